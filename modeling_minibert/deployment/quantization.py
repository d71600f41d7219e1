"""Int8 inference on CPU in PyTorch: dynamic int8 linear layers in the encoder, saved and reloaded as safetensors.

What decides accuracy, chosen on purpose (benchmarks/bench_deploy.py measures the result on Rotten Tomatoes):
- Only the encoder's linear layers run in int8 (Q/K/V as one fused layer, the attention output, the FFN): they
  hold nearly all the multiply-adds. Embeddings (a lookup, no arithmetic to save), every LayerNorm, the pooler and
  the task head stay fp32: they are cheap, and the head turns small errors straight into flipped predictions.
- Weights are quantized per output channel (symmetric int8): one scale for a whole matrix lets a single large
  row crush the resolution of all the others. Activations are quantized per call, from their own range (dynamic),
  so nothing needs calibration data.
The unpadded path (`Packing`) is kept: the int8 layers run on the real tokens only.
- The kernels: int8 weights are packed for one of torch's quantized engines, and the packing decides which
  kernels run. On CPUs with AMX int8 tiles, oneDNN's kernels use them: there Mini-BERT ran 1.35x faster on one
  thread (1.08x on two) than with torch's default engine (x86, which picks fbgemm: VNNI at best). Elsewhere it
  depends, so `packing_engine` measures the two once per machine and keeps the faster.

torch.ao's `quantize_dynamic` is used as is; what this module adds by hand is the Q/K/V fusion (Mini-BERT's
attention concatenates the three fp32 weights per call, which quantized layers cannot do) and the file format,
because torch saves quantized layers only as pickles and this package writes safetensors only.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from modeling_minibert import AUTO_CLASSES
from modeling_minibert.checks_minibert import check_model_folder, check_weights_fit_config, read_safetensors_header
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertPreTrainedModel, MiniBertSelfAttention
from modeling_minibert.utils.files import check_output_dir, staged_folder
from modeling_minibert.utils.measured import fastest
from modeling_minibert.utils.outputs import QUANTIZED_INFO_FILE, QUANTIZED_WEIGHTS_FILE

SCHEME = "int8-dynamic-per-channel"
# Files of the source folder copied beside the int8 weights, so the folder is usable on its own.
COPIED_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class Int8SelfAttention(MiniBertSelfAttention):
    """`MiniBertSelfAttention` with Q, K and V as one linear layer (quantizable), attention itself unchanged."""

    def __init__(self, attention: MiniBertSelfAttention):
        nn.Module.__init__(self)
        self.num_heads, self.head_dim = attention.num_heads, attention.head_dim
        self.scaling, self.dropout_prob = attention.scaling, attention.dropout_prob
        q, k, v = attention.query, attention.key, attention.value
        self.qkv = nn.Linear(q.in_features, 3 * q.out_features)
        with torch.no_grad():
            self.qkv.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
            self.qkv.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))

    def qkv_projection(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.qkv(hidden_states)  # (..., 3H), through the one int8 layer


# `packing_engine`'s workload: an encoder's feed-forward in int8 at a width between Mini-BERT's and BERT-base's, on
# a single request's 16 tokens and on a batch's 1,024: the engines' kernels differ most with the rows.
PROBE_WIDTH, PROBE_ROWS = 384, (16, 1024)


def packing_engine() -> str:
    """The quantized engine to pack int8 weights for on this CPU: torch's current one (by default "x86", which
    picks fbgemm's kernels) or oneDNN's, whichever runs int8 layers faster here. Measured once per machine and
    remembered (`utils.measured.fastest`): the CPU's flags do not tell (oneDNN won by 1.35x where the CPU has AMX
    int8 tiles; on a Zen 4 EPYC with VNNI and no AMX the two were within 25%, each ahead at one of the sizes)."""
    default = torch.backends.quantized.engine
    if default == "onednn" or "onednn" not in torch.backends.quantized.supported_engines:
        return default
    packed = {}  # engine -> (its int8 layers, inputs), built only when measured (not when the answer is known)

    def run(engine: str) -> None:
        if engine not in packed:
            torch.manual_seed(0)
            block = nn.Sequential(nn.Linear(PROBE_WIDTH, 4 * PROBE_WIDTH), nn.Linear(4 * PROBE_WIDTH, PROBE_WIDTH))
            with quantized_engine(engine):
                layers = torch.ao.quantization.quantize_dynamic(block.eval(), {nn.Linear}, torch.qint8)
            packed[engine] = layers, [torch.randn(rows, PROBE_WIDTH) for rows in PROBE_ROWS]
        layers, inputs = packed[engine]
        with torch.inference_mode():
            for x in inputs:
                layers(x)

    return fastest("int8 engine", {engine: functools.partial(run, engine) for engine in (default, "onednn")})


@contextmanager
def quantized_engine(engine: str | None) -> Iterator[str]:
    """Pack int8 weights for `engine` (None: `packing_engine()`) inside the block. The packed weights keep their
    engine's kernels afterwards; torch's process-wide setting is restored on the way out."""
    engine = engine or packing_engine()
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if engine not in supported:
        raise ValueError(f"engine={engine!r} is not one of torch's quantized engines here: {', '.join(supported)}")
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield engine
    finally:
        torch.backends.quantized.engine = previous


def quantize_dynamic_int8(
    model: MiniBertPreTrainedModel, per_channel: bool = True, engine: str | None = None
) -> MiniBertPreTrainedModel:
    """Turn `model`'s encoder linear layers into dynamic int8 ones, in place (an eval-mode model for inference: the
    int8 layers have no gradients); returns the model. `per_channel=False` (one scale per matrix) is there to
    measure what per-channel weights buy; `quantize` and `load_quantized` use per-channel. `engine`: the quantized
    engine whose kernels run the layers (None: `packing_engine()`, the fastest measured on this CPU)."""
    with quantized_engine(engine):
        model.eval()
        encoder = model.base_model.encoder
        for layer in encoder.layer:
            layer.attention.self = Int8SelfAttention(layer.attention.self)
        quantization = torch.ao.quantization
        qconfig = quantization.per_channel_dynamic_qconfig if per_channel else quantization.default_dynamic_qconfig
        quantization.quantize_dynamic(encoder, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)
    return model


def int8_state_dict(model: MiniBertPreTrainedModel) -> dict[str, torch.Tensor]:
    """Plain tensors for safetensors: each int8 layer as `NAME.weight_int8` (out, in), `NAME.weight_scale` (out,),
    `NAME.weight_zero_point` (out,) and `NAME.bias`; every fp32 tensor under its usual name."""
    state: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, DynamicInt8Linear):
            weight, bias = module._weight_bias()
            state[f"{name}.weight_int8"] = weight.int_repr().contiguous()
            state[f"{name}.weight_scale"] = weight.q_per_channel_scales().float().contiguous()
            state[f"{name}.weight_zero_point"] = weight.q_per_channel_zero_points().to(torch.int32).contiguous()
            state[f"{name}.bias"] = bias.detach().contiguous()
    # Parameters and buffers, not state_dict(): tied weights (the MLM decoder and the word embeddings) come once,
    # and the int8 layers' unused output scale and zero point are left out.
    for key, tensor in (*model.named_parameters(), *model.named_buffers()):
        state[key] = tensor.detach().contiguous()
    return state


def load_int8_state_dict(model: MiniBertPreTrainedModel, state: dict[str, torch.Tensor], source: Path) -> None:
    """Fill a model already shaped by `quantize_dynamic_int8` from `int8_state_dict`'s tensors. The int8 weights
    are packed for torch's current quantized engine (`load_quantized` sets it with `quantized_engine`)."""
    for name, module in model.named_modules():
        if isinstance(module, DynamicInt8Linear):
            try:
                values = state.pop(f"{name}.weight_int8")
                scale, zero_point = state.pop(f"{name}.weight_scale"), state.pop(f"{name}.weight_zero_point")
                bias = state.pop(f"{name}.bias")
            except KeyError as err:
                raise ValueError(f"{source}: int8 layer {name} is missing {err.args[0]}") from None
            weight = torch._make_per_channel_quantized_tensor(values, scale.double(), zero_point.long(), 0)
            module.set_weight_bias(weight, bias)
    # Assigned tensor by tensor: the int8 layers' own load_state_dict wants torch's pickled packed format.
    targets = dict(model.named_parameters()) | dict(model.named_buffers())
    unexpected = sorted(set(state) - set(targets))
    missing = sorted(set(targets) - set(state))
    if missing or unexpected:
        raise ValueError(
            f"{source}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    with torch.no_grad():
        for key, tensor in state.items():
            targets[key].copy_(tensor)
    model.tie_weights()


def quantize(
    model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, overwrite_output_dir: bool = False
) -> Path:
    """Write an int8 copy of the saved model in `model_name_or_path` (its own head) to the folder `output_dir`:
    config.json, `model.int8.safetensors`, `quantization.json` and the tokenizer files. `load_quantized` reads it.

    Refuses, before any work, a source that does not exist or has no weights and an output folder that is not
    empty (unless `overwrite_output_dir`). Returns `output_dir`.
    """
    check_model_folder(model_name_or_path, {})
    source = Path(model_name_or_path)
    output = check_output_dir(output_dir, overwrite_output_dir, inputs={"model_name_or_path": source}, job="quantize")
    model = quantize_dynamic_int8(_model_class(MiniBertConfig.from_pretrained(source)).from_pretrained(source))
    with staged_folder(output) as staging:
        model.config.save_pretrained(staging)
        save_file(
            int8_state_dict(model), staging / QUANTIZED_WEIGHTS_FILE, metadata={"format": "pt", "scheme": SCHEME}
        )
        (staging / QUANTIZED_INFO_FILE).write_text(
            json.dumps({"scheme": SCHEME, "source": str(source)}, indent=2) + "\n"
        )
        for name in COPIED_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
    return output


def load_quantized(folder: str | os.PathLike, engine: str | None = None) -> MiniBertPreTrainedModel:
    """The int8 model `quantize` wrote to `folder`, in eval mode, ready to run; its layers packed for `engine`
    (None: `packing_engine()`: the file is the same for every engine).

    Before the model is built, every tensor of the file is checked against the config (`check_int8_file`: its
    dtype and shape, read from the header) and its values (`check_int8_values`: scales finite and positive, zero
    points in int8's range, float tensors finite): ValueError, one line, naming the tensor."""
    folder = Path(folder)
    weights = folder / QUANTIZED_WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(
            f"{folder} holds no int8 weights (no {QUANTIZED_WEIGHTS_FILE}); write them with quantize()"
        )
    with quantized_engine(engine) as engine:  # an unknown engine is refused before the model is built
        config = MiniBertConfig.from_pretrained(folder)
        check_int8_file(config, weights)
        state = load_file(weights)
        check_int8_values(state, weights)
        model = quantize_dynamic_int8(_model_class(config)(config), engine=engine)
        load_int8_state_dict(model, state, folder)
    return model


# safetensors' names of the dtypes an int8 file holds.
SAFETENSORS_DTYPES = {
    torch.float32: "F32",
    torch.int8: "I8",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.bool: "BOOL",
}


def int8_layout(config: MiniBertConfig) -> dict[str, tuple[str, list[int]]]:
    """Every tensor `int8_state_dict` writes for a model of `config`, as (safetensors dtype, shape): the model is
    built on the meta device (nothing allocated) with Q, K and V fused as `quantize_dynamic_int8` fuses them."""
    with torch.device("meta"):
        model = _model_class(config)(config)
        for layer in model.base_model.encoder.layer:
            layer.attention.self = Int8SelfAttention(layer.attention.self)
    prefix = f"{model.base_model_prefix}.encoder." if model.base_model is not model else "encoder."
    int8 = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.startswith(prefix)
    }
    layout = {}
    for name, linear in int8.items():
        out, width = linear.weight.shape
        layout |= {
            f"{name}.weight_int8": ("I8", [out, width]),
            f"{name}.weight_scale": ("F32", [out]),
            f"{name}.weight_zero_point": ("I32", [out]),
            f"{name}.bias": ("F32", [out]),
        }
    for key, tensor in (*model.named_parameters(), *model.named_buffers()):
        if key.rpartition(".")[0] not in int8:
            layout[key] = (SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype)), list(tensor.shape))
    return layout


