"""Task distillation: a fine-tuned teacher's predictions teach a pretrained Mini-BERT; `minibert distill`.

Turc et al. (2019, "Well-Read Students Learn Better") pretrain the compact model, then train it on a large teacher's
soft predictions over a transfer set. The flow (each step before the first is skipped when it has nothing to do):

    check        data, labels, teacher, transfer files, temperature and alpha: errors before any training
    teacher      with `finetune_teacher`, fine-tune the teacher on the training data with the fine-tuning job
    transfer     the training data + unlabelled texts (`transfer_files`) + seeded augmented copies
    label        the teacher's logits on the transfer set and on the validation / test data, computed once and
                 cached in the output folder (`teacher_logits.safetensors` + `.json`), reused by a rerun
    distil       `DistillationTrainer`: KL divergence to the teacher at a temperature (times T^2), plus `alpha`
                 times the cross-entropy on the hard labels where the example has one
    save         model, tokenizer, Trainer's results files, curves PNG, model card

Teacher and student tokenizers may differ: each text is tokenized by both, and for token classification the
teacher's prediction for a word (read at its first sub-token) becomes the target of the student's first
sub-token of that word. The teacher is never run during distillation: its logits are a column of the data.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from datasets import Dataset, load_dataset
from matplotlib.figure import Figure
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import IntervalStrategy, SaveStrategy

import modeling_minibert  # noqa: F401 - registers Mini-BERT with the Auto classes
from modeling_minibert.files import check_output_dir, staged_folder, write_json

TASKS = ("sequence-classification", "token-classification")
AUTO_CLASSES = {
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}
PIPELINE_TAGS = {"sequence-classification": "text-classification", "token-classification": "token-classification"}
ARCHITECTURE_SUFFIX = {"sequence-classification": "ForSequenceClassification", "token-classification": "ForTokenClassification"}
CACHE_FILE = "teacher_logits.safetensors"
CACHE_INFO_FILE = "teacher_logits.json"
TEACHER_DIR = "teacher"  # where --finetune_teacher puts the fine-tuned teacher, inside the output folder
TEACHER_INFO_FILE = "distill_teacher.json"
CURVES_FILE = "training_curves.png"
DATA_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json"}


@dataclass
class DistillationArguments:
    """What to distil into what; `TrainingArguments` (see `DistillationTrainingArguments`) says how."""

    task: str = field(metadata={"help": "sequence-classification or token-classification", "choices": TASKS})
    teacher_model_name_or_path: str = field(
        metadata={"help": "a fine-tuned classifier folder or Hub id (any model AutoModelFor<Task> loads), with its "
                  "tokenizer; with --finetune_teacher any encoder (a BERT, a Mini-BERT)"}
    )
    model_name_or_path: str = field(metadata={"help": "the student: a pretrained Mini-BERT folder with its tokenizer"})
    train_file: str = field(metadata={"help": "CSV/TSV/JSON/JSONL training data (token classification: JSON with "
                                      "lists of words and tags)"})
    validation_file: str | None = field(default=None, metadata={"help": "scored each evaluation; picks the best model"})
    test_file: str | None = field(default=None, metadata={"help": "scored once, with the saved model"})
    finetune_teacher: bool = field(
        default=False, metadata={"help": "fine-tune the teacher on the training data first (into OUTPUT_DIR/teacher)"}
    )
    teacher_num_train_epochs: float = field(default=1.0, metadata={"help": "epochs of teacher fine-tuning"})
    teacher_learning_rate: float = field(default=1e-4, metadata={"help": "learning rate of teacher fine-tuning"})
    transfer_file: list[str] = field(
        default_factory=list,
        metadata={"help": "unlabelled texts the teacher labels for the student: .txt (one example per line) or "
                  "CSV/JSON with the text column", "nargs": "+"},
    )
    augment_copies: int = field(default=1, metadata={"help": "augmented copies of each training example"})
    word_dropout: float = field(default=0.1, metadata={"help": "augmentation: chance to drop each word"})
    word_swap: float = field(default=0.1, metadata={"help": "augmentation: chance to swap each word with the next"})
    temperature: float = field(default=2.0, metadata={"help": "softmax temperature of teacher and student (> 0)"})
    alpha: float = field(default=0.0, metadata={"help": "weight of the hard-label loss, in [0, 1]; the KL term "
                                                "gets 1 - alpha"})
    max_seq_length: int = field(default=128, metadata={"help": "tokens per input, for teacher and student"})
    text_column_name: str | None = field(default=None, metadata={"help": "default: 'text' (or 'tokens')"})
    label_column_name: str | None = field(default=None, metadata={"help": "default: 'label' (or 'tags')"})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace a non-empty --output_dir (the "
                                                                "cached teacher logits there are reused)"})


@dataclass
class DistillationTrainingArguments(TrainingArguments):
    """`TrainingArguments` with the defaults distillation wants (every field keeps its name and flag)."""

    # Small students take large steps; distillation targets are smooth, so a few epochs are enough.
    # (Annotations as TrainingArguments has them, so that HfArgumentParser builds the same flags.)
    learning_rate: float = 1e-4
    num_train_epochs: float = 3.0
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    weight_decay: float = 0.01
    warmup_steps: float = 0.1
    eval_strategy: IntervalStrategy | str = "epoch"
    save_strategy: SaveStrategy | str = "epoch"
    load_best_model_at_end: bool = True
    # None: Trainer's default, the validation loss, which here is the distance to the teacher (the objective).
    metric_for_best_model: str | None = None
    save_only_model: bool = True
    save_total_limit: int | None = 1
    logging_steps: float = 10
    report_to: None | str | list[str] = "none"
    use_cpu: bool = not torch.cuda.is_available()


@dataclass
class DistillResult:
    """What a distillation run produced (scores without the `eval_` / `test_` prefixes)."""

    output_dir: Path
    metrics: dict[str, float]
    test_metrics: dict[str, float] | None
    labels: list[str]
    train_metrics: dict[str, float]
    teacher: str  # the teacher that labelled the transfer set (the fine-tuned one with finetune_teacher)
    transfer_size: int
    reused_teacher_logits: bool


# ---------------------------------------------------------------------------------------------------------------
# Examples: what both tokenizers read


@dataclass
class Examples:
    """One split as plain Python: texts (sequence classification) or word lists (token classification), and
    label names (a string, a list of tags, or None for unlabelled transfer examples)."""

    inputs: list[Any]
    labels: list[Any]


def load_examples(source: str | os.PathLike | Dataset, task: str, text_column: str, label_column: str | None) -> Examples:
    """Read a split from a CSV/TSV/JSON/JSONL file (with `datasets`) or a `Dataset`; without `label_column` the
    labels are None."""
    if isinstance(source, Dataset):
        data = source
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"data file {path} does not exist")
        kind = DATA_EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            raise ValueError(f"{path}: unknown data format {path.suffix!r}; use one of {sorted(DATA_EXTENSIONS)}")
        options = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
        data = load_dataset(kind, data_files=str(path), split="train", **options)
    where = source if not isinstance(source, Dataset) else "the dataset"
    for column in filter(None, (text_column, label_column)):
        if column not in data.column_names:
            raise ValueError(f"{where}: no column {column!r} (columns: {data.column_names})")
    inputs = list(data[text_column])
    if task == "token-classification":
        inputs = [[str(w) for w in words] for words in inputs]
    else:
        inputs = [str(text) for text in inputs]
    if not inputs:
        raise ValueError(f"{where}: no examples")
    if label_column is None:
        return Examples(inputs, [None] * len(inputs))
    labels = list(data[label_column])
    if task == "token-classification":
        labels = [[str(t) for t in tags] for tags in labels]
        for i, (words, tags) in enumerate(zip(inputs, labels)):
            if len(words) != len(tags):
                raise ValueError(f"{where}: example {i} has {len(words)} words but {len(tags)} tags")
    else:
        labels = [str(label) for label in labels]
    return Examples(inputs, labels)


def load_transfer_file(path: str | os.PathLike, task: str, text_column: str) -> list[Any]:
    """Unlabelled inputs: a .txt file holds one example per line (words split on whitespace for token
    classification); CSV/JSON files give their text column."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"transfer file {path} does not exist")
    if path.suffix.lower() in DATA_EXTENSIONS:
        return load_examples(path, task, text_column, None).inputs
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    inputs = [line.split() if task == "token-classification" else line for line in lines if line]
    if not inputs:
        raise ValueError(f"transfer file {path} holds no text")
    return inputs


