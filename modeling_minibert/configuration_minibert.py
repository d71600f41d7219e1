"""Mini-BERT configuration.

Self-contained on purpose (imports only transformers and huggingface_hub): this file is copied next to every saved
checkpoint so that `trust_remote_code=True` works without the package installed. It holds the config and its own
validation (fields, and reading a folder's config.json); what meets the config (a folder's weights, a forward's
inputs) is checked in `checks_minibert.py`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from huggingface_hub.dataclasses import strict
from huggingface_hub.utils import HFValidationError, validate_repo_id
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

# Fields with the same meaning in transformers' BertConfig and MiniBertConfig: a BERT config translates through
# them (loading a BERT folder, `minibert convert-bert` both ways), and BERT's weights fit unchanged.
BERT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
    "classifier_dropout",
    "tie_word_embeddings",
    "id2label",
    "label2id",
    "problem_type",
)
# BertConfig fields whose other values describe a model Mini-BERT (an encoder) is not.
BERT_ONLY_VALUES = (("is_decoder", False), ("add_cross_attention", False))


def minibert_dict_from_bert(bert_config: dict, source: str) -> dict:
    """A MiniBertConfig dict with the architecture of a BertConfig dict (its `to_dict()` or config.json), so that
    its weights load unchanged; a BERT that Mini-BERT cannot hold (a decoder) is a one-line ValueError."""
    for field, value in BERT_ONLY_VALUES:
        if bert_config.get(field, value) != value:
            raise ValueError(
                f"{source}: {field}={bert_config[field]!r} describes a BERT decoder; Mini-BERT is an encoder only "
                f"(it needs {field}={value!r})"
            )
    architectures = [name.replace("Bert", "MiniBert", 1) for name in bert_config.get("architectures") or []]
    fields = {name: bert_config[name] for name in BERT_FIELDS if name in bert_config}
    return {**fields, "architectures": architectures or None, "model_type": MiniBertConfig.model_type}


# (fields, accepted types, how the error names them)
FIELD_TYPES = (
    (
        (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ),
        (int,),
        "an integer",
    ),
    (("pad_token_id",), (int, type(None)), "an integer or null"),
    (
        ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps"),
        (int, float),
        "a number",
    ),
    (("classifier_dropout",), (int, float, type(None)), "a number or null"),
    (("hidden_act", "layer_norm_position"), (str,), "a string"),
    (
        ("tie_word_embeddings", "final_layer_norm", "mlm_head_transform", "unpad_inputs", "sparse_prediction"),
        (bool,),
        "true or false",
    ),
)
SIZE_FIELDS = FIELD_TYPES[0][0]  # positive integers
FLOAT_FIELDS = tuple(name for names, types, _ in FIELD_TYPES if float in types for name in names)  # finite numbers
# The largest vocabulary a config may declare: four times the largest encoder vocabularies in use (XLM-R 250,002,
# mT5 250,112, Gemma 256,000) and 34 times BERT's 30,522; its embeddings are already 3 GB at BERT-base's width.
# A larger value is a typo (an extra zero) that would allocate gigabytes, or abort, before any other check.
MAX_VOCAB_SIZE = 2**20


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
        self._check_sizes()
        if self.hidden_act not in ACT2FN:
            raise ValueError(
                f"MiniBertConfig.hidden_act {self.hidden_act!r} is not a known activation; "
                f"choose one of {sorted(ACT2FN)}"
            )
        self._check_numbers()
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"MiniBertConfig.pad_token_id ({self.pad_token_id}) must be in [0, vocab_size={self.vocab_size})"
            )
        if self.num_labels < 1:  # transformers turns num_labels=0 (or -1) into an empty id2label
            raise ValueError(f"MiniBertConfig.num_labels must be at least 1, got {self.num_labels}")

    def _check_sizes(self) -> None:
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"MiniBertConfig.{name} must be a positive integer, got {value}")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise ValueError(
                f"MiniBertConfig.vocab_size={self.vocab_size} is above the limit of {MAX_VOCAB_SIZE} (2**20) ids"
            )
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"MiniBertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )

    def _check_numbers(self) -> None:
        # NaN passes every comparison's negation (`nan <= 0` is False), so finiteness is checked first, for all.
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"MiniBertConfig.{name} must be a finite number, got {value}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"MiniBertConfig.{name} must be in [0, 1), got {value}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"MiniBertConfig.layer_norm_eps must be positive, got {self.layer_norm_eps}")
        if self.initializer_range < 0:  # the standard deviation of the initial weights
            raise ValueError(f"MiniBertConfig.initializer_range must be at least 0, got {self.initializer_range}")

    def _check_types(self) -> None:
        for names, types, expected in FIELD_TYPES:
            for name in names:
                value = getattr(self, name)
                # bool is an int in Python, but `true` layers is a mistake worth naming
                if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                    raise ValueError(f"MiniBertConfig.{name} must be {expected}, got {value!r}")

    @classmethod
    def from_bert(cls, bert_config: PretrainedConfig) -> MiniBertConfig:
        """The Mini-BERT config of a transformers `BertConfig` (same architecture, so the BERT's weights fit):
        `MiniBertModel.from_pretrained(None, config=MiniBertConfig.from_bert(bert.config), state_dict=bert.state_dict())`
        makes a BertModel already in memory the unpadded Mini-BERT."""
        return cls.from_dict(minibert_dict_from_bert(bert_config.to_dict(), type(bert_config).__name__))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs) -> MiniBertConfig:
        """`PretrainedConfig.from_pretrained`, reading a BERT config.json (`model_type: bert`) as the Mini-BERT
        config of the same architecture (so `MiniBert*.from_pretrained(bert_folder)` loads a BERT checkpoint into
        the unpadded Mini-BERT); a config.json of any other model type is an error, not a warning. A missing
        folder or a config.json that is not JSON is a one-line error naming it."""
        check_model_path(pretrained_model_name_or_path)
        if (Path(pretrained_model_name_or_path) / "config.json").is_file():
            read_config_json(pretrained_model_name_or_path)
        config_dict, unused_kwargs = cls.get_config_dict(pretrained_model_name_or_path, **dict(kwargs))
        model_type = config_dict.get("model_type")
        if model_type == "bert":
            source = f"config.json in {pretrained_model_name_or_path}"
            return cls.from_dict(minibert_dict_from_bert(config_dict, source), **unused_kwargs)
        if model_type is not None and model_type != cls.model_type:
            raise ValueError(
                f"config.json in {pretrained_model_name_or_path} has model_type {model_type!r}, expected "
                f"{cls.model_type!r} or 'bert'"
            )
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


__all__ = ["BERT_FIELDS", "MiniBertConfig", "check_model_path", "minibert_dict_from_bert", "read_config_json"]
