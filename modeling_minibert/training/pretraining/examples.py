"""NSP examples from a prepared corpus's offsets: an index built once per split and recipe, read at load time.

    index = example_index(corpus, document_ids, max_length=64, seed=42, dupe_factor=5)   # cached in the corpus
    examples = PretrainingExamples(corpus, index, tokenizer)
    batch = examples.__getitems__([3, 17, 42])       # numpy (B, T) arrays, padded to the batch's longest example

Pairs follow BERT's `create_pretraining_data.py`: sentences of a document are gathered until they fill the
sequence, split at a random sentence boundary into segments A and B; with chance `random_next` B is replaced by
text from a random other document of the split, and the sentences of the chunk it did not use start the next
pair. A pair longer than the sequence loses tokens from its longer segment, from the front or the back at random.
A chunk of one sentence is cut in two at a random token (BERT makes such pairs random instead, which tilts the
labels away from 50/50 and ties "long A" to "random").

An example is two token ranges, so the index is 25 bytes an example however long the sequence; it is built from
numpy over all documents at once, one chunk of each document per step (the steps number the longest document's
chunks), seeded by (seed, pass, block of documents), and written beside the corpus so that the next run, a resume
and the other processes read it instead. `dupe_factor` (BERT's name) passes over the documents that many times,
each with new boundaries and partners, so that repeated epochs do not show the same pairs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from hashlib import sha256
from pathlib import Path

import numpy as np
import torch

from modeling_minibert.training.pretraining.corpus import MIN_DOCUMENTS_PER_SPLIT
from modeling_minibert.training.pretraining.preparation import PreparedCorpus
from modeling_minibert.utils.files import write_json

IS_NEXT, RANDOM_NEXT = 0, 1  # `next_sentence_label` values, as in transformers' BERT
VERSION = 1  # of the pairing below; an index of another version is built again
EXAMPLE = np.dtype([("a_start", "<i8"), ("b_start", "<i8"), ("a_length", "<i4"), ("b_length", "<i4"), ("label", "i1")])
BLOCK_SENTENCES = 1 << 18  # documents are paired in blocks of about this many sentences: memory stays bounded
COLUMNS = ("input_ids", "token_type_ids", "special_tokens_mask", "word_starts", "next_sentence_label", "example_id")


def check_recipe(max_length: int, dupe_factor: int, random_next: float) -> None:
    if max_length < 8:
        raise ValueError(f"max_length={max_length} is too short for a sentence pair; use at least 8")
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor={dupe_factor} must be at least 1")
    if not 0 <= random_next <= 1:
        raise ValueError(f"random_next={random_next} must be between 0 and 1")


def example_index(
    corpus: PreparedCorpus,
    document_ids: np.ndarray,
    max_length: int = 64,
    seed: int = 42,
    dupe_factor: int = 1,
    random_next: float = 0.5,
) -> np.ndarray:
    """The examples of the documents `document_ids` (sorted), as (E,) `EXAMPLE` records: read from the corpus's
    `examples/` folder when built before, else built and written there (in memory for an in-memory corpus)."""
    check_recipe(max_length, dupe_factor, random_next)
    document_ids = np.asarray(document_ids, dtype=np.int64)
    recipe = {
        "version": VERSION,
        "max_length": max_length,
        "seed": seed,
        "dupe_factor": dupe_factor,
        "random_next": random_next,
        "documents": len(document_ids),
        "document_ids": sha256(document_ids.tobytes()).hexdigest(),
    }
    if corpus.folder is None:
        return np.concatenate(
            [np.zeros(0, EXAMPLE), *build_examples(corpus, document_ids, max_length, seed, dupe_factor, random_next)]
        )
    key = sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]
    path, info = corpus.folder / "examples" / f"{key}.bin", corpus.folder / "examples" / f"{key}.json"
    if not (info.is_file() and path.is_file() and json.loads(info.read_text()).get("bytes") == path.stat().st_size):
        _write_index(path, build_examples(corpus, document_ids, max_length, seed, dupe_factor, random_next))
        write_json(info, {**recipe, "bytes": path.stat().st_size})
    return np.memmap(path, dtype=EXAMPLE, mode="r") if path.stat().st_size else np.zeros(0, EXAMPLE)


def _write_index(path: Path, blocks: Iterator[np.ndarray]) -> None:
    """The blocks' records into `path`, staged beside it (a reader sees the whole index or none)."""
    staging = path.with_name(f".{path.name}.{np.random.default_rng().integers(1 << 62):x}.tmp")
    try:
        with open(staging, "wb") as f:
            for block in blocks:
                f.write(block.tobytes())
        staging.replace(path)
    finally:
        staging.unlink(missing_ok=True)


