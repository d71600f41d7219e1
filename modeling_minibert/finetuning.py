"""Fine-tune a Mini-BERT checkpoint with transformers' `Trainer`; `minibert finetune`.

Three tasks, each a function over the same flow (check data -> tokenize -> Trainer -> evaluate -> save):

    finetune_sequence_classification   single texts or pairs -> one label; accuracy and macro-F1
    finetune_token_classification      words -> one tag each; seqeval entity P/R/F1 for BIO tags, else accuracy
    finetune_question_answering        question + context -> answer span; SQuAD exact match and F1

`finetune(task=..., ...)` dispatches on the task name. The output folder holds the best model (safetensors) with
its tokenizer and label maps, ready for `pipeline(...)`; `finetune_results.json` with the scores; PNG plots of the
training curves (and, for classification, the confusion matrix). It appears complete or not at all: everything is
written to a hidden sibling folder first and moved into place at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from matplotlib.figure import Figure
from sklearn.metrics import ConfusionMatrixDisplay
from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import PredictionOutput

import modeling_minibert  # noqa: F401 - registers Mini-BERT with the Auto classes
from modeling_minibert import finetuning_data, question_answering_pipeline
from modeling_minibert.finetuning_data import (
    DataError,
    DataSource,
    NamedDataset,
    QuestionAnswerExamples,
    check_labels,
    column_values,
    load_data,
    question_answer_columns,
    sorted_labels,
    tag_columns,
)
from modeling_minibert.finetuning_metrics import (
    classification_metrics,
    is_bio_scheme,
    squad_metrics,
    token_classification_metrics,
)
from modeling_minibert.question_answering_pipeline import (
    best_answers,
    default_window,
    question_room,
    tokenize_windows,
)

TASKS = ("sequence-classification", "token-classification", "question-answering")
RESULTS_FILE = "finetune_results.json"
PREDICTIONS_FILE = "validation_predictions.json"
CURVES_FILE = "training_curves.png"
CONFUSION_FILE = "confusion_matrix.png"
CHECKPOINTS_DIR = "checkpoints"

# Our defaults for `TrainingArguments` (any of its fields can be passed to override them). The learning rate is
# higher than bert-base's usual 2e-5..5e-5 because small encoders fine-tune best with larger steps.
TRAINING_DEFAULTS: dict[str, Any] = {
    "num_train_epochs": 3.0,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 1e-4,
    "weight_decay": 0.01,
    "warmup_steps": 0.1,  # a fraction: 10% of the training steps
    "eval_strategy": "epoch",
    "load_best_model_at_end": True,
    "logging_steps": 10,
    "report_to": "none",
    # Checkpoints exist only so that Trainer can reload the best model; they are deleted when training ends.
    "save_only_model": True,
    "save_total_limit": 1,
    "seed": 42,
}


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced."""

    output_dir: Path
    metrics: dict[str, float]  # validation scores of the saved model; empty without validation data
    test_metrics: dict[str, float] | None = None
    labels: list[str] | None = None  # class / tag names in id order (None for question answering)
    train_metrics: dict[str, float] = field(default_factory=dict)


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


# ---------------------------------------------------------------------------------------------------------------
# Tasks


