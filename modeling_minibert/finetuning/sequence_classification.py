"""Sequence classification: single texts or text pairs -> one label; accuracy and macro-F1."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, EvalPrediction, Trainer
from transformers.trainer_utils import PredictionOutput

from modeling_minibert.finetuning import data as finetuning_data
from modeling_minibert.finetuning.data import DataSource, NamedDataset, check_labels
from modeling_minibert.finetuning import flow
from modeling_minibert.finetuning.metrics import classification_metrics
from modeling_minibert.finetuning.plots import CONFUSION_FILE, plot_confusion_matrix


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
    output = flow.check_output(output_dir, overwrite, training_options)
    splits = flow.load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split)

    def read(data: NamedDataset) -> tuple[list[str], list[str] | None, list[str]]:
        texts = finetuning_data.text_column(data, text_column)
        pairs = finetuning_data.text_column(data, text_pair_column) if text_pair_column else None
        return texts, pairs, finetuning_data.label_column(data, label_column)

    read_splits = {role: read(data) for role, data in splits.items()}
    names = flow.label_names(labels, read_splits["train"][2], model)
    for role, data in splits.items():
        check_labels(data, label_column, read_splits[role][2], names)

    tok = flow.load_tokenizer(model, tokenizer)
    length = flow.check_max_length(max_length, tok, flow.load_config(model))
    label2id = {name: i for i, name in enumerate(names)}

    def features(texts: list[str], pairs: list[str] | None, values: list[str]) -> Dataset:
        encoding = tok(texts, pairs, truncation=True, max_length=length)
        return Dataset.from_dict({**encoding, "labels": [label2id[v] for v in values]})

    tokenized = {role: features(*read_splits[role]) for role in splits}

    def metrics_for(role: str) -> Callable[[EvalPrediction], dict[str, float]]:
        return lambda p: classification_metrics(p.predictions, p.label_ids)

    prepared = flow.Prepared(
        train=tokenized["train"],
        validation=tokenized.get("validation"),
        test=tokenized.get("test"),
        collator=DataCollatorWithPadding(tok),
        metric="accuracy",
        metrics_for=metrics_for,
        preprocess_logits=flow.argmax,
    )
    network = flow.load_model(
        AutoModelForSequenceClassification,
        model,
        flow.seed_of(training_options),
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id=label2id,
        problem_type="single_label_classification",
    )

    def confusion_matrix(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        if validation is not None:
            plot_confusion_matrix(validation.predictions, validation.label_ids, names, staging / CONFUSION_FILE)

    return flow.train_and_save(
        "sequence-classification", model, network, tok, prepared, output, names, train_data, training_options,
        keep_checkpoints, extra_outputs=confusion_matrix,
    )
