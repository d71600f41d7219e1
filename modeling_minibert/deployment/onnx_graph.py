"""The ONNX graph of a Mini-BERT: traced with dynamic batch and sequence axes, optimized and int8-quantized with
onnxruntime's tools, and checked against PyTorch. Both exports build on it: `export_onnx` (one graph in a folder
with the model's config and tokenizer) and `transformers_js` (the layout transformers.js loads).

The trace is the padded encoder (unpadding is data-dependent and stays in PyTorch); `onnx_session` gives onnxruntime
batches of similar lengths instead. onnx, onnxscript and onnxruntime (the [onnx] extra) are imported where used.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from modeling_minibert import AUTO_CLASSES
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertPreTrainedModel
from modeling_minibert.utils.logging import quiet_libraries, quiet_transformers, say_missing_weights

# The libraries whose warnings an export silences (their registries, fusions and quantizer say what they skip, not
# what is wrong): `verify_onnx` then says in one line how the graph compares with PyTorch.
EXPORT_LOGGERS = ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript", "onnxruntime", "onnx")

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
TOLERANCE = 1e-4
# An int8 graph is checked against PyTorch relative to the outputs' scale: int8 weights and activations carry
# about 1% error each, so a bound of 1e-4 would fail every correct graph, while a broken one is off by ~100%.
# 10%, not 5%: the check's batch is random ids, far from text, and errors add up over the layers there. A correct
# graph of a five-topic BBC headlines classifier differed by 0.103 on it, 6.4% of its logits' scale (1.61; 0.9 to
# 3.5% on other random batches), while its predictions agreed with float32 on 418 of 419 test headlines.
INT8_TOLERANCE = 0.1
# ... but never on a scale below 1: a barely trained head's logits are a few tenths (all-MiniLM-L6-v2 after one
# short epoch on Rotten Tomatoes: 0.18 at most), where 5% is 0.009, below the int8 error of the hidden states it
# reads, and an error of 0.05 moves a two-way softmax by at most 1.25 points.
INT8_SCALE_FLOOR = 1.0

# --quantize modes: onnxruntime dynamic quantization settings. Only MatMuls with a weight matrix are quantized:
# the embeddings (Gather), the pooler and classifier (Gemm) and attention's activation-by-activation MatMuls stay
# fp32. `reduce_range` (7-bit weights) because on CPUs without VNNI onnxruntime's u8 x s8 kernel sums pairs of
# products in int16 and can saturate with full-range weights (onnxruntime's quantization docs).
# benchmarks/bench_deploy.py measures each mode's accuracy on Rotten Tomatoes.
QUANTIZE_MODES = {
    "int8": dict(per_channel=True, reduce_range=True),
    "int8-per-tensor": dict(per_channel=False, reduce_range=True),
    "int8-full-range": dict(per_channel=True, reduce_range=False),
}


class _TupleOutputs(torch.nn.Module):
    """ONNX wants positional tensor outputs, not a ModelOutput."""

    def __init__(self, model: MiniBertPreTrainedModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return tuple(
            self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=False
            )
        )


def load_for_export(folder: str | os.PathLike, head: str | None = None) -> MiniBertPreTrainedModel:
    """The folder's own head (from its `architectures`), or `head` ('MiniBertModel', 'MiniBertForMaskedLM', ...)."""
    config = MiniBertConfig.from_pretrained(folder)
    name = head or (config.architectures or ["MiniBertModel"])[0]
    model_class = next((m for m in AUTO_CLASSES.values() if m.__name__ == name), None)
    if model_class is None:
        raise ValueError(
            f"unknown head {name!r}; choose one of {', '.join(m.__name__ for m in AUTO_CLASSES.values())}"
        )
    with quiet_transformers():  # a head exported from another's folder drops that head: only what is missing matters
        model, loading = model_class.from_pretrained(folder, output_loading_info=True)
    say_missing_weights(model, loading, folder)
    return model.eval()


def example_inputs(config: MiniBertConfig, batch_size: int, seq_len: int, choices: int | None, seed: int = 0):
    """Random ids with one padded row, and two segments; (B, T), or (B, C, T) for multiple choice."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, choices, seq_len) if choices else (batch_size, seq_len)
    ids = torch.randint(0, config.vocab_size, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[-1, ..., seq_len // 2 :] = 0
    types = torch.zeros_like(ids)
    types[..., seq_len // 2 :] = 1
    return ids, mask, types


def choices_of(model: MiniBertPreTrainedModel) -> int | None:
    """The example inputs' number of choices: 2 for multiple choice (inputs (B, C, T)), else None."""
    return 2 if type(model).__name__ == "MiniBertForMultipleChoice" else None


def head_weights(model: MiniBertPreTrainedModel) -> set[str]:
    """The graph's names of the weights outside the encoder (embeddings, pooler, task head): they stay fp32 under
    int8, being cheap and where errors become predictions."""
    return {f"model.{name}" for name, _ in model.named_parameters() if ".encoder." not in name}