def finetune(task: str, model: str | os.PathLike, train_data: DataSource, output_dir: str | os.PathLike, **kwargs) -> FinetuneResult:
    """Fine-tune `model` on one of `TASKS`; the keyword arguments are those of the task's function."""
    functions = {
        "sequence-classification": finetune_sequence_classification,
        "token-classification": finetune_token_classification,
        "question-answering": finetune_question_answering,
    }
    if task not in functions:
        raise ValueError(f"unknown task {task!r}; choose one of {list(TASKS)}")
    return functions[task](model, train_data, output_dir, **kwargs)


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
    **training_options: Any,
) -> FinetuneResult:
    """Fine-tune a classifier of single texts or text pairs.

    Args:
        model: a folder (or Hub id) holding a Mini-BERT checkpoint of any head, and its tokenizer.
        train_data, validation_data, test_data: files (CSV/TSV/JSON/JSONL), `datasets` folders or names, or
            `Dataset`s (see `finetuning_data.load_data`); multi-split sources give `train_split` etc.
            The best epoch is chosen on the validation data; the test data is scored once at the end.
        text_column, text_pair_column, label_column: the columns to read (`text_pair_column` for pairs).
        labels: the label names in id order; default: the distinct training labels, sorted (or the starting
            model's own `label2id` when it has exactly these labels).
        max_length: longest input in tokens (default and limit: the model's `max_position_embeddings`).
        tokenizer: where to load the tokenizer from, if not from `model`.
        overwrite: replace an existing non-empty `output_dir`.
        **training_options: `TrainingArguments` fields (see `TRAINING_DEFAULTS`), and `group_by_length=True`.

    Raises:
        DataError (ValueError): a missing column, an empty file or text, a label outside the label set, ...
        FileExistsError: `output_dir` is not empty and `overwrite` is False.
    """
    output = _check_output_dir(output_dir, overwrite)
    splits = _load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split)

    def read(data: NamedDataset) -> tuple[list[str], list[str] | None, list[str]]:
        texts = finetuning_data.text_column(data, text_column)
        pairs = finetuning_data.text_column(data, text_pair_column) if text_pair_column else None
        return texts, pairs, finetuning_data.label_column(data, label_column)

    read_splits = {role: read(data) for role, data in splits.items()}
    label_names = _label_names(labels, read_splits["train"][2], model)
    for role, data in splits.items():
        check_labels(data, label_column, read_splits[role][2], label_names)

    tok = _load_tokenizer(model, tokenizer)
    config = _load_config(model)
    length = _max_length(max_length, tok, config)
    label2id = {name: i for i, name in enumerate(label_names)}

    def features(texts: list[str], pairs: list[str] | None, values: list[str]) -> Dataset:
        encoding = tok(texts, pairs, truncation=True, max_length=length)
        return Dataset.from_dict({**encoding, "labels": [label2id[v] for v in values]})

    tokenized = {role: features(*read_splits[role]) for role in splits}

    def metrics_for(role: str) -> Callable[[EvalPrediction], dict[str, float]]:
        return lambda p: classification_metrics(p.predictions, p.label_ids)

    prepared = Prepared(
        train=tokenized["train"],
        validation=tokenized.get("validation"),
        test=tokenized.get("test"),
        collator=DataCollatorWithPadding(tok),
        metric="accuracy",
        metrics_for=metrics_for,
        preprocess_logits=_argmax,
    )
    network = _load_model(
        AutoModelForSequenceClassification,
        model,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id=label2id,
        problem_type="single_label_classification",
    )
    return _train_and_save(
        "sequence-classification", model, network, tok, prepared, output, label_names, training_options,
        extra_outputs=lambda trainer, staging, validation: _save_confusion_matrix(validation, label_names, staging),
    )


def finetune_token_classification(
    model: str | os.PathLike,
    train_data: DataSource,
    output_dir: str | os.PathLike,
    validation_data: DataSource | None = None,
    test_data: DataSource | None = None,
    *,
    tokens_column: str = "tokens",
    tags_column: str = "tags",
    labels: Sequence[str] | None = None,
    label_all_tokens: bool = False,
    max_length: int | None = None,
    tokenizer: str | os.PathLike | None = None,
    train_split: str = "train",
    validation_split: str = "validation",
    test_split: str = "test",
    overwrite: bool = False,
    **training_options: Any,
) -> FinetuneResult:
    """Fine-tune a tagger: one tag per word (named entities in BIO/IOB tags, part-of-speech tags, ...).

    Words are split into sub-tokens by the tokenizer; a word's tag goes on its first sub-token and the others are
    ignored (-100), or with `label_all_tokens` every sub-token is trained on (continuations of a "B-X" word as
    "I-X"). Scores are always word-level: evaluation reads the first sub-token of each word. Words past
    `max_length` tokens are cut off, for training and scoring alike.

    Data: CoNLL files (token and tag per line, blank line between sentences), or CSV/JSON(L)/`datasets` data with
    a list-of-words column `tokens_column` and a list-of-tags column `tags_column`. The other arguments are those
    of `finetune_sequence_classification`.
    """
    output = _check_output_dir(output_dir, overwrite)
    splits = _load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split, conll=True)
    read_splits = {role: tag_columns(data, tokens_column, tags_column) for role, data in splits.items()}
    label_names = _label_names(labels, read_splits["train"][1], model)
    for role, data in splits.items():
        check_labels(data, tags_column, read_splits[role][1], label_names)

    tok = _load_tokenizer(model, tokenizer)
    config = _load_config(model)
    length = _max_length(max_length, tok, config)
    label2id = {name: i for i, name in enumerate(label_names)}
    continuation = continuation_labels(label_names)

    def features(words: list[list[str]], tags: list[list[str]], all_tokens: bool) -> Dataset:
        encoding = tok(words, is_split_into_words=True, truncation=True, max_length=length)
        labels = [
            align_word_labels(encoding.word_ids(i), [label2id[t] for t in sentence_tags], continuation if all_tokens else None)
            for i, sentence_tags in enumerate(tags)
        ]
        return Dataset.from_dict({**encoding, "labels": labels})

    tokenized = {
        role: features(*read_splits[role], all_tokens=label_all_tokens and role == "train") for role in splits
    }
    bio = is_bio_scheme(label_names)

    def metrics_for(role: str) -> Callable[[EvalPrediction], dict[str, float]]:
        def compute(p: EvalPrediction) -> dict[str, float]:
            predictions, references = [], []
            for pred_row, label_row in zip(p.predictions, p.label_ids):
                keep = label_row != -100
                predictions.append([label_names[i] for i in pred_row[keep]])
                references.append([label_names[i] for i in label_row[keep]])
            return token_classification_metrics(predictions, references, label_names)

        return compute

    prepared = Prepared(
        train=tokenized["train"],
        validation=tokenized.get("validation"),
        test=tokenized.get("test"),
        collator=DataCollatorForTokenClassification(tok),
        metric="f1" if bio else "accuracy",
        metrics_for=metrics_for,
        preprocess_logits=_argmax,
    )
    network = _load_model(
        AutoModelForTokenClassification,
        model,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id=label2id,
    )
    return _train_and_save("token-classification", model, network, tok, prepared, output, label_names, training_options)