def augment(words: Sequence[str], rng: random.Random, word_dropout: float, word_swap: float) -> list[int]:
    """Indices of `words` in a perturbed order: each word dropped with chance `word_dropout` (one always stays),
    then each neighbour pair swapped with chance `word_swap`. Indices, so that tags can follow their words."""
    kept = [i for i in range(len(words)) if rng.random() >= word_dropout] or [rng.randrange(len(words))]
    for i in range(len(kept) - 1):
        if rng.random() < word_swap:
            kept[i], kept[i + 1] = kept[i + 1], kept[i]
    return kept


def transfer_set(
    train: Examples, task: str, extra_inputs: Sequence[Any], copies: int, word_dropout: float, word_swap: float, seed: int
) -> Examples:
    """The training examples (with their labels), `copies` augmented copies of each (labelled only by the
    teacher: dropping "not" may flip a sentiment), and the unlabelled extra inputs."""
    rng = random.Random(seed)
    inputs, labels = list(train.inputs), list(train.labels)
    for _ in range(copies):
        for example in train.inputs:
            words = example if task == "token-classification" else example.split()
            if not words:
                continue
            order = augment(words, rng, word_dropout, word_swap)
            new = [words[i] for i in order]
            inputs.append(new if task == "token-classification" else " ".join(new))
            labels.append(None)
    inputs.extend(extra_inputs)
    labels.extend([None] * len(extra_inputs))
    return Examples(inputs, labels)


