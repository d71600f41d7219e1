"""What Mini-BERT checks before it computes: a saved folder's weights against its config, and each forward's inputs.

Self-contained on purpose (imports only torch, transformers and the configuration file): `modeling_minibert.py`
imports this file relatively, so transformers copies it next to every saved checkpoint and `trust_remote_code=True`
works without the package installed. Every check raises one line naming the value and the limit, before any
allocation or tensor work that would fail later with an opaque torch error.

    read_safetensors_header(path)      the one safetensors header reader (nothing loaded or allocated)
    check_model_folder(...)            what `from_pretrained` checks of a local folder
    check_weights_fit_config(...)      the config's sizes against the weights' shapes and dtypes
    check_inputs(...) / check_labels(...)   a forward's tensors; no host sync in training on an accelerator
    check_tokenizer_fits(...)          a tokenizer loaded beside a model: same vocabulary, one id per [MASK]
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from .configuration_minibert import MiniBertConfig, check_model_path

# --- saved folders ------------------------------------------------------------------------------------------------

# Bytes per element of every dtype a safetensors header may declare (the format's own list).
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}
# What a parameter may be stored as: transformers casts any of these to the model's dtype when loading. Integers
# (or bytes) in their place would be cast too, silently, giving a model of garbage (scores of 1.0 in fill-mask).
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
# safetensors' own limit on the header: a larger declared length is a corrupt file, not a header to read.
MAX_HEADER_BYTES = 100_000_000


def read_safetensors_header(path: str | os.PathLike) -> dict[str, dict]:
    """The tensors a safetensors file declares, `{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin,
    end]}}` (plus `"__metadata__"` when present), read from the header alone: nothing is loaded or allocated.

    Raises FileNotFoundError for a missing file and a one-line ValueError naming the file and "truncated or
    corrupted": `{path} has N bytes, its header says M (...)` for a file cut short (by a kill or a full disk), else
    `{path} is truncated or corrupted: ...` for a header that does not parse, declares an unknown dtype, or a size
    that disagrees with a shape.
    """
    path = Path(path)
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            header_size = int.from_bytes(f.read(8), "little") if size >= 8 else None
            if header_size is None or header_size > min(size - 8, MAX_HEADER_BYTES):
                raise ValueError(f"it has {size} bytes, too few for its header")
            header = json.loads(f.read(header_size))
        if not isinstance(header, dict):
            raise ValueError(f"its header is a JSON {type(header).__name__}, not an object")
        end = max((_entry_end(name, entry) for name, entry in header.items() if name != "__metadata__"), default=0)
    except (ValueError, UnicodeDecodeError) as err:  # json's errors are ValueErrors
        raise ValueError(f"{path} is truncated or corrupted: {err}") from None
    if size != 8 + header_size + end:
        expected = 8 + header_size + end
        raise ValueError(f"{path} has {size} bytes, its header says {expected} (truncated or corrupted)")
    return header


def _entry_end(name: str, entry) -> int:
    """Where tensor `name`'s data ends, after checking that its header entry is well formed."""
    try:
        dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        numel = math.prod(shape)
    except (TypeError, KeyError, ValueError):
        raise ValueError(f"the header entry of {name} is malformed: {entry!r}") from None
    if dtype not in SAFETENSORS_DTYPE_BYTES:
        raise ValueError(f"{name} has the unknown dtype {dtype!r}")
    whole = all(type(n) is int and n >= 0 for n in (*shape, begin, end))
    if not whole or end - begin != numel * SAFETENSORS_DTYPE_BYTES[dtype]:
        raise ValueError(f"{name}'s data_offsets {[begin, end]} do not hold {dtype} of shape {shape}")
    return end


def check_weights_fit_config(config: MiniBertConfig, weight_files: list[Path], folder: Path) -> None:
    """Compare the config's sizes with the weights' shapes, and the weights' dtypes with a float model's, read from
    the safetensors headers only (nothing is loaded or allocated); raise a one-line ValueError naming the first
    field or tensor that disagrees.

    Without this, `vocab_size: 1000000` allocates gigabytes before failing, a wrong `hidden_size` ends in a
    mismatch report, and I32 embeddings load silently as garbage. Fewer layers in the weights than in the config
    is refused too: transformers would fill the rest with random layers and only warn.
    """
    tensors = {}
    for path in weight_files:
        header = read_safetensors_header(path)
        header.pop("__metadata__", None)
        tensors.update({key.removeprefix("bert."): (entry, path) for key, entry in header.items()})
    for key, (entry, path) in tensors.items():
        # Parameters only: old BERT checkpoints also hold integer buffers (embeddings.position_ids), never loaded.
        if key.endswith(("weight", "bias")) and entry["dtype"] not in FLOAT_DTYPES:
            raise ValueError(
                f"{path} holds {key} as {entry['dtype']}; Mini-BERT's weights must be floating point "
                f"({', '.join(FLOAT_DTYPES)})"
            )
    expected = (  # (field, weight, the field's value read from that weight's shape)
        ("vocab_size", "embeddings.word_embeddings.weight", lambda shape: shape[0]),
        ("hidden_size", "embeddings.word_embeddings.weight", lambda shape: shape[-1]),
        ("max_position_embeddings", "embeddings.position_embeddings.weight", lambda shape: shape[0]),
        ("type_vocab_size", "embeddings.token_type_embeddings.weight", lambda shape: shape[0]),
        ("intermediate_size", "encoder.layer.0.intermediate.dense.weight", lambda shape: shape[0]),
    )
    for field, key, value_in in expected:
        if key in tensors:
            (entry, path), shape = tensors[key], tensors[key][0]["shape"]
            if value_in(shape) != getattr(config, field):
                raise ValueError(
                    f"{folder / 'config.json'} says {field}={getattr(config, field)} but the weights in {path.name} "
                    f"have {field}={value_in(shape)} ({key} has shape {list(shape)})"
                )
    layers = {int(key.split(".")[2]) for key in tensors if key.startswith("encoder.layer.")}
    if layers and len(layers) < config.num_hidden_layers:
        raise ValueError(
            f"{folder / 'config.json'} says num_hidden_layers={config.num_hidden_layers} but the weights hold "
            f"{len(layers)} layers"
        )


