"""A corpus prepared once: split into sentences and tokenized, in parallel, into flat files that every process of
every run memory-maps.

    corpus = prepare_corpus(source, tokenizer)     # found in the cache, or built there (all cores)
    corpus.tokens[corpus.sentences[s] : corpus.sentences[s + 1]]      # sentence s's token ids

A prepared folder, `<cache_dir>/corpora/<fingerprint>/`, holds:

    tokens.bin        every sentence's token ids one after the other: uint16 (uint32 for vocabularies over 65,536)
    word_starts.bin   one byte per token: 1 where it begins a word (for whole-word masking)
    sentences.npy     int64 (sentences + 1,): where each sentence starts in tokens.bin
    documents.npy     int64 (documents + 1,): where each document starts in sentences.npy
    corpus.json       what it holds (source, tokenizer, counts, file sizes): written last, checked at every open
    examples/         NSP example indexes built from it (`examples.py`), one per split and recipe

Flat files and offsets (Megatron's indexed dataset; nanoGPT's `prepare.py` writes the same flat uint16 file), not
Arrow shards: an NSP example is two slices of the token file, found from the offsets at load time, so the prepared
corpus does not depend on the sequence length, seed or dupe factor, and it costs 3 bytes a token (4.5 for the
raw text). The fingerprint (the folder's name) is the source's (file paths, sizes and modification times; a
dataset's own fingerprint) and the tokenizer's: a second run, a resume and every other process find the folder
instead of building it, and a changed file or tokenizer gets a folder of its own. `--overwrite_cache` builds
again.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from modeling_minibert.training.pretraining.corpus import CorpusSource, Part, split_sentences
from modeling_minibert.utils.cpus import usable_cpus
from modeling_minibert.utils.files import cache_folder, staged_folder
from tokenization.bulk import BulkEncoder, backend_of, id_dtype

FORMAT = 1  # the layout above; a folder of another format is prepared again
CORPUS_FILE = "corpus.json"
FILES = ("tokens.bin", "word_starts.bin", "sentences.npy", "documents.npy")
FOLDER = "pretraining-data"


def default_cache_dir() -> Path:
    """Where prepared corpora are kept unless `--cache_dir` says: `pretraining-data/` in the package's cache
    (`$MINIBERT_CACHE`, else `$HF_HOME/minibert`)."""
    return cache_folder() / FOLDER


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's whole pipeline (vocabulary, normaliser, pre-tokenizer, special tokens), without
    the truncation and padding a caller may have set on it."""
    pipeline = json.loads(backend_of(tokenizer).to_str())
    pipeline.pop("truncation", None), pipeline.pop("padding", None)
    return sha256(json.dumps(pipeline, sort_keys=True).encode()).hexdigest()