# ---------------------------------------------------------------------------------------------------------------
# The teacher's predictions


def encode(tokenizer: PreTrainedTokenizerBase, inputs: Sequence[Any], task: str, max_length: int):
    """Tokenize texts, or word lists (is_split_into_words) for token classification, without padding."""
    return tokenizer(list(inputs), is_split_into_words=task == "token-classification", truncation=True, max_length=max_length)


@torch.inference_mode()
def predict_logits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: Sequence[Any],
    task: str,
    max_length: int,
    batch_size: int = 64,
    show_progress: bool = True,
) -> list[torch.Tensor]:
    """The model's logits for each input, in input order: (C,) per text, or (num_words, C) per word list (each
    word read at its first sub-token; words cut off by `max_length` get zeros, a uniform distribution).

    Batches hold inputs of similar length, each padded only to its longest (dynamic padding): short snippets
    then cost what they hold.
    """
    model.eval()
    encoding = encode(tokenizer, inputs, task, max_length)
    order = sorted(range(len(inputs)), key=lambda i: len(encoding["input_ids"][i]))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in encoding]
    results: list[torch.Tensor | None] = [None] * len(inputs)
    num_labels = model.config.num_labels
    batches = range(0, len(order), batch_size)
    for start in tqdm(batches, desc="teacher labels", disable=not show_progress, leave=False):
        rows = order[start : start + batch_size]
        batch = tokenizer.pad({n: [encoding[n][i] for i in rows] for n in names}, return_tensors="pt")
        logits = model(**batch).logits.float()  # (B, C) or (B, T, C)
        for b, i in enumerate(rows):
            if task == "sequence-classification":
                results[i] = logits[b].clone()
            else:
                word_logits = torch.zeros(len(inputs[i]), num_labels)
                previous = None
                for position, word in enumerate(encoding.word_ids(i)):
                    if word is not None and word != previous:
                        word_logits[word] = logits[b, position]
                    previous = word
                results[i] = word_logits
    return results  # type: ignore[return-value]


def fingerprint(*parts: Any) -> str:
    """A hash of JSON-able parts (the inputs, the options) and of files (Paths: their bytes)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            digest.update(part.name.encode())
            with open(part, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def model_files(name_or_path: str | os.PathLike) -> list[Any]:
    """What identifies a model: its folder's config, weights and tokenizer files, or a Hub id's name."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        return [str(name_or_path)]
    names = ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json")
    return sorted((p for p in folder.iterdir() if p.name in names or p.suffix == ".safetensors"), key=lambda p: p.name)


def save_logits_cache(folder: Path, key: str, splits: dict[str, list[torch.Tensor]]) -> None:
    """Per split: the logits stacked ((N, C), or all words' rows (W, C) with per-example word counts)."""
    tensors = {}
    for split, rows in splits.items():
        tensors[f"{split}.logits"] = torch.cat([r.reshape(-1, r.shape[-1]) for r in rows]).contiguous()
        tensors[f"{split}.rows"] = torch.tensor([r.shape[0] if r.dim() == 2 else 1 for r in rows])
    save_file(tensors, str(folder / CACHE_FILE))
    write_json(folder / CACHE_INFO_FILE, {"fingerprint": key, "splits": {s: len(r) for s, r in splits.items()}})


def load_logits_cache(folder: Path, key: str, task: str) -> dict[str, list[torch.Tensor]] | None:
    """The cached logits if `folder` holds them for exactly this teacher, data and options, else None."""
    try:
        info = json.loads((folder / CACHE_INFO_FILE).read_text(encoding="utf-8"))
        if info.get("fingerprint") != key:
            return None
        tensors = load_file(str(folder / CACHE_FILE))
    except (OSError, ValueError):
        return None
    splits = {}
    for split in info["splits"]:
        logits, rows = tensors[f"{split}.logits"], tensors[f"{split}.rows"].tolist()
        parts = list(torch.split(logits, rows))
        splits[split] = [p[0] for p in parts] if task == "sequence-classification" else parts
    return splits


