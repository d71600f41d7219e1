"""Mini-BERT configuration.

Self-contained on purpose (imports only torch, transformers, huggingface_hub and safetensors): this file is copied
next to every saved checkpoint so that `trust_remote_code=True` works without the package installed. Beside the
config live the checks of what meets it: a model folder (`check_model_path`, `check_model_folder`,
`check_weights_fit_config`) and a forward's inputs (`check_inputs`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from huggingface_hub.dataclasses import strict
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors import safe_open
from transformers import PretrainedConfig
from transformers.activations import ACT2FN


def check_model_path(name_or_path: str | os.PathLike) -> None:
    """Raise FileNotFoundError for a model folder that does not exist, unless the name could be a Hub repo id
    ("user/model"), which `from_pretrained` then looks up on the Hub.

    transformers reports a missing folder such as `./runs/model` as a malformed repo id, which hides the cause.
    """
    path = Path(name_or_path)
    if path.exists():
        return
    try:
        validate_repo_id(str(name_or_path))
    except HFValidationError:
        raise FileNotFoundError(f"model folder {name_or_path} does not exist") from None


def check_weights_fit_config(config: "MiniBertConfig", weight_files: list[Path], folder: Path) -> None:
    """Compare the config's sizes with the weights' shapes, read from the safetensors headers only (nothing is
    loaded or allocated), and raise a one-line ValueError naming the first field that disagrees.

    Without this, `vocab_size: 10000000` allocates gigabytes before failing, and a wrong `hidden_size` ends in a
    mismatch report. Fewer layers in the weights than in the config is refused too: transformers would fill the
    rest with random layers and only warn.
    """
    shapes = {}
    for path in weight_files:
        try:
            with safe_open(path, framework="pt") as f:
                shapes.update({key.removeprefix("bert."): (tuple(f.get_slice(key).get_shape()), path) for key in f.keys()})
        except Exception as err:  # safetensors raises its own error types for unreadable headers
            raise ValueError(f"{path} is truncated or corrupted: {err}") from err
    expected = (  # (field, weight, the field's value read from that weight's shape)
        ("vocab_size", "embeddings.word_embeddings.weight", lambda shape: shape[0]),
        ("hidden_size", "embeddings.word_embeddings.weight", lambda shape: shape[-1]),
        ("max_position_embeddings", "embeddings.position_embeddings.weight", lambda shape: shape[0]),
        ("type_vocab_size", "embeddings.token_type_embeddings.weight", lambda shape: shape[0]),
        ("intermediate_size", "encoder.layer.0.intermediate.dense.weight", lambda shape: shape[0]),
    )
    for field, key, value_in in expected:
        if key in shapes:
            shape, path = shapes[key]
            if value_in(shape) != getattr(config, field):
                raise ValueError(
                    f"{folder / 'config.json'} says {field}={getattr(config, field)} but the weights in {path.name} "
                    f"have {field}={value_in(shape)} ({key} has shape {list(shape)})"
                )
    layers = {int(key.split(".")[2]) for key in shapes if key.startswith("encoder.layer.")}
    if layers and len(layers) < config.num_hidden_layers:
        raise ValueError(
            f"{folder / 'config.json'} says num_hidden_layers={config.num_hidden_layers} but the weights hold "
            f"{len(layers)} layers"
        )


def read_config_json(folder: str | os.PathLike) -> dict:
    """The parsed config.json of a local model folder, or a one-line ValueError naming the file."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


LAYER_NORM_POSITIONS = ("post", "pre")

# (fields, accepted types, how the error names them)
FIELD_TYPES = (
    (
        ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "type_vocab_size"),
        (int,),
        "an integer",
    ),
    (("pad_token_id",), (int, type(None)), "an integer or null"),
    (("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps"), (int, float), "a number"),
    (("classifier_dropout",), (int, float, type(None)), "a number or null"),
    (("hidden_act", "layer_norm_position"), (str,), "a string"),
    (("tie_word_embeddings", "final_layer_norm", "mlm_head_transform", "unpad_inputs", "sparse_prediction"), (bool,), "true or false"),
)


