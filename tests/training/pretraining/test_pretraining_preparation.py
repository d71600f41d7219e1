"""The prepared corpus (modeling_minibert/training/pretraining/preparation.py): the tokenizer's own tokens, the
same files from one process or several, found again instead of built again, and refused in one line when it is
damaged, from another tokenizer, or could not be written."""

from __future__ import annotations

import errno
import json
import multiprocessing.pool
import os
import shutil
import signal
import time

import numpy as np
import pytest

import modeling_minibert.training.pretraining.corpus as corpus_module
import modeling_minibert.training.pretraining.preparation as preparation
from modeling_minibert.training.pretraining.corpus import TextFiles, load_bbc_news, split_sentences
from modeling_minibert.training.pretraining.preparation import PreparedCorpus, prepare_corpus
from tokenization import train_tokenizer


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return [doc.replace("\n\n", "\n") for doc in load_bbc_news()[::20]]  # ~105 articles of every topic


@pytest.fixture(scope="module")
def text_file(docs, tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "news.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(docs):
    return train_tokenizer(train_data=docs, vocab_size=1200, disable_tqdm=True)


@pytest.fixture(scope="module")
def prepared(text_file, tokenizer, tmp_path_factory) -> PreparedCorpus:
    return prepare_corpus(TextFiles([text_file]), tokenizer, tmp_path_factory.mktemp("cache"), 1, show_progress=False)


def test_the_prepared_tokens_are_the_tokenizers_own(prepared, docs, tokenizer):
    """Every document's sentences, tokenized by the tokenizer itself (empty ones dropped), in order; a token starts
    a word unless it continues the previous token's word."""
    assert prepared.num_documents == len(docs) and prepared.info["documents"] == len(docs)
    sentence = 0
    for d, doc in enumerate(docs):
        encodings = [tokenizer(s, add_special_tokens=False) for s in split_sentences(doc)]
        encodings = [e for e in encodings if e["input_ids"]]
        assert prepared.documents[d + 1] - prepared.documents[d] == len(encodings)
        for encoding in encodings:
            start, end = prepared.sentences[sentence], prepared.sentences[sentence + 1]
            assert prepared.tokens[start:end].tolist() == encoding["input_ids"]
            words = encoding.word_ids()
            assert prepared.word_starts[start:end].tolist() == [
                int(i == 0 or w != words[i - 1]) for i, w in enumerate(words)
            ]
            sentence += 1
    assert sentence == len(prepared.sentences) - 1 == prepared.info["sentences"]
    assert prepared.tokens.dtype == np.uint16 and isinstance(prepared.tokens, np.memmap)


def test_several_processes_prepare_the_very_files_one_does(prepared, text_file, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "MIN_PART_BYTES", 4096)  # many parts, documents cut across them
    # Done, the workers end by themselves: a SIGTERM to end them could reach one before it is ready (below).
    monkeypatch.setattr(multiprocessing.pool.Pool, "terminate", lambda pool: pytest.fail("the pool was terminated"))
    again = prepare_corpus(TextFiles([text_file]), tokenizer, tmp_path, num_workers=2, show_progress=False)
    assert again.info["workers"] == 2 and again.folder.name == prepared.folder.name
    for name in preparation.FILES:
        assert (again.folder / name).read_bytes() == (prepared.folder / name).read_bytes(), name


def _slow_to_start() -> None:
    """A pool worker that takes its time before it is ready (`_start_worker`), then waits to be ended."""
    time.sleep(0.5)
    preparation._start_worker(None, None)
    time.sleep(60)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="the workers are forked here")
def test_a_sigterm_that_reaches_a_worker_before_it_is_ready_still_ends_it():
    """The worker inherits a training run's handler, which takes SIGTERM as a request to stop later; sent before
    the worker is ready, it waits (held) until the worker is, then ends it. Lost, `Pool.terminate` would wait
    for the worker forever (it did: the suite hung on a corpus preparation)."""
    asked = []
    handler = signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))
    try:
        with preparation._stop_held_while_forking():
            worker = multiprocessing.get_context("fork").Process(target=_slow_to_start)
            worker.start()
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(20)
        if worker.is_alive():
            worker.kill()
            worker.join()
            pytest.fail("the worker outlived the SIGTERM sent to it while it started")
        assert worker.exitcode == -signal.SIGTERM
        assert asked == [], "the signal was the worker's, not this process's"
    finally:
        signal.signal(signal.SIGTERM, handler)


def test_a_second_run_finds_the_prepared_corpus_and_builds_nothing(prepared, text_file, tokenizer, monkeypatch):
    cache = prepared.folder.parent.parent
    monkeypatch.setattr(preparation, "build", lambda *args: pytest.fail("prepared again"))
    found = prepare_corpus(TextFiles([text_file]), tokenizer, cache, show_progress=False)
    assert found.folder == prepared.folder and np.array_equal(found.tokens, prepared.tokens)


