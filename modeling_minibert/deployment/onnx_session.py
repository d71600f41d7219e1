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
    `threads` sets its intra-op threads (default: onnxruntime's, one per core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(graph_file(path)), options, providers=["CPUExecutionProvider"])


def length_buckets(attention_mask: np.ndarray, step: int = Packing.BUCKET_STEP) -> list[tuple[np.ndarray, int]]:
    """The rows of a (B, T) mask grouped by extent (up to the last real token, so left padding and holes are kept)
    rounded up to `step`: [(row indices, bucket length), ...], longest first. Rows without tokens join the
    shortest bucket (a graph needs at least one position)."""
    seq_len = attention_mask.shape[1]
    real = attention_mask != 0
    extents = np.where(real.any(1), seq_len - np.argmax(real[:, ::-1], axis=1), 0)
    rounded = np.minimum(np.maximum(-(-extents // step) * step, step), seq_len)
    return [(np.flatnonzero(rounded == length), int(length)) for length in sorted(set(rounded.tolist()), reverse=True)]


class LengthBucketedSession:
    """`session.run` for padded (B, T) numpy inputs, run bucket by bucket (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None, step: int = Packing.BUCKET_STEP):
        self.session = make_session(path, threads)
        self.step = step
        self.output_names = [output.name for output in self.session.get_outputs()]
        # Per-token outputs are those whose second axis is the inputs' (symbolic) sequence axis.
        sequence_axis = self.session.get_inputs()[0].shape[1]
        self.per_token = [len(o.shape) >= 2 and o.shape[1] == sequence_axis for o in self.session.get_outputs()]

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray, token_type_ids: np.ndarray) -> list[np.ndarray]:
        """Outputs as `session.run(None, inputs)` returns them for the whole batch: per-token outputs (B, T, ...)
        with zeros at positions cut off, per-sequence outputs (B, ...)."""
        batch_size, seq_len = input_ids.shape
        results: list[np.ndarray | None] = [None] * len(self.output_names)
        for rows, length in length_buckets(attention_mask, self.step):
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


__all__ = ["LengthBucketedSession", "graph_file", "length_buckets", "make_session"]
