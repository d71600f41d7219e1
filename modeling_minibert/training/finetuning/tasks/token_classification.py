"""Token classification: words -> one tag each; seqeval entity P/R/F1 for BIO tags, else token accuracy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from datasets import Dataset
from transformers import (
    BatchEncoding,
    DataCollatorForTokenClassification,
    EvalPrediction,
    PreTrainedTokenizerBase,
)

from modeling_minibert.training.finetuning.arguments import FinetuneArguments
from modeling_minibert.training.finetuning.data import NamedDataset, column_values, require_columns, tag_columns
from modeling_minibert.training.finetuning.metrics import is_bio_scheme, token_classification_metrics
from modeling_minibert.training.finetuning.task import Examples, Setup, Task, classifier_setup


def prepare(args: FinetuneArguments, splits: dict[str, NamedDataset]) -> Setup:
    """A tagger: one tag per word (named entities in BIO/IOB tags, part-of-speech tags, ...).

    Words are split into sub-tokens by the tokenizer; a word's tag goes on its first sub-token and the others are
    ignored (-100), or with `label_all_tokens` every sub-token of the training data is trained on (continuations
    of a "B-X" word as "I-X"). Scores are always word-level: evaluation reads the first sub-token of each word.
    Words past `max_seq_length` tokens are cut off, for training and scoring alike.

    Data: CoNLL files (token and tag per line, blank line between sentences), or CSV/JSON(L)/`datasets` data with
    a list-of-words column (`text_column_name`, default "tokens") and a list-of-tags column (`label_column_name`,
    default "tags").
    """

    def features(
        tokenizer: PreTrainedTokenizerBase, examples: Examples, names: list[str], length: int, role: str
    ) -> Dataset:
        return tag_features(
            tokenizer, examples.inputs, examples.labels, names, length, args.label_all_tokens and role == "train"
        )

    read = partial(
        TASK.load_examples, input_column=args.text_column_name, label_column=args.label_column_name or "tags"
    )
    return classifier_setup(TASK, args, splits, read, features)


def read_tags(data: NamedDataset, tokens_column: str, tags_column: str | None) -> Examples:
    """Word lists and their tag lists (None each without `tags_column`)."""
    if tags_column is None:
        require_columns(data, tokens_column)
        words = column_values(data.dataset, tokens_column)
        return Examples([[str(w) for w in sentence] for sentence in words], [None] * len(words))
    return Examples(*tag_columns(data, tokens_column, tags_column))


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
    tokenizer,
    words: list[list[str]],
    tags: list[list[str]],
    names: Sequence[str],
    max_length: int,
    label_all_tokens: bool,
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


def align_word_labels(
    word_ids: Sequence[int | None], word_labels: Sequence[int], continuation: dict[int, int] | None
) -> list[int]:
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


TASK = Task(
    name="token-classification",
    auto_class_name="AutoModelForTokenClassification",
    prepare=prepare,
    collator=DataCollatorForTokenClassification,
    read=read_tags,
    columns=("tokens", "tags"),
    conll=True,
    encode=encode,
    metrics=tag_metrics,
    best_metric=best_metric,
)