def build_examples(
    corpus: PreparedCorpus, document_ids: np.ndarray, max_length: int, seed: int, dupe_factor: int, random_next: float
) -> Iterator[np.ndarray]:
    """The examples, pass after pass, each pass a block of documents at a time (in document order)."""
    first, last = corpus.documents[document_ids], corpus.documents[document_ids + 1]
    keep = last > first  # a document without sentences makes no pair, and is no partner
    documents = np.stack([first[keep], last[keep]], axis=1)  # (D, 2) first and end sentence of each document
    if len(documents) < MIN_DOCUMENTS_PER_SPLIT:
        raise ValueError(f"NSP needs at least {MIN_DOCUMENTS_PER_SPLIT} non-empty documents, got {len(documents)}")
    offsets = np.asarray(corpus.sentences)
    sentences_before = np.concatenate([[0], np.cumsum(documents[:, 1] - documents[:, 0])])
    bounds = np.unique(np.searchsorted(sentences_before, np.arange(0, sentences_before[-1], BLOCK_SENTENCES)))
    blocks = [*zip(bounds, [*bounds[1:], len(documents)])]
    for dupe in range(dupe_factor):
        for number, (a, b) in enumerate(blocks):
            rng = np.random.default_rng([seed & 0xFFFFFFFF, dupe, number])
            yield _pair_block(offsets, documents, np.arange(a, b), max_length - 3, random_next, rng)


