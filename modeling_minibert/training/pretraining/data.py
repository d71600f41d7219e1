"""Pretraining data: a corpus prepared once -> NSP examples from its offsets -> the run's batches -> masked tensors.

    data = run_data(source, tokenizer, max_length=64, seed=42, dupe_factor=5)  # prepared (or found), split, indexed
    collator = DataCollatorForPreTraining(tokenizer, seed=42)                     # MLM masking + NSP labels
    loader = DataLoader(RunExamples(data.train_set), sampler=RunBatches(len(data.train_set), 32, seed=42),
                        batch_size=None, collate_fn=collator)                     # the run's batches, in order

The corpus (`corpus.py`) is tokenized once into memory-mapped files (`preparation.py`) that every process of every
run shares; the NSP pairs are two token ranges each, in an index built once per split and recipe (`examples.py`);
a batch is gathered from them and masked with whole-array numpy operations when the loader asks for it. Nothing
here holds the corpus: a process's memory is its batches, the documents' offsets it touches, and the page cache.

A run's batches are one sequence numbered across epochs (`RunBatches`), and each batch's masks are a function of
its examples and epoch: what a step trains on follows the global step, whatever the number of processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler
from transformers import PreTrainedTokenizerBase

from modeling_minibert.modeling_minibert import plan_batch

# The corpus's names, importable from here as before they had a module of their own.
from modeling_minibert.training.pretraining.corpus import (  # noqa: F401
    CorpusSource,
    Documents,
    Texts,
    bbc_news_dir,
    load_bbc_news,
    load_documents,
    read_article,
    read_text_files,
    split_document_ids,
    split_documents,
    split_sentences,
)
from modeling_minibert.training.pretraining.examples import (  # noqa: F401 (the labels, importable from here too)
    IS_NEXT,
    RANDOM_NEXT,
    PretrainingExamples,
    example_index,
)
from modeling_minibert.training.pretraining.preparation import PreparedCorpus, in_memory_corpus, prepare_corpus

if TYPE_CHECKING:
    from accelerate import Accelerator


# --- the run's data --------------------------------------------------------------------------------------------


@dataclass
class RunData:
    """A run's prepared corpus, its split by document, and the examples of each side."""

    corpus: PreparedCorpus
    train_ids: np.ndarray  # document numbers, sorted
    held_out_ids: np.ndarray
    train_set: PretrainingExamples
    eval_set: PretrainingExamples

    def train_documents(self, source: CorpusSource) -> Documents:
        """The training documents' text, streamed from the source (for what needs text, not tokens)."""
        return Documents(source, self.train_ids)


def run_data(
    source: CorpusSource,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 64,
    seed: int = 42,
    dupe_factor: int = 1,
    random_next: float = 0.5,
    held_out_fraction: float = 0.05,
    cache_dir: str | os.PathLike | None = None,
    num_workers: int | None = None,
    overwrite_cache: bool = False,
    show_progress: bool = True,
    max_eval_samples: int | None = None,
) -> RunData:
    """The corpus prepared (or found prepared), split by document (seeded by `seed`) and indexed: the training
    examples from `seed` with `dupe_factor` passes and `random_next`; the held-out ones always from `seed` + 1, one
    pass, half of them with a random B, so that held-out metrics compare across objectives (`max_eval_samples` of
    them, a sample seeded by `seed`, when given)."""
    corpus = prepare_corpus(source, tokenizer, cache_dir, num_workers, overwrite_cache, show_progress)
    train_ids, held_out_ids = split_document_ids(corpus.num_documents, held_out_fraction, seed)
    train = example_index(corpus, train_ids, max_length, seed, dupe_factor, random_next)
    held_out = example_index(corpus, held_out_ids, max_length, seed + 1, 1, 0.5)
    if max_eval_samples is not None and max_eval_samples < len(held_out):
        keep = np.random.default_rng(seed).choice(len(held_out), max_eval_samples, replace=False)
        held_out = held_out[np.sort(keep)]
    return RunData(
        corpus,
        train_ids,
        held_out_ids,
        PretrainingExamples(corpus, train, tokenizer),
        PretrainingExamples(corpus, held_out, tokenizer),
    )


def build_nsp_dataset(
    documents: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 64,
    seed: int = 42,
    dupe_factor: int = 1,
    random_next: float = 0.5,
) -> PretrainingExamples:
    """The NSP examples of a few documents given as strings, prepared in memory (a notebook, a test): the
    examples `pretrain` builds from its corpus, without a cache folder."""
    corpus = in_memory_corpus(Texts(documents), tokenizer)
    index = example_index(corpus, np.arange(corpus.num_documents), max_length, seed, dupe_factor, random_next)
    return PretrainingExamples(corpus, index, tokenizer)


# --- the run's batches -----------------------------------------------------------------------------------------


