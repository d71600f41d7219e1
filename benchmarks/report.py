"""What every benchmark writes beside its numbers, so that a figure can be traced to its run.

A results file is JSON with a `run` block (RUN_FIELDS: the command that reproduces it, the date, the machine's
core count and CPU, the Python and library versions) next to the benchmark's own payload. A field the run did
not record is null (files written before the block existed carry what they recorded, and a `note` saying so).
Tables are rendered from these files by each benchmark's `readme_table(results)`.

Benchmarks write under runs/benchmarks/ unless `--output` says otherwise, so that running one never replaces a
committed file in benchmarks/results/ by accident.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"  # the committed results
RUNS = ROOT / "runs" / "benchmarks"  # where a benchmark writes unless told otherwise (git-ignored)
LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "scikit-learn")
RUN_FIELDS = ("command", "date", "cpu_count", "machine", "cpu", "python", "versions")


def default_output(name: str) -> Path:
    """Where a benchmark's results go when `--output` is not given: runs/benchmarks/NAME.json."""
    return RUNS / f"{name}.json"


def command_line(module: str, argv: list[str] | None = None) -> str:
    """`python -m MODULE ARGS`: the command that reproduces a run from the repository root (ARGS: `argv`, or this
    process's own arguments)."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def run_info(command: str | None = None) -> dict:
    """The command that made a result (default: this process's, as it was typed), when, and on what."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    if command is None:
        command = "python " + shlex.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    return {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "versions": versions,
    }


def cpu_model() -> str:
    """The CPU's model name and the vector extensions that decide torch's speed on it: machines of the same core
    count differ several-fold (an AVX2-only AMD EPYC of 2017 against an AVX-512 one)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)  # the last core's; all alike
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    extensions = [x for x in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if x in flags]
    family = f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return f"{fields.get('model name', platform.processor())} ({family}; {', '.join(extensions) or 'no AVX2'})"


def cpu_kind(cpu: str) -> str:
    """`cpu_model()`'s description shortened to the name, family/model and the instructions that decide which path
    is fast: 'AMD EPYC (family 25 model 1; avx2)' -> 'AMD EPYC 25/1: AVX2 only'."""
    name, _, rest = cpu.partition(" (")
    ids, _, flags = rest.rstrip(")").partition("; ")
    name = name.replace("(R)", "").replace(" Processor", "")
    family_model = "/".join(ids.replace("family ", "").split(" model "))
    kinds = [
        kind
        for flag, kind in (("amx", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512_vnni", "AVX-512 VNNI"))
        if flag in flags
    ]
    return f"{name} {family_model}: {', '.join(kinds) if kinds else 'AVX2 only'}"


def write_results(path: str | os.PathLike, payload: dict, command: str | None = None) -> Path:
    """Write `payload` with its `run` block (`run_info(command)`) as JSON, atomically; returns the path. A payload
    that carries a `run` of its own (rows added to an earlier run's file) keeps it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"run": run_info(command), **payload}, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def check_results(results: dict) -> None:
    """ValueError unless `results` is in the one format: a `run` block with every field of RUN_FIELDS."""
    run = results.get("run")
    if not isinstance(run, dict):
        raise ValueError("no `run` block")
    missing = [name for name in RUN_FIELDS if name not in run]
    if missing:
        raise ValueError(f"the `run` block lacks {', '.join(missing)}")
    if not (isinstance(run["command"], str) or run.get("note")):
        raise ValueError("the `run` block names no command and no note saying why")


def markdown_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A GitHub table; `align` has one character per column, "l" or "r" (default: all left)."""
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [header, rule, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
