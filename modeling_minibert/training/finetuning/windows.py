"""Texts longer than a model reads, as overlapping windows: cut, counted and pooled back to one row per text.

Fine-tuning and distillation read a sequence classification text in windows with `doc_stride` (`task.py`'s
`window_examples`, distillation's student and teacher); `deployment.long_texts.classify_long_texts` predicts the
same way. Windows are cut as text, by character offsets (`text_windows`): a teacher with another tokenizer then reads
the very text the student's window holds. transformers has no pooled classification over windows (its pipeline and
example scripts truncate); the windows are its fast tokenizers' own (`return_overflowing_tokens`, `stride`).

Light on purpose (numpy and a tokenizer): a plain install imports it to serve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

MAX_WINDOWS = 4096  # windows of one text, by default: a 1.5M-token text at 512 positions; beyond, a text is refused


class TooManyWindows(ValueError):
    """A text that would make more windows than allowed; `index`: which text."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def check_doc_stride(
    doc_stride: int, max_length: int, tokenizer: PreTrainedTokenizerBase, length_name: str = "max_seq_length"
) -> None:
    """ValueError in one line unless `doc_stride` leaves every window new text: 0 <= doc_stride < the text tokens
    a window holds (`max_length` less [CLS] and [SEP])."""
    room = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, int):
        raise ValueError(f"doc_stride={doc_stride!r} must be a whole number of tokens")
    if not 0 <= doc_stride < room:
        raise ValueError(
            f"doc_stride={doc_stride} must be at least 0 and below {room}, the text tokens of a window "
            f"with {length_name}={max_length}"
        )


def window_count(tokens: int, room: int, doc_stride: int) -> int:
    """How many windows of `room` text tokens overlapping by `doc_stride` a text of `tokens` tokens makes."""
    return 1 if tokens <= room else 1 + -(-(tokens - room) // (room - doc_stride))


def check_window_counts(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], room: int, doc_stride: int, max_windows: int
) -> None:
    """`TooManyWindows` for the first text that would make more than `max_windows` windows, before any is cut. A
    text has at most as many tokens as characters, so only a text long enough to reach the bound is counted, and
    that in growing prefixes, stopping as soon as one holds too many: the time spent is bounded by the bound, not
    by the text (a million-word text is refused in a fraction of a second)."""
    most = room + max_windows * (room - doc_stride)  # the most tokens a text may hold
    for index, text in enumerate(texts):
        if len(text) <= most:
            continue
        length = 4 * most
        while True:
            tokens = len(
                tokenizer(
                    text[:length],
                    add_special_tokens=False,
                    return_attention_mask=False,
                    return_token_type_ids=False,
                    verbose=False,
                )["input_ids"]
            )
            if tokens > most or length >= len(text):
                break
            length *= 4
        if tokens > most:
            whole = "" if length >= len(text) else "at least "
            raise TooManyWindows(
                f"text {index} holds {whole}{tokens:,} tokens: in windows of {room} text tokens "
                f"advancing by {room - doc_stride} (doc_stride={doc_stride}) it would make more than "
                f"max_windows={max_windows:,} windows; cut the text, lower doc_stride or raise "
                "max_windows",
                index,
            )


def text_windows(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    max_length: int,
    doc_stride: int,
    max_windows: int = MAX_WINDOWS,
) -> tuple[list[str], list[int]]:
    """Each text cut into windows of `max_length` tokens (with [CLS] and [SEP]) overlapping by `doc_stride`:
    (window texts, index of each window's text). A text that fits is its own one window, unchanged; each window of
    a longer one is the stretch of the text its tokens span. Read again, a window that starts inside a word tokenizes that word's
    tail as a word ("##ing" becomes "ing"): the window may then be a token longer, and its last token falls to
    truncation, inside the next window's overlap. A text that would make more than `max_windows` windows is refused
    first (`TooManyWindows`): its time and memory would grow with it unbounded."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"doc_stride needs a fast tokenizer (character offsets); {type(tokenizer).__name__} is not one"
        )
    check_doc_stride(doc_stride, max_length, tokenizer)
    texts = list(texts)
    if not texts:
        return [], []
    check_window_counts(
        tokenizer, texts, max_length - tokenizer.num_special_tokens_to_add(pair=False), doc_stride, max_windows
    )
    encoding = tokenizer(
        texts,
        truncation=True,
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    owners = [int(i) for i in encoding["overflow_to_sample_mapping"]]
    counts = np.bincount(owners, minlength=len(texts))
    windows = []
    for w, owner in enumerate(owners):
        if counts[owner] == 1:
            windows.append(texts[owner])
            continue
        spans = [
            span
            for span, sequence in zip(encoding["offset_mapping"][w], encoding.sequence_ids(w))
            if sequence is not None
        ]
        windows.append(texts[owner][spans[0][0] : spans[-1][1]])
    return windows, owners


def pool_logits(logits: np.ndarray, owners: Sequence[int], count: int) -> np.ndarray:
    """(windows, C) logits -> (count, C): the mean over each text's windows."""
    logits = np.asarray(logits, dtype=np.float64)
    sums = np.zeros((count, logits.shape[-1]))
    np.add.at(sums, np.asarray(owners, dtype=np.int64), logits)
    return sums / np.maximum(np.bincount(owners, minlength=count), 1)[:, None]


def text_count(owners: Sequence[int]) -> int:
    """The texts behind windows (`owners`: each window's text, every text holding at least one, in order)."""
    return int(owners[-1]) + 1 if len(owners) else 0


def per_text(logits: np.ndarray, labels: Sequence, owners: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Windows' (logits, labels) -> each text's: the mean of its windows' logits, and its first window's label
    (`owners`: each window's text, every text holding at least one window, in order)."""
    first = np.flatnonzero(np.diff(np.asarray(owners), prepend=-1))  # the windows that start a text
    return pool_logits(logits, owners, text_count(owners)), np.asarray(labels)[first]


__all__ = [
    "MAX_WINDOWS",
    "TooManyWindows",
    "check_doc_stride",
    "per_text",
    "pool_logits",
    "text_count",
    "text_windows",
    "window_count",
]