def corpus_fingerprint(source: CorpusSource, tokenizer_hash: str) -> str:
    identity = {"format": FORMAT, "source": source.fingerprint(), "tokenizer": tokenizer_hash}
    return sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class PreparedCorpus:
    """The arrays of a prepared folder, memory-mapped (read-only: every process shares the same pages)."""

    folder: Path | None
    info: dict
    tokens: np.ndarray  # (N,) token ids
    word_starts: np.ndarray  # (N,) uint8
    sentences: np.ndarray  # (S + 1,) int64 offsets into tokens
    documents: np.ndarray  # (D + 1,) int64 offsets into sentences

    @property
    def num_documents(self) -> int:
        return len(self.documents) - 1

    def sentence_counts(self) -> np.ndarray:
        """(D,) sentences of each document."""
        return np.diff(self.documents)

    @classmethod
    def open(cls, folder: Path, tokenizer_hash: str | None = None, source_print: dict | None = None) -> PreparedCorpus:
        """Open a prepared folder, refusing in one line (ValueError) one that is incomplete, damaged, of another
        format, or prepared from another source or tokenizer than the run's."""
        info_file = folder / CORPUS_FILE
        if not info_file.is_file():
            raise ValueError(
                f"{folder} holds no prepared corpus (no {CORPUS_FILE}); delete it or pass --overwrite_cache"
            )
        try:
            info = json.loads(info_file.read_text())
        except ValueError as err:
            raise ValueError(
                f"{info_file} is not valid JSON ({err}); delete the folder or pass --overwrite_cache"
            ) from None
        if info.get("format") != FORMAT:
            raise ValueError(
                f"{folder} was prepared in format {info.get('format')!r}, not {FORMAT}; pass --overwrite_cache"
            )
        if tokenizer_hash is not None and info.get("tokenizer") != tokenizer_hash:
            raise ValueError(
                f"the prepared corpus in {folder} was tokenized with another tokenizer ({info.get('vocab_size')} "
                f"tokens, fingerprint {str(info.get('tokenizer'))[:12]}) than this run's (fingerprint "
                f"{tokenizer_hash[:12]}); pass --overwrite_cache to prepare it again"
            )
        if source_print is not None and info.get("source") != source_print:
            raise ValueError(
                f"the prepared corpus in {folder} was made from other text ({info.get('description')}) "
                f"than this run's; pass --overwrite_cache to prepare it again"
            )
        for name, size in info["sizes"].items():
            found = (folder / name).stat().st_size if (folder / name).is_file() else None
            if found != size:
                raise ValueError(
                    f"the prepared corpus in {folder} is incomplete or damaged: {name} has "
                    f"{'no file' if found is None else f'{found:,} bytes'}, {CORPUS_FILE} says "
                    f"{size:,}; delete it or pass --overwrite_cache"
                )
        dtype = np.dtype(info["dtype"])
        return cls(
            folder,
            info,
            _mapped(folder / "tokens.bin", dtype),
            _mapped(folder / "word_starts.bin", np.uint8),
            np.load(folder / "sentences.npy", mmap_mode="r"),
            np.load(folder / "documents.npy", mmap_mode="r"),
        )


def _mapped(path: Path, dtype) -> np.ndarray:
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype=dtype)


