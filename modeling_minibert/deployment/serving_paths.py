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
tokenizer) and opens one as a function of padded (B, T) int64 numpy inputs to (B, num_labels) logits. Opening
checks the graph against the folder's config (its embedding tables, input names, and a probe's output width
against `num_labels`: a graph of 2 outputs beside a config of 5 labels would answer a label from the wrong
softmax), and the function refuses inputs outside its tables in one line, on every path alike
(`onnx_session.check_graph_inputs`). The compiled path's folder is native code (`compiled.load_compiled`): it opens
where this user compiled it, or with `allow_compiled=True`. Which path
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

from modeling_minibert.deployment.onnx_session import config_limits
from modeling_minibert.sharing.folder import copy_tokenizer_files
from modeling_minibert.utils.outputs import SERVING_FILE  # in a ready folder: its path, its files, what was measured
from modeling_minibert.utils.precision import native_bf16

Logits = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (ids, mask, types) (B, T) -> (B, C)


@dataclass(frozen=True)
class ServingPath:
    name: str
    summary: str
    write: Callable[[Path, Path], object]  # (model folder, new output folder): writes the path's files (paths
    # that run the same files share their `write`, and `benchmark_deploy` writes them once)
    open: Callable[..., Logits]  # (its folder, threads, allow_compiled=False): the checked logits function
    missing: Callable[[], str | None]  # why this machine cannot run it; None when it can
    files: tuple[str, ...] = ()  # what its folder holds besides config.json and the tokenizer (what `push` publishes)
    native: bool = False  # its folder holds native code, which runs when it is opened


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


def _open_pytorch(dtype: torch.dtype) -> Callable[..., Logits]:
    def open_(folder: Path, threads: int | None, allow_compiled: bool = False) -> Logits:
        from modeling_minibert import MiniBertForSequenceClassification

        _set_torch_threads(threads)
        check_head(folder)
        model = MiniBertForSequenceClassification.from_pretrained(folder, dtype=dtype).eval()
        return _bounded(folder, _torch_logits(model), config_limits(model.config))

    return open_


def _write_int8(source: Path, output: Path) -> None:
    from modeling_minibert.deployment.quantization import quantize

    quantize(source, output)


def _open_int8(folder: Path, threads: int | None, allow_compiled: bool = False) -> Logits:
    from modeling_minibert.deployment.quantization import load_quantized

    _set_torch_threads(threads)
    model = load_quantized(folder)
    return _bounded(folder, _torch_logits(model), config_limits(model.config))


def _write_compiled(source: Path, output: Path) -> None:
    from modeling_minibert.deployment.compiled import compile_model

    compile_model(source, output)  # with the config and tokenizer


def _open_compiled(folder: Path, threads: int | None, allow_compiled: bool = False) -> Logits:
    from transformers import AutoConfig

    from modeling_minibert.deployment.compiled import load_compiled

    _set_torch_threads(threads)
    runner = load_compiled(folder, allow_compiled=allow_compiled)

    def graph(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return runner(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))[0].numpy()

    # The package's tables cannot be read: its config's bounds (the sequence axis was compiled up to them).
    limits = config_limits(AutoConfig.from_pretrained(folder))
    return _bounded(folder, lambda ids, mask, types: _in_length_buckets(graph, ids, mask, types), limits)


def _torch_logits(model) -> Logits:
    def logits(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types),
            ).logits
        return out.float().numpy()

    return logits


def _set_torch_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


def check_head(folder: Path) -> None:
    """ValueError unless the classifier in the folder's weights gives the config's `num_labels` (read from the
    safetensors header; transformers would print a page-long load report first)."""
    from transformers import AutoConfig

    from modeling_minibert.checks_minibert import read_safetensors_header

    config = AutoConfig.from_pretrained(folder)
    header = read_safetensors_header(folder / "model.safetensors")
    rows = next((entry["shape"][0] for name, entry in header.items() if name.endswith("classifier.weight")), None)
    if rows is not None and rows != config.num_labels:
        raise ValueError(
            f"{folder}: the classifier gives {rows} logit(s) a text, config.json names num_labels="
            f"{config.num_labels} ({', '.join(map(str, config.id2label.values()))}): the weights and the "
            "config do not belong together"
        )