# ---------------------------------------------------------------------------------------------------------------
# The loss and the Trainer


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    alpha: float = 0.0,
    labels: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(1 - alpha) * T^2 * KL(teacher_T || student_T) + alpha * cross-entropy(student, labels).

    Logits (B, C) or (B, T, C); `mask` (B, T) marks the positions that have a teacher target; labels -100 are
    ignored. T^2 keeps the soft term's gradients on the hard term's scale whatever the temperature (Hinton et
    al. 2015). The KL term is averaged over the examples (or masked positions).
    """
    num_labels = student_logits.shape[-1]
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)  # (B,) or (B, T)
    if mask is not None:
        keep = mask == 1
        kl = kl[keep].sum() / keep.sum().clamp(min=1)
    else:
        kl = kl.mean()
    loss = (1.0 - alpha) * temperature**2 * kl
    if alpha > 0 and labels is not None and bool((labels != -100).any()):
        loss = loss + alpha * F.cross_entropy(
            student_logits.float().reshape(-1, num_labels), labels.reshape(-1), ignore_index=-100
        )
    return loss


class DistillationTrainer(Trainer):
    """`Trainer` whose loss is `distillation_loss` against the batch's `teacher_logits` column."""

    def __init__(self, *args: Any, temperature: float = 2.0, alpha: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.temperature = temperature
        self.alpha = alpha

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        teacher_logits = inputs["teacher_logits"]
        mask = inputs.get("teacher_mask")
        labels = inputs.get("labels")
        model_inputs = {k: v for k, v in inputs.items() if k not in ("teacher_logits", "teacher_mask", "labels")}
        outputs = model(**model_inputs)
        loss = distillation_loss(outputs.logits, teacher_logits, self.temperature, self.alpha, labels, mask)
        return (loss, outputs) if return_outputs else loss


class DistillationCollator:
    """The task's transformers collator for the model inputs and labels; the teacher's logits (and, for token
    classification, their mask) padded to the batch's length by hand, since those collators pad only token
    columns."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, task: str) -> None:
        self.task = task
        self.base = DataCollatorForTokenClassification(tokenizer) if task == "token-classification" else DataCollatorWithPadding(tokenizer)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        features = [dict(f) for f in features]
        teacher = [torch.as_tensor(f.pop("teacher_logits"), dtype=torch.float32) for f in features]
        masks = [torch.as_tensor(f.pop("teacher_mask")) for f in features] if self.task == "token-classification" else None
        batch = self.base(features)
        if masks is None:
            batch["teacher_logits"] = torch.stack(teacher)
            return batch
        length = batch["input_ids"].shape[1]
        batch["teacher_logits"] = torch.stack([F.pad(t, (0, 0, 0, length - t.shape[0])) for t in teacher])
        batch["teacher_mask"] = torch.stack([F.pad(m, (0, length - m.shape[0])) for m in masks])
        return batch


def student_features(
    tokenizer: PreTrainedTokenizerBase,
    examples: Examples,
    teacher_logits: list[torch.Tensor],
    task: str,
    max_length: int,
    label2id: dict[str, int],
) -> Dataset:
    """The student's tokens with the hard labels (-100 where there are none) and the teacher's targets: (C,) per
    text, or per token (T, C) with a mask marking each word's first sub-token."""
    encoding = encode(tokenizer, examples.inputs, task, max_length)
    if task == "sequence-classification":
        labels = [label2id[y] if y is not None else -100 for y in examples.labels]
        return Dataset.from_dict({**encoding, "labels": labels, "teacher_logits": [t.tolist() for t in teacher_logits]})
    labels, targets, masks = [], [], []
    num_labels = len(label2id)
    for i, tags in enumerate(examples.labels):
        word_ids = encoding.word_ids(i)
        row_labels, row_targets, row_mask, previous = [], torch.zeros(len(word_ids), num_labels), [], None
        for position, word in enumerate(word_ids):
            first = word is not None and word != previous
            row_labels.append(label2id[tags[word]] if first and tags is not None else -100)
            row_mask.append(int(first))
            if first:
                row_targets[position] = teacher_logits[i][word]
            previous = word
        labels.append(row_labels)
        targets.append(row_targets.tolist())
        masks.append(row_mask)
    return Dataset.from_dict({**encoding, "labels": labels, "teacher_logits": targets, "teacher_mask": masks})


def scores(predictions: np.ndarray, labels: np.ndarray, teacher_logits: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float]:
    """Accuracy and macro-F1 against the hard labels, agreement with the teacher's argmax, and the mean
    KL(teacher || student) at temperature 1, over examples (or the labelled positions of token classification)."""
    from sklearn.metrics import accuracy_score, f1_score

    keep = labels != -100 if mask is None else (mask == 1) & (labels != -100)
    student, teacher, gold = predictions[keep], teacher_logits[keep], labels[keep]
    log_s = torch.log_softmax(torch.as_tensor(student, dtype=torch.float32), -1)
    log_t = torch.log_softmax(torch.as_tensor(teacher, dtype=torch.float32), -1)
    kl = F.kl_div(log_s, log_t, log_target=True, reduction="none").sum(-1).mean()
    predicted = student.argmax(-1)
    return {
        "accuracy": float(accuracy_score(gold, predicted)),
        "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
        "teacher_agreement": float((predicted == teacher.argmax(-1)).mean()),
        "kl_to_teacher": float(kl),
    }


def compute_metrics(p: EvalPrediction) -> dict[str, float]:
    labels, teacher, *mask = p.label_ids
    return scores(p.predictions, labels, teacher, mask[0] if mask else None)


# ---------------------------------------------------------------------------------------------------------------
# Checks: everything that can be wrong is found before any training


def classifier_config(teacher: str, task: str):
    try:
        return AutoConfig.from_pretrained(teacher)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"cannot load a teacher from {teacher!r}: {str(err).splitlines()[0]}") from err


