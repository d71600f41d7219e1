"""Mini-BERT: BERT's encoder and heads as transformers 5.x classes.

Self-contained on purpose (imports only torch, transformers, the configuration file and the checks file): this file
is copied next to every saved checkpoint, with the two files it imports, so that `trust_remote_code=True` works
without the package installed.

Module and parameter names follow transformers' `modeling_bert.py`, so BERT checkpoints line up key for key.
What Mini-BERT adds is speed: with padding in the batch, the dense work runs on the real tokens only and attention
per bucket of similar lengths (`MiniBertConfig.unpad_inputs`, see `Packing`), MLM training computes logits only at
masked positions (`MiniBertConfig.sparse_prediction`), and CPU dropout is cheaper (`BitMaskDropout`). An opt-in
pre-LayerNorm block (`MiniBertConfig.layer_norm_position="pre"`) uses the same parameters in other places.

Shapes: B batch, T sequence length, H hidden size, nh heads, hd head size (H = nh * hd), N real (non-pad)
tokens in the batch, V vocabulary size.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from torch.nn import CrossEntropyLoss
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertForPreTrainingOutput
from transformers.utils import is_flash_attn_2_available
from transformers.utils.generic import can_return_tuple

from .checks_minibert import IGNORE_INDEX, check_inputs, check_labels, check_model_folder, check_tensors
from .configuration_minibert import MiniBertConfig

if is_flash_attn_2_available():  # transformers' idiom: a saved folder then loads where flash_attn is missing
    from flash_attn import flash_attn_varlen_func


@dataclass
class MiniBertForPreTrainingOutput(BertForPreTrainingOutput):
    r"""
    BERT's pretraining output, plus what training and evaluation read without re-deriving it:

    mlm_loss (`torch.Tensor` scalar, when `labels` is given): the masked-LM part of `loss`.
    next_sentence_loss (`torch.Tensor` scalar, when `next_sentence_label` is given): the NSP part of `loss`.
    masked_positions (`torch.LongTensor` of shape `(M,)`): in sparse training, the flat indices into the B * T
        positions of the M labelled rows that `prediction_logits` (M, V) holds; None when it is (B, T, V).
    """

    mlm_loss: torch.Tensor | None = None
    next_sentence_loss: torch.Tensor | None = None
    masked_positions: torch.LongTensor | None = None


@dataclass
class MiniBertMaskedLMOutput(MaskedLMOutput):
    r"""
    masked_positions (`torch.LongTensor` of shape `(M,)`): in sparse training, the flat indices into the B * T
        positions of the M labelled rows that `logits` (M, V) holds; None when it is (B, T, V).
    """

    masked_positions: torch.LongTensor | None = None


def functional_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`nn.functional.dropout`, with a cheaper mask on CPU (see `BitMaskDropout`); CUDA and compiled graphs keep
    torch's fused kernel."""
    if not training or p in (0, 1) or x.device.type != "cpu" or torch.compiler.is_compiling():
        return nn.functional.dropout(x, p, training)
    return BitMaskDropout.apply(x, p)


class BitMaskDropout(torch.autograd.Function):
    """Dropout whose mask costs 16 random bits per element, drawn four at a time as 64-bit integers.

    Hand-written because torch's CPU dropout draws a float per element (`bernoulli_`), which took about a fifth of
    a CPU training step. `p` is rounded to a multiple of 2**-15 (at most 1.5e-5 off) and kept values are scaled by
    the exact inverse of the rounded keep rate, so the expectation is unchanged. Draws come from torch's default
    generator: `torch.manual_seed` and gradient checkpointing's RNG replay apply as usual.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        threshold = round(p * 2**15)
        bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_()  # [0, 2**63)
        halves = bits.view(torch.int16).bitwise_and_(0x7FFF)  # four uniform 15-bit numbers per draw
        dropped = halves[: x.numel()].lt(threshold).view(x.shape)
        ctx.scale = 2**15 / (2**15 - threshold)
        ctx.save_for_backward(dropped)
        return torch.where(dropped, 0.0, x).mul_(ctx.scale)  # not x * mask: multiplying by a bool converts it

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        (dropped,) = ctx.saved_tensors
        return torch.where(dropped, 0.0, grad_output).mul_(ctx.scale), None


class MiniBertDropout(nn.Dropout):
    """`nn.Dropout` through `functional_dropout` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional_dropout(x, self.p, self.training)


