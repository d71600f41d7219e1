"""Run an exported Mini-BERT with onnxruntime on mixed-length batches without computing the padding.

The exported graph is the padded encoder: given a (B, T) batch, onnxruntime computes every layer at all B * T
positions. Mini-BERT's own unpadding is data-dependent and cannot be exported, and onnxruntime's packed-input
attention (PackedAttention) exists only for CUDA. What does carry over is the grouping: sequences sorted by length
and run in buckets, each cut to its own longest length rounded up to `Packing.BUCKET_STEP`, so that most of the
padding is never sent to the graph. Outputs come back in the caller's order and shape (zeros at padding).

Needs the [onnx] extra; onnxruntime is imported when a session is made.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from modeling_minibert.modeling_minibert import Packing
from modeling_minibert.utils.cpus import cpu_quota, usable_cpus

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def graph_file(path: str | os.PathLike) -> Path:
    """The graph `path` names: an .onnx file, or an `export-onnx` folder holding one (`model.onnx` or
    `model_quantized.onnx`); FileNotFoundError naming the folder when it holds none or several."""
    path = Path(path)
    if not path.is_dir():
        return path
    graphs = sorted(path.glob("*.onnx"))
    if len(graphs) != 1:
        found = ", ".join(g.name for g in graphs) or "none"
        raise FileNotFoundError(f"{path} must hold one .onnx graph (found: {found}); name the file instead")
    return graphs[0]


def make_session(path: str | os.PathLike, threads: int | None = None):
    """An onnxruntime CPU session for the graph at `path` (a file, or a folder `graph_file` finds it in);
    `threads` sets its intra-op threads (default: onnxruntime's, one per core, but no more than a container's CPU
    quota grants: onnxruntime counts the host's cores there, and its threads would be throttled)."""
    import onnxruntime

    if threads is None and cpu_quota() is not None:
        threads = usable_cpus()
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(graph_file(path)), options, providers=["CPUExecutionProvider"])


