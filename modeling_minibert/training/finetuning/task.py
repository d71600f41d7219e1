"""What a fine-tuning task is, as the shared flow sees it: a `Task` (its reader, features, collator, metrics and
Auto class) that `prepare`s a `Setup` (tokenizer, tokenized data in `Prepared`, label names, the new head's
config). Each task module in `tasks/` exports one; `classifier_setup` is the `prepare` of the tasks that predict
label names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import EvalPrediction, PreTrainedTokenizerBase, Trainer
from transformers.trainer_utils import PredictionOutput

from modeling_minibert.sharing.model_card import PIPELINE_TAGS
from modeling_minibert.training.finetuning.arguments import FinetuneArguments
from modeling_minibert.training.finetuning.data import DataError, NamedDataset, check_split_labels, sorted_labels
from modeling_minibert.training.finetuning.loading import check_max_length, load_config, load_tokenizer_and_config
from modeling_minibert.training.finetuning.windows import TooManyWindows, per_text, text_count, text_windows


@dataclass
class Prepared:
    """A task's tokenized data and how Trainer should batch and score it."""

    train: Dataset
    validation: Dataset | None
    test: Dataset | None
    collator: Callable
    metric: str  # metric_for_best_model
    metrics_for: Callable[[str], Callable[[EvalPrediction], dict[str, float]]]  # role -> compute_metrics
    preprocess_logits: Callable | None = None
    # Texts read in windows (`doc_stride`): role -> the index of each row's text (`window_examples`).
    owners: dict[str, list[int]] = field(default_factory=dict)

    def samples(self, role: str) -> int:
        """The examples of a split: its texts, when they are read in windows; else its rows."""
        return text_count(self.owners[role]) if self.owners.get(role) else len(getattr(self, role))


@dataclass
class Examples:
    """One split as plain Python: inputs (texts, or word lists for token classification) and label names (a
    string, a list of tags, or None for an unlabelled example)."""

    inputs: list[Any]
    labels: list[Any]


@dataclass
class Setup:
    """What a task's `prepare` hands the shared flow: the tokenizer, the tokenized data and how to score it, the
    label names in id order (None for question answering), the new head's config, the task's own output files."""

    tokenizer: PreTrainedTokenizerBase
    prepared: Prepared
    labels: list[str] | None = None
    model_options: dict[str, Any] = field(default_factory=dict)  # config overrides for `from_pretrained`
    extra_outputs: Callable[[Trainer, Path, PredictionOutput | None], None] | None = None


@dataclass(frozen=True)
class Task:
    """What one fine-tuning task brings to the shared flow; its module exports one as `TASK`, and `tasks.TASKS`
    names the module. Distillation reuses the same parts, so a task that has them (`read`) can be distilled too."""

    name: str  # its key in tasks.TASKS
    auto_class_name: (
        str  # the transformers Auto class that loads its models, e.g. "AutoModelForSequenceClassification"
    )
    # (the run's options, {role: data}) -> Setup: reads and checks the splits, loads the tokenizer, builds features.
    prepare: Callable[[FinetuneArguments, dict[str, NamedDataset]], Setup]
    collator: Callable[[PreTrainedTokenizerBase], Callable]  # tokenizer -> Trainer's data collator
    # (data, input column, label column or None) -> checked Examples; None for a task distillation cannot use.
    read: Callable[[NamedDataset, str, str | None], Examples] | None = None
    columns: tuple[str, str] = ("text", "label")  # the input and label columns read by default
    conll: bool = False  # its files may be CoNLL
    encode: Callable[[PreTrainedTokenizerBase, list[Any], int], Any] | None = None  # tokenizer, inputs, max length
    metrics: Callable[[list[str]], Callable[[EvalPrediction], dict[str, float]]] | None = None  # on predicted ids
    best_metric: Callable[[list[str]], str] = lambda names: "accuracy"  # noqa: E731 - metric_for_best_model

    @property
    def auto_class(self) -> type:
        import transformers

        return getattr(transformers, self.auto_class_name)

    @property
    def pipeline_tag(self) -> str:
        """The Hub pipeline tag of its models (the model card's, `minibert push`'s)."""
        return PIPELINE_TAGS[self.auto_class_name]

    def load_examples(self, data: NamedDataset, input_column: str | None, label_column: str | None) -> Examples:
        """The split read with this task's reader (default columns where None is given)."""
        return self.read(data, input_column or self.columns[0], label_column)


