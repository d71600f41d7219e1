"""Choices made by measuring this machine, once, and remembered: which of a few ways to run is the fastest here.

Which way wins depends on the CPU in ways its flags do not tell: a CPU that lists AVX-512 BF16 but has no bf16
matrix units runs bf16 autocast slower than float32 (0.73x on such a Xeon), one with them about twice as fast. So
`fastest` times each candidate on a short workload, interleaved (so a neighbour's burst hits all of them alike), and
keeps the winner in a small JSON file keyed by what was measured, the CPU, torch's version and the thread count:
later runs on the same machine read the answer instead of measuring again. A machine whose answer must not be
measured (a shared CI box, a reproducible run) says so with the job's explicit setting (`bf16` or `no`), not `auto`.

The file lives in `$MINIBERT_CACHE` or else `$HF_HOME/minibert` (huggingface_hub's cache root), as
`measured.json`. It is advisory: an unreadable file is measured over, an unwritable folder only costs the next run
its measurement.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from modeling_minibert.utils.files import cache_folder, write_json

ROUNDS = 5  # timed calls per candidate, interleaved; the median decides
# A candidate other than the first (the plain way) must be this much faster to be chosen: two ways within noise
# of each other keep the plain one, whose results need no caveat.
MARGIN = 0.9


def cache_file() -> Path:
    """Where the answers are kept: `$MINIBERT_CACHE/measured.json`, else under huggingface_hub's `HF_HOME`."""
    return cache_folder() / "measured.json"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows where there is none."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), name)
    except OSError:
        return name


def machine() -> str:
    """What the answer depends on besides the workload: the CPU's name and instructions, torch, the threads."""
    name = cpu_name()
    flags = ",".join(sorted(k for k, v in torch.cpu.get_capabilities().items() if v is True))
    return f"{name} [{flags}] torch {torch.__version__} threads {torch.get_num_threads()}"


def _read(path: Path) -> dict:
    try:
        answers = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return answers if isinstance(answers, dict) else {}


def timings(candidates: dict[str, Callable[[], None]], rounds: int = ROUNDS) -> dict[str, float]:
    """Median seconds per call of each candidate, after one warm-up call each, timed in interleaved rounds."""
    for run in candidates.values():
        run()  # first calls allocate and pick kernels
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, run in candidates.items():
            tic = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - tic)
    return {name: statistics.median(values) for name, values in seconds.items()}


def fastest(what: str, candidates: dict[str, Callable[[], None]]) -> str:
    """The name of the fastest of `candidates` (name -> a call doing the workload one way) on this machine, for the
    question `what`; measured once per machine (`machine()`) and remembered in `cache_file()`. The first candidate
    is the plain way: another must beat it by `MARGIN` to be chosen."""
    path, key = cache_file(), f"{what} on {machine()}"
    answers = _read(path)
    known = answers.get(key, {}).get("choice")
    if known in candidates:
        return known
    medians = timings(candidates)
    plain = next(iter(candidates))
    best = min(medians, key=medians.get)
    choice = best if medians[best] < MARGIN * medians[plain] else plain
    answers[key] = {"choice": choice, "seconds": medians, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, answers)
    except OSError:  # advisory: the next run measures again
        pass
    return choice


__all__ = ["cache_file", "cpu_name", "fastest", "machine", "timings"]
