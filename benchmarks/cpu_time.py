"""CPU and wall-clock minutes of a benchmark's stages: a block in this process (`Stage`), or a child process
(`run_child`). CPU time counts every thread, so a stage's minutes compare across thread counts as a budget does."""

from __future__ import annotations

import resource
import subprocess
import time


class Stage:
    """CPU and wall-clock time of a block: `with Stage() as s: ...; s.cpu_minutes`."""

    def __enter__(self) -> Stage:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.cpu_minutes = (time.process_time() - self.cpu) / 60
        self.wall_minutes = (time.perf_counter() - self.wall) / 60


def run_child(command: list[str]) -> float:
    """Run `command` (its output shown as it comes); its CPU minutes, user and system, all threads.
    CalledProcessError if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / 60