def check_int8_file(config: MiniBertConfig, weights: Path) -> None:
    """The int8 file's header against `config`, nothing loaded: its sizes (`check_weights_fit_config`, before the
    model is built: a `vocab_size` of a million would allocate gigabytes first), then every tensor's name, dtype
    and shape against `int8_layout`. ValueError, one line, naming the first that disagrees."""
    check_weights_fit_config(config, [weights], weights.parent)
    header = read_safetensors_header(weights)
    header.pop("__metadata__", None)
    layout = int8_layout(config)
    missing, unexpected = sorted(set(layout) - set(header)), sorted(set(header) - set(layout))
    if missing or unexpected:
        raise ValueError(
            f"{weights}: the tensors do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for key, (dtype, shape) in layout.items():
        if (header[key]["dtype"], header[key]["shape"]) != (dtype, shape):
            raise ValueError(
                f"{weights}: {key} is {header[key]['dtype']} of shape {header[key]['shape']}, expected "
                f"{dtype} of shape {shape}"
            )


def check_int8_values(state: dict[str, torch.Tensor], weights: Path) -> None:
    """Scales finite and positive (a NaN or a zero would turn a whole output channel into NaN or zeros, silently),
    zero points in int8's range, every float tensor finite; ValueError, one line, naming the tensor and the row."""
    for key, tensor in state.items():
        if key.endswith(".weight_scale"):
            bad = ~(torch.isfinite(tensor) & (tensor > 0))
            what = "scales must be finite and positive"
        elif key.endswith(".weight_zero_point"):
            bad = (tensor < -128) | (tensor > 127)
            what = "zero points must be in int8's range [-128, 127]"
        elif tensor.is_floating_point():
            bad = ~torch.isfinite(tensor)
            what = "weights must be finite"
        else:
            continue
        if bad.any():
            rows = bad.reshape(max(len(bad), 1) if bad.dim() else 1, -1)  # (rows, values per row)
            row = int(rows.any(1).nonzero()[0])
            value = tensor.reshape(rows.shape)[row][rows[row]][0].item()
            raise ValueError(f"{weights}: {key} holds {value} at row {row}: {what}")


def _model_class(config: MiniBertConfig) -> type[MiniBertPreTrainedModel]:
    """The class named first in the config's `architectures` (MiniBertModel when none is)."""
    name = (config.architectures or ["MiniBertModel"])[0]
    for model_class in AUTO_CLASSES.values():
        if model_class.__name__ == name:
            return model_class
    raise ValueError(f"unknown architecture {name!r} in config.json")


__all__ = [
    "Int8SelfAttention",
    "load_quantized",
    "packing_engine",
    "quantize",
    "quantize_dynamic_int8",
    "quantized_engine",
]
