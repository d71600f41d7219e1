"""Token classification: words -> one tag each; seqeval entity P/R/F1 for BIO tags, else token accuracy."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from datasets import Dataset
from transformers import (
    AutoModelForTokenClassification,
    BatchEncoding,
    DataCollatorForTokenClassification,
    EvalPrediction,
    PreTrainedTokenizerBase,
)

from modeling_minibert.finetuning.data import DataSource, NamedDataset, check_labels, column_values, require_columns, tag_columns
from modeling_minibert.finetuning import flow
from modeling_minibert.finetuning.metrics import is_bio_scheme, token_classification_metrics


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
    keep_checkpoints: bool = False,
    **training_options: Any,
) -> flow.FinetuneResult:
    """Fine-tune a tagger: one tag per word (named entities in BIO/IOB tags, part-of-speech tags, ...).

    Words are split into sub-tokens by the tokenizer; a word's tag goes on its first sub-token and the others are
    ignored (-100), or with `label_all_tokens` every sub-token is trained on (continuations of a "B-X" word as
    "I-X"). Scores are always word-level: evaluation reads the first sub-token of each word. Words past
    `max_length` tokens are cut off, for training and scoring alike.

    Data: CoNLL files (token and tag per line, blank line between sentences), or CSV/JSON(L)/`datasets` data with
    a list-of-words column `tokens_column` and a list-of-tags column `tags_column`. The other arguments are those
    of `finetune_sequence_classification`.
    """
    with flow.run_folder(output_dir, overwrite, training_options, "finetune") as output:
        splits = flow.load_splits(train_data, validation_data, test_data, train_split, validation_split, test_split, conll=True)
        read_splits = {role: read_tags(data, tokens_column, tags_column) for role, data in splits.items()}
        names = flow.label_names(labels, read_splits["train"].labels, model, splits["train"].name)
        for role, data in splits.items():
            check_labels(data, tags_column, read_splits[role].labels, names)
        config = flow.load_config(model)  # before the tokenizer: AutoTokenizer would warn past a bad config
        tok = flow.load_tokenizer(model, tokenizer)
        length = flow.check_max_length(max_length, tok, config)
        tokenized = {
            role: tag_features(tok, examples.inputs, examples.labels, names, length, label_all_tokens and role == "train")
            for role, examples in read_splits.items()
        }
        prepared = flow.Prepared(
            train=tokenized["train"],
            validation=tokenized.get("validation"),
            test=tokenized.get("test"),
            collator=DataCollatorForTokenClassification(tok),
            metric=best_metric(names),
            metrics_for=lambda role: tag_metrics(names),
            preprocess_logits=flow.argmax,
        )
        network = flow.load_model(
            AutoModelForTokenClassification, model, flow.seed_of(training_options), num_labels=len(names),
            id2label=dict(enumerate(names)), label2id={name: i for i, name in enumerate(names)},
        )
        return flow.train_and_save(
            TASK.name, model, network, tok, prepared, output, names, train_data, training_options, keep_checkpoints
        )


def read_tags(data: NamedDataset, tokens_column: str, tags_column: str | None) -> flow.Examples:
    """Word lists and their tag lists (None each without `tags_column`)."""
    if tags_column is None:
        require_columns(data, tokens_column)
        words = column_values(data.dataset, tokens_column)
        return flow.Examples([[str(w) for w in sentence] for sentence in words], [None] * len(words))
    return flow.Examples(*tag_columns(data, tokens_column, tags_column))


def encode(tokenizer: PreTrainedTokenizerBase, words: list[list[str]], max_length: int) -> BatchEncoding:
    """Word lists tokenized without padding; `word_ids(i)` maps tokens back to words."""
    return tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=max_length)


def best_metric(names: Sequence[str]) -> str:
    return "f1" if is_bio_scheme(names) else "accuracy"


def tag_metrics(names: Sequence[str]) -> Callable[[EvalPrediction], dict[str, float]]:
    """Word-level scores of predicted tag ids, read at the positions that have a label (first sub-tokens)."""

    def compute(p: EvalPrediction) -> dict[str, float]:
        predictions, references = [], []
        for pred_row, label_row in zip(p.predictions, p.label_ids):
            keep = label_row != -100
            predictions.append([names[i] for i in pred_row[keep]])
            references.append([names[i] for i in label_row[keep]])
        return token_classification_metrics(predictions, references, names)

    return compute


def tag_features(
    tokenizer, words: list[list[str]], tags: list[list[str]], names: Sequence[str], max_length: int, label_all_tokens: bool
) -> Dataset:
    """Tokenized sentences with one label per token (see `align_word_labels`): what Trainer trains on."""
    label2id = {name: i for i, name in enumerate(names)}
    continuation = continuation_labels(names) if label_all_tokens else None
    encoding = encode(tokenizer, words, max_length)
    labels = [
        align_word_labels(encoding.word_ids(i), [label2id[t] for t in sentence_tags], continuation)
        for i, sentence_tags in enumerate(tags)
    ]
    return Dataset.from_dict({**encoding, "labels": labels})


def continuation_labels(label_names: Sequence[str]) -> dict[int, int]:
    """Label id -> the id later sub-tokens of a word with that label get: "B-X" continues as "I-X" (when the tag
    set has it, so that no sub-token starts a second entity), any other label as itself."""
    label2id = {name: i for i, name in enumerate(label_names)}
    return {
        label2id[name]: label2id.get("I-" + name[2:], label2id[name]) if name.startswith("B-") else label2id[name]
        for name in label_names
    }


def first_subtokens(word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
    """(position, word) of each word's first sub-token, from the tokenizer's `word_ids()` (None for [CLS], [SEP]
    and padding): where a word's label is trained and read, here and in distillation."""
    firsts, previous = [], None
    for position, word in enumerate(word_ids):
        if word is not None and word != previous:
            firsts.append((position, word))
        previous = word
    return firsts


def align_word_labels(word_ids: Sequence[int | None], word_labels: Sequence[int], continuation: dict[int, int] | None) -> list[int]:
    """Word labels -> token labels, from the tokenizer's `word_ids()` (None for [CLS], [SEP] and padding).

    A word's first sub-token gets its label; the others get -100 (ignored by the loss), or with `continuation`
    (label all tokens) `continuation[label]`. Special tokens get -100.
    """
    labels = [-100] * len(word_ids)
    if continuation is not None:
        labels = [-100 if word is None else continuation[word_labels[word]] for word in word_ids]
    for position, word in first_subtokens(word_ids):
        labels[position] = word_labels[word]
    return labels


def cli_options(data_args: Any) -> dict[str, Any]:
    return dict(
        tokens_column=data_args.text_column_name or "tokens", tags_column=data_args.label_column_name or "tags",
        labels=data_args.labels.split(",") if data_args.labels else None, label_all_tokens=data_args.label_all_tokens,
    )


TASK = flow.Task(
    name="token-classification",
    finetune=finetune_token_classification,
    collator=DataCollatorForTokenClassification,
    read=read_tags,
    columns=("tokens", "tags"),
    conll=True,
    encode=encode,
    metrics=tag_metrics,
    best_metric=best_metric,
    cli_options=cli_options,
)