def check_model_folder(name_or_path: str | os.PathLike, load_options: dict) -> None:
    """What `MiniBert*.from_pretrained` checks before any allocation: the path exists (or could be a Hub repo id),
    and a local folder holds weights, not only pickles (unless `use_safetensors=False`), whose sizes and dtypes
    match the config's. `load_options` are `from_pretrained`'s keyword arguments."""
    check_model_path(name_or_path)
    folder = Path(name_or_path)
    if not folder.is_dir() or load_options.get("subfolder"):
        return
    weights = sorted(folder.glob("*.safetensors"))
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if load_options.get("use_safetensors", True) and not weights and pickles:
        raise ValueError(
            f"{folder} holds only pickle weights ({', '.join(pickles)}), which can run arbitrary code when "
            "loaded; pass use_safetensors=False if you trust them"
        )
    if not weights and not pickles:
        raise FileNotFoundError(f"{folder} holds no model weights (no model.safetensors)")
    if weights and not load_options.get("ignore_mismatched_sizes", False):
        config = load_options.get("config")
        if not isinstance(config, MiniBertConfig):
            config = MiniBertConfig.from_pretrained(folder)
        check_weights_fit_config(config, weights, folder)


def check_tokenizer_fits(tokenizer, config: MiniBertConfig, model_folder, tokenizer_folder=None) -> None:
    """A tokenizer loaded together with a model must speak its vocabulary: as many ids as the model's embeddings
    (more would index past them; fewer means another vocabulary, decoding predictions as the wrong words), and,
    when it has a mask token, no other token on the mask's id. Raise a one-line ValueError naming the folder(s)."""
    where = f"the tokenizer in {tokenizer_folder or model_folder}"
    model = f"the model in {model_folder} has" if tokenizer_folder is not None else "the model's"
    if len(tokenizer) != config.vocab_size:
        raise ValueError(
            f"{where} has {len(tokenizer)} tokens but {model} vocab_size={config.vocab_size}: they were not "
            "trained together"
        )
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is not None:
        vocab = tokenizer.get_vocab()
        sharing = sorted(token for token, i in vocab.items() if i == mask_id and token != tokenizer.mask_token)
        if sharing:
            raise ValueError(
                f"{where} maps {', '.join(map(repr, sharing))} onto the id of {tokenizer.mask_token} ({mask_id}); "
                "each id must be one token"
            )


# --- forward inputs -----------------------------------------------------------------------------------------------

# (argument, config field bounding its values)
ID_LIMITS = (
    ("input_ids", "vocab_size"),
    ("token_type_ids", "type_vocab_size"),
    ("position_ids", "max_position_embeddings"),
)
# The index dtypes nn.Embedding takes; uint8 or int16 ids fail deep inside torch, naming neither argument nor fix.
ID_DTYPES = (torch.long, torch.int32)
IGNORE_INDEX = -100  # labels at this value are skipped by every loss, as in transformers


def check_tensors(**named) -> None:
    """TypeError for an argument that is given but not a tensor (a list of ids, say), naming it."""
    for name, value in named.items():
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (e.g. torch.tensor(...)), got {type(value).__name__}")


def check_inputs(
    config: MiniBertConfig,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    training: bool = False,
) -> None:
    """Reject bad input before any tensor work, naming the value and the limit.

    Out-of-range ids would otherwise surface as an opaque index error deep in an embedding (or a device assert
    on GPU); mismatched shapes would broadcast silently. Values are read on the host only where that costs no
    sync (see `read_on_host`); in training on an accelerator they are checked on the device, asynchronously.
    """
    named = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        inputs_embeds=inputs_embeds,
    )
    check_tensors(**named)
    _check_shapes(config, **named)
    for name in ("input_ids", "token_type_ids", "position_ids"):
        tensor = named[name]
        if tensor is not None and tensor.dtype not in ID_DTYPES:
            raise ValueError(f"{name} must hold integer ids of dtype torch.long (or torch.int32), got {tensor.dtype}")
    if inputs_embeds is not None and not inputs_embeds.is_floating_point():
        raise ValueError(f"inputs_embeds must be floating point, got {inputs_embeds.dtype}")
    for name, field in ID_LIMITS:
        check_range(name, named[name], getattr(config, field), field, training)
    _check_mask_values(attention_mask, training)