def extents(attention_mask: np.ndarray) -> np.ndarray:
    """(B,) each row's extent in a (B, T) mask: up to its last real token (0 for a row without tokens)."""
    real = attention_mask != 0
    return np.where(real.any(1), attention_mask.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def length_buckets(
    attention_mask: np.ndarray, step: int = Packing.BUCKET_STEP, limit: int | None = None
) -> list[tuple[np.ndarray, int]]:
    """The rows of a (B, T) mask grouped by extent (up to the last real token, so left padding and holes are kept)
    rounded up to `step` (but not past `limit`, the graph's positions): [(row indices, bucket length), ...],
    longest first. Rows without tokens join the shortest bucket (a graph needs at least one position)."""
    seq_len = min(attention_mask.shape[1], limit or attention_mask.shape[1])
    rounded = np.minimum(np.maximum(-(-extents(attention_mask) // step) * step, step), seq_len)
    return [(np.flatnonzero(rounded == length), int(length)) for length in sorted(set(rounded.tolist()), reverse=True)]


# The embedding tables an exported Mini-BERT or BERT graph keeps under their PyTorch names (ONNX initializers), and
# what each bounds: a token id must be a row of the word embeddings, a segment id one of the token-type
# embeddings, a position one of the position embeddings.
EMBEDDING_TABLES = {
    "input_ids": ("word_embeddings.weight", "vocab_size"),
    "token_type_ids": ("token_type_embeddings.weight", "type_vocab_size"),
    "positions": ("position_embeddings.weight", "max_position_embeddings"),
}


def config_limits(config) -> dict[str, tuple[int, str]]:
    """The same bounds as `embedding_limits`, from a model's config (for a graph whose tables cannot be read)."""
    return {name: (int(getattr(config, field)), field) for name, (_, field) in EMBEDDING_TABLES.items()}


def embedding_limits(path: str | os.PathLike) -> dict[str, tuple[int, str]]:
    """{"input_ids" | "token_type_ids" | "positions": (rows, the config field it is)} from the graph's embedding
    tables, read without their data (external data is not loaded); a table the graph does not name so is left out
    (and its input unchecked)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found = {}
    for initializer in graph.initializer:
        for name, (suffix, field) in EMBEDDING_TABLES.items():
            if initializer.name.endswith(suffix) and len(initializer.dims) == 2:
                found[name] = (int(initializer.dims[0]), field)
    return found


class LengthBucketedSession:
    """`session.run` for padded (B, T) numpy inputs, run bucket by bucket (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None, step: int = Packing.BUCKET_STEP):
        self.session = make_session(path, threads)
        self.step = step
        self.limits = embedding_limits(graph_file(path))
        self.output_names = [output.name for output in self.session.get_outputs()]
        # Per-token outputs are those whose second axis is the inputs' (symbolic) sequence axis.
        sequence_axis = self.session.get_inputs()[0].shape[1]
        self.per_token = [len(o.shape) >= 2 and o.shape[1] == sequence_axis for o in self.session.get_outputs()]

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray, token_type_ids: np.ndarray) -> list[np.ndarray]:
        """Outputs as `session.run(None, inputs)` returns them for the whole batch: per-token outputs (B, T, ...)
        with zeros at positions cut off, per-sequence outputs (B, ...). Inputs the graph cannot take (`checked`)
        are refused before it runs: ValueError, one line."""
        input_ids, attention_mask, token_type_ids = self.checked(input_ids, attention_mask, token_type_ids)
        batch_size, seq_len = input_ids.shape
        results: list[np.ndarray | None] = [None] * len(self.output_names)
        for rows, length in length_buckets(attention_mask, self.step, self.limits.get("positions", (None,))[0]):
            feed = {
                name: np.ascontiguousarray(array[rows, :length])
                for name, array in zip(INPUT_NAMES, (input_ids, attention_mask, token_type_ids))
            }
            for k, out in enumerate(self.session.run(None, feed)):
                per_token = self.per_token[k]
                if results[k] is None:
                    shape = (batch_size, seq_len, *out.shape[2:]) if per_token else (batch_size, *out.shape[1:])
                    results[k] = np.zeros(shape, dtype=out.dtype)
                if per_token:
                    results[k][rows, :length] = out
                else:
                    results[k][rows] = out
        return results

    def checked(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """`check_graph_inputs` with the graph's own embedding tables."""
        return check_graph_inputs(self.limits, *arrays)


def check_graph_inputs(limits: dict[str, tuple[int, str]], *arrays: np.ndarray) -> list[np.ndarray]:
    """The three inputs as a graph's int64 arrays; ValueError, one line naming the input and the limit, for
    one that is not a (B, T) array of integers like input_ids, an empty batch, an id outside the `limits` of
    the graph's embedding tables (`embedding_limits`; negative ids too: onnxruntime's and OpenVINO's Gather
    read them from the end), or a row whose tokens reach past its positions. A graph would fail deep inside a
    Gather, or answer silently from another row of a table. Every serving path checks its inputs so."""
    arrays = [np.asarray(a) for a in arrays]
    shape = arrays[0].shape
    for name, array in zip(INPUT_NAMES, arrays):
        if array.ndim != 2 or array.shape != shape:
            raise ValueError(
                f"{name} has shape {array.shape}, input_ids {shape}: each must be a (batch, sequence) array "
                "of the same shape"
            )
        if not (np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):
            raise ValueError(f"{name} holds {array.dtype} values: ids and masks are integers")
    if 0 in shape:
        raise ValueError(f"input_ids has shape {shape}: the batch is empty")
    for name, array in zip(INPUT_NAMES, arrays):
        if name in limits:
            rows, field = limits[name]
            low, high = int(array.min()), int(array.max())
            if low < 0 or high >= rows:
                raise ValueError(
                    f"{name} contains {low if low < 0 else high}, outside the graph's embeddings "
                    f"({field}={rows}: 0 to {rows - 1})"
                )
    if "positions" in limits:
        positions, field = limits["positions"]
        longest = int(extents(arrays[1]).max())
        if longest > positions:
            raise ValueError(
                f"row {int(extents(arrays[1]).argmax())} has tokens up to position {longest} (sequence "
                f"length {shape[1]}); the graph's position table holds {field}={positions}"
            )
    return [array.astype(np.int64, copy=False) for array in arrays]


__all__ = [
    "LengthBucketedSession",
    "check_graph_inputs",
    "config_limits",
    "embedding_limits",
    "graph_file",
    "length_buckets",
    "make_session",
]
