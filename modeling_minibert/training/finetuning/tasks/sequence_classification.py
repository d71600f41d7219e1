"""Sequence classification: single texts or text pairs -> one label; accuracy and macro-F1."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from datasets import Dataset
from transformers import (
    BatchEncoding,
    DataCollatorWithPadding,
    EvalPrediction,
    PreTrainedTokenizerBase,
    Trainer,
)
from transformers.trainer_utils import PredictionOutput

from modeling_minibert.training.finetuning import data as finetuning_data
from modeling_minibert.training.finetuning.arguments import FinetuneArguments
from modeling_minibert.training.finetuning.data import NamedDataset
from modeling_minibert.training.finetuning.metrics import classification_metrics
from modeling_minibert.training.finetuning.plots import plot_confusion_matrix
from modeling_minibert.training.finetuning.task import Examples, Setup, Task, classifier_setup
from modeling_minibert.training.finetuning.windows import per_text
from modeling_minibert.utils.outputs import CONFUSION_FILE


def prepare(args: FinetuneArguments, splits: dict[str, NamedDataset]) -> Setup:
    """Texts (`text_column_name`, default "text"; `text_pair_column_name` for pairs) and labels
    (`label_column_name`, default "label"), checked against the label set; tokenized without padding. With
    `doc_stride`, each text is read in windows (`task.window_examples`) and scored by their mean logits."""
    read = partial(
        read_texts,
        text_column=args.text_column_name or "text",
        label_column=args.label_column_name or "label",
        text_pair_column=args.text_pair_column_name,
    )
    setup = classifier_setup(TASK, args, splits, read, features, problem_type="single_label_classification")
    setup.extra_outputs = confusion_matrix(setup.labels, setup.prepared.owners.get("validation"))
    return setup


def features(
    tokenizer: PreTrainedTokenizerBase, examples: Examples, names: list[str], max_length: int, role: str
) -> Dataset:
    """What Trainer trains on: the encoded inputs and their label ids."""
    label2id = {name: i for i, name in enumerate(names)}
    return Dataset.from_dict(
        {**encode(tokenizer, examples.inputs, max_length), "labels": [label2id[v] for v in examples.labels]}
    )


def read_texts(
    data: NamedDataset, text_column: str, label_column: str | None, text_pair_column: str | None = None
) -> Examples:
    """Texts (or (text, pair) tuples) and their labels (None each without `label_column`)."""
    texts = finetuning_data.text_column(data, text_column)
    inputs = list(zip(texts, finetuning_data.text_column(data, text_pair_column))) if text_pair_column else texts
    labels = finetuning_data.label_column(data, label_column) if label_column else [None] * len(texts)
    return Examples(inputs, labels)


def encode(tokenizer: PreTrainedTokenizerBase, inputs: list, max_length: int) -> BatchEncoding:
    """Texts, or (text, pair) tuples, tokenized without padding (the collator pads each batch)."""
    if inputs and isinstance(inputs[0], tuple):
        texts, pairs = (list(column) for column in zip(*inputs))
        return tokenizer(texts, pairs, truncation=True, max_length=max_length)
    return tokenizer(list(inputs), truncation=True, max_length=max_length)


def class_metrics(names: list[str]) -> Callable[[EvalPrediction], dict[str, float]]:
    """Accuracy and macro-F1 of predicted class ids (rows labelled -100, unlabelled, are left out)."""

    def compute(p: EvalPrediction) -> dict[str, float]:
        keep = np.asarray(p.label_ids) != -100
        return classification_metrics(np.asarray(p.predictions)[keep], np.asarray(p.label_ids)[keep])

    return compute


def confusion_matrix(
    names: list[str], owners: list[int] | None = None
) -> Callable[[Trainer, Path, PredictionOutput | None], None]:
    """The validation texts' confusion matrix; read in windows (`owners`: each row's text), each text's
    prediction from the mean of its windows' logits."""

    def plot(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        if validation is None:
            return
        predicted, labels = validation.predictions, validation.label_ids
        if owners:
            logits, labels = per_text(predicted, labels, owners)
            predicted = logits.argmax(-1)
        plot_confusion_matrix(predicted, labels, names, staging / CONFUSION_FILE)

    return plot


TASK = Task(
    name="sequence-classification",
    auto_class_name="AutoModelForSequenceClassification",
    prepare=prepare,
    collator=DataCollatorWithPadding,
    read=read_texts,
    columns=("text", "label"),
    encode=encode,
    metrics=class_metrics,
)