def continuation_labels(label_names: Sequence[str]) -> dict[int, int]:
    """Label id -> the id later sub-tokens of a word with that label get: "B-X" continues as "I-X" (when the tag
    set has it, so that no sub-token starts a second entity), any other label as itself."""
    label2id = {name: i for i, name in enumerate(label_names)}
    return {
        label2id[name]: label2id.get("I-" + name[2:], label2id[name]) if name.startswith("B-") else label2id[name]
        for name in label_names
    }


def align_word_labels(word_ids: Sequence[int | None], word_labels: Sequence[int], continuation: dict[int, int] | None) -> list[int]:
    """Word labels -> token labels, from the tokenizer's `word_ids()` (None for [CLS], [SEP] and padding).

    A word's first sub-token gets its label; the others get -100 (ignored by the loss), or with `continuation`
    (label all tokens) `continuation[label]`. Special tokens get -100.
    """
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(-100)
        elif word != previous:
            labels.append(word_labels[word])
        else:
            labels.append(continuation[word_labels[word]] if continuation is not None else -100)
        previous = word
    return labels


def finetune_question_answering(
    model: str | os.PathLike,
    train_data: DataSource,
    output_dir: str | os.PathLike,
    validation_data: DataSource | None = None,
    test_data: DataSource | None = None,
    *,
    question_column: str = "question",
    context_column: str = "context",
    answers_column: str = "answers",
    max_length: int | None = None,
    doc_stride: int | None = None,
    n_best: int = 20,
    max_answer_length: int = 30,
    tokenizer: str | os.PathLike | None = None,
    train_split: str = "train",
    validation_split: str = "validation",
    test_split: str = "test",
    overwrite: bool = False,
    **training_options: Any,
) -> FinetuneResult:
    """Fine-tune extractive question answering (SQuAD v1 style: every answer is a span of its context).

    Each question + context becomes windows of `max_length` tokens that overlap by `doc_stride` tokens (defaults:
    the model's `max_position_embeddings`, and a quarter of it). A window that holds the whole answer is trained
    to point at it; the others point at [CLS]. At evaluation the best span over all windows of a question, at
    most `max_answer_length` tokens long, is its answer; `validation_predictions.json` keeps the `n_best`
    candidates of each question.

    Data: SQuAD JSON files, or JSON / JSON-lines / `datasets` data with question, context and answers columns
    (answers as {"text": [...], "answer_start": [...]}, or a list of {"text", "answer_start"}). The saved folder carries the question-answering pipeline
    (transformers 5 has none): `pipeline("question-answering", model=output_dir, trust_remote_code=True)`.
    The other arguments are those of `finetune_sequence_classification`.
    """
    if n_best < 1:
        raise ValueError(f"n_best={n_best} must be at least 1")
    if max_answer_length < 1:
        raise ValueError(f"max_answer_length={max_answer_length} must be at least 1")
    output = _check_output_dir(output_dir, overwrite)
    splits = _load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split)
    examples = {
        role: question_answer_columns(data, question_column, context_column, answers_column)
        for role, data in splits.items()
    }
    tok = _load_tokenizer(model, tokenizer)
    config = _load_config(model)
    default_length, default_stride = default_window(tok, config)
    length = _max_length(max_length, tok, config) if max_length is not None else default_length
    stride = doc_stride if doc_stride is not None else min(default_stride, length // 4)
    if not 0 <= stride < length:
        raise ValueError(f"doc_stride={stride} must be at least 0 and below max_length={length}")
    features = {role: _qa_features(tok, splits[role], examples[role], length, stride) for role in splits}

    def metrics_for(role: str) -> Callable[[EvalPrediction], dict[str, float]]:
        def compute(p: EvalPrediction) -> dict[str, float]:
            start_logits, end_logits = p.predictions
            answers = _qa_answers(examples[role], features[role], start_logits, end_logits, 1, max_answer_length)
            predictions = {qid: found[0]["answer"] if found else "" for qid, found in answers.items()}
            references = dict(zip(examples[role].ids, (a["text"] for a in examples[role].answers)))
            return squad_metrics(predictions, references)

        return compute

    prepared = Prepared(
        train=features["train"],
        validation=features.get("validation"),
        test=features.get("test"),
        collator=default_data_collator,  # windows are padded to max_length already
        metric="f1",
        metrics_for=metrics_for,
    )
    network = _load_model(AutoModelForQuestionAnswering, model)

    def extra_outputs(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        # The pipeline file travels with the weights; the config tells pipeline() where it is.
        trainer.model.config.custom_pipelines = question_answering_pipeline.CUSTOM_PIPELINES
        shutil.copy(question_answering_pipeline.__file__, staging / Path(question_answering_pipeline.__file__).name)
        if validation is not None:
            start_logits, end_logits = validation.predictions
            n_best_answers = _qa_answers(
                examples["validation"], prepared.validation, start_logits, end_logits, n_best, max_answer_length
            )
            _write_json(staging / PREDICTIONS_FILE, n_best_answers)

    return _train_and_save("question-answering", model, network, tok, prepared, output, None, training_options, extra_outputs)


def _qa_features(
    tokenizer: PreTrainedTokenizerBase, data: NamedDataset, examples: QuestionAnswerExamples, max_length: int, doc_stride: int
) -> Dataset:
    """Windows of each question + context with the answer's token span (start_positions, end_positions; 0 = [CLS]
    when the window does not hold the whole answer), plus what post-processing needs: example_index,
    offset_mapping and context_mask."""
    room = question_room(tokenizer, max_length, doc_stride)
    question_lengths = [len(ids) for ids in tokenizer(examples.questions, add_special_tokens=False)["input_ids"]]
    for i, n in enumerate(question_lengths):
        if n > room:
            raise DataError(
                f"{data.where(i, 'question')}: the question is {n} tokens; with max_length={max_length} and "
                f"doc_stride={doc_stride} it may be at most {room} (raise max_length or lower doc_stride)"
            )
    encoding = tokenize_windows(tokenizer, examples.questions, examples.contexts, max_length, doc_stride)
    example_index = encoding.pop("overflow_to_sample_mapping")
    starts, ends, masks = [], [], []
    for w, offsets in enumerate(encoding["offset_mapping"]):
        context_mask = [sid == 1 for sid in encoding.sequence_ids(w)]
        context_tokens = [t for t, inside in enumerate(context_mask) if inside]
        answer = examples.answers[example_index[w]]
        start_char = answer["answer_start"][0]
        end_char = start_char + len(answer["text"][0])
        first, last = context_tokens[0], context_tokens[-1]
        if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
            start = first
            while start < last and offsets[start][1] <= start_char:
                start += 1  # the first token that ends after the answer starts
            end = last
            while end > start and offsets[end][0] >= end_char:
                end -= 1  # the last token that starts before the answer ends
        else:
            start = end = 0
        starts.append(start)
        ends.append(end)
        masks.append(context_mask)
    return Dataset.from_dict(
        {
            **encoding,
            "start_positions": starts,
            "end_positions": ends,
            "example_index": example_index,
            "context_mask": masks,
        }
    )


def _qa_answers(
    examples: QuestionAnswerExamples,
    features: Dataset,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best: int,
    max_answer_length: int,
) -> dict[str, list[dict[str, Any]]]:
    """Question id -> its `n_best` answers (best first), from the logits (num_windows, T) of its windows."""
    windows: dict[int, list] = {}
    offsets = column_values(features, "offset_mapping")
    masks = column_values(features, "context_mask")
    for w, example in enumerate(column_values(features, "example_index")):
        windows.setdefault(example, []).append((start_logits[w], end_logits[w], offsets[w], masks[w]))
    return {
        examples.ids[i]: best_answers(windows.get(i, []), examples.contexts[i], n_best, max_answer_length)
        for i in range(len(examples.ids))
    }


# ---------------------------------------------------------------------------------------------------------------
# The shared flow


def _check_output_dir(output_dir: str | os.PathLike, overwrite: bool) -> Path:
    """Fail before any work if the output folder would be clobbered."""
    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"{output}: exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise FileExistsError(f"{output}: folder is not empty (pass overwrite=True / --overwrite to replace it)")
    return output


def _load_splits(
    train_data: DataSource,
    validation_data: DataSource | None,
    test_data: DataSource | None,
    train_split: str,
    validation_split: str,
    test_split: str,
    conll: bool = False,
) -> dict[str, NamedDataset]:
    sources = {"train": (train_data, train_split), "validation": (validation_data, validation_split), "test": (test_data, test_split)}
    return {
        role: load_data(source, split=split, conll=conll)
        for role, (source, split) in sources.items()
        if source is not None
    }


def _label_names(labels: Sequence[str] | None, train_values: list, model: str | os.PathLike) -> list[str]:
    """The label set in id order: as given, else the starting model's own order if it has exactly these labels
    (fine-tuning a fine-tuned model again keeps its ids), else sorted."""
    if labels is not None:
        names = [str(label) for label in labels]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"labels must be distinct and non-empty, got {names}")
        return names
    names = sorted_labels(train_values)
    try:
        label2id = _load_config(model).label2id
    except (OSError, ValueError):
        return names
    if set(label2id) == set(names) and sorted(label2id.values()) == list(range(len(names))):
        return sorted(names, key=label2id.__getitem__)
    return names


def _load_tokenizer(model: str | os.PathLike, tokenizer: str | os.PathLike | None) -> PreTrainedTokenizerBase:
    source = str(tokenizer if tokenizer is not None else model)
    path = Path(source)
    if path.is_dir() and not any((path / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
        raise FileNotFoundError(f"{path}: no tokenizer in this folder (pass tokenizer= / --tokenizer)")
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except OSError as err:
        raise FileNotFoundError(f"cannot load a tokenizer from {source!r}: {err}") from err
    if not tok.is_fast:
        raise ValueError(f"{source}: fine-tuning needs a fast tokenizer (word ids and offsets), got {type(tok).__name__}")
    return tok


def _load_config(model: str | os.PathLike):
    try:
        return AutoConfig.from_pretrained(str(model))
    except OSError as err:
        raise FileNotFoundError(f"cannot load a model from {str(model)!r}: {err}") from err


def _load_model(auto_class: type, model: str | os.PathLike, **config_overrides: Any) -> PreTrainedModel:
    try:
        return auto_class.from_pretrained(str(model), **config_overrides)
    except OSError as err:
        raise FileNotFoundError(f"cannot load a model from {str(model)!r}: {err}") from err


def _max_length(max_length: int | None, tokenizer: PreTrainedTokenizerBase, config) -> int:
    limit = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    if max_length is None:
        return int(min(limit, tokenizer.model_max_length))
    if not 2 < max_length <= limit:
        raise ValueError(f"max_length={max_length} must be above 2 and at most the model's max_position_embeddings={limit}")
    return max_length


def _argmax(logits, labels):
    """Keep only predicted ids during evaluation: Trainer would otherwise hold every logit of the eval set."""
    return logits.argmax(dim=-1)


def training_arguments(output_dir: str | os.PathLike, has_validation: bool, metric: str, **options: Any) -> TrainingArguments:
    """`TrainingArguments` from our defaults and `options` (its own field names, plus `group_by_length`).

    Checkpoints are saved whenever Trainer evaluates (load_best_model_at_end needs it). Without validation data
    nothing is evaluated, and the model of the last step is the one saved.
    """
    options = dict(options)
    if options.pop("group_by_length", False):
        options["train_sampling_strategy"] = "group_by_length"
    fields = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"unknown training option(s) {unknown}: use TrainingArguments field names")
    args = {**TRAINING_DEFAULTS, "metric_for_best_model": metric, **options}
    if not torch.cuda.is_available():
        # Without it TrainingArguments refuses bf16 on a CPU-only machine, where torch's autocast supports it.
        args.setdefault("use_cpu", True)
    if not has_validation:
        if options.get("load_best_model_at_end"):
            raise ValueError("load_best_model_at_end needs validation data")
        if options.get("eval_strategy", "no") != "no":
            raise ValueError(f"eval_strategy={options['eval_strategy']!r} needs validation data")
        args.update(eval_strategy="no", load_best_model_at_end=False)
    # load_best_model_at_end needs a checkpoint at every evaluation.
    args.setdefault("save_strategy", args["eval_strategy"])
    if args["eval_strategy"] == "steps":
        args.setdefault("eval_steps", args["logging_steps"])
        args.setdefault("save_steps", args["eval_steps"])
    return TrainingArguments(output_dir=str(output_dir), **args)


def _train_and_save(
    task: str,
    model_source: str | os.PathLike,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prepared: Prepared,
    output: Path,
    label_names: list[str] | None,
    training_options: dict[str, Any],
    extra_outputs: Callable[[Trainer, Path, PredictionOutput | None], None] | None = None,
) -> FinetuneResult:
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private (0700); the published folder should not be
    try:
        args = training_arguments(
            staging / CHECKPOINTS_DIR, prepared.validation is not None, prepared.metric, **training_options
        )
        trainer = Trainer(
            model=model,
            args=args,
            data_collator=prepared.collator,
            train_dataset=prepared.train,
            eval_dataset=prepared.validation,
            processing_class=tokenizer,
            compute_metrics=prepared.metrics_for("validation") if prepared.validation is not None else None,
            preprocess_logits_for_metrics=prepared.preprocess_logits,
        )
        train_output = trainer.train()
        # One pass over the validation data with the final (best) model gives its scores and its predictions.
        validation = None
        if prepared.validation is not None:
            validation = trainer.predict(prepared.validation, metric_key_prefix="eval")
        metrics = _strip_prefix(validation.metrics, "eval_") if validation is not None else {}
        test_metrics = None
        if prepared.test is not None:
            trainer.compute_metrics = prepared.metrics_for("test")
            test_metrics = _strip_prefix(trainer.evaluate(prepared.test, metric_key_prefix="test"), "test_")
        shutil.rmtree(staging / CHECKPOINTS_DIR, ignore_errors=True)

        if extra_outputs is not None:
            extra_outputs(trainer, staging, validation)
        # Pipelines truncate to model_max_length: it must not exceed the position table.
        limit = getattr(trainer.model.config, "max_position_embeddings", None)
        if limit is not None and tokenizer.model_max_length > limit:
            tokenizer.model_max_length = limit
        trainer.model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        results = {
            "task": task,
            "model": str(model_source),
            "labels": label_names,
            "validation": metrics,
            "test": test_metrics,
            "train": train_output.metrics,
            "best_checkpoint_step": _best_step(trainer),
            "training_arguments": {k: v for k, v in args.to_dict().items() if _is_json(v)},
            "log_history": trainer.state.log_history,
        }
        _write_json(staging / RESULTS_FILE, results)
        metric = (args.metric_for_best_model or prepared.metric).removeprefix("eval_")
        _plot_training_curves(trainer.state.log_history, metric, _best_step(trainer), staging / CURVES_FILE)
        _publish(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return FinetuneResult(output, metrics, test_metrics, label_names, train_output.metrics)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish(staging: Path, output: Path) -> None:
    """Move the finished folder into place; a previous folder there is swapped out, then deleted."""
    previous = None
    if output.exists():
        previous = output.with_name(f".{output.name}.previous-{os.getpid()}")
        os.replace(output, previous)
    os.replace(staging, output)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)


def _best_step(trainer: Trainer) -> int | None:
    checkpoint = trainer.state.best_model_checkpoint
    return int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else None


def _strip_prefix(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {k.removeprefix(prefix): v for k, v in metrics.items()}


def _is_json(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


def _write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (temporary file in the same folder, then os.replace)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _save_figure(figure: Figure, path: Path) -> None:
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


def _plot_training_curves(log_history: list[dict[str, Any]], metric: str, best_step: int | None, path: Path) -> None:
    """Training loss (and validation loss and `metric`, when evaluated) against the step; the saved step marked."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e]
    evals = [(e["step"], e.get("eval_loss"), e.get(f"eval_{metric}")) for e in log_history if "eval_loss" in e]
    figure = Figure(figsize=(9, 3.5))
    loss_ax, metric_ax = figure.subplots(1, 2)
    if train:
        loss_ax.plot(*zip(*train), label="training loss")
    if evals:
        loss_ax.plot([s for s, _, _ in evals], [v for _, v, _ in evals], "o-", label="validation loss")
        metric_ax.plot([s for s, _, _ in evals], [m for _, _, m in evals], "o-", color="tab:green")
        if best_step is not None:
            metric_ax.axvline(best_step, color="grey", linestyle="--", linewidth=1, label="saved (best)")
            metric_ax.legend()
    loss_ax.set(xlabel="step", ylabel="loss", title="Loss")
    if train or evals:
        loss_ax.legend()
    metric_ax.set(xlabel="step", ylabel=metric, title=f"Validation {metric}" if evals else "(no validation data)")
    _save_figure(figure, path)


def _save_confusion_matrix(output: PredictionOutput | None, label_names: list[str], staging: Path) -> None:
    if output is None:
        return
    figure = Figure(figsize=(1.2 * len(label_names) + 3, 1.2 * len(label_names) + 2))
    ax = figure.subplots()
    ConfusionMatrixDisplay.from_predictions(
        output.label_ids,
        output.predictions,
        labels=list(range(len(label_names))),
        display_labels=label_names,
        ax=ax,
        colorbar=False,
    )
    ax.set_title("Validation confusion matrix")
    _save_figure(figure, staging / CONFUSION_FILE)


# ---------------------------------------------------------------------------------------------------------------
# CLI


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune a checkpoint for classification, tagging or question answering",
        description=(
            "Fine-tune a Mini-BERT checkpoint with transformers' Trainer and save the best model, its tokenizer and "
            "label maps to --output-dir."
        ),
    )
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("--tokenizer", help="tokenizer folder, if not the model's")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")

    data = parser.add_argument_group("data")
    source = data.add_mutually_exclusive_group(required=True)
    source.add_argument("--train-file", help="CSV/TSV/JSON/JSONL; CoNLL for token classification; SQuAD JSON for QA")
    source.add_argument("--dataset", help="a datasets folder (save_to_disk or data files) or dataset name")
    data.add_argument("--validation-file", help="scores each evaluation and picks the best model")
    data.add_argument("--test-file", help="scored once, with the best model")
    data.add_argument("--train-split", default="train")
    data.add_argument("--validation-split", default="validation", help="with --dataset; used if the dataset has it")
    data.add_argument("--test-split", default=None, help="with --dataset")
    data.add_argument("--text-column", help="text (sequence classification, default 'text') or words (token "
                      "classification, default 'tokens')")
    data.add_argument("--text-pair-column", help="second text of a pair (sequence classification)")
    data.add_argument("--label-column", help="label (default 'label') or tags (token classification, default 'tags')")
    data.add_argument("--labels", help="comma-separated label names in id order (default: sorted training labels)")
    data.add_argument("--label-all-tokens", action="store_true", help="token classification: train every sub-token")
    data.add_argument("--question-column", default="question")
    data.add_argument("--context-column", default="context")
    data.add_argument("--answers-column", default="answers")
    data.add_argument("--max-length", type=int, help="tokens per input (default: the model's maximum)")
    data.add_argument("--doc-stride", type=int, help="QA: overlap of context windows, in tokens")
    data.add_argument("--n-best", type=int, default=20, help="QA: candidate answers kept per question")
    data.add_argument("--max-answer-length", type=int, default=30, help="QA: longest answer, in tokens")

    train = parser.add_argument_group("training (TrainingArguments)")
    train.add_argument("--epochs", type=float, default=TRAINING_DEFAULTS["num_train_epochs"])
    train.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs)")
    train.add_argument("--batch-size", type=int, default=TRAINING_DEFAULTS["per_device_train_batch_size"])
    train.add_argument("--eval-batch-size", type=int, default=TRAINING_DEFAULTS["per_device_eval_batch_size"])
    train.add_argument("--learning-rate", type=float, default=TRAINING_DEFAULTS["learning_rate"])
    train.add_argument("--weight-decay", type=float, default=TRAINING_DEFAULTS["weight_decay"])
    train.add_argument("--warmup", type=float, default=TRAINING_DEFAULTS["warmup_steps"],
                       help="warmup steps, or a fraction of all steps if below 1")
    train.add_argument("--gradient-accumulation-steps", type=int, default=1)
    train.add_argument("--eval-strategy", choices=("no", "steps", "epoch"), default=None,
                       help="default: 'epoch' with validation data, else 'no'")
    train.add_argument("--eval-steps", type=int, help="with --eval-strategy steps")
    train.add_argument("--no-load-best-model-at-end", action="store_true", help="save the last model, not the best")
    train.add_argument("--metric-for-best-model", help="default: accuracy / f1 (entities) / f1 (QA)")
    train.add_argument("--bf16", action="store_true")
    train.add_argument("--fp16", action="store_true")
    train.add_argument("--group-by-length", action="store_true", help="batch inputs of similar length together")
    train.add_argument("--seed", type=int, default=TRAINING_DEFAULTS["seed"])
    train.add_argument("--logging-steps", type=int, default=TRAINING_DEFAULTS["logging_steps"])
    train.add_argument("--report-to", default="none", help="e.g. tensorboard")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    training = {
        "num_train_epochs": args.epochs,
        "max_steps": args.max_steps,
        "per_device_train_batch_size": args.batch_size,
        "per_device_eval_batch_size": args.eval_batch_size,
        "learning_rate": args.learning_rate,
        "weight_decay": args.weight_decay,
        "warmup_steps": args.warmup,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "bf16": args.bf16,
        "fp16": args.fp16,
        "group_by_length": args.group_by_length,
        "seed": args.seed,
        "logging_steps": args.logging_steps,
        "report_to": args.report_to,
        "disable_tqdm": args.quiet,
    }
    if args.eval_strategy is not None:
        training["eval_strategy"] = args.eval_strategy
    if args.eval_steps is not None:
        training["eval_steps"] = args.eval_steps
    if args.no_load_best_model_at_end:
        training["load_best_model_at_end"] = False
    if args.metric_for_best_model:
        training["metric_for_best_model"] = args.metric_for_best_model

    if args.dataset is not None:
        from modeling_minibert.finetuning_data import dataset_splits

        splits = dataset_splits(args.dataset) or []
        train_data = args.dataset
        validation_data = args.validation_file or (args.dataset if args.validation_split in splits else None)
        test_data = args.test_file or (args.dataset if args.test_split else None)
    else:
        train_data, validation_data, test_data = args.train_file, args.validation_file, args.test_file
    common = dict(
        validation_data=validation_data,
        test_data=test_data,
        tokenizer=args.tokenizer,
        train_split=args.train_split,
        validation_split=args.validation_split,
        test_split=args.test_split or "test",
        overwrite=args.overwrite,
        **training,
    )
    if args.task == "sequence-classification":
        task_options = dict(
            text_column=args.text_column or "text",
            text_pair_column=args.text_pair_column,
            label_column=args.label_column or "label",
            labels=args.labels.split(",") if args.labels else None,
            max_length=args.max_length,
        )
    elif args.task == "token-classification":
        task_options = dict(
            tokens_column=args.text_column or "tokens",
            tags_column=args.label_column or "tags",
            labels=args.labels.split(",") if args.labels else None,
            label_all_tokens=args.label_all_tokens,
            max_length=args.max_length,
        )
    else:
        task_options = dict(
            question_column=args.question_column,
            context_column=args.context_column,
            answers_column=args.answers_column,
            max_length=args.max_length,
            doc_stride=args.doc_stride,
            n_best=args.n_best,
            max_answer_length=args.max_answer_length,
        )
    result = finetune(args.task, args.model, train_data, args.output_dir, **common, **task_options)
    print(f"saved to {result.output_dir}")
    for name, scores in (("validation", result.metrics), ("test", result.test_metrics)):
        if scores:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, float) and "runtime" not in k and "per_second" not in k)
            print(f"{name}: {shown}")
    return 0


__all__ = [
    "FinetuneResult",
    "TASKS",
    "TRAINING_DEFAULTS",
    "align_word_labels",
    "continuation_labels",
    "finetune",
    "finetune_question_answering",
    "finetune_sequence_classification",
    "finetune_token_classification",
    "training_arguments",
]
