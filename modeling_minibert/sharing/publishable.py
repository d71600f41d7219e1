"""What a folder must hold to be published whole, for its kind, and that its files are what their names say.

`folder.published_files` chooses files by name; a repository made of them must still load for its consumer, so
before anything goes up `minibert push` checks (`check_publishable`), each refusal one line naming the file:

    a model        its weights: model.safetensors, or every shard its index names
    an ONNX graph  every external data file it names (any name, inside the folder), published beside it
    compiled       model.pt2 and compiled.json: native code, published only when asked (`allow_compiled`)
    serving        serving.json, and every file it lists as its path's (what `load_serving` reads)
    results        JSON files that parse, PNG files that are PNG images, a metrics log of JSON lines, each of a
                   bounded size: a blob named like a results file is not published as one

and returns the files to publish besides the chosen ones (external data, the serving path's files); then each
file's contents are checked (`check_contents`).
"""

from __future__ import annotations

import json
from pathlib import Path

from modeling_minibert.utils.outputs import (
    COMPILED_BUILD_FILE,
    COMPILED_PACKAGE_FILE,
    METRICS_FILE,
    SERVING_FILE,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_RESULTS_BYTES = 16 << 20  # a results file, a job's arguments, a metrics log: text of a few KB to a few MB


def _inside(folder: Path, name: object, what: str) -> str:
    """`name` as a folder-relative path of a file that is there; ValueError naming `what` lists it otherwise."""
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(("/", "\\"))
        or ".." in name.replace("\\", "/").split("/")
    ):
        raise ValueError(f"{what} names {name!r}, which is not a file inside {folder}")
    if not (folder / name).is_file():
        raise ValueError(f"{what} names {name}, which {folder} does not hold: it would be published without it")
    return name


def external_data(folder: Path, graph: str) -> list[str]:
    """The external data files the ONNX graph `graph` (folder-relative) names, each checked to be in the folder."""
    try:
        import onnx
    except ImportError:
        raise ValueError(
            f"{folder / graph}: checking that an ONNX graph is published with its external data needs the "
            "onnx package (the [onnx] extra)"
        ) from None
    try:
        model = onnx.load(str(folder / graph), load_external_data=False)
    except Exception as err:  # noqa: BLE001 - protobuf's and onnx's errors alike mean "not a graph"
        raise ValueError(
            f"{folder / graph} is not an ONNX graph: {str(err).splitlines()[0] if str(err) else err!r}"
        ) from None
    names = []
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = {entry.key: entry.value for entry in tensor.external_data}.get("location")
            names.append((Path(graph).parent / str(location)).as_posix() if location else location)
    return sorted({_inside(folder, name, f"{folder / graph} (external data of {tensor.name})") for name in names})


def serving_files(folder: Path) -> list[str]:
    """serving.json's own check: a JSON object naming its path, and each file it lists."""
    path = folder / SERVING_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(info, dict) or not isinstance(info.get("path"), str):
        raise ValueError(f"{path} must be a JSON object naming its serving path; it holds {type(info).__name__}")
    listed = info.get("files", [])
    if not isinstance(listed, list):
        raise ValueError(f"{path}: files must be a list of the folder's files, not {type(listed).__name__}")
    return [_inside(folder, name, str(path)) for name in listed]


def check_contents(folder: Path, path: str, shown: object = None) -> None:
    """A results-kind file is what its name says: JSON that parses, a PNG image, JSON lines; bounded in size.
    `shown`: the file as the user knows it (default: folder/path)."""
    file, name = folder / path, Path(path).name
    shown = shown or file
    if name.endswith(".png"):
        with open(file, "rb") as f:
            if f.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
                raise ValueError(f"{shown} is not a PNG image (its first bytes are not PNG's): rename or remove it")
        return
    if not name.endswith((".json", ".jsonl")):
        return
    size = file.stat().st_size
    results = name.endswith(("_results.json", "_args.json", ".jsonl")) or name == "metrics.json"
    if results and size > MAX_RESULTS_BYTES:
        raise ValueError(
            f"{shown} has {size:,} bytes, more than a results file holds ({MAX_RESULTS_BYTES:,}): rename or remove it"
        )
    try:
        text = file.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines() if name == METRICS_FILE else [text], 1):
            if line.strip() or name != METRICS_FILE:
                json.loads(line)
    except (UnicodeDecodeError, ValueError) as err:
        where = f" line {number}" if name == METRICS_FILE else ""
        raise ValueError(f"{shown}{where} is not JSON ({str(err)[:80]}): rename or remove it") from None


def check_publishable(folder: Path, paths: list[str], allow_compiled: bool = False) -> list[str]:
    """Refuse a folder whose chosen files (`paths`) would not load for its kind (see the module's docstring);
    return the files to publish beside them."""
    extra: list[str] = []
    compiled = [name for name in (COMPILED_PACKAGE_FILE, COMPILED_BUILD_FILE) if (folder / name).is_file()]
    if compiled and not allow_compiled:
        raise ValueError(
            f"{folder} holds a compiled model ({COMPILED_PACKAGE_FILE}: native code, which runs as "
            "soon as it is loaded); pass allow_compiled=True (--allow_compiled) to publish it: whoever "
            "loads it must then trust you, and pass allow_compiled=True too"
        )
    if compiled:
        extra += [
            _inside(folder, name, f"{folder} (a compiled model)")
            for name in (COMPILED_PACKAGE_FILE, COMPILED_BUILD_FILE)
        ]
    if (folder / SERVING_FILE).is_file():
        extra += [SERVING_FILE, *serving_files(folder)]
    for path in paths + extra:
        if path.endswith(".onnx"):
            extra += external_data(folder, path)
    chosen = set(paths) | set(extra)
    index = folder / "model.safetensors.index.json"
    if "model.safetensors.index.json" in chosen:
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{index} is not a safetensors index: {err!r}") from None
        extra += [_inside(folder, shard, str(index)) for shard in sorted(shards)]
    model = [p for p in chosen if p.endswith((".safetensors", ".onnx", ".pt2")) or p.endswith(".bin")]
    if not model:
        raise ValueError(f"{folder} holds no model to publish: no model.safetensors, ONNX graph or compiled model")
    return sorted(set(extra) - set(paths))


__all__ = ["check_contents", "check_publishable", "external_data", "serving_files"]