@dataclass
class Packing:
    """Where the real tokens of a padded (B, T) batch go when packed, and how attention regroups them.

    Hand-written because neither torch nor transformers offers unpadding for CPU encoders: nested tensors fall
    back to slow kernels there, and transformers' varlen path is flash-attention (GPU) only.

    Sequences are packed longest first, so that sequences of similar length sit next to each other. Attention,
    the one step that needs the sequences apart, then runs either once per bucket of such sequences, padded only
    to the bucket's length (the buckets' padded layouts are S slots in all: on batches of mixed lengths, most of
    the (B, T, T) scores a padded batch would compute are never computed), or, where flash-attention is installed
    on a GPU, in one varlen call over the packed tokens (`packed_attention_kernel`).

    Built on the host, from a CPU mask (`from_mask`): every size in it is a Python number the device is never
    asked for, so a step that receives it from the collator (`plan_batch`) launches its kernels without waiting
    for the device. `to` moves its tensors and keeps the numbers.
    """

    indices: torch.Tensor  # (N,) where each packed token sits in the flattened (B * T) batch
    gather: torch.Tensor  # (S,) the packed token in each bucket slot (padding slots repeat a real token)
    scatter: torch.Tensor  # (N,) the bucket slot of each packed token
    lengths: torch.Tensor  # (B,) each sequence's real tokens, in packing order (longest first)
    cu_seqlens: torch.Tensor  # (B' + 1,) int32: where each of the B' non-empty sequences starts, then N (varlen)
    batch_size: int
    seq_len: int
    max_length: int  # the longest sequence's real tokens
    bucket_shapes: list[tuple[int, int]]  # (sequences, length) of each bucket, in packing order
    bucket_full: list[bool]  # whether every sequence of a bucket fills it (its attention needs no mask)
    # Set by the model for one forward (`with_attention`): the kernel, and for "buckets" each bucket's mask in the
    # attention backend's format (None where the bucket is full).
    kernel: str = "buckets"
    bucket_masks: list[torch.Tensor | None] | None = None

    # A bucket holds the sequences whose lengths round up to the same multiple of this. CPU attention kernels run
    # up to twice as fast on lengths that are multiples of 16 (47 tokens took longer than 48), and coarser steps
    # would waste attention on padding while finer ones would pay per-call overhead for little.
    BUCKET_STEP = 16
    TENSORS = ("indices", "gather", "scatter", "lengths", "cu_seqlens")

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Packing | None:
        """attention_mask (B, T) on the CPU, nonzero at real tokens; None when no position is padding (or none is
        real): then there is nothing to pack."""
        attention_mask = attention_mask.bool()
        batch_size, seq_len = attention_mask.shape
        lengths = attention_mask.sum(1)  # (B,)
        sizes = lengths.tolist()  # the host's copy: every size below is a Python int
        if sum(sizes) in (0, batch_size * seq_len):
            return None
        order = torch.argsort(lengths, descending=True, stable=True)
        rows, cols = attention_mask[order].nonzero(as_tuple=True)
        indices = order[rows] * seq_len + cols
        sorted_lengths = lengths[order]
        starts = sorted_lengths.cumsum(0) - sorted_lengths  # first packed token of each sequence
        sorted_sizes = sorted(sizes, reverse=True)

        rounded = [-(-n // cls.BUCKET_STEP) * cls.BUCKET_STEP for n in sorted_sizes]
        gather, bucket_shapes, bucket_full, padding_masks = [], [], [], []
        first = 0
        while first < batch_size and rounded[first] > 0:  # sequences without tokens get no bucket
            length = rounded[first]
            last = first + rounded.count(length)  # sorted, so the bucket's sequences are consecutive
            slots = torch.arange(length)
            mask = slots < sorted_lengths[first:last, None]  # (n, L)
            gather.append((starts[first:last, None] + torch.where(mask, slots, 0)).flatten())
            bucket_shapes.append((last - first, length))
            bucket_full.append(sorted_sizes[last - 1] == length)
            padding_masks.append(mask)
            first = last
        real_slots = torch.cat([m.flatten() for m in padding_masks]).nonzero(as_tuple=True)[0]
        nonempty = sorted_lengths[:first]  # the sequences with tokens (`first` has passed them all)
        cu_seqlens = torch.cat([nonempty.new_zeros(1), nonempty.cumsum(0)]).int()
        return cls(
            indices,
            torch.cat(gather),
            real_slots,
            sorted_lengths,
            cu_seqlens,
            batch_size,
            seq_len,
            sorted_sizes[0],
            bucket_shapes,
            bucket_full,
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Packing:
        return dataclasses.replace(
            self, **{k: getattr(self, k).to(device, non_blocking=non_blocking) for k in self.TENSORS}
        )

    def pin_memory(self) -> Packing:
        """For `DataLoader(pin_memory=True)`: page-locked tensors copy to the GPU asynchronously."""
        return dataclasses.replace(self, **{k: getattr(self, k).pin_memory() for k in self.TENSORS})

    def padding_masks(self) -> list[torch.Tensor | None]:
        """Each bucket's (n, L) padding mask (True at real slots), None for a full bucket; made on the tensors'
        device from `lengths` and the host's sizes, without reading a value back."""
        masks, first = [], 0
        for (n, length), full in zip(self.bucket_shapes, self.bucket_full):
            slots = torch.arange(length, device=self.lengths.device)
            masks.append(None if full else slots < self.lengths[first : first + n, None])
            first += n
        return masks

    def with_attention(self, kernel: str, bucket_masks: list[torch.Tensor | None] | None = None) -> Packing:
        """A copy for one forward: the attention kernel ("buckets" or "flash_attn_varlen") and the buckets' masks."""
        return dataclasses.replace(self, kernel=kernel, bucket_masks=bucket_masks)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...)"""
        return x.flatten(0, 1).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at padding."""
        out = x.new_zeros(self.batch_size * self.seq_len, *x.shape[1:]).index_copy(0, self.indices, x)
        return out.view(self.batch_size, self.seq_len, *x.shape[1:])

    def to_buckets(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(N, ...) -> one (n, L, ...) tensor per bucket."""
        slots = x.index_select(0, self.gather)  # (S, ...): one gather for all buckets, so one scatter backward
        sizes = [n * length for n, length in self.bucket_shapes]
        return [
            chunk.view(n, length, *x.shape[1:]) for chunk, (n, length) in zip(slots.split(sizes), self.bucket_shapes)
        ]

    def from_buckets(self, buckets: list[torch.Tensor]) -> torch.Tensor:
        """One (n, L, ...) tensor per bucket -> (N, ...)"""
        return torch.cat([b.flatten(0, 1) for b in buckets]).index_select(0, self.scatter)


def packed_attention_kernel(
    attn_implementation: str, device_type: str, dtype: torch.dtype, flash_attn_installed: bool
) -> str:
    """How attention runs on packed tokens: "flash_attn_varlen", flash-attention's varlen kernel over all of them
    at once (on CUDA, in half precision, the flash_attn package installed, attention "sdpa" or
    "flash_attention_2"); else "buckets", the attention backend once per bucket (`Packing`): on CUDA, torch's sdpa
    then picks its own best kernel per bucket (flash for a full bucket, memory-efficient for one with a mask)."""
    if (
        device_type == "cuda"
        and dtype in (torch.float16, torch.bfloat16)
        and flash_attn_installed
        and attn_implementation in ("sdpa", "flash_attention_2")
    ):
        return "flash_attn_varlen"
    return "buckets"


@dataclass
class BatchPlan:
    """What a training step must know on the host about its batch, made by the collator on the CPU (`plan_batch`)
    so that the step never reads a value back from the device: where the real tokens are (`packing`, None when
    the batch has no padding) and how many of `masked_positions`' entries are labelled positions
    (`masked_count`). Travels in the batch like a tensor: `to` moves it (its numbers stay on the host)."""

    packing: Packing | None = None
    masked_count: int | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> BatchPlan:
        packing = self.packing.to(device, non_blocking) if self.packing is not None else None
        return dataclasses.replace(self, packing=packing)

    def pin_memory(self) -> BatchPlan:
        return dataclasses.replace(self, packing=self.packing.pin_memory() if self.packing is not None else None)


# Standard deviations of the masked count above its mean that `masked_capacity` leaves room for.
MASKED_SPREAD = 6


def masked_capacity(batch_size: int, seq_len: int, mlm_probability: float) -> int:
    """The fixed number of masked positions a (batch_size, seq_len) batch masked at `mlm_probability` is given
    (`plan_batch`): a function of the shape and the rate alone, so that a compiled step sees one shape.

    Each of the B x T positions is masked with chance p, so the count has mean p B T and standard deviation
    sqrt(p (1 - p) B T); the capacity is the mean plus 6 of those, rounded up to a multiple of 8, at most B x T.
    Only real non-special tokens are masked, so the true mean is lower still; whole-word masking draws words,
    whose pieces at most double the variance (still over 4 deviations). A batch past the capacity (odds under
    1e-5) keeps its first `capacity` labels and scores no others, as BERT's `max_predictions_per_seq` does.
    """
    positions = batch_size * seq_len
    count = positions * mlm_probability + MASKED_SPREAD * math.sqrt(
        positions * mlm_probability * (1 - mlm_probability)
    )
    return min(positions, 8 * math.ceil(count / 8))


def plan_batch(batch: dict, mlm_probability: float | None = None) -> dict:
    """The collated batch with what a training step needs on the host, for a step with no host sync: the last
    thing a collator does, on its CPU tensors.

    Adds `batch_plan` (a `BatchPlan`: the packing, or None without padding; the count of labelled positions)
    and, when there are `labels` ((B, T), -100 where not masked), `masked_positions`: the flat indices (into the
    B x T positions) of the labelled positions in order, padded to `masked_capacity(B, T, mlm_probability)`
    with the index of a position whose label is -100 (its row scores nothing). Give the highest rate the batches
    can have (a masking-rate schedule's largest) so that every batch of a shape gets the same count; None: no
    padding, one count per batch (shapes then vary, which only a compiled step minds). Labels beyond the
    capacity (see `masked_capacity`) are set to -100 in the returned `labels`.
    """
    out = dict(batch)
    mask = batch.get("attention_mask")
    packing = Packing.from_mask(mask) if mask is not None else None
    count = None
    labels = batch.get("labels")
    if labels is not None:
        flat = labels.flatten()
        labelled = (flat != IGNORE_INDEX).nonzero(as_tuple=True)[0]  # (M,)
        count = len(labelled)
        capacity = count if mlm_probability is None else masked_capacity(*labels.shape, mlm_probability)
        if count > capacity:  # see masked_capacity: the labels past it are scored by no one
            flat = flat.clone()
            flat[labelled[capacity:]] = IGNORE_INDEX
            out["labels"], labelled, count = flat.view_as(labels), labelled[:capacity], capacity
        filler = (flat == IGNORE_INDEX).nonzero()[:1].flatten()  # a position that scores nothing
        out["masked_positions"] = torch.cat([labelled, filler.expand(capacity - count)])
    out["batch_plan"] = BatchPlan(packing, count)
    return out


class MiniBertEmbeddings(nn.Module):
    """Token + segment + learned position embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = MiniBertDropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor,
        position_ids: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Ids of any shape S (padded (B, T) or packed (N,)) -> (*S, H)."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = (
            inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        )
        return self.dropout(self.LayerNorm(embeddings))


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax(QK^T * scaling + mask) V. q, k, v: (B, nh, T, hd); mask (B, 1, T, T), additive or boolean
    (True = attend, sdpa's format). -> (B, T, nh, hd)"""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, nh, T, T)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
    elif attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = functional_dropout(attn_weights, dropout, module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()  # (B, T, nh, hd)
    return attn_output, attn_weights


class MiniBertSelfAttention(nn.Module):
    """Bidirectional multi-head self-attention, dispatched through transformers' attention interface."""

    is_causal = False  # read by transformers' sdpa/flash backends

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def qkv_projection(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # (..., H) -> (..., 3H): one matmul for Q, K and V, which read the same input. The weights stay separate
        # parameters so that checkpoint keys line up with BERT's.
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        return nn.functional.linear(hidden_states, weight, bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_implementation: str,
        packing: Packing | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states (B, T, H) and the mask in `attn_implementation`'s format; or, packed, hidden_states (N, H),
        no mask here and the buckets' masks in `packing`. -> same shape as hidden_states, and the weights (eager,
        padded only)."""
        qkv = self.qkv_projection(hidden_states)  # (B, T, 3H) or (N, 3H)
        if packing is None:
            return self._attend(qkv, attention_mask, attn_implementation, **kwargs)
        # Packed: attention is the one step that needs the sequences apart; run it on all of them at once with
        # a varlen kernel, or bucket by bucket.
        if packing.kernel == "flash_attn_varlen":
            return self._attend_varlen(qkv, packing), None
        outputs = [
            self._attend(bucket, mask, attn_implementation, **kwargs)[0]
            for bucket, mask in zip(packing.to_buckets(qkv), packing.bucket_masks)
        ]
        return packing.from_buckets(outputs), None  # (N, H)

    def _attend_varlen(self, qkv: torch.Tensor, packing: Packing) -> torch.Tensor:
        """qkv (N, 3H), packed -> (N, H): flash-attention's varlen kernel, each sequence attending within itself."""
        query, key, value = qkv.view(-1, 3, self.num_heads, self.head_dim).unbind(1)  # each (N, nh, hd)
        longest = packing.max_length
        attn_output = flash_attn_varlen_func(
            query,
            key,
            value,
            packing.cu_seqlens,
            packing.cu_seqlens,
            longest,
            longest,
            dropout_p=self.dropout_prob if self.training else 0.0,
            softmax_scale=self.scaling,
            causal=False,
        )
        return attn_output.reshape(qkv.shape[0], -1)

    def _attend(
        self, qkv: torch.Tensor, attention_mask: torch.Tensor | None, attn_implementation: str, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """qkv (B, T, 3H), mask in the attention backend's format -> (B, T, H), and the weights (eager only)."""
        batch_size, seq_len, _ = qkv.shape
        qkv = qkv.view(batch_size, seq_len, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        query, key, value = qkv.unbind(0)  # each (B, nh, T, hd)

        dropout = self.dropout_prob if self.training else 0.0
        if attn_implementation == "sdpa" and dropout > 0 and qkv.device.type == "cpu":
            # torch's CPU sdpa has no fused dropout and falls back to this same math with a slower dropout.
            # The eager function below takes sdpa's boolean mask too.
            attn_implementation = "eager"
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        return attn_output.reshape(batch_size, seq_len, -1), attn_weights


def residual_sum(branch: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """branch + residual; in place when the dtypes agree (the branch is a fresh tensor that no backward needs). Under
    autocast the branch is half precision and the stream float32: the sum then promotes, as in BERT."""
    return branch.add_(residual) if branch.dtype == residual.dtype else branch + residual


class MiniBertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual; then LayerNorm when post-LN (BERT). Pre-LN applies this
    LayerNorm to the attention's input instead (see `MiniBertAttention`)."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = MiniBertDropout(config.hidden_dropout_prob)
        self.post_norm = config.layer_norm_position == "post"

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        residual = residual_sum(self.dropout(self.dense(hidden_states)), input_tensor)
        return self.LayerNorm(residual) if self.post_norm else residual


class MiniBertAttention(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.self = MiniBertSelfAttention(config)
        self.output = MiniBertSelfOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_implementation: str,
        packing: Packing | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # Pre-LN normalises the branch's input and leaves the residual stream unnormalised. The LayerNorm keeps
        # BERT's name (attention.output.LayerNorm) so that both variants have the same parameters.
        attention_input = hidden_states if self.output.post_norm else self.output.LayerNorm(hidden_states)
        attn_output, attn_weights = self.self(attention_input, attention_mask, attn_implementation, packing, **kwargs)
        return self.output(attn_output, hidden_states), attn_weights


# The same kernels as ACT2FN's "gelu" and "relu", writing into their input.
IN_PLACE_ACTIVATIONS = {"gelu": torch.ops.aten.gelu_, "relu": torch.relu_}


class MiniBertIntermediate(nn.Module):
    """First half of the position-wise FFN: H -> intermediate_size, activation."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]
        self.in_place_act_fn = IN_PLACE_ACTIVATIONS.get(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)  # (..., intermediate_size)
        if self.in_place_act_fn is not None and not torch.is_grad_enabled():
            # Without autograd nothing needs the pre-activation: overwrite the layer's largest tensor in place.
            return self.in_place_act_fn(hidden_states)
        return self.intermediate_act_fn(hidden_states)


class MiniBertOutput(nn.Module):
    """Second half of the FFN: intermediate_size -> H, dropout, residual; then LayerNorm when post-LN (BERT).
    Pre-LN applies this LayerNorm to the FFN's input instead (see `MiniBertLayer`)."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = MiniBertDropout(config.hidden_dropout_prob)
        self.post_norm = config.layer_norm_position == "post"

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        residual = residual_sum(self.dropout(self.dense(hidden_states)), input_tensor)
        return self.LayerNorm(residual) if self.post_norm else residual


class MiniBertLayer(GradientCheckpointingLayer):
    """One encoder block: self-attention then FFN, each with a residual and a LayerNorm (after the sum in BERT's
    post-LN; on the branch's input in the pre-LN variant)."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.attention = MiniBertAttention(config)
        self.intermediate = MiniBertIntermediate(config)
        self.output = MiniBertOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_implementation: str,
        packing: Packing | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, attn_weights = self.attention(
            hidden_states, attention_mask, attn_implementation, packing, **kwargs
        )
        ffn_input = attention_output if self.output.post_norm else self.output.LayerNorm(attention_output)
        layer_output = self.output(self.intermediate(ffn_input), attention_output)
        return layer_output, attn_weights


class MiniBertEncoder(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.layer = nn.ModuleList([MiniBertLayer(config) for _ in range(config.num_hidden_layers)])
        # Absent in BERT. The Mini-BERT guide's variant normalises the last block's output once more; pre-LN
        # needs it, since its residual stream is never normalised otherwise (the config sets it for pre-LN).
        self.LayerNorm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.final_layer_norm else None
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_implementation: str,
        packing: Packing | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """hidden_states (B, T, H), or (N, H) with `packing` (the mask is then None: each bucket's is in `packing`).
        -> last hidden state, hidden states (embeddings + one per layer), attentions; all in the input's layout."""
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layer:
            hidden_states, attn_weights = layer(hidden_states, attention_mask, attn_implementation, packing, **kwargs)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
        if self.LayerNorm is not None:
            hidden_states = self.LayerNorm(hidden_states)
        return hidden_states, all_hidden_states, all_attentions


class MiniBertPooler(nn.Module):
    """tanh(dense(hidden state of [CLS])): the sentence vector used by NSP and the classification heads."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))  # (B, H)


class MiniBertPredictionHeadTransform(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class MiniBertLMPredictionHead(nn.Module):
    """MLM scores over the vocabulary: (..., H) -> (..., V)."""

    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.transform = MiniBertPredictionHeadTransform(config) if config.mlm_head_transform else nn.Identity()
        # The decoder weight is tied to the word embeddings unless `tie_word_embeddings=False`. The output bias
        # lives beside it (as in BERT checkpoints), so tying or untying never touches it.
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        logits = self.decoder(self.transform(hidden_states))
        return logits + self.bias.to(logits.dtype)  # under autocast in the decoder's dtype, as BERT's (one Linear)


class MiniBertOnlyMLMHead(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.predictions = MiniBertLMPredictionHead(config)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.predictions(sequence_output)


class MiniBertOnlyNSPHead(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output: torch.Tensor) -> torch.Tensor:
        return self.seq_relationship(pooled_output)


class MiniBertPreTrainingHeads(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.predictions = MiniBertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output: torch.Tensor, pooled_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


def classifier_dropout(config: MiniBertConfig) -> float:
    """The task heads' dropout: `classifier_dropout`, or the hidden dropout when unset (as in BERT)."""
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


class MiniBertPreTrainedModel(PreTrainedModel):
    config_class = MiniBertConfig
    config: MiniBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    _no_split_modules = ["MiniBertEmbeddings", "MiniBertLayer"]
    # In BERT checkpoints, not weights: an old buffer, and BERT's tied copy of `cls.predictions.bias`.
    _keys_to_ignore_on_load_unexpected = [r"embeddings\.position_ids$", r"cls\.predictions\.decoder\.bias$"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, MiniBertLMPredictionHead):
            module.bias.zero_()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, with one-line errors before any allocation for a local folder that
        does not exist, holds no weights, holds only pickle weights (refused unless `use_safetensors=False`), or
        whose config disagrees with its weights' shapes; and naming the file when a `model.safetensors` is
        truncated or corrupted. A transformers BERT folder or Hub id (`model_type: bert`) loads into the unpadded
        Mini-BERT of the same architecture (see `MiniBertConfig.from_bert`; BERT's weight names are ours)."""
        kwargs.setdefault("use_safetensors", True)
        if pretrained_model_name_or_path is None:  # weights from `state_dict=`: no folder to check
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        check_model_folder(pretrained_model_name_or_path, kwargs)
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as err:
            raise ValueError(
                f"{Path(pretrained_model_name_or_path) / 'model.safetensors'} is truncated or corrupted: {err}"
            ) from err

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """`PreTrainedModel.save_pretrained`, plus two guarantees.

        The config's `auto_map` names every head, so one saved folder loads with any `AutoModelFor*` class and
        `trust_remote_code=True`. And files are written to a temporary folder first, then moved in one by one
        with `os.replace`: an interrupted save never leaves a half-written `model.safetensors` in place of a good one.
        """
        own = own_class(self)
        if type(self) is not own:
            # FSDP2's `fully_shard` swaps the model's class for a subclass it generates (`FSDP<Name>`, defined in
            # torch): saved as that, config.json would name it and transformers would copy torch's module files
            # in place of this one. The folder is the model's own class's, so the save runs as that class.
            wrapper, self.__class__ = self.__class__, own
            try:
                return self.save_pretrained(save_directory, *args, **kwargs)
            finally:
                self.__class__ = wrapper
        self.config.auto_map = {"AutoConfig": "configuration_minibert.MiniBertConfig", **AUTO_MAP}
        if kwargs.get("push_to_hub"):
            return super().save_pretrained(save_directory, *args, **kwargs)
        target = Path(save_directory)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target, prefix=".saving-") as staging:
            super().save_pretrained(staging, *args, **kwargs)
            for file in sorted(Path(staging).iterdir()):
                os.replace(file, target / file.name)


def own_class(model: nn.Module) -> type[nn.Module]:
    """The class `model` was made as: its own, or the Mini-BERT class a wrapper's subclass derives from (FSDP2's
    `fully_shard` swaps a module's class for a generated `FSDP<Name>`); what a saved folder names and holds the
    code of."""
    return next((cls for cls in type(model).__mro__ if cls.__module__ == __name__), type(model))


class MiniBertModel(MiniBertPreTrainedModel):
    """The bare encoder: embeddings, encoder blocks and (optionally) the [CLS] pooler."""

    def __init__(self, config: MiniBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = MiniBertEmbeddings(config)
        self.encoder = MiniBertEncoder(config)
        self.pooler = MiniBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        unpad_inputs: bool | None = None,
        batch_plan: BatchPlan | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        """
        input_ids, attention_mask, token_type_ids, position_ids: (B, T); inputs_embeds: (B, T, H).
        attention_mask: 1 at real tokens, 0 at padding, in any dtype.
        unpad_inputs: overrides `config.unpad_inputs` for this call; False gives hidden states at padding positions
            too, for heads that read them.
        batch_plan: where the batch's real tokens are, worked out on the host by the collator (`plan_batch`): with
            it the forward reads no value back from the device. Without it the model works that out itself from
            `attention_mask`, which it reads back once (on a GPU, one host sync: the host waits for the device).
        Returns last_hidden_state (B, T, H), pooler_output (B, H), hidden_states and attentions when asked.
        When unpadding runs (the default, with padding in the batch), hidden states at padding positions are zeros
        (they are never attended to, and no head should read them).
        """
        check_inputs(
            self.config, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, self.training
        )
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        unpad_inputs = unpad_inputs if unpad_inputs is not None else self.config.unpad_inputs
        for name in ("num_items_in_batch", "return_loss"):  # Trainer's bookkeeping, not model input
            kwargs.pop(name, None)

        ref = input_ids if input_ids is not None else inputs_embeds
        batch_size, seq_len = ref.shape[:2]
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=ref.device)
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=ref.device).expand(batch_size, seq_len)
        else:
            position_ids = position_ids.expand(batch_size, seq_len)

        # Only the eager kernel materialises attention weights. The choice travels down as an argument: the config
        # is shared by every submodule and every thread using the model, so it is never changed here.
        attn_implementation = "eager" if output_attentions else self.config._attn_implementation
        dtype = inputs_embeds.dtype if inputs_embeds is not None else self.embeddings.word_embeddings.weight.dtype
        packing, padding = self._layout(attention_mask, batch_plan, unpad_inputs and not output_attentions)
        if packing is not None:
            packing = self._packed_attention(packing, dtype, attn_implementation)
        embedding_output = self.embeddings(
            *(
                (None if t is None else packing.unpad(t)) if packing is not None else t
                for t in (input_ids, token_type_ids, position_ids, inputs_embeds)
            )
        )
        mask = None if packing is not None else self._backend_mask(attention_mask, dtype, attn_implementation, padding)
        sequence_output, hidden_states, attentions = self.encoder(
            embedding_output, mask, attn_implementation, packing, output_hidden_states, output_attentions, **kwargs
        )
        if packing is not None:
            sequence_output = packing.pad(sequence_output)
            if hidden_states is not None:
                hidden_states = tuple(packing.pad(h) for h in hidden_states)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=hidden_states,
            attentions=attentions,
        )

    def _layout(
        self, attention_mask: torch.Tensor | None, plan: BatchPlan | None, unpad: bool
    ) -> tuple[Packing | None, bool | None]:
        """(the packing to run with or None, whether the batch has padding or None where that is not known)."""
        if attention_mask is None:
            return None, False
        if torch.compiler.is_compiling():
            return None, None  # a compiled graph's shapes cannot depend on the data: it stays padded, mask and all
        if plan is not None:
            packing = plan.packing
        elif unpad:  # the host's copy of the mask (on a GPU: the one read back)
            packing = Packing.from_mask(attention_mask.cpu())
            packing = packing.to(attention_mask.device) if packing is not None else None
        else:
            return None, None  # padded: transformers' mask helper looks for padding itself
        return packing if unpad else None, packing is not None

    def _packed_attention(self, packing: Packing, dtype: torch.dtype, attn_implementation: str) -> Packing:
        """`packing` for this forward: the kernel that runs attention on it and, per bucket, the backend's mask."""
        device = packing.indices.device
        if torch.is_autocast_enabled(device.type):  # the attention's inputs come out of autocast's matmuls
            dtype = torch.get_autocast_dtype(device.type)
        flash_attn = device.type == "cuda" and is_flash_attn_2_available()
        kernel = packed_attention_kernel(attn_implementation, device.type, dtype, flash_attn)
        if kernel != "buckets":
            return packing.with_attention(kernel)
        masks = [
            None if m is None else self._backend_mask(m, dtype, attn_implementation, True)
            for m in packing.padding_masks()
        ]
        return packing.with_attention(kernel, masks)

    def _backend_mask(
        self,
        attention_mask: torch.Tensor | None,
        dtype: torch.dtype,
        attn_implementation: str,
        padding: bool | None = None,
    ) -> torch.Tensor | None:
        """A (B, T) padding mask in the format `attn_implementation` takes (None when it needs none); `padding`:
        whether the mask has padding, when the caller knows (None: not known)."""
        if attention_mask is None or padding is False:
            return None
        if padding and attn_implementation in ("sdpa", "eager"):
            # sdpa's boolean format (True = attend; `eager_attention_forward` takes it too), made here because
            # transformers' helper would first read the mask back to look for padding (a host sync on a GPU).
            batch_size, seq_len = attention_mask.shape
            return attention_mask.bool()[:, None, None, :].expand(batch_size, 1, seq_len, seq_len)
        config = self.config
        if attn_implementation != config._attn_implementation:
            # transformers' mask helper reads the backend from a config: give it a private copy to read.
            config = copy.copy(config)
            config._attn_implementation = attn_implementation
        shape_and_dtype = torch.empty(*attention_mask.shape, 0, dtype=dtype, device=attention_mask.device)
        return create_bidirectional_mask(config=config, inputs_embeds=shape_and_dtype, attention_mask=attention_mask)


def _mlm_logits_and_loss(
    model: MiniBertPreTrainedModel,
    predictions: MiniBertLMPredictionHead,
    sequence_output: torch.Tensor,
    labels: torch.Tensor | None,
    sparse_prediction: bool | None = None,
    masked_positions: torch.Tensor | None = None,
    batch_plan: BatchPlan | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """MLM logits (B, T, V), loss, and None; when sparse, logits (M, V) at the M labelled positions, loss, and
    those positions (M,) as flat indices into the B * T positions.

    Sparse by default in training with `config.sparse_prediction`, dense in evaluation (as BERT); a caller that
    only scores the labelled positions (an evaluation loop) passes `sparse_prediction=True`. Scoring only those
    skips most of the largest matmul in pretraining (H x V per token), since usually 15% of tokens carry a label.

    `masked_positions` from `plan_batch` (padded to a fixed count with positions that score nothing) spare the
    device the search for the labels (a host sync): eagerly the plan's count cuts the padding off; a compiled
    graph keeps it, so that its shapes are the same for every batch of the shape.
    """
    if labels is None:
        if sparse_prediction:
            raise ValueError("sparse_prediction=True needs labels: they mark the positions to score")
        return predictions(sequence_output), None, None
    check_labels("labels", labels, model.config.vocab_size, "vocab_size", model.training)
    if sparse_prediction is None:
        sparse_prediction = model.training and model.config.sparse_prediction
    if not sparse_prediction:
        logits = predictions(sequence_output)
        return logits, model.loss_function(logits, labels, vocab_size=model.config.vocab_size, **kwargs), None
    if masked_positions is None:
        masked_positions = (labels.flatten() != IGNORE_INDEX).nonzero(as_tuple=True)[0]  # (M,): a host sync
    elif not torch.compiler.is_compiling() and batch_plan is not None and batch_plan.masked_count is not None:
        # Eager: the padding rows cut off. Compiled: all rows, and the count never read (a guard on it would
        # recompile the graph for every batch).
        masked_positions = masked_positions[: batch_plan.masked_count]
    labels = labels.flatten().index_select(0, masked_positions)
    # (M, V); index_select rather than boolean indexing: its backward is a cheap index_add
    logits = predictions(sequence_output.flatten(0, 1).index_select(0, masked_positions))
    loss = model.loss_function(logits, labels, vocab_size=model.config.vocab_size, **kwargs)
    return logits, loss, masked_positions


class MiniBertForPreTraining(MiniBertPreTrainedModel):
    """Masked language modelling + next sentence prediction; loss = MLM loss + NSP loss."""

    _tied_weights_keys = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.bert = MiniBertModel(config)
        self.cls = MiniBertPreTrainingHeads(config)
        self.loss_type = "ForMaskedLM"
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        sparse_prediction: bool | None = None,
        masked_positions: torch.Tensor | None = None,
        batch_plan: BatchPlan | None = None,
        **kwargs,
    ) -> MiniBertForPreTrainingOutput:
        """labels (B, T) with -100 where not masked; next_sentence_label (B,): 0 = B follows A, 1 = random B.
        sparse_prediction: score only the labelled positions (default: `config.sparse_prediction` in training,
        False in evaluation). masked_positions, batch_plan: what the collator worked out on the host
        (`plan_batch`), so that a training step reads nothing back from the device.

        prediction_logits (B, T, V), or (M, V) when sparse (rows at `masked_positions`); seq_relationship_logits
        (B, 2). loss = mlm_loss + next_sentence_loss when both labels are given (as BERT).
        """
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, batch_plan=batch_plan, **kwargs
        )
        mlm_logits, mlm_loss, masked_positions = _mlm_logits_and_loss(
            self,
            self.cls.predictions,
            outputs.last_hidden_state,
            labels,
            sparse_prediction,
            masked_positions,
            batch_plan,
            **kwargs,
        )
        nsp_logits = self.cls.seq_relationship(outputs.pooler_output)  # (B, 2)
        nsp_loss = None
        if next_sentence_label is not None:
            check_labels("next_sentence_label", next_sentence_label, 2, "num_classes", self.training)
            nsp_loss = CrossEntropyLoss()(nsp_logits.view(-1, 2), next_sentence_label.view(-1))
        loss = mlm_loss + nsp_loss if mlm_loss is not None and nsp_loss is not None else None
        return MiniBertForPreTrainingOutput(
            loss=loss,
            prediction_logits=mlm_logits,
            seq_relationship_logits=nsp_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            mlm_loss=mlm_loss,
            next_sentence_loss=nsp_loss,
            masked_positions=masked_positions,
        )


class MiniBertForMaskedLM(MiniBertPreTrainedModel):
    _tied_weights_keys = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}
    # A pretraining folder (MLM + NSP) is what this head is usually loaded from: its pooler and NSP head are
    # expected leftovers, not a problem to report (transformers 4's BertForMaskedLM ignored the pooler likewise).
    _keys_to_ignore_on_load_unexpected = [r"^bert\.pooler\.", r"^cls\.seq_relationship\."]

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.bert = MiniBertModel(config, add_pooling_layer=False)
        self.cls = MiniBertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sparse_prediction: bool | None = None,
        masked_positions: torch.Tensor | None = None,
        batch_plan: BatchPlan | None = None,
        **kwargs,
    ) -> MiniBertMaskedLMOutput:
        """labels (B, T) with -100 where not masked. sparse_prediction: score only the labelled positions
        (default: `config.sparse_prediction` in training, False in evaluation). masked_positions, batch_plan: see
        `MiniBertForPreTraining`. logits (B, T, V), or (M, V) when sparse (rows at `masked_positions`)."""
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, batch_plan=batch_plan, **kwargs
        )
        logits, loss, masked_positions = _mlm_logits_and_loss(
            self,
            self.cls.predictions,
            outputs.last_hidden_state,
            labels,
            sparse_prediction,
            masked_positions,
            batch_plan,
            **kwargs,
        )
        return MiniBertMaskedLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            masked_positions=masked_positions,
        )


class MiniBertForNextSentencePrediction(MiniBertPreTrainedModel):
    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.bert = MiniBertModel(config)
        self.cls = MiniBertOnlyNSPHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> NextSentencePredictorOutput:
        """labels (B,): 0 = sentence B follows A, 1 = random. logits (B, 2)."""
        outputs = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.cls(outputs.pooler_output)
        check_labels("labels", labels, 2, "num_classes", self.training)
        loss = CrossEntropyLoss()(logits.view(-1, 2), labels.view(-1)) if labels is not None else None
        return NextSentencePredictorOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class MiniBertForSequenceClassification(MiniBertPreTrainedModel):
    """Pooled [CLS] -> dropout -> linear. Regression, single- or multi-label through `config.problem_type`."""

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = MiniBertModel(config)
        self.dropout = MiniBertDropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        """labels (B,) class ids, (B,) or (B, num_labels) floats for regression / multi-label. logits (B, num_labels)."""
        outputs = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output))
        if self.num_labels > 1 and self.config.problem_type in (None, "single_label_classification"):
            check_labels("labels", labels, self.num_labels, "num_labels", self.training, floats_allowed=True)
        loss = self.loss_function(labels, logits, self.config, **kwargs) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class MiniBertForMultipleChoice(MiniBertPreTrainedModel):
    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.bert = MiniBertModel(config)
        self.dropout = MiniBertDropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> MultipleChoiceModelOutput:
        """Inputs (B, C, T) for C choices (inputs_embeds (B, C, T, H)); labels (B,) the right choice. logits (B, C)."""
        check_tensors(input_ids=input_ids, inputs_embeds=inputs_embeds)
        ref = input_ids if input_ids is not None else inputs_embeds
        if ref is None or ref.dim() < 3:
            raise ValueError("MiniBertForMultipleChoice expects inputs of shape (batch_size, num_choices, seq_len)")
        num_choices = ref.shape[1]

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.flatten(0, 1)  # (B, C, ...) -> (B * C, ...)

        outputs = self.bert(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            flat(inputs_embeds),
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)  # (B, C)
        check_labels("labels", labels, num_choices, "num_choices", self.training)
        loss = CrossEntropyLoss()(logits, labels) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class MiniBertForTokenClassification(MiniBertPreTrainedModel):
    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = MiniBertModel(config, add_pooling_layer=False)
        self.dropout = MiniBertDropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        """labels (B, T) with -100 where ignored. logits (B, T, num_labels)."""
        outputs = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        check_labels("labels", labels, self.num_labels, "num_labels", self.training)
        loss = self.loss_function(logits, labels, self.config, **kwargs) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class MiniBertForQuestionAnswering(MiniBertPreTrainedModel):
    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = MiniBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        """start/end_positions (B,); positions outside the sequence are clamped and ignored, as in BERT.
        start_logits, end_logits (B, T)."""
        # BERT's span loss is a softmax over every position, padding included: exact parity needs BERT's hidden
        # states at padding positions, which only the padded path computes.
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=False, **kwargs
        )
        logits = self.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Auto class -> head: the one list of heads. Written into every saved config so that any head loads with
# trust_remote_code; the package's Auto registration, `__all__` and convert-bert derive from it.
AUTO_MAP = {
    "AutoModel": "modeling_minibert.MiniBertModel",
    "AutoModelForPreTraining": "modeling_minibert.MiniBertForPreTraining",
    "AutoModelForMaskedLM": "modeling_minibert.MiniBertForMaskedLM",
    "AutoModelForNextSentencePrediction": "modeling_minibert.MiniBertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "modeling_minibert.MiniBertForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_minibert.MiniBertForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_minibert.MiniBertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_minibert.MiniBertForQuestionAnswering",
}

# Derived from AUTO_MAP, the one list of heads.
__all__ = [
    "AUTO_MAP",
    "BatchPlan",
    "MiniBertForPreTrainingOutput",
    "MiniBertLayer",
    "MiniBertMaskedLMOutput",
    "MiniBertPreTrainedModel",
    "masked_capacity",
    "own_class",
    "plan_batch",
    *(target.split(".")[-1] for target in AUTO_MAP.values()),
]