def _pair_block(
    offsets: np.ndarray,
    documents: np.ndarray,
    block: np.ndarray,
    target: int,
    random_next: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The pairs of the documents `block` (positions in `documents`), in document order: `target` tokens for A and
    B together ([CLS], [SEP], [SEP] aside). Each step makes one pair of every document with sentences left."""
    start, end = documents[block, 0].copy(), documents[block, 1]
    active = np.arange(len(block))
    found: list[tuple[np.ndarray, ...]] = []
    while len(active):
        s, e_max = start[active], end[active] - 1
        # The chunk: sentences from s until they fill the target (or the document ends).
        e = np.minimum(np.searchsorted(offsets, offsets[s] + target, side="left") - 1, e_max)
        chunk = e - s + 1
        is_random = rng.random(len(active)) < random_next
        a_end = s + rng.integers(1, np.maximum(chunk, 2))  # A: sentences [s, a_end); at least one, B gets one
        a_start, a_stop = offsets[s], offsets[a_end]
        b_start, b_stop = offsets[a_end].copy(), offsets[e + 1].copy()
        # One sentence fills the chunk: its continuation is its own second half, cut at a random token.
        single = (chunk == 1) & ~is_random
        length = a_stop - a_start
        cut = a_start + np.where(length >= 2, rng.integers(1, np.maximum(length, 2)), 0)
        a_stop, b_start, b_stop = (
            np.where(single, cut, a_stop),
            np.where(single, cut, b_start),
            np.where(single, offsets[s + 1], b_stop),
        )
        # A random B: text of another document of the split, from a random sentence on, until it fills the rest.
        partner = rng.integers(0, len(documents) - 1, len(active))
        partner += partner >= block[active]
        p_first, p_end = documents[partner, 0], documents[partner, 1]
        p_start = p_first + (rng.random(len(active)) * (p_end - p_first)).astype(np.int64)
        need = np.maximum(target - (a_stop - a_start), 1)
        p_stop = np.minimum(np.searchsorted(offsets, offsets[p_start] + need, side="left"), p_end)
        b_start = np.where(is_random, offsets[p_start], b_start)
        b_stop = np.where(is_random, offsets[np.maximum(p_stop, p_start + 1)], b_stop)
        made = (a_stop > a_start) & (b_stop > b_start)
        found.append((active[made], a_start[made], a_stop[made], b_start[made], b_stop[made], is_random[made]))
        # The unused sentences of a random pair's chunk start the next one.
        start[active] = np.where(is_random, a_end, e + 1)
        active = active[start[active] < end[active]]
    if not found:
        return np.zeros(0, EXAMPLE)
    owner, a_start, a_stop, b_start, b_stop, is_random = (np.concatenate(c) for c in zip(*found))
    order = np.argsort(owner, kind="stable")  # document order, each document's pairs in the order made
    return _truncated(a_start[order], a_stop[order], b_start[order], b_stop[order], is_random[order], target, rng)


def _truncated(a_start, a_stop, b_start, b_stop, is_random, target: int, rng: np.random.Generator) -> np.ndarray:
    """The pairs as records, trimmed to `target` tokens as BERT trims them: one token at a time from the longer
    segment (B when equal), from its front or back at random. So the longer loses its surplus over the shorter
    first, then they take turns (B first); the tokens a segment loses from its front are Binomial(lost, 1/2)."""
    a_length, b_length = a_stop - a_start, b_stop - b_start
    excess = np.maximum(a_length + b_length - target, 0)
    first_a = np.minimum(excess, np.maximum(a_length - b_length, 0))
    first_b = np.minimum(excess, np.maximum(b_length - a_length, 0))
    turns = excess - first_a - first_b
    lose_a, lose_b = first_a + turns // 2, first_b + (turns + 1) // 2
    front_a, front_b = rng.binomial(lose_a, 0.5), rng.binomial(lose_b, 0.5)
    records = np.zeros(len(a_start), EXAMPLE)
    records["a_start"], records["a_length"] = a_start + front_a, a_length - lose_a
    records["b_start"], records["b_length"] = b_start + front_b, b_length - lose_b
    records["label"] = np.where(is_random, RANDOM_NEXT, IS_NEXT)
    return records


class PretrainingExamples(torch.utils.data.Dataset):
    """The examples of an index as `[CLS] A [SEP] B [SEP]` token ids, assembled from the corpus when read.

    `__getitems__(indices)` (what a `DataLoader` calls for a batch) gives numpy arrays, vectorised over the batch:
    input_ids, attention_mask, token_type_ids, special_tokens_mask, word_starts (B, T), padded to the batch's
    longest example with the tokenizer's pad id (0 for the others), and next_sentence_label, example_id (B,). `examples[i]` gives one
    example's lists (unpadded), as a `datasets` row.
    """

    def __init__(self, corpus: PreparedCorpus, index: np.ndarray, tokenizer):
        self.corpus, self.index = corpus, index
        self.cls, self.sep, self.pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id

    def __len__(self) -> int:
        return len(self.index)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64)
        records = self.index[indices]
        a_length, b_length = (
            records["a_length"].astype(np.int64)[:, None],
            records["b_length"].astype(np.int64)[:, None],
        )
        total = a_length + b_length + 3  # (B, 1)
        position = np.arange(int(total.max()) if len(indices) else 0)[None, :]  # (1, T)
        in_a = (position >= 1) & (position <= a_length)
        in_b = (position >= a_length + 2) & (position < total - 1)
        source = np.where(
            in_a, records["a_start"][:, None] + position - 1, records["b_start"][:, None] + position - a_length - 2
        )
        text = in_a | in_b
        source = np.where(text, source, 0)
        input_ids = np.where(text, self.corpus.tokens[source], self.pad).astype(np.int64)
        special = (~text) & (position < total)  # [CLS] and the two [SEP]
        input_ids[special] = self.sep
        input_ids[:, 0] = self.cls
        return {
            "input_ids": input_ids,
            "attention_mask": (position < total).astype(np.int64),
            "token_type_ids": ((position >= a_length + 2) & (position < total)).astype(np.int64),
            "special_tokens_mask": special.astype(np.int64),
            "word_starts": (self.corpus.word_starts[source] * text).astype(np.int64),
            "next_sentence_label": records["label"].astype(np.int64),
            "example_id": indices,
        }

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"example {index} of {len(self)}")
        batch = self.__getitems__([index % len(self)])
        length = int(batch["special_tokens_mask"][0].nonzero()[0][-1]) + 1
        return {
            name: batch[name][0, :length].tolist() if batch[name].ndim == 2 else int(batch[name][0])
            for name in COLUMNS
        }
