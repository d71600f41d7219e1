"""What every benchmark writes beside its numbers, so that a README figure can be traced to its run.

A results file under `benchmarks/results/` is JSON with a `run` block (the command, the date, the machine's core
count, the library versions) next to the benchmark's own payload. The README's tables are rendered from these
files by each benchmark's `readme_table(results)`, and tests/test_readme.py checks that they still match.
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

RESULTS = Path(__file__).resolve().parent / "results"
LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "scikit-learn")


def run_info() -> dict:
    """The command that made a result, when, and on what."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "command": "python " + shlex.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
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


def write_results(path: str | os.PathLike, payload: dict) -> Path:
    """Write `payload` with its `run` block as JSON, atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"run": run_info(), **payload}, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def markdown_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A GitHub table; `align` has one character per column, "l" or "r" (default: all left)."""
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [header, rule, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