def prepare_corpus(
    source: CorpusSource,
    tokenizer,
    cache_dir: str | os.PathLike | None = None,
    num_workers: int | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> PreparedCorpus:
    """The prepared corpus of `source` tokenized by `tokenizer`: opened from the cache, or built there first
    (by `num_workers` processes; None: one per usable core)."""
    tokenizer_hash = tokenizer_fingerprint(tokenizer)
    folder = Path(cache_dir or default_cache_dir()) / "corpora" / corpus_fingerprint(source, tokenizer_hash)
    if overwrite or not (folder / CORPUS_FILE).is_file():
        build(source, tokenizer, folder, num_workers or usable_cpus(), show_progress)
    return PreparedCorpus.open(folder, tokenizer_hash, source.fingerprint())


# --- building --------------------------------------------------------------------------------------------------


@dataclass
class PartTokens:
    """A part's sentences, tokenized: ids and word starts (flat), tokens per sentence (empty ones dropped),
    sentences per document (or piece of one, see `PartText`)."""

    source: int
    ids: np.ndarray
    word_starts: np.ndarray
    sentence_lengths: np.ndarray  # int64
    document_sentences: np.ndarray  # int64
    leading_text: bool
    trailing_text: bool
    size: int


_worker: tuple[CorpusSource, BulkEncoder] | None = None  # this process's source and encoder (`tokenize_part`)


def _start_worker(source: CorpusSource, encoder: BulkEncoder) -> None:
    global _worker
    # Each worker is one process on one core: the tokenizer's own threads would only compete with its siblings.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C is the parent's to handle (it reaches the whole process group); SIGTERM, which ends the pool, ends a
    # worker at once, not through the handlers a forked worker inherits from a training run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # held while the pool forked (`_stop_held_while_forking`)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _worker = (source, encoder)


def tokenize_part(part: Part) -> PartTokens:
    """Read, split and tokenize one part of the corpus (in a worker process, or in the caller's)."""
    source, encoder = _worker
    found = source.read_part(part)
    sentences = [split_sentences(doc) for doc in found.documents]
    ids, starts, lengths = encoder.encode([s for doc in sentences for s in doc])
    per_document = np.array([len(doc) for doc in sentences], dtype=np.int64)
    if len(lengths) and (lengths == 0).any():  # a sentence of characters the vocabulary drops: not a sentence
        owner = np.repeat(np.arange(len(sentences)), per_document)
        per_document -= np.bincount(owner[lengths == 0], minlength=len(sentences))
        lengths = lengths[lengths > 0]
    return PartTokens(
        part.source, ids, starts, lengths, per_document, found.leading_text, found.trailing_text, found.size
    )


class _Writer:
    """Appends parts' tokens to the folder's files in order, joining the pieces of a document that spans two."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files = {
            name: open(folder / name, "wb") for name in ("tokens.bin", "word_starts.bin", ".lengths", ".counts")
        }
        self.last_document: int | None = None  # sentences of the newest document, which the next part may continue
        self.previous: tuple[int, bool] | None = None
        self.tokens = self.size = 0
        self.found_in: dict[int, int] = {}  # documents (or pieces) read from each source

    def add(self, part: PartTokens) -> None:
        self.files["tokens.bin"].write(part.ids.tobytes())
        self.files["word_starts.bin"].write(part.word_starts.tobytes())
        self.files[".lengths"].write(part.sentence_lengths.tobytes())
        counts = part.document_sentences
        if (
            len(counts)
            and self.last_document is not None
            and self.previous == (part.source, True)
            and part.leading_text
        ):
            self.last_document += int(counts[0])
            counts = counts[1:]
        if len(counts):
            if self.last_document is not None:
                self.files[".counts"].write(np.int64(self.last_document).tobytes())
            self.files[".counts"].write(counts[:-1].tobytes())
            self.last_document = int(counts[-1])
        self.previous = (part.source, part.trailing_text)
        self.found_in[part.source] = self.found_in.get(part.source, 0) + len(part.document_sentences)
        self.tokens += len(part.ids)
        self.size += part.size

    def close(self) -> tuple[int, int]:
        """Write the offsets; return (documents, sentences)."""
        if self.last_document is not None:
            self.files[".counts"].write(np.int64(self.last_document).tobytes())
        for f in self.files.values():
            f.close()
        sentences = _offsets(self.folder / ".lengths", self.folder / "sentences.npy")
        documents = _offsets(self.folder / ".counts", self.folder / "documents.npy")
        return documents, sentences


def _offsets(counts_file: Path, out: Path, chunk: int = 1 << 20) -> int:
    """(n + 1,) int64 running sums of the n int64 counts in `counts_file`, written to `out` a chunk at a time with
    plain reads and writes (a corpus's sentences need not fit in memory, and a memory map would keep every page it
    touched in this process's resident set); the counts file is removed. Returns n."""
    n = counts_file.stat().st_size // 8
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)), "fortran_order": False, "shape": (n + 1,)}
    total = np.int64(0)
    with counts_file.open("rb") as counts, out.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(total.tobytes())
        while piece := counts.read(chunk * 8):
            sums = np.cumsum(np.frombuffer(piece, dtype=np.int64)) + total
            f.write(sums.tobytes())
            total = sums[-1]
    counts_file.unlink()
    return n


def build(source: CorpusSource, tokenizer, folder: Path, num_workers: int, show_progress: bool = True) -> None:
    """Prepare `source` into `folder` (staged beside it and renamed in: nothing half-written is ever left there)."""
    started = time.perf_counter()
    encoder = BulkEncoder(tokenizer)
    parts = source.parts(num_workers)
    with _naming_write_errors(folder), staged_folder(folder) as staging:
        writer = _Writer(staging)
        unit = "rows" if source.__class__.__name__ == "DatasetRows" else "B"
        with tqdm(
            total=source.size, unit=unit, unit_scale=True, desc="preparing the corpus", disable=not show_progress
        ) as bar:
            for part in _tokenized(source, encoder, parts, num_workers):
                writer.add(part)
                bar.update(part.size)
        documents, sentences = writer.close()
        source.check_read(writer.found_in)
        info = {
            "format": FORMAT,
            "description": source.description,
            "source": source.fingerprint(),
            "tokenizer": tokenizer_fingerprint(tokenizer),
            "vocab_size": len(tokenizer),
            "dtype": encoder.dtype.name,
            "documents": documents,
            "sentences": sentences,
            "tokens": writer.tokens,
            "text_size": writer.size,
            "workers": num_workers,
            "seconds": round(time.perf_counter() - started, 2),
            "sizes": {name: (staging / name).stat().st_size for name in FILES},
        }
        (staging / CORPUS_FILE).write_text(json.dumps(info, indent=2) + "\n")
        (staging / "examples").mkdir()