def trace_graph(model: MiniBertPreTrainedModel, path: Path) -> None:
    """Write `model`'s padded graph to `path`, with dynamic batch, sequence (and choice) axes."""
    choices = choices_of(model)
    seq_len = min(16, model.config.max_position_embeddings)
    inputs = example_inputs(model.config, 2, seq_len, choices)
    with torch.no_grad():
        output_names = [k for k, v in model(*inputs[:2], token_type_ids=inputs[2]).items() if v is not None]
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=model.config.max_position_embeddings)
    axes = {0: batch, 2: sequence} if choices else {0: batch, 1: sequence}
    if choices:
        axes[1] = torch.export.Dim("choice")
    with quiet_libraries(*EXPORT_LOGGERS):
        torch.onnx.export(
            _TupleOutputs(model).eval(),  # a new module is in training mode, and torch warns about exporting that
            inputs,
            path,
            dynamo=True,
            input_names=list(INPUT_NAMES),
            output_names=output_names,
            dynamic_shapes=dict.fromkeys(INPUT_NAMES, axes),
            # One self-contained file unless protobuf's 2 GB limit forces weights into a side file.
            external_data=model.num_parameters() * 4 > 1.5 * 2**30,
            verbose=False,
        )


def optimize_graph(path: Path, config: MiniBertConfig) -> None:
    """Replace the graph at `path` by onnxruntime's BERT-optimized one (same inputs and outputs).

    The fusions that apply to Mini-BERT's export are SkipLayerNormalization and BiasGelu; onnxruntime's Attention
    fusion does not recognise the exported attention (one fused Q/K/V MatMul, then sdpa), so attention stays as
    MatMul + Softmax. The ORT-level optimisations run when a session loads the graph, for the CPU it runs on.
    """
    from onnxruntime.transformers.optimizer import optimize_model

    with quiet_libraries(*EXPORT_LOGGERS):
        optimized = optimize_model(
            str(path), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
        )
        optimized.save_model_to_file(str(path))


def quantize_graph(path: Path, mode: str, fp32_weights: set[str]) -> None:
    """Replace the graph at `path` by its dynamically int8-quantized form in `mode` (see QUANTIZE_MODES), keeping
    fp32 every MatMul without a weight matrix and every one whose weight is named in `fp32_weights`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(path)).graph
    weights = {initializer.name for initializer in graph.initializer}
    keep = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul"
        and (node.input[1] not in weights or node.input[1].removesuffix("_Transposed") in fp32_weights)
    ]
    # quantize_dynamic first rewrites each Gemm (the pooler and 2-D heads) as a MatMul named after it.
    keep += [f"{node.name}_MatMul" for node in graph.node if node.op_type == "Gemm"]
    quantized = path.with_name(path.stem + ".int8" + path.suffix)
    with quiet_libraries(*EXPORT_LOGGERS):  # its advice to pre-process is for image models' static quantization
        quantize_dynamic(
            path,
            quantized,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
            nodes_to_exclude=keep,
            **QUANTIZE_MODES[mode],
        )
    os.replace(quantized, path)


def verify_onnx(
    model: MiniBertPreTrainedModel, path: Path, choices: int | None, relative_tolerance: float | None = None
) -> float:
    """Run onnxruntime and PyTorch on a batch of another shape than the export's; return the largest difference.

    Compared at real tokens only: positions that are padding carry no meaning (and PyTorch's unpadded encoder
    leaves them at zero). The bound is TOLERANCE, or `relative_tolerance` times each output's largest value (at
    least INT8_SCALE_FLOOR).
    """
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    seq_len = min(11, model.config.max_position_embeddings)
    ids, mask, types = example_inputs(model.config, 3, seq_len, choices, seed=1)
    got = session.run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
    )
    with torch.no_grad():
        expected = [v for v in model(ids, attention_mask=mask, token_type_ids=types).values() if v is not None]
    keep = mask.bool().flatten(0, -2) if choices else mask.bool()
    worst = 0.0
    for name, e, g in zip(session.get_outputs(), expected, got):
        g = torch.from_numpy(g)
        if e.dim() >= 2 and e.shape[:2] == keep.shape:
            e, g = e[keep], g[keep]
        difference = float((e - g).abs().max())
        worst = max(worst, difference)
        scale = max(float(e.abs().max()), INT8_SCALE_FLOOR)
        bound = TOLERANCE if relative_tolerance is None else relative_tolerance * scale
        if difference > bound:
            raise ValueError(f"{path}: output {name.name} differs from PyTorch by {difference:.2e} (> {bound:.2e})")
    return worst


def checked_line(path: Path, worst: float, relative_tolerance: float | None = None) -> str:
    """What `verify_onnx` found, as the export says it."""
    bound = (
        f"{TOLERANCE:.0e}" if relative_tolerance is None else f"{relative_tolerance:.0%} of the outputs' largest value"
    )
    return f"{path.name} against PyTorch with onnxruntime: largest output difference {worst:.1e} (allowed: {bound})"
