"""Export a saved Mini-BERT in the folder layout transformers.js (`@huggingface/transformers` on npm) loads.

transformers.js runs models in Node and in the browser through onnxruntime, and reads a model folder as the Hub
lays it out for it:

    config.json              with model_type "bert": transformers.js picks its model and tokenizer classes by
                             model_type and has no "minibert"; the default Mini-BERT *is* BERT, so the config is
                             the one `minibert convert-bert --to_bert` writes (a variant BERT cannot express is
                             refused, in one line naming the field)
    tokenizer.json, tokenizer_config.json, vocab.txt, special_tokens_map.json
    onnx/model.onnx          the plain fp32 graph (what `dtype: "fp32"` loads: Node's default)
    onnx/model_quantized.onnx  the optimized int8 graph (`dtype: "q8"`: the browser's default)

The weights themselves travel only inside the two graphs. Both graphs are checked against PyTorch with
onnxruntime, as `export_onnx` checks any export.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from modeling_minibert.deployment import onnx_graph
from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
from modeling_minibert.sharing.folder import TOKENIZER_FILES
from modeling_minibert.utils.files import check_output_dir, staged_folder
from modeling_minibert.utils.logging import checks_unsaid, say_checked

FORMAT = "transformers.js"
MODEL_FILE, QUANTIZED_FILE = "onnx/model.onnx", "onnx/model_quantized.onnx"


def export_transformers_js(
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    head: str | None = None,
    verify: bool = True,
    overwrite_output_dir: bool = False,
    quantize: str = "int8",
) -> Path:
    """Write the transformers.js folder `output_dir` for the Mini-BERT in `model_name_or_path` (its own head, or
    `head`).

    `quantize` is the QUANTIZE_MODES mode of onnx/model_quantized.onnx. Refuses before any export work, one line
    each: an unknown mode, a folder that is not a saved Mini-BERT, a config BERT cannot express, and an `output`
    that is a non-empty folder (unless `overwrite_output_dir`) or cannot be written. Returns `output_dir`.
    """
    folder, output = Path(model_name_or_path), Path(output_dir)
    if quantize not in onnx_graph.QUANTIZE_MODES:
        raise ValueError(f"unknown quantize mode {quantize!r}; choose one of {', '.join(onnx_graph.QUANTIZE_MODES)}")
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    check_output_dir(output, overwrite_output_dir, inputs={"model_name_or_path": folder}, job="export-onnx")
    with staged_folder(output) as staging:
        write_bert_config_and_tokenizer(folder, staging, head)
        model = onnx_graph.load_for_export(folder, head)
        plain, quantized = staging / MODEL_FILE, staging / QUANTIZED_FILE
        plain.parent.mkdir()
        onnx_graph.trace_graph(model, plain)
        shutil.copyfile(plain, quantized)
        onnx_graph.optimize_graph(quantized, model.config)
        onnx_graph.quantize_graph(quantized, quantize, onnx_graph.head_weights(model))
        if verify:
            for graph, tolerance in ((plain, None), (quantized, onnx_graph.INT8_TOLERANCE)):
                worst = onnx_graph.verify_onnx(model, graph, onnx_graph.choices_of(model), tolerance)
                say_checked(onnx_graph.checked_line(graph, worst, tolerance))
    return output


def write_bert_config_and_tokenizer(folder: Path, staging: Path, head: str | None) -> None:
    """Put `folder`'s config as BERT's (model_type "bert", the `Bert*` architecture of the exported head) and its
    tokenizer files into `staging`. The conversion also checks that BERT can hold the model: it refuses, naming
    the field, a variant such as `layer_norm_position="pre"`."""
    bert = staging / "bert"
    with checks_unsaid():  # a step of the export, which says what it checked of its graphs
        convert_minibert_to_bert(folder, bert)
    config = json.loads((bert / "config.json").read_text(encoding="utf-8"))
    if head is not None:
        config["architectures"] = [head.replace("MiniBert", "Bert", 1)]
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for name in TOKENIZER_FILES:
        if (bert / name).is_file():
            os.replace(bert / name, staging / name)
    shutil.rmtree(bert)  # the weights travel in the graphs; a second copy would double the download
