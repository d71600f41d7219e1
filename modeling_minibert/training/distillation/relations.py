"""A model's self-attention relations (MiniLMv2, Wang et al. 2021), read through transformers' attention interface,
and the loss that teaches a teacher's to a student. General distillation (pretraining) teaches them on raw text;
task distillation teaches a fine-tuned teacher's on the transfer set.

    relations   at one layer, the queries, keys and values (each the concatenation of all heads, (B, T, H)) are
                split into R relation heads; softmax(x x^T / sqrt(H / R)) over the keys is the relation of each
                token to the others. Loss: KL(teacher || student) for query-query, key-key and value-value, summed.
                Neither width nor head count has to match, only R has to divide both widths; both models must read
                the same tokens.

The queries, keys and values are read where every attention backend receives them: a recording attention function
is registered under its own name (`RECORDING`) and a model is set to it (`set_recording_attention`); it keeps the
inputs of the wanted call and runs sdpa. Mini-BERT's unpadded path calls attention once per bucket, not per layer:
a recorded Mini-BERT runs padded (`unpad_inputs=False`).
"""

from __future__ import annotations

import contextvars
import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

RECORDING = "minibert_relations"  # the attention implementation that records q, k, v (then runs sdpa)


# --- reading q, k, v through the attention interface ---------------------------------------------------------------


@dataclass
class AttentionRecord:
    """Which call of the attention function to keep (0: the first layer's), and its query, key and value."""

    layer: int
    calls: int = 0
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # each (B, nh, T, hd)


_RECORD: contextvars.ContextVar[AttentionRecord | None] = contextvars.ContextVar("minibert_relations", default=None)


def recording_attention(module: nn.Module, query, key, value, attention_mask, **kwargs):
    """sdpa, keeping q, k, v of the wanted layer when a `recording` block is open (each model calls this once per
    layer, in order)."""
    record = _RECORD.get()
    if record is not None:
        if record.calls == record.layer:
            record.qkv = (query, key, value)
        record.calls += 1
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


# Adding a name to transformers' tables changes nothing for any model that does not ask for it by that name.
AttentionInterface.register(RECORDING, recording_attention)
AttentionMaskInterface.register(RECORDING, sdpa_mask)


@contextmanager
def recording(layer: int):
    """Record q, k, v of layer `layer` (0-based) of the model run inside the block."""
    record = AttentionRecord(layer)
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


def set_recording_attention(model: PreTrainedModel, name: str) -> None:
    """Route `model`'s attention through `recording_attention`; ValueError (naming `name`) for a model whose
    attention does not go through transformers' attention interface."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its refusal is a logged warning: said below in one line instead
    try:
        model.set_attn_implementation(RECORDING)
    finally:
        hf_logging.set_verbosity(verbosity)
    if model.config._attn_implementation != RECORDING:
        raise ValueError(
            f"{name} ({type(model).__name__}) does not run attention through transformers' attention "
            "interface: its attention relations cannot be read"
        )


# --- the losses --------------------------------------------------------------------------------------------------


def relation_log_probs(x: torch.Tensor, heads: int, mask: torch.Tensor) -> torch.Tensor:
    """x (B, nh, T, hd): one of q, k, v; mask (B, T) bool. -> log softmax(x_r x_r^T / sqrt(d_r)) (B, R, T, T)
    over the real keys, for R = `heads` relation heads of d_r = H / R dims each."""
    batch, _, length, _ = x.shape
    x = x.transpose(1, 2).reshape(batch, length, heads, -1).transpose(1, 2).float()  # (B, R, T, d_r)
    scores = x @ x.transpose(-1, -2) / math.sqrt(x.shape[-1])  # (B, R, T, T)
    # The smallest float, not -inf: a padding key then gets probability 0 and KL terms 0 x (finite), never NaN.
    scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min)
    return scores.log_softmax(-1)


def relation_loss(teacher_qkv, student_qkv, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """MiniLMv2's loss: KL(teacher || student) of the query-query, key-key and value-value relations, each
    averaged over the real query tokens and the relation heads, summed. mask (B, T): the real tokens."""
    mask = mask.bool()
    queries = mask[:, None, :].float()  # (B, 1, T)
    total = torch.zeros((), device=mask.device)
    for t, s in zip(teacher_qkv, student_qkv):
        log_t, log_s = relation_log_probs(t, heads, mask), relation_log_probs(s, heads, mask)
        kl = (log_t.exp() * (log_t - log_s)).sum(-1)  # (B, R, T)
        total = total + (kl * queries).sum() / (queries.sum() * heads)
    return total


def padded(model: PreTrainedModel) -> dict[str, bool]:
    """The keyword that makes `model` run padded when it is a Mini-BERT (whose unpadded path calls attention once per
    bucket of sequences, not once per layer); nothing for other models."""
    return {"unpad_inputs": False} if getattr(model.config, "unpad_inputs", False) else {}


__all__ = ["RECORDING", "padded", "recording", "relation_loss", "set_recording_attention"]