def classifier_setup(
    task: Task,
    args: FinetuneArguments,
    splits: dict[str, NamedDataset],
    read: Callable[[NamedDataset], Examples],
    features: Callable[[PreTrainedTokenizerBase, Examples, list[str], int, str], Dataset],
    **model_options: Any,
) -> Setup:
    """The `prepare` of the tasks that predict label names: each split read with `read` and checked against the
    label set (in id order: see `label_names`), the tokenizer, then `features(tokenizer, examples, names,
    max_length, role)` per split."""
    examples = {role: read(data) for role, data in splits.items()}
    names = label_names(
        label_list(args.labels), examples["train"].labels, args.model_name_or_path, splits["train"].name
    )
    for role, data in splits.items():
        check_split_labels(data, args.label_column_name or task.columns[1], examples[role].labels, names)
    tokenizer, config = load_tokenizer_and_config(args)
    length = check_max_length(args.max_seq_length, tokenizer, config)
    owners = {}
    if args.doc_stride is not None:  # every split in windows, each text scored by their mean
        for role in examples:
            try:
                examples[role], owners[role] = window_examples(tokenizer, examples[role], length, args.doc_stride)
            except TooManyWindows as err:  # named as the data's row, not as the list's index
                raise DataError(
                    f"{splits[role].where(err.index, args.text_column_name or task.columns[0])}: "
                    f"{str(err).removeprefix(f'text {err.index} ')}"
                ) from None
    tokenized = {role: features(tokenizer, examples[role], names, length, role) for role in examples}
    prepared = Prepared(
        train=tokenized["train"],
        validation=tokenized.get("validation"),
        test=tokenized.get("test"),
        collator=task.collator(tokenizer),
        metric=task.best_metric(names),
        metrics_for=lambda role: pooled(task.metrics(names), owners[role]) if owners else task.metrics(names),
        preprocess_logits=None if owners else argmax,
        owners=owners,
    )
    new_head = dict(
        num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)}
    )
    return Setup(tokenizer, prepared, names, {**new_head, **model_options})


def window_examples(
    tokenizer: PreTrainedTokenizerBase, examples: Examples, max_length: int, doc_stride: int
) -> tuple[Examples, list[int]]:
    """Each text as its windows (`windows.text_windows`), each with its text's label, and the index of each
    window's text."""
    inputs, owners = text_windows(tokenizer, examples.inputs, max_length, doc_stride)
    return Examples(inputs, [examples.labels[i] for i in owners]), owners


def pooled(
    metrics: Callable[[EvalPrediction], dict[str, float]], owners: list[int]
) -> Callable[[EvalPrediction], dict[str, float]]:
    """`metrics` (on predicted ids) of each text, predicted from the mean of its windows' logits."""

    def compute(p: EvalPrediction) -> dict[str, float]:
        logits, labels = per_text(p.predictions, p.label_ids, owners)
        return metrics(EvalPrediction(logits.argmax(-1), labels))

    return compute


def label_list(labels: str | Sequence[str] | None) -> list[str] | None:
    """The `labels` option: comma-separated names (the command line), or a list of them (Python)."""
    return labels.split(",") if isinstance(labels, str) else None if labels is None else list(labels)


def label_names(
    labels: Sequence[str] | None, train_values: list, model: str | os.PathLike, where: str = "the training data"
) -> list[str]:
    """The label set in id order: as given, else the starting model's own order if it has exactly these labels
    (fine-tuning a fine-tuned model again keeps its ids), else sorted."""
    if labels is not None:
        names = [str(label) for label in labels]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"labels must be distinct and non-empty, got {names}")
        return names
    names = sorted_labels(train_values)
    check_label_count(names, where)
    try:
        label2id = load_config(model).label2id
    except (OSError, ValueError):
        return names
    if set(label2id) == set(names) and sorted(label2id.values()) == list(range(len(names))):
        return sorted(names, key=label2id.__getitem__)
    return names


def check_label_count(names: list[str], where: str) -> None:
    """Refuse training data with a single label (`where`: the data's name): the model could only ever predict it,
    and would report a perfect accuracy on data of that label."""
    if len(names) < 2:
        raise DataError(
            f"{where}: every example has the label {names[0]!r}; a classifier needs examples of at least two labels"
        )


def argmax(logits, labels):
    """Keep only predicted ids during evaluation: Trainer would otherwise hold every logit of the eval set."""
    return logits.argmax(dim=-1)
