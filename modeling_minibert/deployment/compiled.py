"""A Mini-BERT compiled ahead of time for this CPU: AOTInductor's package of the model, `model.pt2`, beside its
config and tokenizer.

torch.export traces the padded encoder with dynamic batch and sequence axes (as the ONNX export does: unpadding is
data-dependent and cannot be traced), and AOTInductor compiles the graph with its weights frozen into C++ kernels
for this machine's instruction set, packaged with the weights. It runs without the eager model's per-module Python
dispatch, which is much of a single request's time for a model this small; like the ONNX paths, it is given mixed
batches in length buckets (`serving_paths`).

What it costs: a C++ compiler where it is compiled (AOTInductor calls one), about half a minute of compiling, and
a file bound to the torch version and the CPU capability (AVX2, AVX-512, AMX...) it was compiled for.
`compiled.json` records both, and a package from another is refused in one line rather than run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from modeling_minibert.deployment.onnx_graph import (
    INPUT_NAMES,
    TOLERANCE,
    _TupleOutputs,
    example_inputs,
    load_for_export,
)
from modeling_minibert.utils.files import check_output_dir, staged_folder

PACKAGE_FILE = "model.pt2"
BUILD_FILE = "compiled.json"  # what the package was compiled with: torch's version, the CPU capability


def compiler_missing() -> str | None:
    """Why AOTInductor cannot compile here (no C++ compiler on PATH), or None."""
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None and shutil.which("clang++") is None:
        return f"no C++ compiler ({compiler} or clang++) on PATH: AOTInductor compiles the model to C++"
    return None


def this_build() -> dict:
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def compile_model(model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, *, head: str | None = None,
                  overwrite_output_dir: bool = False) -> Path:
    """Write `output_dir`: `model.pt2` (the model in `model_name_or_path`, its own head or `head`, compiled for this
    CPU), `compiled.json`, the config and the tokenizer files. The package is checked against the eager model
    (within 1e-4 at real tokens) before the folder appears; nothing is left behind when anything fails."""
    from modeling_minibert.deployment.onnx_export import serving_config
    from modeling_minibert.sharing.folder import copy_tokenizer_files

    folder, output = Path(model_name_or_path), Path(output_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    why = compiler_missing()
    if why:
        raise RuntimeError(why)
    check_output_dir(output, overwrite_output_dir, inputs={"model_name_or_path": folder}, job="compile_model")
    model = load_for_export(folder, head)
    if type(model).__name__ == "MiniBertForMultipleChoice":
        raise ValueError("compile_model takes (batch, sequence) inputs; MiniBertForMultipleChoice's are "
                         "(batch, choice, sequence): export it with `minibert export-onnx` instead")
    with staged_folder(output) as staging:
        package = staging / PACKAGE_FILE
        _compile(model, package)
        check_against_eager(model, package)
        serving_config(model, folder).to_json_file(staging / "config.json")
        (staging / BUILD_FILE).write_text(json.dumps(this_build(), indent=2) + "\n", encoding="utf-8")
        copy_tokenizer_files(folder, staging)
    return output


def _compile(model, package: Path) -> None:
    inputs = example_inputs(model.config, 2, min(16, model.config.max_position_embeddings), None)
    axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence", max=model.config.max_position_embeddings)}
    with torch.no_grad():
        program = torch.export.export(_TupleOutputs(model).eval(), inputs,
                                      dynamic_shapes={name: axes for name in INPUT_NAMES})
    # freezing: weights become constants the compiler folds and packs for its matrix kernels.
    torch._inductor.aoti_compile_and_package(program, package_path=str(package), inductor_configs={"freezing": True})


def check_against_eager(model, package: Path) -> float:
    """The largest difference between the package's outputs and the eager model's, at real tokens, on a batch of
    another shape than the trace's; ValueError beyond 1e-4."""
    runner = torch._inductor.aoti_load_package(str(package))
    ids, mask, types = example_inputs(model.config, 3, min(11, model.config.max_position_embeddings), None, seed=1)
    with torch.inference_mode():
        got = runner(ids, mask, types)
        expected = [v for v in model(ids, attention_mask=mask, token_type_ids=types).values() if v is not None]
    worst = 0.0
    for e, g in zip(expected, got):
        if e.dim() >= 2 and e.shape[:2] == mask.shape:
            e, g = e[mask.bool()], g[mask.bool()]
        worst = max(worst, float((e - g).abs().max()))
    if worst > TOLERANCE:
        raise ValueError(f"{package}: the compiled model differs from PyTorch by {worst:.2e} (> {TOLERANCE:.0e})")
    return worst


def load_compiled(folder: str | os.PathLike):
    """The package in `folder` (from `compile_model`) as a callable (input_ids, attention_mask, token_type_ids) ->
    the outputs' tensors; refused in one line when it was compiled with another torch or for another CPU."""
    folder = Path(folder)
    build_file = folder / BUILD_FILE
    if not (folder / PACKAGE_FILE).is_file() or not build_file.is_file():
        raise FileNotFoundError(f"{folder} holds no compiled model ({PACKAGE_FILE} and {BUILD_FILE}); write one "
                                "with modeling_minibert.deployment.compile_model")
    built, here = json.loads(build_file.read_text(encoding="utf-8")), this_build()
    if built != here:
        raise RuntimeError(f"{folder} was compiled with torch {built.get('torch')} for {built.get('cpu_capability')}; "
                           f"this is torch {here['torch']} on {here['cpu_capability']}: compile it again here")
    return torch._inductor.aoti_load_package(str(folder / PACKAGE_FILE))


__all__ = ["compile_model", "load_compiled"]
