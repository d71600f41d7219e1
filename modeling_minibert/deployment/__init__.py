"""Deployment: a trained folder put to work.

mask_filling.py         `fill_mask`: try a pretrained model, the top predictions for [MASK]
sentence_embeddings.py  mean-pooled sentence embeddings, and the files `SentenceTransformer(folder)` reads
quantization.py         int8 in PyTorch, saved and reloaded as safetensors
onnx_graph.py           the ONNX graph: traced, optimized, quantized, checked against PyTorch
onnx_export.py          `export_onnx`: a folder -> ONNX (or, with format='transformers.js', the browser's layout)
transformers_js.py      the folder transformers.js loads
compiled.py             `compile_model`: the model compiled ahead of time for this CPU (AOTInductor)
onnx_session.py         onnxruntime on mixed-length batches without computing the padding
serving_paths.py        the ways to serve a classifier on CPU (PyTorch, onnxruntime, OpenVINO), `load_serving`
serving_benchmark.py    `benchmark_deploy`: measure every path on this machine, keep the fastest
long_texts.py           `classify_long_texts`: texts longer than the model reads, classified over windows

from modeling_minibert.deployment import export_onnx, quantize, encode
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "mask_filling": ("fill_mask",),
        "sentence_embeddings": ("encode", "write_sentence_transformers_files"),
        "quantization": ("quantize", "load_quantized"),
        "onnx_export": ("export_onnx",),
        "onnx_session": ("LengthBucketedSession",),
        "compiled": ("compile_model", "load_compiled"),
        "serving_paths": ("load_serving",),
        "serving_benchmark": ("benchmark_deploy",),
        "long_texts": ("classify_long_texts",),
    },
)