def check_teacher(teacher: str, task: str, data_labels: list[str]) -> list[str]:
    """The label names in the teacher's id order; ValueError if the teacher is not a `task` classifier or its
    labels are not exactly the data's."""
    config = classifier_config(teacher, task)
    suffix = ARCHITECTURE_SUFFIX[task]
    architectures = config.architectures or []
    if not any(a.endswith(suffix) for a in architectures):
        raise ValueError(
            f"teacher {teacher} is a {'/'.join(architectures) or config.model_type} model, not a {task} classifier "
            f"(*{suffix}); fine-tune it first or pass --finetune_teacher"
        )
    teacher_labels = [config.id2label[i] for i in range(config.num_labels)]
    if set(teacher_labels) != set(data_labels):
        raise ValueError(
            f"teacher {teacher} predicts labels {teacher_labels} but the data has {data_labels}; use a teacher "
            f"fine-tuned on these labels, or pass --finetune_teacher"
        )
    return teacher_labels


def check_options(args: DistillationArguments) -> None:
    if args.task not in TASKS:
        raise ValueError(f"task={args.task!r} must be one of {list(TASKS)}")
    if not (args.temperature > 0 and np.isfinite(args.temperature)):
        raise ValueError(f"temperature={args.temperature} must be a positive number")
    if not 0 <= args.alpha <= 1:
        raise ValueError(f"alpha={args.alpha} must be between 0 and 1 (the weight of the hard-label loss)")
    if args.augment_copies < 0:
        raise ValueError(f"augment_copies={args.augment_copies} must be at least 0")
    for name in ("word_dropout", "word_swap"):
        if not 0 <= getattr(args, name) < 1:
            raise ValueError(f"{name}={getattr(args, name)} must be in [0, 1)")
    if args.max_seq_length < 3:
        raise ValueError(f"max_seq_length={args.max_seq_length} must be at least 3")
    for path in args.transfer_file:
        if not Path(path).is_file():
            raise FileNotFoundError(f"transfer file {path} does not exist")


def max_length_for(name_or_path: str, tokenizer: PreTrainedTokenizerBase, wanted: int) -> int:
    limit = getattr(AutoConfig.from_pretrained(name_or_path), "max_position_embeddings", None) or wanted
    return int(min(wanted, limit, tokenizer.model_max_length))


# ---------------------------------------------------------------------------------------------------------------
# The job


