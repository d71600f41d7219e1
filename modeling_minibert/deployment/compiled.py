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

A package is native code: its shared library runs as soon as it is loaded, like a pickle but worse (nothing in
torch restricts it). `load_compiled` loads a package only when this user compiled it on this machine, which
`compile_model` records by the package's SHA-256 in this user's cache folder (`files.cache_folder()`, outside the
model folder: someone who can only write the folder cannot forge it; the copy that was hashed is the one loaded),
or when the caller passes `allow_compiled=True` (a package from elsewhere, whose writer the caller trusts). Before
torch's loader extracts it, the archive is checked entry by entry: no absolute path, `..` or link, a bounded count
and size, every entry whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

import torch

from modeling_minibert.deployment.onnx_graph import (
    INPUT_NAMES,
    TOLERANCE,
    _TupleOutputs,
    example_inputs,
    load_for_export,
)
from modeling_minibert.utils.files import cache_folder, check_output_dir, staged_folder
from modeling_minibert.utils.outputs import COMPILED_BUILD_FILE, COMPILED_PACKAGE_FILE

PACKAGE_FILE = COMPILED_PACKAGE_FILE
BUILD_FILE = COMPILED_BUILD_FILE  # what the package was compiled with: torch's version, the CPU capability


def compiler_missing() -> str | None:
    """Why AOTInductor cannot compile here (no C++ compiler on PATH), or None."""
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None and shutil.which("clang++") is None:
        return f"no C++ compiler ({compiler} or clang++) on PATH: AOTInductor compiles the model to C++"
    return None


def this_build() -> dict:
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def compile_model(
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    head: str | None = None,
    overwrite_output_dir: bool = False,
) -> Path:
    """Write `output_dir`: `model.pt2` (the model in `model_name_or_path`, its own head or `head`, compiled for this
    CPU), `compiled.json`, the config and the tokenizer files. The package is checked against the eager model
    (within 1e-4 at real tokens) before the folder appears; nothing is left behind when anything fails."""
    from modeling_minibert.deployment.onnx_export import serving_config
    from modeling_minibert.sharing.folder import copy_tokenizer_files

    folder, output = Path(model_name_or_path), Path(output_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    check_output_dir(output, overwrite_output_dir, inputs={"model_name_or_path": folder}, job="compile_model")
    why = compiler_missing()
    if why:
        raise RuntimeError(why)
    model = load_for_export(folder, head)
    if type(model).__name__ == "MiniBertForMultipleChoice":
        raise ValueError(
            "compile_model takes (batch, sequence) inputs; MiniBertForMultipleChoice's are "
            "(batch, choice, sequence): export it with `minibert export-onnx` instead"
        )
    with staged_folder(output) as staging:
        package = staging / PACKAGE_FILE
        _compile(model, package)
        check_against_eager(model, package)
        record_compiled(package)  # this user compiled it here: it loads here without allow_compiled
        serving_config(model, folder).to_json_file(staging / "config.json")
        (staging / BUILD_FILE).write_text(json.dumps(this_build(), indent=2) + "\n", encoding="utf-8")
        copy_tokenizer_files(folder, staging)
    return output


def _compile(model, package: Path) -> None:
    inputs = example_inputs(model.config, 2, min(16, model.config.max_position_embeddings), None)
    axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence", max=model.config.max_position_embeddings)}
    with torch.no_grad():
        program = torch.export.export(
            _TupleOutputs(model).eval(), inputs, dynamic_shapes=dict.fromkeys(INPUT_NAMES, axes)
        )
    # freezing: weights become constants the compiler folds and packs for its matrix kernels.
    torch._inductor.aoti_compile_and_package(program, package_path=str(package), inductor_configs={"freezing": True})


def check_against_eager(model, package: Path) -> float:
    """The largest difference between the package's outputs and the eager model's, at real tokens, on a batch of
    another shape than the trace's; ValueError beyond 1e-4."""
    runner = _load_package(package)  # just compiled by this process
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


# -- loading: native code, so only what this user compiled here, or what the caller allows -----------------------------
RECORDS = "compiled"  # under files.cache_folder(): one empty file per package this user compiled here, by SHA-256
MAX_ENTRIES = 10_000  # files in a package: a model's are a dozen
MAX_EXPANSION = 4  # bytes extracted per byte of package (AOTInductor stores its files uncompressed)


class NativeCodeRefused(ValueError):
    """A compiled package that was not allowed: it is native code, run as soon as it is loaded."""


def record_compiled(package: Path) -> None:
    """Remember that this user compiled `package` on this machine: an entry named by its SHA-256 in this user's own
    cache folder (not in the model folder, where anyone who can write the folder could forge it)."""
    records = cache_folder() / RECORDS
    records.mkdir(parents=True, exist_ok=True, mode=0o700)
    (records / sha256_of(package)).touch()


def sha256_of(path: Path, copy_to: Path | None = None) -> str:
    """The file's SHA-256, read once; with `copy_to`, the bytes read are written there too (what is hashed is
    then what is loaded: a file swapped in the folder after the check is not the one run)."""
    digest = hashlib.sha256()
    with open(path, "rb") as source, open(copy_to, "xb") if copy_to else contextlib.nullcontext() as copy:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            if copy is not None:
                copy.write(chunk)
    return digest.hexdigest()


def read_build(folder: Path) -> dict:
    """`compiled.json`: a JSON object naming the torch version and CPU capability; ValueError naming the file else."""
    path = folder / BUILD_FILE
    try:
        build = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}): compile the model again") from None
    if not isinstance(build, dict) or not all(isinstance(build.get(key), str) for key in this_build()):
        raise ValueError(
            f"{path} must be a JSON object with the strings {' and '.join(this_build())} (it holds "
            f"{type(build).__name__} {str(build)[:80]}): compile the model again"
        )
    return build


