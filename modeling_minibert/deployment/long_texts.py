"""Texts longer than a classifier reads, cut into overlapping windows and classified from their mean logits.

A sequence classifier reads `max_length` tokens of a text, and transformers' text-classification pipeline drops
the rest. With `doc_stride`, `minibert finetune` and `minibert distill` cut each text into windows of `max_length`
tokens that overlap by `doc_stride` tokens (as question answering cuts contexts), train on every window with the
text's label, and score a text by the mean of its windows' logits; `classify_long_texts` predicts the same way:

    from modeling_minibert.deployment import classify_long_texts
    logits = classify_long_texts(model, tokenizer, articles, doc_stride=16)  # (texts, labels)
    labels = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]

The windows are fine-tuning's own (`training.finetuning.windows`: cut as text by character offsets, pooled by the
mean), so that a text is predicted as it was trained and scored.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

# Fine-tuning's windows, named here too (`__all__`) as before they moved there.
from modeling_minibert.training.finetuning.windows import (
    MAX_WINDOWS,
    TooManyWindows,
    check_doc_stride,
    per_text,
    pool_logits,
    text_count,
    text_windows,
)


def whole_number(name: str, value: object, low: int, high: int | None = None) -> int:
    """`value` if it is an int (not a bool) from `low` to `high`; ValueError in one line naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ValueError(f"{name}={value!r} must be a whole number {bound}")
    return value


@torch.no_grad()
def classify_long_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    doc_stride: int | None = None,
    max_length: int | None = None,
    batch_size: int = 32,
    max_windows: int = MAX_WINDOWS,
) -> torch.Tensor:
    """The (len(texts), num_labels) logits of a sequence classifier, each text's the mean over its windows of
    `max_length` tokens (default: what the model and tokenizer read) overlapping by `doc_stride` (default: a quarter
    of a window), as `finetune --doc_stride` scores them; no texts give (0, num_labels). Refused in one line before
    any work: `texts` as one string (TypeError: a list is meant), an option out of its bounds (ValueError: a
    `doc_stride` that leaves no new text, a `max_length` beyond the model's positions), a text that would make more
    than `max_windows` windows."""
    from modeling_minibert.deployment.serving_paths import check_texts

    check_texts(texts)
    limit = min(
        getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length,
        tokenizer.model_max_length,
    )
    special = tokenizer.num_special_tokens_to_add(pair=False)
    max_length = int(limit) if max_length is None else whole_number("max_length", max_length, special + 1, int(limit))
    whole_number("batch_size", batch_size, 1)
    whole_number("max_windows", max_windows, 1)
    stride = max_length // 4 if doc_stride is None else doc_stride
    windows, owners = text_windows(tokenizer, texts, max_length, stride, max_windows)
    model.eval()
    device = next(model.parameters()).device
    logits = []
    for start in range(0, len(windows), batch_size):
        batch = tokenizer(
            windows[start : start + batch_size],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        logits.append(model(**batch).logits.float().cpu())
    stacked = torch.cat(logits) if logits else torch.zeros(0, model.config.num_labels)
    return torch.from_numpy(pool_logits(stacked.numpy(), owners, len(texts))).float()


__all__ = [
    "MAX_WINDOWS",
    "TooManyWindows",
    "check_doc_stride",
    "classify_long_texts",
    "per_text",
    "pool_logits",
    "text_count",
    "text_windows",
]