class ShuffledOrder:
    """Each epoch's order of `n` examples, a seeded permutation computed a position at a time: `order(epoch,
    positions)` is the example at those positions of epoch `epoch`'s order, for any n and in O(batch) memory.

    Hand-written because a stored permutation (`torch.randperm`, Accelerate's `SeedableRandomSampler`) costs 8 bytes
    an example in every process (2.6 GB each for BERT's corpus at dupe factor 5), drawn again every epoch. This is a
    6-round Feistel network keyed by (seed, epoch) on the smallest power of two >= n (halves of unequal width when
    its bits are odd), taking values of n or more through it again until they fall below n ("cycle walking": a
    bijection of [0, n); fewer than two passes on average, as the power of two is below 2n).
    """

    ROUNDS = 6

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed
        self.bits = max(2, (n - 1).bit_length())

    def __call__(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        keys = np.random.SeedSequence([self.seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF]).generate_state(
            self.ROUNDS, np.uint64
        )
        out = self._permute(np.asarray(positions, dtype=np.uint64), keys)
        outside = out >= self.n
        while outside.any():
            out[outside] = self._permute(out[outside], keys)
            outside = out >= self.n
        return out.astype(np.int64)

    def _permute(self, values: np.ndarray, keys: np.ndarray) -> np.ndarray:
        left_bits, right_bits = (self.bits + 1) // 2, self.bits // 2
        left, right = values >> np.uint64(right_bits), values & np.uint64((1 << right_bits) - 1)
        for key in keys:  # (left, right) -> (right, left ^ F(right)): the halves trade places and widths
            left, right = right, left ^ (_mix(right ^ key) & np.uint64((1 << left_bits) - 1))
            left_bits, right_bits = right_bits, left_bits
        return (left << np.uint64(right_bits)) | right


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit flips about half the output bits (a Feistel round's function).
    Products wrap modulo 2**64, as uint64 arrays do."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class RunBatch:
    """One micro-batch of a run: its examples (indices into the training set), the epoch they come from, and its
    number among the run's micro-batches (`number` of `of`: the masking-rate schedule's place)."""

    indices: list[int]
    epoch: int
    number: int
    of: int


class RunBatches(Sampler[RunBatch]):
    """The micro-batches of a run, numbered across epochs, as process `process_index` of `num_processes` takes them,
    from the run's batch `start` on (endless: the loop stops at its last step).

    Batch g is the (g mod N)-th slice of `batch_size` examples of epoch g // N's order (N = examples // batch_size;
    the remainder is left out, as `drop_last`), each epoch's order a permutation seeded by (`seed`, epoch)
    (`ShuffledOrder`). Process r takes batches r, r + W, r + 2W, ...: at optimizer step s with A micro-batches per
    process, its micro-batch m is batch (s x A + m) x W + r. One process with W x A micro-batches per step
    therefore trains on the very batches W processes share out, a run resumed with another number of processes
    (`start` = steps x W x A) continues the same sequence, and a batch is never padded or repeated at an epoch's end.

    Hand-written because Accelerate shards each epoch on its own (`BatchSamplerShard`: an epoch whose batches do not
    divide among the processes is padded with its first ones, and a new epoch starts on every process at once),
    so its batches would follow the number of processes, not the step. `of` (the run's total, which `--max_time`
    refits) goes with every batch, so that data-loader workers mask by the current schedule.
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        seed: int,
        num_processes: int = 1,
        process_index: int = 0,
        start: int = 0,
        of: int = 0,
    ):
        if num_examples < batch_size:
            raise ValueError(f"{num_examples} example(s) make no batch of {batch_size}")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.num_processes, self.process_index, self.start, self.of = num_processes, process_index, start, of
        self.per_epoch = num_examples // batch_size
        self.shuffled = ShuffledOrder(num_examples, seed)

    def order(self, epoch: int) -> list[int]:
        """The examples of `epoch` in their shuffled order (all of them: for a look, not for the loop)."""
        return self.shuffled(epoch, np.arange(self.num_examples)).tolist()

    def __iter__(self):
        number = self.start + self.process_index
        while True:
            epoch, position = divmod(number, self.per_epoch)
            first = position * self.batch_size
            indices = self.shuffled(epoch, np.arange(first, first + self.batch_size)).tolist()
            yield RunBatch(indices, epoch, number, self.of)
            number += self.num_processes


class RunExamples(Dataset):
    """The examples of each `RunBatch` (a `DataLoader` with `batch_size=None` fetches a whole batch at once), with
    the batch's epoch, number and total (`BATCH_FIELDS`), which the collator masks by."""

    def __init__(self, examples: PretrainingExamples):
        self.examples = examples

    def __getitem__(self, batch: RunBatch) -> dict:
        return {
            **self.examples.__getitems__(batch.indices),
            "epoch": batch.epoch,
            "batch_number": batch.number,
            "batches": batch.of,
        }


BATCH_FIELDS = ("epoch", "batch_number", "batches")
DATA_WAIT = "data_wait"  # metrics.jsonl's key for the share of step time spent waiting for batches (`DataWait`)


class DataWait:
    """How much of the training steps' time goes to waiting for batches: `data_wait` in each training record of
    metrics.jsonl (the logging window's share) and `train_data_wait` in the results (the session's).

    The wait is the time spent in the data loader's `next` and the copy to the device; the steps' time is the
    wall-clock time between two logged steps, evaluations and checkpoints left out. A window ends after the
    logging's reduction, which waits for the device: on a GPU, whose steps run ahead of the loop, its time is
    counted. In a distributed run the largest share of any process is recorded (a process waiting for its batch
    holds the others up at the gradients' all-reduce). Near 0 when the loader keeps ahead of the steps; the loader
    collates in the loop's process unless `--dataloader_num_workers` says otherwise.
    """

    def __init__(self):
        self.waited = self.left_out = self.total_waited = self.total_seconds = 0.0
        self.window_start = self.paused = time.perf_counter()

    def start(self) -> None:
        self.window_start = time.perf_counter()

    def next(self, batches: Iterator[dict], device: torch.device) -> dict:
        """The next batch, on `device`, its wait counted."""
        began = time.perf_counter()
        batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
        self.waited += time.perf_counter() - began
        return batch

    def resume(self) -> None:
        """After an evaluation or a checkpoint (begun at `paused`): its time is not step time."""
        self.left_out += time.perf_counter() - self.paused

    def share(self, accelerator: Accelerator) -> float:
        """The window's share (the largest of any process); the next window starts."""
        now = time.perf_counter()
        seconds = now - self.window_start - self.left_out
        share = self.waited / seconds if seconds > 0 else 0.0
        if accelerator.num_processes > 1:
            share = accelerator.reduce(torch.tensor(share, device=accelerator.device), "max").item()
        self.total_waited, self.total_seconds = self.total_waited + share * seconds, self.total_seconds + seconds
        self.waited = self.left_out = 0.0
        self.window_start = now
        return round(share, 4)

    def session_share(self) -> float:
        return round(self.total_waited / self.total_seconds, 4) if self.total_seconds > 0 else 0.0


def _batch_seed(*numbers: int) -> int:
    return int(np.random.SeedSequence([n & 0xFFFFFFFF for n in numbers]).generate_state(1)[0])


# --- masking ---------------------------------------------------------------------------------------------------


@dataclass
class DataCollatorForPreTraining:
    """Masks NSP examples for MLM, as transformers' `DataCollatorForLanguageModeling` (and BERT) do, with whole-array
    numpy operations: a share `mlm_probability` of the tokens (of the words, with `whole_word_mask`) is chosen,
    [CLS], [SEP] and padding never; of those, 80% become [MASK], 10% a random token, 10% stay (whole words: all
    [MASK], as transformers' whole-word masking). `next_sentence_label` passes through.

    Takes what `PretrainingExamples.__getitems__` gives (numpy (B, T) arrays, with `BATCH_FIELDS` from
    `RunExamples`), or a list of examples' dicts of lists (`examples[i]`), which it pads.

    The mask of a batch is drawn from a generator seeded by (seed, epoch, the batch's example ids): a function of
    the batch alone, not of how many batches came before. So a resumed run (which skips batches without
    collating them) and every process of a distributed run mask exactly as an uninterrupted run does; set
    `epoch` at each epoch to draw new masks (dynamic masking, as RoBERTa). Batches from `RunExamples` carry their
    epoch and number, which then take the place of `epoch` and `batches`: the collator keeps no state, so it masks
    alike in the loop's process and in data-loader workers.

    Output: input_ids, token_type_ids, attention_mask, labels (B, T) (-100 where not masked), next_sentence_label (B,),
    and (`plan_batches`) what the model needs on the host to train without waiting for the device: `batch_plan` and
    `masked_positions` (`modeling_minibert.plan_batch`; a model of transformers' takes neither: set it False).
    `pad_to_length` pads every batch to that many tokens, so that a compiled step sees one shape.
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    whole_word_mask: bool = False
    seed: int = 42
    epoch: int = 0
    # A masking-rate schedule (Ankner et al. 2023): the rate goes linearly from mlm_probability at the run's first
    # batch to final_mlm_probability at its last (batch `total_batches - 1`); `batches` counts the run's batches
    # collated so far (a resumed run sets it). A function of the batch's place in the run: the data loader may
    # collate a batch ahead, and a resumed run masks as an uninterrupted one.
    final_mlm_probability: float | None = None
    total_batches: int = 0
    batches: int = 0
    plan_batches: bool = True
    pad_to_length: int | None = None

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability={self.mlm_probability} must be between 0 and 1 (exclusive)")
        self.mask_id, self.vocab_size = self.tokenizer.mask_token_id, len(self.tokenizer)

    def rate(self, batch: int, total_batches: int | None = None) -> float:
        """The masking rate of the run's batch number `batch` (0-based) of `total_batches` (default: the
        collator's)."""
        if self.final_mlm_probability is None:
            return self.mlm_probability
        total = self.total_batches if total_batches is None else total_batches
        progress = min(batch / max(total - 1, 1), 1.0)
        return self.mlm_probability + (self.final_mlm_probability - self.mlm_probability) * progress

    def __call__(self, examples: dict | list[dict]) -> dict[str, torch.Tensor]:
        batch = examples if isinstance(examples, dict) else padded(examples, self.tokenizer.pad_token_id)
        if self.pad_to_length is not None:
            batch = padded_to(batch, self.pad_to_length, self.tokenizer.pad_token_id)
        epoch = batch.get("epoch", self.epoch)
        if self.final_mlm_probability is not None and "batch_number" in batch:
            rate = self.rate(batch["batch_number"], batch["batches"])
        elif self.final_mlm_probability is not None:
            rate = self.rate(self.batches)
            self.batches += 1
        else:
            rate = self.mlm_probability
        rng = np.random.default_rng(_batch_seed(self.seed, epoch, *batch["example_id"].tolist()))
        input_ids, labels = self.mask(batch, rate, rng)
        tensors = {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(batch["token_type_ids"]),
            "attention_mask": torch.from_numpy(batch["attention_mask"]),
            "labels": torch.from_numpy(labels),
            "next_sentence_label": torch.from_numpy(batch["next_sentence_label"]),
        }
        if not self.plan_batches:
            return tensors
        # The schedule's highest rate: every batch of a shape then has room for the same number of masked positions.
        return plan_batch(tensors, max(self.mlm_probability, self.final_mlm_probability or 0.0))

    def mask(self, batch: dict, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(masked input_ids, labels) of a batch at masking rate `rate`."""
        ids, special = batch["input_ids"], batch["special_tokens_mask"].astype(bool)
        candidates = batch["attention_mask"].astype(bool) & ~special
        if self.whole_word_mask:
            # A word starts at a word-start token, or wherever a segment starts inside one (after [CLS] / [SEP]).
            starts = batch["word_starts"].astype(bool)
            starts[:, 1:] |= special[:, :-1]
            word = np.cumsum(starts.ravel()).reshape(ids.shape)
            chosen = (rng.random(int(word.max(initial=0)) + 1) < rate)[word] & candidates
        else:
            chosen = (rng.random(ids.shape) < rate) & candidates
        labels = np.where(chosen, ids, -100)
        draw = rng.random(ids.shape)
        masked = chosen & ((draw < 0.8) | self.whole_word_mask)
        randomized = chosen & ~masked & (draw < 0.9)
        masked_ids = np.where(masked, self.mask_id, ids)
        masked_ids = np.where(randomized, rng.integers(0, self.vocab_size, ids.shape), masked_ids)
        return masked_ids, labels


def padded_to(batch: dict, length: int, pad_id: int) -> dict:
    """A batch's (B, T) arrays padded to (B, `length`) (ValueError if an example is longer)."""
    width = batch["input_ids"].shape[1]
    if width > length:
        raise ValueError(f"an example of {width} tokens does not fit pad_to_length={length}")
    fills = {"input_ids": pad_id}
    return {
        k: np.pad(v, ((0, 0), (0, length - width)), constant_values=fills.get(k, 0))
        if isinstance(v, np.ndarray) and v.ndim == 2
        else v
        for k, v in batch.items()
    }


def padded(examples: list[dict], pad_id: int) -> dict[str, np.ndarray]:
    """Examples' dicts of lists (`PretrainingExamples[i]`) as the arrays `__getitems__` gives."""
    length = max(len(e["input_ids"]) for e in examples)
    batch = {}
    for name, fill in (("input_ids", pad_id), ("token_type_ids", 0), ("special_tokens_mask", 0), ("word_starts", 0)):
        column = np.full((len(examples), length), fill, dtype=np.int64)
        for row, example in enumerate(examples):
            column[row, : len(example[name])] = example[name]
        batch[name] = column
    batch["attention_mask"] = (
        np.arange(length)[None, :] < np.array([len(e["input_ids"]) for e in examples])[:, None]
    ).astype(np.int64)
    batch["next_sentence_label"] = np.array([e["next_sentence_label"] for e in examples], dtype=np.int64)
    batch["example_id"] = np.array([e["example_id"] for e in examples], dtype=np.int64)
    return batch