def test_overwrite_cache_prepares_again(text_file, tokenizer, tmp_path):
    first = prepare_corpus(TextFiles([text_file]), tokenizer, tmp_path, 1, show_progress=False)
    stamp = (first.folder / "corpus.json").stat().st_mtime_ns
    again = prepare_corpus(TextFiles([text_file]), tokenizer, tmp_path, 1, overwrite=True, show_progress=False)
    assert (again.folder / "corpus.json").stat().st_mtime_ns != stamp and again.folder == first.folder


def test_another_text_or_tokenizer_gets_a_folder_of_its_own(prepared, text_file, docs, tokenizer, tmp_path):
    cache = prepared.folder.parent.parent
    other_tokenizer = train_tokenizer(train_data=docs, vocab_size=600, disable_tqdm=True)
    assert (
        prepare_corpus(TextFiles([text_file]), other_tokenizer, cache, 1, show_progress=False).folder
        != prepared.folder
    )
    changed = tmp_path / "news.txt"
    changed.write_text(text_file.read_text() + "\nOne more document.\n")
    assert prepare_corpus(TextFiles([changed]), tokenizer, cache, 1, show_progress=False).folder != prepared.folder


def test_a_truncated_prepared_file_is_refused_in_one_line(prepared, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(prepared.folder, copy)
    with open(copy / "tokens.bin", "r+b") as f:
        f.truncate(100)
    expected = prepared.info["sizes"]["tokens.bin"]
    with pytest.raises(
        ValueError,
        match=rf"^the prepared corpus in {copy} is incomplete or damaged: tokens.bin has "
        rf"100 bytes, corpus.json says {expected:,}; delete it or pass --overwrite_cache$",
    ):
        PreparedCorpus.open(copy)
    (copy / "corpus.json").unlink()
    with pytest.raises(ValueError, match=rf"^{copy} holds no prepared corpus \(no corpus.json\)"):
        PreparedCorpus.open(copy)


def test_prepared_files_of_another_tokenizer_are_refused_in_one_line(prepared, text_file, docs, tmp_path):
    """A folder under the name another tokenizer's would have (copied, or moved by hand) is refused, not read."""
    other = train_tokenizer(train_data=docs, vocab_size=600, disable_tqdm=True)
    source = TextFiles([text_file])
    place = tmp_path / "corpora" / preparation.corpus_fingerprint(source, preparation.tokenizer_fingerprint(other))
    shutil.copytree(prepared.folder, place)
    with pytest.raises(
        ValueError,
        match=r"^the prepared corpus in .* was tokenized with another tokenizer \(1200 tokens, "
        r"fingerprint \w{12}\) than this run's \(fingerprint \w{12}\); pass --overwrite_cache",
    ):
        prepare_corpus(source, other, tmp_path, show_progress=False)


def test_a_full_disk_while_preparing_leaves_nothing_half_written(text_file, tokenizer, tmp_path, monkeypatch):
    def full(self, part):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.folder / "tokens.bin"))

    monkeypatch.setattr(preparation._Writer, "add", full)
    with pytest.raises(
        OSError,
        match=rf"^\[Errno {errno.ENOSPC}\] cannot write the prepared corpus to {tmp_path}/corpora: "
        r"No space left on device \(it needs about 1.5x the text's size; --cache_dir",
    ):
        prepare_corpus(TextFiles([text_file]), tokenizer, tmp_path, 1, show_progress=False)
    assert list((tmp_path / "corpora").iterdir()) == []


def test_a_bad_file_found_by_a_worker_is_named_and_nothing_is_kept(text_file, tokenizer, tmp_path, monkeypatch):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(text_file.read_bytes()[:20_000] + b"\n\xff\xfe broken\n")
    monkeypatch.setattr(corpus_module, "MIN_PART_BYTES", 4096)
    with pytest.raises(ValueError, match=rf"^{bad} is not UTF-8 text \(invalid byte at offset 20001\)$"):
        prepare_corpus(TextFiles([bad]), tokenizer, tmp_path / "cache", num_workers=2, show_progress=False)
    assert list((tmp_path / "cache" / "corpora").iterdir()) == []


def test_the_corpus_record_says_what_was_prepared(prepared, text_file, tokenizer):
    info = json.loads((prepared.folder / "corpus.json").read_text())
    assert info["source"] == TextFiles([text_file]).fingerprint()
    assert info["tokenizer"] == preparation.tokenizer_fingerprint(tokenizer) and info["vocab_size"] == len(tokenizer)
    assert info["tokens"] == len(prepared.tokens) and info["text_size"] == text_file.stat().st_size
    assert set(info["sizes"]) == set(preparation.FILES)