@strict
class MiniBertConfig(PretrainedConfig):
    r"""
    Configuration of a Mini-BERT encoder. The defaults are the Mini-BERT sizes; every BERT size is expressible
    (`MiniBertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, max_position_embeddings=512)` is bert-base).

    With the defaults the architecture is exactly BERT's (post-LN, GELU FFN, MLM decoder tied to the word
    embeddings). The variant drawn in the Mini-BERT guide is `hidden_act="relu", final_layer_norm=True,
    mlm_head_transform=False, tie_word_embeddings=False`.

    Mini-BERT-only fields:
        layer_norm_position: "post" (BERT: LayerNorm after each residual sum) or "pre" (LayerNorm on the input of
            each attention and FFN branch, inside the residual branch, plus a final LayerNorm; often trains stably
            at higher learning rates). The parameters are the same: pre-LN uses BERT's LayerNorms in other places.
            Pre-LN sets `final_layer_norm=True`, which it needs. Only "post" converts to transformers' BERT.
        final_layer_norm: add a LayerNorm after the last encoder block (always there with pre-LN).
        mlm_head_transform: keep BERT's dense + activation + LayerNorm before the MLM decoder; when False the
            decoder is a single projection of the hidden states.
        unpad_inputs: when the attention mask has padding, run the dense work on the non-pad tokens only and
            attention per bucket of sequences of similar length (same outputs, less work on mixed-length batches).
        sparse_prediction: in training with MLM labels, compute logits and loss only where the label is not -100
            (the returned `logits` then hold those rows only, shape (num_masked, vocab_size)).
    """

    model_type = "minibert"

    vocab_size: int = 8192
    hidden_size: int = 192
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    intermediate_size: int = 768
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    classifier_dropout: float | int | None = None
    tie_word_embeddings: bool = True
    layer_norm_position: str = "post"
    final_layer_norm: bool = False
    mlm_head_transform: bool = True
    unpad_inputs: bool = True
    sparse_prediction: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # Checked here rather than in `validate_*` methods: those are wrapped by `@strict` into an error that is
        # not a ValueError, and users catch ValueError for bad configs. Types first: a config.json with
        # "hidden_size": "abc" or 2.5 layers would otherwise fail far from the field (or build a wrong model).
        self._check_types()
        if self.layer_norm_position not in LAYER_NORM_POSITIONS:
            raise ValueError(
                f"MiniBertConfig.layer_norm_position must be one of {', '.join(map(repr, LAYER_NORM_POSITIONS))}, "
                f"got {self.layer_norm_position!r}"
            )
        if self.layer_norm_position == "pre":
            self.final_layer_norm = True  # pre-LN's residual stream is normalised only there
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"MiniBertConfig.{name} must be a positive integer, got {value}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"MiniBertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACT2FN:
            raise ValueError(
                f"MiniBertConfig.hidden_act {self.hidden_act!r} is not a known activation; "
                f"choose one of {sorted(ACT2FN)}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"MiniBertConfig.{name} must be in [0, 1), got {value}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"MiniBertConfig.layer_norm_eps must be positive, got {self.layer_norm_eps}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"MiniBertConfig.pad_token_id ({self.pad_token_id}) must be in [0, vocab_size={self.vocab_size})"
            )

    def _check_types(self) -> None:
        for names, types, expected in FIELD_TYPES:
            for name in names:
                value = getattr(self, name)
                # bool is an int in Python, but `true` layers is a mistake worth naming
                if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                    raise ValueError(f"MiniBertConfig.{name} must be {expected}, got {value!r}")

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs) -> MiniBertConfig:
        """`PretrainedConfig.from_pretrained`, but a config.json of another model type is an error, not a warning:
        BERT folders go through `minibert convert-bert` instead. A missing folder or a config.json that is not
        JSON is a one-line error naming it."""
        check_model_path(pretrained_model_name_or_path)
        if (Path(pretrained_model_name_or_path) / "config.json").is_file():
            read_config_json(pretrained_model_name_or_path)
        config_dict, _ = cls.get_config_dict(pretrained_model_name_or_path, **dict(kwargs))
        model_type = config_dict.get("model_type")
        if model_type is not None and model_type != cls.model_type:
            raise ValueError(
                f"config.json in {pretrained_model_name_or_path} has model_type {model_type!r}, expected "
                f"{cls.model_type!r} (convert BERT checkpoints with `minibert convert-bert`)"
            )
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def check_inputs(
    config: "MiniBertConfig",
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
) -> None:
    """Reject bad input before any tensor work, naming the value and the limit.

    Out-of-range ids would otherwise surface as an opaque index error deep in an embedding (or a device assert
    on GPU); mismatched shapes would broadcast silently.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids or inputs_embeds")
    shape = tuple(input_ids.shape) if input_ids is not None else tuple(inputs_embeds.shape[:-1])
    if len(shape) != 2:
        raise ValueError(f"input_ids must have shape (batch_size, sequence_length), got {shape}")
    if shape[1] > config.max_position_embeddings:
        raise ValueError(
            f"sequence length {shape[1]} exceeds max_position_embeddings={config.max_position_embeddings}"
        )
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but input_ids has shape {shape}")
    if position_ids is not None and tuple(position_ids.shape[-1:]) != shape[-1:]:
        raise ValueError(f"position_ids has shape {tuple(position_ids.shape)} but input_ids has shape {shape}")
    for name, tensor in (("input_ids", input_ids), ("token_type_ids", token_type_ids), ("position_ids", position_ids)):
        # An embedding lookup with float ids fails deep inside torch, naming neither the argument nor the fix.
        if tensor is not None and (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool):
            raise ValueError(f"{name} must hold integer ids (torch.long), got dtype {tensor.dtype}")
    if torch.compiler.is_compiling():
        return  # value checks need host syncs that would break the compiled graph
    limits = (
        ("input_ids", input_ids, config.vocab_size, "vocab_size"),
        ("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size"),
        ("position_ids", position_ids, config.max_position_embeddings, "max_position_embeddings"),
    )
    for name, tensor, limit, limit_name in limits:
        if tensor is None or tensor.numel() == 0:
            continue
        low, high = int(tensor.min()), int(tensor.max())
        if low < 0 or high >= limit:
            bad = low if low < 0 else high
            raise ValueError(f"{name} contains {bad}, outside [0, {limit_name}={limit})")
    # Any dtype is accepted (bool, int, float 1.0/0.0), as by BERT. Other values are refused rather than taken
    # as BERT takes them: transformers' mask helper casts to bool, so "nonzero = attend", which silently inverts
    # an additive mask (0 = attend, -10000 = padding) and gives 0.5 or 2 no meaning.
    if attention_mask is not None and attention_mask.dtype != torch.bool and attention_mask.numel():
        odd = attention_mask[(attention_mask != 0) & (attention_mask != 1)]
        if odd.numel():
            raise ValueError(
                f"attention_mask contains {odd[0].item()}; it must hold only 1 (attend) and 0 (padding)"
            )


def check_model_folder(folder: Path, config, use_safetensors: bool, ignore_mismatched_sizes: bool) -> None:
    """What `MiniBert*.from_pretrained` checks of a local folder before any allocation: weights present, not only
    pickles (unless `use_safetensors=False`), and the config's sizes matching the weights' shapes."""
    weights = sorted(folder.glob("*.safetensors"))
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if use_safetensors and not weights and pickles:
        raise ValueError(
            f"{folder} holds only pickle weights ({', '.join(pickles)}), which can run arbitrary code when "
            "loaded; pass use_safetensors=False if you trust them"
        )
    if not weights and not pickles:
        raise FileNotFoundError(f"{folder} holds no model weights (no model.safetensors)")
    if weights and not ignore_mismatched_sizes:
        if not isinstance(config, MiniBertConfig):
            config = MiniBertConfig.from_pretrained(folder)
        check_weights_fit_config(config, weights, folder)


__all__ = ["MiniBertConfig", "check_inputs", "check_model_folder", "check_model_path", "check_weights_fit_config"]