def distill(
    args: DistillationArguments | None = None,
    training_args: TrainingArguments | None = None,
    *,
    train_data: Dataset | None = None,
    validation_data: Dataset | None = None,
    test_data: Dataset | None = None,
    show_progress: bool = True,
    **options: Any,
) -> DistillResult:
    """Distil a teacher into a student; see the module docstring for the flow.

    Call it with the two dataclasses (as the CLI does), or with keyword arguments: `DistillationArguments`
    fields (`task`, `teacher_model_name_or_path`, `model_name_or_path`, `train_file`, ...) and `TrainingArguments`
    fields (`output_dir`, `num_train_epochs`, ...; defaults of `DistillationTrainingArguments`). In-memory
    `Dataset`s may replace the files (`train_data` etc.).

        distill(task="sequence-classification", teacher_model_name_or_path="runs/bert-sst2",
                model_name_or_path="minibert-pretrained", train_file="train.csv", validation_file="dev.csv",
                output_dir="runs/distilled", num_train_epochs=3)

    Raises (before any training): ValueError for bad options, a teacher that is not a classifier for the task or
    whose labels differ from the data's; FileNotFoundError for missing files; FileExistsError for a non-empty
    output_dir without overwrite_output_dir.
    """
    names = {f.name for f in dataclasses.fields(DistillationArguments)}
    if args is None:
        if train_data is not None:
            options.setdefault("train_file", "")
        args = DistillationArguments(**{k: options.pop(k) for k in list(options) if k in names})
    if training_args is None:
        fields = {f.name for f in dataclasses.fields(DistillationTrainingArguments) if f.init}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}: use DistillationArguments or TrainingArguments field names")
        has_validation = args.validation_file is not None or validation_data is not None
        if not has_validation:
            options.setdefault("eval_strategy", "no")
            options.setdefault("load_best_model_at_end", False)
        if "output_dir" not in options:
            raise ValueError("output_dir is required")
        training_args = DistillationTrainingArguments(**options)
    elif options:
        raise ValueError(f"pass options either in the dataclasses or as keywords, not both: {sorted(options)}")
    if not training_args.output_dir:
        raise ValueError("output_dir is required")

    # --- check: everything before any work -----------------------------------------------------------------
    check_options(args)
    task = args.task
    token_task = task == "token-classification"
    text_column = args.text_column_name or ("tokens" if token_task else "text")
    label_column = args.label_column_name or ("tags" if token_task else "label")
    output = check_output_dir(training_args.output_dir, overwrite=args.overwrite_output_dir)
    splits = {"train": train_data if train_data is not None else args.train_file}
    for role, data, path in (("validation", validation_data, args.validation_file), ("test", test_data, args.test_file)):
        if data is not None or path is not None:
            splits[role] = data if data is not None else path
    evaluation = getattr(training_args.eval_strategy, "value", training_args.eval_strategy)
    if "validation" not in splits and (evaluation != "no" or training_args.load_best_model_at_end):
        raise ValueError(
            f"eval_strategy={evaluation!r} and load_best_model_at_end={training_args.load_best_model_at_end} need "
            "validation data (validation_file); pass --eval_strategy no --load_best_model_at_end false without it"
        )
    examples = {role: load_examples(source, task, text_column, label_column) for role, source in splits.items()}
    flat = lambda ys: [t for y in ys for t in y] if token_task else list(ys)  # noqa: E731
    data_labels = sorted(set(flat(examples["train"].labels)))
    for role in ("validation", "test"):
        if role in examples:
            unseen = sorted(set(flat(examples[role].labels)) - set(data_labels))
            if unseen:
                raise ValueError(f"{role} data has labels {unseen} that the training data does not have")
    extra_inputs = [x for path in args.transfer_file for x in load_transfer_file(path, task, text_column)]
    if args.finetune_teacher:
        classifier_config(args.teacher_model_name_or_path, task)
        label_names = data_labels
    else:
        label_names = check_teacher(args.teacher_model_name_or_path, task, data_labels)
    label2id = {name: i for i, name in enumerate(label_names)}
    student_config = AutoConfig.from_pretrained(args.model_name_or_path)  # fails early on a wrong folder
    del student_config
    previous = output if output.is_dir() else None

    with staged_folder(output) as staging:
        # --- teacher: the given one, or fine-tuned on the training data -------------------------------------
        teacher = args.teacher_model_name_or_path
        if args.finetune_teacher:
            teacher = str(_fine_tuned_teacher(args, training_args, examples, label_names, staging, previous, text_column, label_column))
        teacher_tokenizer = AutoTokenizer.from_pretrained(teacher)
        teacher_length = max_length_for(teacher, teacher_tokenizer, args.max_seq_length)

        # --- transfer set, labelled by the teacher once ------------------------------------------------------
        transfer = transfer_set(
            examples["train"], task, extra_inputs, args.augment_copies, args.word_dropout, args.word_swap, training_args.seed
        )
        inputs = {"transfer": transfer.inputs, **{r: examples[r].inputs for r in ("validation", "test") if r in examples}}
        key = fingerprint(task, teacher_length, label_names, inputs, *model_files(teacher))
        cached = load_logits_cache(previous, key, task) if previous is not None else None
        if cached is None:
            teacher_logits = label_with_teacher(
                teacher, teacher_tokenizer, task, inputs, teacher_length, training_args.per_device_eval_batch_size,
                label_names, show_progress,
            )
        else:
            teacher_logits = cached
        save_logits_cache(staging, key, teacher_logits)

        # --- distil ------------------------------------------------------------------------------------------
        tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
        student_length = max_length_for(args.model_name_or_path, tokenizer, args.max_seq_length)
        datasets = {
            role: student_features(tokenizer, examples[role] if role != "transfer" else transfer, teacher_logits[role], task, student_length, label2id)
            for role in teacher_logits
        }
        student = AUTO_CLASSES[task].from_pretrained(
            args.model_name_or_path, num_labels=len(label_names), id2label=dict(enumerate(label_names)), label2id=label2id
        )
        training_args.output_dir = str(staging)  # checkpoint-N/ land in the staging folder and are removed below
        training_args.label_names = ["labels", "teacher_logits"] + (["teacher_mask"] if token_task else [])
        training_args.disable_tqdm = training_args.disable_tqdm or not show_progress
        trainer = DistillationTrainer(
            model=student,
            args=training_args,
            data_collator=DistillationCollator(tokenizer, task),
            train_dataset=datasets["transfer"],
            eval_dataset=datasets.get("validation"),
            processing_class=tokenizer,
            compute_metrics=compute_metrics,
            temperature=args.temperature,
            alpha=args.alpha,
        )
        train_metrics = trainer.train().metrics
        metrics: dict[str, float] = {}
        test_metrics = None
        if "validation" in datasets:
            metrics = trainer.evaluate(datasets["validation"], metric_key_prefix="eval")
            metrics.update(teacher_scores("eval", examples["validation"], teacher_logits["validation"], label2id))
        if "test" in datasets:
            test_metrics = trainer.evaluate(datasets["test"], metric_key_prefix="test")
            test_metrics.update(teacher_scores("test", examples["test"], teacher_logits["test"], label2id))
        trainer.save_state()
        for checkpoint in staging.glob("checkpoint-*"):
            shutil.rmtree(checkpoint)

        # --- save: like a fine-tuning run --------------------------------------------------------------------
        limit = getattr(trainer.model.config, "max_position_embeddings", None)
        if limit is not None and tokenizer.model_max_length > limit:
            tokenizer.model_max_length = limit  # pipelines truncate to it: it must fit the position table
        trainer.model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        train_metrics.update(train_transfer_examples=len(transfer.inputs), train_teacher=teacher)
        all_results = {}
        for name, values in (("train", train_metrics), ("eval", metrics), ("test", test_metrics)):
            if values:
                write_json(staging / f"{name}_results.json", values)
                all_results.update(values)
        write_json(staging / "all_results.json", all_results)
        write_json(staging / "distillation_args.json", dataclasses.asdict(args))
        plot_training_curves(trainer.state.log_history, staging / CURVES_FILE)
        from modeling_minibert.hub import write_model_card

        write_model_card(staging, task=PIPELINE_TAGS[task], base_model=str(args.model_name_or_path))

    strip = lambda m, p: {k.removeprefix(p): v for k, v in m.items()} if m else m  # noqa: E731
    return DistillResult(
        output_dir=output,
        metrics=strip(metrics, "eval_"),
        test_metrics=strip(test_metrics, "test_"),
        labels=label_names,
        train_metrics=train_metrics,
        teacher=str(output / TEACHER_DIR) if args.finetune_teacher else teacher,
        transfer_size=len(transfer.inputs),
        reused_teacher_logits=cached is not None,
    )


