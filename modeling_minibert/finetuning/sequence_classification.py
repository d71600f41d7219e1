"""Sequence classification: single texts or text pairs -> one label; accuracy and macro-F1."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset
import numpy as np
from transformers import (
    AutoModelForSequenceClassification,
    BatchEncoding,
    DataCollatorWithPadding,
    EvalPrediction,
    PreTrainedTokenizerBase,
    Trainer,
)
from transformers.trainer_utils import PredictionOutput

from modeling_minibert.finetuning import data as finetuning_data
from modeling_minibert.finetuning.data import DataSource, NamedDataset, check_labels
from modeling_minibert.finetuning import flow
from modeling_minibert.finetuning.metrics import classification_metrics
from modeling_minibert.finetuning.plots import plot_confusion_matrix
from modeling_minibert.outputs import CONFUSION_FILE


def finetune_sequence_classification(
    model: str | os.PathLike,
    train_data: DataSource,
    output_dir: str | os.PathLike,
    validation_data: DataSource | None = None,
    test_data: DataSource | None = None,
    *,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    labels: Sequence[str] | None = None,
    max_length: int | None = None,
    tokenizer: str | os.PathLike | None = None,
    train_split: str = "train",
    validation_split: str = "validation",
    test_split: str = "test",
    overwrite: bool = False,
    keep_checkpoints: bool = False,
    **training_options: Any,
) -> flow.FinetuneResult:
    """Fine-tune a classifier of single texts or text pairs.

    Args:
        model: a folder (or Hub id) holding a Mini-BERT checkpoint of any head, and its tokenizer.
        train_data, validation_data, test_data: files (CSV/TSV/JSON/JSONL), `datasets` folders or names, or
            `Dataset`s (see `finetuning.data.load_data`); multi-split sources give `train_split` etc.
            The best epoch is chosen on the validation data; the test data is scored once at the end.
        output_dir: the output folder (see `finetuning.flow` for what it holds).
        text_column, text_pair_column, label_column: the columns to read (`text_pair_column` for pairs).
        labels: the label names in id order; default: the distinct training labels, sorted (or the starting
            model's own `label2id` when it has exactly these labels).
        max_length: longest input in tokens (default and limit: the model's `max_position_embeddings`).
        tokenizer: where to load the tokenizer from, if not from `model`.
        overwrite: replace an existing non-empty `output_dir`.
        keep_checkpoints: keep Trainer's `checkpoint-N` folders in `output_dir` (default: removed at the end).
        **training_options: `TrainingArguments` fields (our defaults: `TRAINING_DEFAULTS`), and
            `group_by_length=True`. `resume_from_checkpoint` (a path, or True for the newest in `output_dir`)
            continues an interrupted run; `push_to_hub` with `hub_model_id` uploads the final folder.

    Raises:
        DataError (ValueError): a missing column, an empty file or text, a label outside the label set, ...
        FileExistsError: `output_dir` is not empty and neither `overwrite` nor `resume_from_checkpoint` is set.
        OSError: `output_dir` cannot be written.
    """
    with flow.run_folder(output_dir, overwrite, training_options, "finetune") as output:
        splits = flow.load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split)
        read_splits = {role: read_texts(data, text_column, label_column, text_pair_column) for role, data in splits.items()}
        names = flow.label_names(labels, read_splits["train"].labels, model, splits["train"].name)
        for role, data in splits.items():
            check_labels(data, label_column, read_splits[role].labels, names)
        config = flow.load_config(model)  # before the tokenizer: AutoTokenizer would warn past a bad config
        tok = flow.load_tokenizer(model, tokenizer)
        length = flow.check_max_length(max_length, tok, config)
        label2id = {name: i for i, name in enumerate(names)}
        tokenized = {
            role: Dataset.from_dict({**encode(tok, examples.inputs, length), "labels": [label2id[v] for v in examples.labels]})
            for role, examples in read_splits.items()
        }
        prepared = flow.Prepared(
            train=tokenized["train"],
            validation=tokenized.get("validation"),
            test=tokenized.get("test"),
            collator=DataCollatorWithPadding(tok),
            metric="accuracy",
            metrics_for=lambda role: class_metrics(names),
            preprocess_logits=flow.argmax,
        )
        network = flow.load_model(
            AutoModelForSequenceClassification, model, flow.seed_of(training_options), num_labels=len(names),
            id2label=dict(enumerate(names)), label2id=label2id, problem_type="single_label_classification",
        )
        return flow.train_and_save(
            TASK.name, model, network, tok, prepared, output, names, train_data, training_options,
            keep_checkpoints, extra_outputs=confusion_matrix(names),
        )


def read_texts(data: NamedDataset, text_column: str, label_column: str | None, text_pair_column: str | None = None) -> flow.Examples:
    """Texts (or (text, pair) tuples) and their labels (None each without `label_column`)."""
    texts = finetuning_data.text_column(data, text_column)
    inputs = list(zip(texts, finetuning_data.text_column(data, text_pair_column))) if text_pair_column else texts
    labels = finetuning_data.label_column(data, label_column) if label_column else [None] * len(texts)
    return flow.Examples(inputs, labels)


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


def confusion_matrix(names: list[str]) -> Callable[[Trainer, Path, PredictionOutput | None], None]:
    def plot(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        if validation is not None:
            plot_confusion_matrix(validation.predictions, validation.label_ids, names, staging / CONFUSION_FILE)

    return plot


def cli_options(data_args: Any) -> dict[str, Any]:
    return dict(
        text_column=data_args.text_column_name or "text", text_pair_column=data_args.text_pair_column_name,
        label_column=data_args.label_column_name or "label", labels=data_args.labels.split(",") if data_args.labels else None,
    )


TASK = flow.Task(
    name="sequence-classification",
    finetune=finetune_sequence_classification,
    collator=DataCollatorWithPadding,
    read=read_texts,
    columns=("text", "label"),
    encode=encode,
    metrics=class_metrics,
    cli_options=cli_options,
)