def _tokenized(
    source: CorpusSource, encoder: BulkEncoder, parts: list[Part], num_workers: int
) -> Iterator[PartTokens]:
    """The parts, tokenized in order: in this process for one worker, else by a pool of processes."""
    global _worker
    if num_workers <= 1 or len(parts) <= 1:
        saved, _worker = _worker, (source, encoder)
        try:
            yield from map(tokenize_part, parts)
        finally:
            _worker = saved
        return
    # Forked where the platform can (a worker then starts in milliseconds, sharing what is loaded); spawned
    # elsewhere, where the source and encoder are pickled to each worker.
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with _quiet_tokenizers_fork():
        with _stop_held_while_forking():
            pool = context.Pool(num_workers, _start_worker, (source, encoder))
        # Not `with pool`: its exit terminates the workers (SIGTERM) even when they are done. Done, they are told
        # to end and end by themselves; only a failure or an early stop terminates them.
        try:
            yield from pool.imap(tokenize_part, parts)
            pool.close()
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()


@contextmanager
def _stop_held_while_forking() -> Iterator[None]:
    """SIGTERM held (blocked) in this thread while the pool forks its workers, and released by each worker once
    SIGTERM would end it (`_start_worker`). A SIGTERM that reaches a worker in its first moments, before it has put
    back the default action, goes to the Python-level handling it inherited (a training run's handler) instead of
    ending it; `Pool.terminate` then waits forever for a worker that never ends (seen: a worker stuck on the task
    queue's lock, which `terminate` holds). Held, the signal waits until the worker is ready for it. The pool's
    own threads start here too and keep it held, so a worker they fork later also starts with it held."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: spawned workers, no POSIX signals
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def _quiet_tokenizers_fork() -> Iterator[None]:
    """`tokenizers` warns in every forked child when this process used its threads; the workers turn them off
    themselves, so the warning would be noise. Set for the fork only, then put back."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


@contextmanager
def _naming_write_errors(folder: Path) -> Iterator[None]:
    """A failed write (a full disk, a read-only cache) as one line naming the folder and what it needs."""
    try:
        yield
    except OSError as err:
        ours = err.filename is None or Path(err.filename).resolve().is_relative_to(folder.parent.resolve())
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES) or not ours:
            raise
        raise OSError(
            err.errno,
            f"cannot write the prepared corpus to {folder.parent}: {err.strerror or err} "
            "(it needs about 1.5x the text's size; --cache_dir puts it elsewhere)",
        ) from None


def in_memory_corpus(source: CorpusSource, tokenizer) -> PreparedCorpus:
    """A few documents given as strings (`corpus.Texts`), prepared in this process into arrays, not files."""
    parts = list(_tokenized(source, BulkEncoder(tokenizer), source.parts(), 1))
    encoder_dtype = id_dtype(len(tokenizer))
    join = lambda name, dtype: np.concatenate([np.zeros(0, dtype), *(getattr(p, name) for p in parts)]).astype(dtype)  # noqa: E731
    counts = join("document_sentences", np.int64)
    info = {
        "format": FORMAT,
        "description": source.description,
        "source": source.fingerprint(),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "vocab_size": len(tokenizer),
        "dtype": encoder_dtype.name,
    }
    return PreparedCorpus(
        None,
        info,
        join("ids", encoder_dtype),
        join("word_starts", np.uint8),
        np.concatenate([[0], np.cumsum(join("sentence_lengths", np.int64))]),
        np.concatenate([[0], np.cumsum(counts)]),
    )
