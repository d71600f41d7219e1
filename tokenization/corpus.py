"""Training text: files or an iterable of strings, streamed in bounded batches with a progress bar.

Reading the files here (rather than handing paths to `tokenizers`) lets a file that is not UTF-8 fail with
its name, offset and line; `tokenizers` only says "stream did not contain valid UTF-8".

Long lines are cut into pieces of at most `MAX_PIECE_CHARS`, at whitespace: the Rust trainer keeps about a
hundred bytes of alignment and split bookkeeping per byte of the text it is working on, so one 30 MB line
(a dump without line breaks) took 7.7 GB. Cutting at whitespace keeps every word whole (but for "words"
longer than a piece, which WordPiece turns into [UNK] anyway).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tqdm.auto import tqdm

BATCH_LINES = 1000  # lines handed to the Rust trainer per call: amortises the Python -> Rust crossing
BATCH_CHARS = 1 << 20  # ... and at most about this much text per call, whatever the line lengths
MAX_PIECE_CHARS = 1 << 16  # longest piece of one line the trainer sees (bytes for files, characters for texts)
WHITESPACE = (" ", "\t", "\r", "\f", "\v", "\n")


class Corpus:
    """One pass over the training text, as batches of strings; counts what it saw.

    Either `files` (a path, or a list of paths; each must name a file) or `texts` (any iterable of strings): said
    by the caller, never guessed from the strings.
    """

    def __init__(
        self,
        files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        texts: Iterable[str] | None = None,
        show_progress: bool = True,
    ):
        if isinstance(texts, str):  # iterating it would give characters
            raise TypeError("the texts to train on are one str: pass a list of texts, or name a file as train_file")
        self.files = None if files is None else _checked_files(files)
        self.texts = texts
        self.show_progress = show_progress

    def describe(self) -> str:
        if self.files is None:
            return "the texts given"
        names = ", ".join(str(f) for f in self.files[:3]) + (", ..." if len(self.files) > 3 else "")
        return f"{len(self.files)} file(s) ({names})"

    @property
    def reiterable(self) -> bool:
        """Whether the text can be read twice (files, lists, datasets columns; not generators)."""
        return self.files is not None or iter(self.texts) is not self.texts

    def batches(self, desc: str = "reading corpus") -> Iterator[list[str]]:
        """One pass over the text, in batches of strings, with a progress bar labelled `desc`."""
        return self._file_batches(desc) if self.files is not None else self._text_batches(desc)

    def __iter__(self) -> Iterator[list[str]]:
        return self.batches()

    def _file_batches(self, desc: str) -> Iterator[list[str]]:
        total = sum(f.stat().st_size for f in self.files)
        with tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not self.show_progress) as bar:
            for path in self.files:
                for batch, size in _read_utf8_lines(path):
                    bar.update(size)
                    yield batch

    def _text_batches(self, desc: str) -> Iterator[list[str]]:
        batch: list[str] = []
        chars = texts = 0
        with tqdm(unit=" texts", desc=desc, disable=not self.show_progress) as bar:
            for i, text in enumerate(self.texts):
                if not isinstance(text, str):
                    raise TypeError(f"text #{i} is a {type(text).__name__}, expected str")
                texts += 1
                for piece in split_long_text(text):
                    batch.append(piece)
                    chars += len(piece)
                    if len(batch) == BATCH_LINES or chars >= BATCH_CHARS:
                        bar.update(texts)
                        yield batch
                        batch, chars, texts = [], 0, 0
            if batch:
                bar.update(texts)
                yield batch


def _checked_files(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The files as paths; FileNotFoundError for one that is missing or not a file."""
    paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    for path in paths:
        if _is_dir(path):  # FileNotFoundError still: what was asked for, a text file, is not there
            raise FileNotFoundError(
                f"training file {path} is a folder, not a text file: name the files in it (--train_file {path}/*.txt)"
            )
        if not _is_file(path):
            raise FileNotFoundError(f"training file not found: {path}")
    return paths


def _is_file(x: str | os.PathLike) -> bool:
    try:
        return Path(x).is_file()
    except (OSError, ValueError):  # too long for a path, or holds a NUL: not a file name
        return False


def _is_dir(x: str | os.PathLike) -> bool:
    try:
        return Path(x).is_dir()
    except (OSError, ValueError):
        return False


def split_long_text(text: str, limit: int | None = None) -> Iterator[str]:
    """`text` in pieces of at most `limit` (default `MAX_PIECE_CHARS`) characters, each ending at whitespace where there is any."""
    limit = limit or MAX_PIECE_CHARS
    start = 0
    while len(text) - start > limit:
        cut = max(text.rfind(c, start, start + limit) for c in WHITESPACE) + 1
        if cut <= start:  # no whitespace in a whole piece: not a word WordPiece would keep anyway
            cut = start + limit
        yield text[start:cut]
        start = cut
    yield text[start:] if start else text


def _read_utf8_lines(path: Path) -> Iterator[tuple[list[str], int]]:
    """Yield (lines, bytes read) batches of a UTF-8 file; ValueError naming the file at the first bad byte.

    A line longer than `MAX_PIECE_CHARS` bytes comes as several pieces (see `_bounded_lines`), so memory
    stays bounded whatever the file's line lengths.
    """
    batch: list[str] = []
    size = offset = 0
    lineno = 1
    for raw in _bounded_lines(path):
        try:
            batch.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{path} is not valid UTF-8: byte 0x{raw[err.start]:02x} at offset {offset + err.start} "
                f"(line {lineno}) cannot be decoded; re-encode the file as UTF-8"
            ) from None
        offset += len(raw)
        size += len(raw)
        lineno += raw.endswith(b"\n")
        if len(batch) == BATCH_LINES or size >= BATCH_CHARS:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


def _bounded_lines(path: Path, limit: int | None = None) -> Iterator[bytes]:
    """The file's lines as bytes, a line longer than `limit` cut after its last ASCII whitespace in each piece.

    ASCII bytes never occur inside a UTF-8 multi-byte character, so a cut at one never splits a character;
    without whitespace the cut goes before the last character that starts in the piece.
    """
    limit = limit or MAX_PIECE_CHARS
    carry = b""
    with open(path, "rb") as f:
        while True:
            piece = carry + f.readline(limit - len(carry))
            if not piece:
                return
            if len(piece) < limit or piece.endswith(b"\n"):  # a whole line (or the end of the file)
                carry = b""
                yield piece
                continue
            cut = max(piece.rfind(c.encode()) for c in WHITESPACE) + 1
            if cut <= 0:
                cut = len(piece)
                for back in range(1, 4):  # back to the lead byte of a character the piece may have cut
                    if piece[-back] & 0xC0 != 0x80:
                        cut = len(piece) - back if piece[-back] >= 0xC0 else len(piece)
                        break
                cut = cut or len(piece)
            carry = piece[cut:]
            yield piece[:cut]