def check_archive(package: Path, shown: Path) -> None:
    """Refuse, naming the entry, a package that is not a whole zip archive whose entries all stay inside the folder
    it is extracted to (no absolute path, no `..`, no link), of a bounded count and size, each matching its CRC:
    torch's loader extracts every entry as named. `shown`: the package as the user knows it."""
    try:
        with zipfile.ZipFile(package) as archive:
            entries = archive.infolist()
            if len(entries) > MAX_ENTRIES:
                raise ValueError(
                    f"{shown} holds {len(entries):,} files (at most {MAX_ENTRIES:,}): not a model package"
                )
            for entry in entries:
                parts = entry.filename.replace("\\", "/").split("/")
                if entry.filename.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
                    raise ValueError(f"{shown} has an entry that leads out of its folder: {entry.filename!r}")
                if stat.S_ISLNK(entry.external_attr >> 16):
                    raise ValueError(f"{shown} has an entry that is a link: {entry.filename!r}")
            size = sum(entry.file_size for entry in entries)
            if size > MAX_EXPANSION * package.stat().st_size + (1 << 20):
                raise ValueError(f"{shown} would extract to {size:,} bytes, {MAX_EXPANSION}x more than it holds")
            broken = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise ValueError(f"{shown} is not a whole AOTInductor package ({err}): compile the model again") from None
    if broken is not None:
        raise ValueError(f"{shown}: the entry {broken!r} is damaged (its CRC does not match): compile the model again")


def _load_package(package: Path):
    """AOTInductor's runner of `package`, extracted into a private folder removed once loaded: torch's loader
    extracts into a new folder of $TMPDIR (kept until the runner is freed, and left behind by a process that never
    frees it). TMPDIR is the one place it reads, so it is set for the call and put back (process-wide state: not
    to be called from several threads at once); the shared library, once loaded, runs without its file."""
    with tempfile.TemporaryDirectory(prefix="minibert-compiled-") as private:
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = private
        try:
            return torch._inductor.aoti_load_package(str(package))
        finally:
            if before is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before


def load_compiled(folder: str | os.PathLike, *, allow_compiled: bool = False):
    """The package in `folder` (from `compile_model`) as a callable (input_ids, attention_mask, token_type_ids) ->
    the outputs' tensors. It is native code, which runs as soon as it loads: loaded when this user compiled it on
    this machine (recorded outside the folder by `compile_model`) or with `allow_compiled=True`, and refused in
    one line otherwise (`NativeCodeRefused`), as it is when it was compiled with another torch or for another CPU,
    or when its archive is damaged or names a file outside its folder."""
    folder = Path(folder)
    build_file, package = folder / BUILD_FILE, folder / PACKAGE_FILE
    if not package.is_file() or not build_file.is_file():
        raise FileNotFoundError(
            f"{folder} holds no compiled model ({PACKAGE_FILE} and {BUILD_FILE}); write one "
            "with modeling_minibert.deployment.compile_model"
        )
    built, here = read_build(folder), this_build()
    if {key: built[key] for key in here} != here:
        raise RuntimeError(
            f"{folder} was compiled with torch {built.get('torch')} for {built.get('cpu_capability')}; "
            f"this is torch {here['torch']} on {here['cpu_capability']}: compile it again here"
        )
    with tempfile.TemporaryDirectory(prefix="minibert-package-") as private:
        copy = Path(private) / PACKAGE_FILE
        digest = sha256_of(package, copy_to=copy)
        if not allow_compiled and not (cache_folder() / RECORDS / digest).is_file():
            raise NativeCodeRefused(
                f"{package} is native code (a shared library compiled by AOTInductor), which runs as soon as it "
                "loads, and it was not compiled on this machine by you: load it with allow_compiled=True only if "
                "you trust whoever compiled it"
            )
        check_archive(copy, package)
        return _load_package(copy)


__all__ = ["NativeCodeRefused", "compile_model", "load_compiled", "record_compiled"]
