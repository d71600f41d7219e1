"""Deployment: a trained folder put to work.

    mask_filling.py         `fill_mask`: try a pretrained model, the top predictions for [MASK]
    sentence_embeddings.py  mean-pooled sentence embeddings, and the files `SentenceTransformer(folder)` reads
    quantization.py         int8 in PyTorch, saved and reloaded as safetensors
    onnx_graph.py           the ONNX graph: traced, optimized, quantized, checked against PyTorch
    onnx_export.py          `export_onnx`: a folder -> ONNX (or, with format='transformers.js', the browser's layout)
    transformers_js.py      the folder transformers.js loads
    onnx_session.py         onnxruntime on mixed-length batches without computing the padding

    from modeling_minibert.deployment import export_onnx, quantize, encode
"""

from modeling_minibert.utils.lazy import lazy_names

_NAMES = {
    "fill_mask": "mask_filling",
    "encode": "sentence_embeddings",
    "write_sentence_transformers_files": "sentence_embeddings",
    "quantize": "quantization",
    "load_quantized": "quantization",
    "export_onnx": "onnx_export",
    "LengthBucketedSession": "onnx_session",
}
__getattr__ = lazy_names(__name__, _NAMES)
__all__ = list(_NAMES)
