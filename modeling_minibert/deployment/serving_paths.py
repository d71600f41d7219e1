"""The ways to serve a Mini-BERT sequence classifier on a CPU, one `ServingPath` each in `SERVING_PATHS`.

    pytorch-fp32            the model as trained, eager (Mini-BERT's unpadded encoder)
    pytorch-bf16            the same in bfloat16, where the CPU has bf16 instructions (AVX-512 BF16, AMX)
    pytorch-int8            PyTorch dynamic int8 (`quantization.py`)
    pytorch-compiled-fp32   compiled ahead of time for this CPU by AOTInductor (`compiled.py`), in length buckets
    onnxruntime-fp32        onnxruntime on the optimized export, in length buckets (`onnx_session.py`)
    onnxruntime-int8        onnxruntime on the int8 export, in length buckets
    openvino-fp32           OpenVINO on the plain export, in length buckets, float32 inference
    openvino-bf16           the same with OpenVINO's bf16 inference, where the CPU has bf16 instructions

Each path writes a self-contained folder from a fine-tuned model folder (its weights or graph, config.json and the
tokenizer) and opens one as a function of padded (B, T) int64 numpy inputs to (B, num_labels) logits. Which path
is fastest depends on the CPU and on the batch sizes served: `serving_benchmark.py` measures them on the user's
own machine and texts and keeps the fastest as a ready folder, which `load_serving` opens as a pipeline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from modeling_minibert.sharing.folder import copy_tokenizer_files
from modeling_minibert.utils.precision import native_bf16

Logits = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (ids, mask, types) (B, T) -> (B, C)
SERVING_FILE = "serving.json"  # in a ready folder: which path it holds, and what was measured


@dataclass(frozen=True)
class ServingPath:
    name: str
    summary: str
    write: Callable[[Path, Path], object]  # (model folder, new output folder): writes the path's files (paths
    # that run the same files share their `write`, and `benchmark_deploy` writes them once)
    open: Callable[[Path, int | None], Logits]  # (its folder, threads): the logits function
    missing: Callable[[], str | None]  # why this machine cannot run it; None when it can


def _nothing_missing() -> None:
    return None


def _module_missing(module: str, extra: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        import importlib.util

        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the [{extra}] extra: pip install -e '.[{extra}]' in the clone)"
        return None
    return missing


def _bf16_missing(other: Callable[[], str | None] = _nothing_missing) -> Callable[[], str | None]:
    def missing() -> str | None:
        if not native_bf16(torch.device("cpu")):
            return "the CPU has no bf16 instructions (AVX-512 BF16 or AMX): bf16 would be emulated, slower than fp32"
        return other()
    return missing


# -- PyTorch ---------------------------------------------------------------------------------------------------------
def _write_pytorch(source: Path, output: Path) -> None:
    from modeling_minibert import MiniBertForSequenceClassification

    MiniBertForSequenceClassification.from_pretrained(source).save_pretrained(output)
    copy_tokenizer_files(source, output)


def _open_pytorch(dtype: torch.dtype) -> Callable[[Path, int | None], Logits]:
    def open_(folder: Path, threads: int | None) -> Logits:
        from modeling_minibert import MiniBertForSequenceClassification

        _set_torch_threads(threads)
        model = MiniBertForSequenceClassification.from_pretrained(folder, dtype=dtype).eval()
        return _torch_logits(model)
    return open_


def _write_int8(source: Path, output: Path) -> None:
    from modeling_minibert.deployment.quantization import quantize

    quantize(source, output)


def _open_int8(folder: Path, threads: int | None) -> Logits:
    from modeling_minibert.deployment.quantization import load_quantized

    _set_torch_threads(threads)
    return _torch_logits(load_quantized(folder))


def _write_compiled(source: Path, output: Path) -> None:
    from modeling_minibert.deployment.compiled import compile_model

    compile_model(source, output)  # with the config and tokenizer


def _open_compiled(folder: Path, threads: int | None) -> Logits:
    from modeling_minibert.deployment.compiled import load_compiled

    _set_torch_threads(threads)
    runner = load_compiled(folder)

    def graph(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return runner(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))[0].numpy()
    return lambda ids, mask, types: _in_length_buckets(graph, ids, mask, types)


def _torch_logits(model) -> Logits:
    def logits(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        token_type_ids=torch.from_numpy(types)).logits
        return out.float().numpy()
    return logits


def _set_torch_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


# -- onnxruntime and OpenVINO, on the exported graph ------------------------------------------------------------------
def _write_onnx(**options) -> Callable[[Path, Path], object]:
    def write(source: Path, output: Path) -> None:
        from modeling_minibert.deployment.onnx_export import export_onnx

        export_onnx(source, output, **options)
    return write


def _open_onnxruntime(folder: Path, threads: int | None) -> Logits:
    from modeling_minibert.deployment.onnx_session import LengthBucketedSession

    session = LengthBucketedSession(folder, threads)
    return lambda ids, mask, types: session.run(ids, mask, types)[0]


def _open_openvino(precision: str) -> Callable[[Path, int | None], Logits]:
    def open_(folder: Path, threads: int | None) -> Logits:
        import openvino

        from modeling_minibert.deployment.onnx_session import graph_file

        settings = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        if threads is not None:
            settings["INFERENCE_NUM_THREADS"] = threads
        request = openvino.Core().compile_model(str(graph_file(folder)), "CPU", settings).create_infer_request()

        def graph(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
            result = request.infer({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
            return np.asarray(result[request.model_outputs[0]], dtype=np.float32)
        return lambda ids, mask, types: _in_length_buckets(graph, ids, mask, types)
    return open_


def _in_length_buckets(graph: Logits, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    """`graph`'s (B, C) logits, run on rows of similar length each cut to its bucket (`onnx_session`): a padded
    graph computes every position it is given."""
    from modeling_minibert.deployment.onnx_session import length_buckets

    logits = None
    for rows, length in length_buckets(mask):
        part = graph(*(np.ascontiguousarray(a[rows, :length]) for a in (ids, mask, types)))
        if logits is None:
            logits = np.empty((len(ids), part.shape[-1]), dtype=np.float32)
        logits[rows] = part
    return logits


_write_plain_onnx = _write_onnx()  # both OpenVINO paths read the same graph: one `write`, written once
_onnxruntime_missing = _module_missing("onnxruntime", "onnx")
_openvino_missing = _module_missing("openvino", "openvino")


def _compiler_missing() -> str | None:
    from modeling_minibert.deployment.compiled import compiler_missing

    return compiler_missing()


# In the table's order: the plain path first (the reference every other is checked against).
SERVING_PATHS = {path.name: path for path in (
    ServingPath("pytorch-fp32", "PyTorch, float32, eager", _write_pytorch, _open_pytorch(torch.float32),
                _nothing_missing),
    ServingPath("pytorch-bf16", "PyTorch, bfloat16 weights and activations", _write_pytorch,
                _open_pytorch(torch.bfloat16), _bf16_missing()),
    ServingPath("pytorch-int8", "PyTorch dynamic int8 (Linear layers)", _write_int8, _open_int8, _nothing_missing),
    ServingPath("pytorch-compiled-fp32", "PyTorch, float32, compiled for this CPU (AOTInductor), length buckets",
                _write_compiled, _open_compiled, _compiler_missing),
    ServingPath("onnxruntime-fp32", "onnxruntime, optimized graph, float32, length buckets",
                _write_onnx(optimize=True), _open_onnxruntime, _onnxruntime_missing),
    ServingPath("onnxruntime-int8", "onnxruntime, optimized graph, int8 weights, length buckets",
                _write_onnx(quantize="int8"), _open_onnxruntime, _onnxruntime_missing),
    ServingPath("openvino-fp32", "OpenVINO, plain graph, float32 inference, length buckets", _write_plain_onnx,
                _open_openvino("f32"), lambda: _onnxruntime_missing() or _openvino_missing()),
    ServingPath("openvino-bf16", "OpenVINO, plain graph, bf16 inference, length buckets", _write_plain_onnx,
                _open_openvino("bf16"), _bf16_missing(lambda: _onnxruntime_missing() or _openvino_missing())),
)}
REFERENCE = "pytorch-fp32"


def serving_path(name: str) -> ServingPath:
    """The path called `name`; ValueError naming the known ones, or saying why this machine cannot run it."""
    if name not in SERVING_PATHS:
        raise ValueError(f"unknown serving path {name!r}; choose from {', '.join(SERVING_PATHS)}")
    path = SERVING_PATHS[name]
    why = path.missing()
    if why:
        raise ValueError(f"serving path {name} cannot run on this machine: {why}")
    return path


class ServingClassifier:
    """A ready folder (`serving.json` beside the path's files) as a text-classification pipeline: called with a text
    or a list of texts, it returns what transformers' `pipeline("text-classification")` returns (a list of
    {"label", "score"}; with `top_k`, a list of such lists, best first)."""

    def __init__(self, folder: str | os.PathLike, threads: int | None = None):
        from transformers import AutoConfig, AutoTokenizer

        folder = Path(folder)
        info_file = folder / SERVING_FILE
        if not info_file.is_file():
            raise FileNotFoundError(f"{folder} is not a serving folder (no {SERVING_FILE}); write one with "
                                    "`minibert benchmark-deploy`")
        self.info = json.loads(info_file.read_text(encoding="utf-8"))
        self.path = serving_path(self.info["path"])
        self.config = AutoConfig.from_pretrained(folder)  # BERT's, beside an ONNX graph
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.logits = self.path.open(folder, threads if threads is not None else self.info.get("threads"))
        self.max_length = min(self.config.max_position_embeddings, self.tokenizer.model_max_length)

    def scores(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """(len(texts), num_labels) probabilities: softmax, or sigmoid for multi-label and one-label heads (as the
        pipeline's default function_to_apply)."""
        rows = []
        for start in range(0, len(texts), batch_size):
            encoded = self.tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="np")
            ids, mask = encoded["input_ids"].astype(np.int64), encoded["attention_mask"].astype(np.int64)
            types = encoded.get("token_type_ids", np.zeros_like(ids)).astype(np.int64)
            rows.append(self.logits(ids, mask, types))
        logits = np.concatenate(rows) if rows else np.zeros((0, self.config.num_labels), np.float32)
        if self.config.problem_type == "multi_label_classification" or self.config.num_labels == 1:
            return 1 / (1 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        return shifted / shifted.sum(-1, keepdims=True)

    def __call__(self, inputs: str | list[str], top_k: int | None = 1, batch_size: int = 32):
        single = isinstance(inputs, str)
        scores = self.scores([inputs] if single else list(inputs), batch_size)
        k = scores.shape[1] if top_k is None else top_k
        ranked = [[{"label": self.config.id2label[int(i)], "score": float(row[i])} for i in np.argsort(-row)[:k]]
                  for row in scores]
        if top_k == 1:
            return [r[0] for r in ranked]
        return ranked[0] if single else ranked


def load_serving(folder: str | os.PathLike, threads: int | None = None) -> ServingClassifier:
    """The ready folder `minibert benchmark-deploy` wrote, as a pipeline: `load_serving(folder)("a fine film")`."""
    return ServingClassifier(folder, threads)


__all__ = ["REFERENCE", "SERVING_PATHS", "ServingClassifier", "ServingPath", "load_serving", "serving_path"]