def label_with_teacher(
    teacher: str,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    inputs: dict[str, list[Any]],
    max_length: int,
    batch_size: int,
    label_names: list[str],
    show_progress: bool = True,
) -> dict[str, list[torch.Tensor]]:
    """The teacher's logits on each split's inputs, columns in the order of `label_names`."""
    model = AUTO_CLASSES[task].from_pretrained(teacher)
    order = [model.config.label2id[name] for name in label_names]
    return {
        split: [logits[..., order] for logits in predict_logits(model, tokenizer, rows, task, max_length, batch_size, show_progress)]
        for split, rows in inputs.items()
    }


def teacher_scores(prefix: str, examples: Examples, logits: list[torch.Tensor], label2id: dict[str, int]) -> dict[str, float]:
    """The teacher's own accuracy and macro-F1 on a labelled split, from its cached logits."""
    from sklearn.metrics import accuracy_score, f1_score

    if isinstance(examples.labels[0], list):
        gold = [label2id[t] for tags in examples.labels for t in tags]
        predicted = [int(i) for rows in logits for i in rows.argmax(-1)]
    else:
        gold = [label2id[y] for y in examples.labels]
        predicted = [int(row.argmax()) for row in logits]
    return {
        f"{prefix}_teacher_accuracy": float(accuracy_score(gold, predicted)),
        f"{prefix}_teacher_macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
    }


