"""How much CPU this process may use: the cores it may run on and, in a container, the CPU time its quota grants.

    usable_cores()     the cores of its CPU affinity (which `taskset`, `docker --cpuset-cpus` and Kubernetes'
                       static CPU manager narrow): the most threads that can run at once
    cpu_quota()        the cores' worth of CPU time its cgroup's quota grants (`docker --cpus 2.5`, a Kubernetes
                       CPU limit), or None without one
    usable_cpus()      the two together: the threads worth running (at least 1)

A quota does not narrow the affinity: a container limited to 2 CPUs on a 64-core host still sees 64 cores, and 64
threads there get 2 cores' worth of time, throttled in every scheduler period. torch and onnxruntime count the
cores only (as does `os.process_cpu_count`), so the quota is read here, from the cgroup files the kernel mounts
in the container: cgroup v2's `cpu.max` ("250000 100000": 250 ms per 100 ms, 2.5 CPUs; "max": none) and cgroup
v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none).
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")  # where the kernel mounts the process's own cgroup (the container's, inside one)
# Where cgroup v1 mounts the cpu controller under CGROUP (a name joins the controllers mounted together).
CGROUP_V1_CPU = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cores() -> set[int]:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # macOS, Windows
        return set(range(os.cpu_count() or 1))


def cpu_quota(cgroup: Path | None = None) -> float | None:
    """The cores' worth of CPU time the cgroup at `cgroup` (default: `CGROUP`) may use, from cgroup v2's `cpu.max`
    or cgroup v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us`; None where there is no quota (or no such file)."""
    root = CGROUP if cgroup is None else Path(cgroup)
    limits = [_read_pair(root / "cpu.max", None)]  # "QUOTA PERIOD", QUOTA "max" without a limit
    limits += [
        _read_pair(root / name / "cpu.cfs_quota_us", root / name / "cpu.cfs_period_us") for name in CGROUP_V1_CPU
    ]
    limits += [_read_pair(root / "cpu.cfs_quota_us", root / "cpu.cfs_period_us")]  # v1 mounted at the root
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _read_pair(quota_file: Path, period_file: Path | None) -> float | None:
    """quota / period from one file ("QUOTA PERIOD", cgroup v2) or two (cgroup v1); None for no limit ("max",
    -1), a missing or unreadable file, or values that are not positive integers."""
    try:
        words = quota_file.read_text().split()
        if period_file is not None:
            words += period_file.read_text().split()
        quota, period = int(words[0]), int(words[1])
    except (OSError, ValueError, IndexError):  # "max" does not parse: no limit
        return None
    return quota / period if quota > 0 and period > 0 else None


def usable_cpus(cgroup: Path | None = None) -> int:
    """The threads worth running: the usable cores, no more than the CPU quota (rounded down, at least 1)."""
    cores = len(usable_cores())
    quota = cpu_quota(cgroup)
    return max(1, min(cores, int(quota))) if quota is not None else cores


def check_thread_count(name: str, threads: int) -> None:
    """ValueError in one line when `threads` (the option `name`) exceeds the cores this process may run on: threads
    beyond them only wait for one another (and thousands of them crash the OpenMP runtime)."""
    cores = len(usable_cores())
    if threads > cores:
        raise ValueError(
            f"{name}={threads} exceeds the {cores} CPU cores this process may run on; use at most {cores} "
            "(0 chooses by how busy they are)"
        )


__all__ = ["CGROUP", "check_thread_count", "cpu_quota", "usable_cores", "usable_cpus"]