def _bounded(folder: Path, graph: Logits, limits: dict[str, tuple[int, str]]) -> Logits:
    """`graph` refusing inputs outside `limits` (`check_graph_inputs`), once its folder's config is checked to
    belong with it: the same tables, and a probe's output width the config's `num_labels`."""
    from transformers import AutoConfig

    from modeling_minibert.deployment.onnx_session import check_graph_inputs

    config = AutoConfig.from_pretrained(folder)
    for name, (rows, field) in limits.items():
        if getattr(config, field, rows) != rows:
            raise ValueError(
                f"{folder}: the graph's {name} table holds {rows} rows, config.json says "
                f"{field}={getattr(config, field)}: the graph and the config do not belong together"
            )

    def logits(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        return graph(*check_graph_inputs(limits, ids, mask, types))

    probe = np.zeros((1, 2), np.int64)
    width = np.asarray(logits(probe, np.ones_like(probe), probe)).shape
    if width != (1, config.num_labels):
        raise ValueError(
            f"{folder}: the graph gives {width[-1] if width else 0} logit(s) a text, config.json names "
            f"num_labels={config.num_labels} ({', '.join(map(str, config.id2label.values()))}): the "
            "graph and the config do not belong together"
        )
    return logits


def check_input_names(graph: Path, names: list[str]) -> None:
    """ValueError unless the graph at `graph` takes exactly the three inputs a serving path feeds."""
    from modeling_minibert.deployment.onnx_session import INPUT_NAMES

    if sorted(names) != sorted(INPUT_NAMES):
        raise ValueError(
            f"{graph} takes the inputs {', '.join(names) or 'none'}; a serving graph takes {', '.join(INPUT_NAMES)}"
        )


# -- onnxruntime and OpenVINO, on the exported graph ------------------------------------------------------------------
def _write_onnx(**options) -> Callable[[Path, Path], object]:
    def write(source: Path, output: Path) -> None:
        from modeling_minibert.deployment.onnx_export import export_onnx

        export_onnx(source, output, **options)

    return write


def _open_onnxruntime(folder: Path, threads: int | None, allow_compiled: bool = False) -> Logits:
    from modeling_minibert.deployment.onnx_session import LengthBucketedSession, graph_file

    session = LengthBucketedSession(folder, threads)
    check_input_names(graph_file(folder), [i.name for i in session.session.get_inputs()])
    return _bounded(folder, lambda ids, mask, types: session.run(ids, mask, types)[0], session.limits)


def _open_openvino(precision: str) -> Callable[..., Logits]:
    def open_(folder: Path, threads: int | None, allow_compiled: bool = False) -> Logits:
        import openvino

        from modeling_minibert.deployment.onnx_session import embedding_limits, graph_file

        settings = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        if threads is not None:
            settings["INFERENCE_NUM_THREADS"] = threads
        path = graph_file(folder)
        compiled = openvino.Core().compile_model(str(path), "CPU", settings)
        check_input_names(path, [port.get_any_name() for port in compiled.inputs])
        request = compiled.create_infer_request()

        def graph(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
            result = request.infer({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
            return np.asarray(result[request.model_outputs[0]], dtype=np.float32)

        # OpenVINO checks no index: the graph's own tables bound the inputs, as onnxruntime's session does.
        limits = embedding_limits(path)
        return _bounded(folder, lambda ids, mask, types: _in_length_buckets(graph, ids, mask, types, limits), limits)

    return open_


def _in_length_buckets(
    graph: Logits,
    ids: np.ndarray,
    mask: np.ndarray,
    types: np.ndarray,
    limits: dict[str, tuple[int, str]] | None = None,
) -> np.ndarray:
    """`graph`'s (B, C) logits, run on rows of similar length each cut to its bucket (`onnx_session`), no longer
    than the graph's positions (`limits`): a padded graph computes every position it is given."""
    from modeling_minibert.deployment.onnx_session import length_buckets

    logits = None
    for rows, length in length_buckets(mask, limit=(limits or {}).get("positions", (None,))[0]):
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
SERVING_PATHS = {
    path.name: path
    for path in (
        ServingPath(
            "pytorch-fp32",
            "PyTorch, float32, eager",
            _write_pytorch,
            _open_pytorch(torch.float32),
            _nothing_missing,
            ("model.safetensors",),
        ),
        ServingPath(
            "pytorch-bf16",
            "PyTorch, bfloat16 weights and activations",
            _write_pytorch,
            _open_pytorch(torch.bfloat16),
            _bf16_missing(),
            ("model.safetensors",),
        ),
        ServingPath(
            "pytorch-int8",
            "PyTorch dynamic int8 (Linear layers)",
            _write_int8,
            _open_int8,
            _nothing_missing,
            ("model.int8.safetensors", "quantization.json"),
        ),
        ServingPath(
            "pytorch-compiled-fp32",
            "PyTorch, float32, compiled for this CPU (AOTInductor), length buckets",
            _write_compiled,
            _open_compiled,
            _compiler_missing,
            ("model.pt2", "compiled.json"),
            native=True,
        ),
        ServingPath(
            "onnxruntime-fp32",
            "onnxruntime, optimized graph, float32, length buckets",
            _write_onnx(optimize=True),
            _open_onnxruntime,
            _onnxruntime_missing,
            ("model.onnx",),
        ),
        ServingPath(
            "onnxruntime-int8",
            "onnxruntime, optimized graph, int8 weights, length buckets",
            _write_onnx(quantize="int8"),
            _open_onnxruntime,
            _onnxruntime_missing,
            ("model_quantized.onnx",),
        ),
        ServingPath(
            "openvino-fp32",
            "OpenVINO, plain graph, float32 inference, length buckets",
            _write_plain_onnx,
            _open_openvino("f32"),
            lambda: _onnxruntime_missing() or _openvino_missing(),
            ("model.onnx",),
        ),
        ServingPath(
            "openvino-bf16",
            "OpenVINO, plain graph, bf16 inference, length buckets",
            _write_plain_onnx,
            _open_openvino("bf16"),
            _bf16_missing(lambda: _onnxruntime_missing() or _openvino_missing()),
            ("model.onnx",),
        ),
    )
}
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

    def __init__(self, folder: str | os.PathLike, threads: int | None = None, allow_compiled: bool = False):
        from transformers import AutoConfig, AutoTokenizer

        folder = Path(folder)
        self.info = read_serving_info(folder)
        check_threads(threads)
        self.path = serving_path(self.info["path"])
        self.config = AutoConfig.from_pretrained(folder)  # BERT's, beside an ONNX graph
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if len(self.tokenizer) > self.config.vocab_size:
            raise ValueError(
                f"the tokenizer in {folder} has {len(self.tokenizer)} tokens, more than config.json's "
                f"vocab_size={self.config.vocab_size}"
            )
        self.logits = self.path.open(
            folder, threads if threads is not None else self.info.get("threads"), allow_compiled
        )
        self.max_length = min(self.config.max_position_embeddings, self.tokenizer.model_max_length)

    def scores(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """(len(texts), num_labels) probabilities: softmax, or sigmoid for multi-label and one-label heads (as the
        pipeline's default function_to_apply)."""
        check_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a whole number of at least 1")
        rows = []
        for start in range(0, len(texts), batch_size):
            encoded = self.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="np",
            )
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
        ranked = [
            [{"label": self.config.id2label[int(i)], "score": float(row[i])} for i in np.argsort(-row)[:k]]
            for row in scores
        ]
        if top_k == 1:
            return [r[0] for r in ranked]
        return ranked[0] if single else ranked


def read_serving_info(folder: Path) -> dict:
    """`serving.json` of a ready folder: a JSON object naming its path, and its thread count (or null); one line
    naming the file otherwise."""
    info_file = folder / SERVING_FILE
    if not info_file.is_file():
        raise FileNotFoundError(
            f"{folder} is not a serving folder (no {SERVING_FILE}); write one with `minibert benchmark-deploy`"
        )
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{info_file} is not valid JSON ({err})") from None
    if not isinstance(info, dict) or not isinstance(info.get("path"), str):
        raise ValueError(
            f'{info_file} must be a JSON object whose "path" names a serving path '
            f"({', '.join(SERVING_PATHS)}); it holds {type(info).__name__} {str(info)[:80]}"
        )
    check_threads(info.get("threads"), f"{info_file}: ")
    return info


def check_threads(threads: object, where: str = "") -> None:
    """ValueError unless `threads` is None or a whole number from 1 to this machine's CPUs."""
    cpus = os.cpu_count() or 1
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cpus):
        raise ValueError(f"{where}threads={threads!r} must be between 1 and this machine's {cpus} CPUs")


def check_texts(texts: object) -> None:
    """TypeError in one line unless `texts` is a list (or sequence) of strings: a bare string would be read as its
    characters."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"texts is one {type(texts).__name__}: pass a list of texts (a list with one text for one)")
    for number, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text #{number} is {type(text).__name__} {str(text)[:40]!r}, not a str")


def load_serving(
    folder: str | os.PathLike, threads: int | None = None, *, allow_compiled: bool = False
) -> ServingClassifier:
    """The ready folder `minibert benchmark-deploy` wrote, as a pipeline: `load_serving(folder)("a fine film")`.
    A folder of the compiled path is native code: it opens where this user compiled it (`benchmark-deploy` here),
    else only with `allow_compiled=True` (`compiled.load_compiled`)."""
    return ServingClassifier(folder, threads, allow_compiled)


__all__ = [
    "REFERENCE",
    "SERVING_PATHS",
    "ServingClassifier",
    "ServingPath",
    "check_threads",
    "load_serving",
    "read_serving_info",
    "serving_path",
]