def _fine_tuned_teacher(
    args: DistillationArguments,
    training_args: TrainingArguments,
    examples: dict[str, Examples],
    label_names: list[str],
    staging: Path,
    previous: Path | None,
    text_column: str,
    label_column: str,
) -> Path:
    """Fine-tune the teacher with the fine-tuning job into staging/teacher, or reuse the one a previous run of
    the same teacher, data and options left in the output folder."""
    from modeling_minibert.finetuning import finetune_sequence_classification, finetune_token_classification

    target = staging / TEACHER_DIR
    task = args.task
    key = fingerprint(
        task, label_names, args.teacher_num_train_epochs, args.teacher_learning_rate, args.max_seq_length,
        training_args.seed, {r: dataclasses.asdict(e) for r, e in examples.items() if r != "test"},
        *model_files(args.teacher_model_name_or_path),
    )
    if previous is not None:
        try:
            info = json.loads((previous / TEACHER_DIR / TEACHER_INFO_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = {}
        if info.get("fingerprint") == key:
            shutil.copytree(previous / TEACHER_DIR, target)
            return target

    token_task = task == "token-classification"
    columns = (text_column, label_column)
    data = {r: Dataset.from_dict(dict(zip(columns, (examples[r].inputs, examples[r].labels)))) for r in ("train", "validation") if r in examples}
    tokenizer = AutoTokenizer.from_pretrained(args.teacher_model_name_or_path)
    # The one place that calls the fine-tuning job (its keyword names are the fine-tuning module's).
    common = dict(
        validation_data=data.get("validation"),
        labels=label_names,
        max_length=max_length_for(args.teacher_model_name_or_path, tokenizer, args.max_seq_length),
        overwrite=True,
        num_train_epochs=args.teacher_num_train_epochs,
        learning_rate=args.teacher_learning_rate,
        per_device_train_batch_size=training_args.per_device_train_batch_size,
        per_device_eval_batch_size=training_args.per_device_eval_batch_size,
        seed=training_args.seed,
        disable_tqdm=training_args.disable_tqdm,
        report_to="none",
    )
    if "validation" not in data:
        common.update(eval_strategy="no", load_best_model_at_end=False)
    if token_task:
        finetune_token_classification(
            args.teacher_model_name_or_path, data["train"], target, tokens_column=text_column, tags_column=label_column, **common
        )
    else:
        finetune_sequence_classification(
            args.teacher_model_name_or_path, data["train"], target, text_column=text_column, label_column=label_column, **common
        )
    write_json(target / TEACHER_INFO_FILE, {"fingerprint": key, "source": str(args.teacher_model_name_or_path)})
    return target


def plot_training_curves(log_history: list[dict[str, Any]], path: Path) -> None:
    """Training loss, and the validation accuracy and agreement with the teacher, against the step."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e]
    evals = [(e["step"], e.get("eval_accuracy"), e.get("eval_teacher_agreement")) for e in log_history if "eval_loss" in e]
    figure = Figure(figsize=(9, 3.5))
    loss_ax, metric_ax = figure.subplots(1, 2)
    if train:
        loss_ax.plot(*zip(*train), label="training loss")
    if evals:
        loss_ax.plot([s for s, *_ in evals], [v for v in (e["eval_loss"] for e in log_history if "eval_loss" in e)], "o-", label="validation loss")
        metric_ax.plot([s for s, _, _ in evals], [a for _, a, _ in evals], "o-", label="accuracy")
        metric_ax.plot([s for s, _, _ in evals], [g for _, _, g in evals], "s--", label="agreement with teacher")
        metric_ax.legend()
    loss_ax.set(xlabel="step", ylabel="distillation loss", title="Loss")
    if train or evals:
        loss_ax.legend()
    metric_ax.set(xlabel="step", title="Validation" if evals else "(no validation data)")
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------------
# CLI


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill",
        # One source of truth for the API and the CLI; TrainingArguments' flags under their own names.
        parents=[HfArgumentParser((DistillationArguments, DistillationTrainingArguments), add_help=False)],
        help="distil a fine-tuned teacher into a Mini-BERT",
        description=(
            "Train a pretrained Mini-BERT (the student) on a fine-tuned teacher's predictions over the training "
            "data, unlabelled transfer texts and augmented copies; save it like a fine-tuning run."
        ),
    )
    parser.set_defaults(func=run_cli)


def run_cli(namespace: argparse.Namespace) -> int:
    values = vars(namespace)
    names = {f.name for f in dataclasses.fields(DistillationArguments)}
    args = DistillationArguments(**{k: v for k, v in values.items() if k in names})
    training_fields = {f.name for f in dataclasses.fields(DistillationTrainingArguments) if f.init}
    chosen = {k: v for k, v in values.items() if k in training_fields}
    if args.validation_file is None:
        chosen.update(eval_strategy="no", load_best_model_at_end=False)
    result = distill(args, DistillationTrainingArguments(**chosen))
    print(f"saved the distilled model to {result.output_dir} (teacher: {result.teacher}, "
          f"{result.transfer_size} transfer examples{', cached teacher logits reused' if result.reused_teacher_logits else ''})")
    for name, found in (("validation", result.metrics), ("test", result.test_metrics)):
        if found:
            keys = ("accuracy", "macro_f1", "teacher_agreement", "teacher_accuracy")
            print(f"{name}: " + ", ".join(f"{k}={found[k]:.4f}" for k in keys if k in found))
    return 0


__all__ = [
    "DistillResult",
    "DistillationArguments",
    "DistillationCollator",
    "DistillationTrainer",
    "DistillationTrainingArguments",
    "TASKS",
    "augment",
    "distill",
    "distillation_loss",
    "label_with_teacher",
    "predict_logits",
    "transfer_set",
]