def _check_shapes(
    config: MiniBertConfig, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds
) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids or inputs_embeds")
    shape = tuple(input_ids.shape) if input_ids is not None else tuple(inputs_embeds.shape[:-1])
    if len(shape) != 2:
        raise ValueError(f"input_ids must have shape (batch_size, sequence_length), got {shape}")
    if 0 in shape:
        what = "the batch is empty" if shape[0] == 0 else "the sequences are empty"
        raise ValueError(f"input_ids has shape {shape}: {what}; pass at least one token")
    if inputs_embeds is not None and inputs_embeds.shape[-1] != config.hidden_size:
        raise ValueError(
            f"inputs_embeds has shape {tuple(inputs_embeds.shape)}: its last dimension must be "
            f"hidden_size={config.hidden_size}"
        )
    if shape[1] > config.max_position_embeddings:
        raise ValueError(
            f"sequence length {shape[1]} exceeds max_position_embeddings={config.max_position_embeddings}"
        )
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but input_ids has shape {shape}")
    if position_ids is not None and tuple(position_ids.shape[-1:]) != shape[-1:]:
        raise ValueError(f"position_ids has shape {tuple(position_ids.shape)} but input_ids has shape {shape}")


def read_on_host(tensor: torch.Tensor, training: bool) -> bool:
    """Whether a check may read `tensor`'s values on the host now: always on the CPU (nothing to wait for), and
    outside training on an accelerator. In training there, a read would stall the device once per step for the
    sake of a mistake that is rare; the check is queued on the device instead (`torch._assert_async`), which
    stops the run at the bad batch as BERT's own device assert would, with the limit named."""
    return tensor.device.type == "cpu" or not training


def check_range(
    name: str,
    tensor: torch.Tensor | None,
    limit: int,
    limit_name: str,
    training: bool,
    ignore_index: int | None = None,
) -> None:
    """Every value of `tensor` in [0, limit) (`ignore_index` aside): else a ValueError naming the first value out."""
    if tensor is None or tensor.numel() == 0 or torch.compiler.is_compiling():
        return  # (compiled: value checks need host syncs that would break the graph)
    values = tensor if ignore_index is None else torch.where(tensor == ignore_index, 0, tensor)
    skipped = f" ({ignore_index} marks ignored positions)" if ignore_index is not None else ""
    if not read_on_host(tensor, training):
        in_range = (values.min() >= 0) & (values.max() < limit)
        torch._assert_async(in_range, f"{name} holds a value outside [0, {limit_name}={limit}){skipped}")
        return
    low, high = torch.stack([values.min(), values.max()]).tolist()
    if low < 0 or high >= limit:
        raise ValueError(f"{name} contains {low if low < 0 else high}, outside [0, {limit_name}={limit}){skipped}")


def _check_mask_values(attention_mask: torch.Tensor | None, training: bool) -> None:
    """Any dtype is accepted (bool, int, float 1.0/0.0), as by BERT. Other values are refused rather than taken as
    BERT takes them: transformers' mask helper casts to bool, so "nonzero = attend", which silently inverts an
    additive mask (0 = attend, -10000 = padding) and gives 0.5 or 2 no meaning."""
    if attention_mask is None or attention_mask.dtype == torch.bool or torch.compiler.is_compiling():
        return
    binary = (attention_mask == 0) | (attention_mask == 1)
    message = "it must hold only 1 (attend) and 0 (padding)"
    if not read_on_host(attention_mask, training):
        torch._assert_async(binary.all(), f"attention_mask holds a value other than 0 and 1; {message}")
        return
    odd = attention_mask[~binary]
    if odd.numel():
        raise ValueError(f"attention_mask contains {odd[0].item()}; {message}")


def check_labels(
    name: str,
    labels: torch.Tensor | None,
    num_classes: int,
    limit_name: str,
    training: bool,
    floats_allowed: bool = False,
) -> None:
    """Class ids in [0, num_classes), or -100 where ignored: else one line naming the value and the number of
    classes, where torch would say "Target 5 is out of bounds" (or assert on the device). `floats_allowed`: float
    labels are another task's targets (sequence classification reads them as multi-label), not checked here."""
    check_tensors(**{name: labels})
    if labels is None or (floats_allowed and labels.is_floating_point()):
        return
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must hold class ids of dtype torch.long, got {labels.dtype}")
    check_range(name, labels, num_classes, limit_name, training, ignore_index=IGNORE_INDEX)


__all__ = [
    "check_inputs",
    "check_labels",
    "check_model_folder",
    "check_tokenizer_fits",
    "check_weights_fit_config",
    "read_safetensors_header",
]
