"""Export a saved Mini-BERT (base model or any head) to ONNX; `minibert export-onnx`.

    export_onnx("runs/sentiment", "runs/sentiment-onnx")                    # runs/sentiment-onnx/model.onnx
    export_onnx("runs/sentiment", "runs/sentiment-int8", quantize="int8")   # .../model_quantized.onnx
    LengthBucketedSession("runs/sentiment-int8")                            # onnxruntime on mixed lengths

The output is a folder, as optimum's export writes one: the graph (`model.onnx`; `model_quantized.onnx` with
`quantize`) beside the model's `config.json` (labels, sizes; in BERT's format wherever BERT can hold the model, so
that optimum's `ORTModelFor*.from_pretrained(folder)` serves it) and tokenizer files. The
graph has dynamic batch and sequence axes and is checked against PyTorch with onnxruntime.

`optimize=True` (`--optimize`) runs onnxruntime's BERT graph optimizer on the export (LayerNorm, residual and
bias+GeLU fusions); `quantize="int8"` (`--quantize int8`) also quantizes the optimized graph's weight matrices to
int8 with onnxruntime's dynamic quantization. Run either on mixed-length batches through
`onnx_session.LengthBucketedSession`, which gives onnxruntime batches of similar lengths as Mini-BERT's own
unpadding does: the graph itself stays padded. `format="transformers.js"` writes the folder transformers.js loads
instead (`transformers_js.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import PretrainedConfig

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.deployment.onnx_graph import (
    INT8_TOLERANCE,
    QUANTIZE_MODES,
    checked_line,
    choices_of,
    head_weights,
    load_for_export,
    optimize_graph,
    quantize_graph,
    trace_graph,
    verify_onnx,
)
from modeling_minibert.deployment.transformers_js import export_transformers_js
from modeling_minibert.modeling_minibert import MiniBertPreTrainedModel
from modeling_minibert.sharing.bert_format import bert_config_of
from modeling_minibert.sharing.folder import copy_tokenizer_files
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.files import check_output_dir, staged_folder
from modeling_minibert.utils.logging import say_checked

# --format: a folder with one graph, or the folder layout transformers.js reads (transformers_js.py).
FORMATS = ("onnx", "transformers.js")
# The graph's file name in the output folder (optimum's names).
MODEL_FILE, QUANTIZED_FILE = "model.onnx", "model_quantized.onnx"


def export_onnx(
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    format: str = "onnx",
    head: str | None = None,
    optimize: bool = False,
    quantize: str | None = None,
    verify: bool = True,
    overwrite_output_dir: bool = False,
) -> Path:
    """Write the folder `output_dir` with the ONNX graph of the model in `model_name_or_path`, its config and its
    tokenizer files; with `verify`, compare onnxruntime to PyTorch. Returns `output_dir`.

    `format="transformers.js"` writes the folder transformers.js loads instead (see
    `transformers_js.export_transformers_js`; `quantize` is then the mode of its int8 graph, and `optimize` is
    refused: its fp32 graph stays the plain one, and its int8 graph is always optimized).

    `optimize` fuses the graph with onnxruntime's BERT optimizer; `quantize` (a QUANTIZE_MODES key, implies
    `optimize`) makes its weight matrices int8. Before any export work, refuses (one line each) an unknown
    `quantize` mode, a folder that is not a saved model, an `output_dir` that is a non-empty folder (unless
    `overwrite_output_dir`) or a file, and a place that cannot be written. Raises ValueError when the exported
    graph disagrees beyond 1e-4 (int8: beyond INT8_TOLERANCE of the outputs' largest value).
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise ValueError(f"unknown quantize mode {quantize!r}; choose one of {', '.join(QUANTIZE_MODES)}")
    if format == "transformers.js":
        if optimize:
            raise ValueError(
                "optimize (--optimize) does not apply to format transformers.js: its onnx/model.onnx "
                "stays the plain graph, and onnx/model_quantized.onnx is always optimized"
            )
        return export_transformers_js(
            model_name_or_path, output_dir, head, verify, overwrite_output_dir, quantize or "int8"
        )
    folder, output = Path(model_name_or_path), Path(output_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    check_output_dir(output, overwrite_output_dir, inputs={"model_name_or_path": folder}, job="export-onnx")
    with staged_folder(output) as staging:
        model = load_for_export(folder, head)
        graph = staging / (QUANTIZED_FILE if quantize else MODEL_FILE)
        trace_graph(model, graph)
        if optimize or quantize:
            optimize_graph(graph, model.config)
        if quantize:
            quantize_graph(graph, quantize, head_weights(model))
        if verify:
            tolerance = INT8_TOLERANCE if quantize else None
            say_checked(checked_line(graph, verify_onnx(model, graph, choices_of(model), tolerance), tolerance))
        serving_config(model, folder).to_json_file(staging / "config.json")
        copy_tokenizer_files(folder, staging)
    return output


def serving_config(model: MiniBertPreTrainedModel, folder: Path) -> PretrainedConfig:
    """The config beside the graph: BERT's (`model_type: bert`, the `Bert*` head) wherever BERT can hold the model,
    so that optimum's ORTModel, transformers.js and AutoTokenizer read the folder without any code, as the folder
    of a BERT; a Mini-BERT-only variant keeps its own config without `auto_map`, which would name code files that
    the graph replaces."""
    try:
        config = bert_config_of(model.config, folder / "config.json")
    except ValueError:
        config = MiniBertConfig(**model.config.to_dict())
        config.auto_map = None
        return config
    config.architectures = [type(model).__name__.replace("MiniBert", "Bert", 1)]
    return config


@dataclass(kw_only=True)
class ExportArguments:
    """`minibert export-onnx`'s options; `export_onnx` takes the same names as keywords."""

    model_name_or_path: str = field(metadata={"help": "a saved Mini-BERT folder"})
    output_dir: str = field(
        metadata={
            "help": "the folder to write: model.onnx (model_quantized.onnx with --quantize), config and tokenizer"
        }
    )
    format: str = field(
        default="onnx",
        metadata={
            "choices": FORMATS,
            "help": "onnx: one graph with the config and tokenizer; transformers.js: the folder transformers.js loads "
            "(config as BERT, tokenizer, onnx/model.onnx and the int8 onnx/model_quantized.onnx)",
        },
    )
    head: str | None = field(
        default=None, metadata={"help": "class to export instead of the folder's own, e.g. MiniBertModel"}
    )
    optimize: bool = field(default=False, metadata={"help": "fuse the graph with onnxruntime's BERT optimizer"})
    quantize: str | None = field(
        default=None, metadata={"help": f"int8 weights in the optimized graph; one of {', '.join(QUANTIZE_MODES)}"}
    )
    verify: bool = field(
        default=True, metadata={"help": "compare the graph's outputs with PyTorch's (--no_verify skips)"}
    )
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace a non-empty output folder"})


COMMAND_LINE = CommandLine(
    arguments=(ExportArguments,),
    help="export a saved model to ONNX (dynamic batch and sequence axes), or for transformers.js",
    description="Export the model in --model_name_or_path (its own head, or --head) to ONNX in --output_dir, "
    "beside its config and tokenizer, and check it with onnxruntime.",
    report=lambda path, options: f"wrote {path}",
    renamed={"--overwrite": "--overwrite_output_dir"},
    positionals="FOLDER OUTPUT are now --model_name_or_path FOLDER --output_dir OUTPUT_DIR",
)


__all__ = ["ExportArguments", "export_onnx"]
