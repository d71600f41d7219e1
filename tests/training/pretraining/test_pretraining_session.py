"""What a run sets in its process (modeling_minibert/training/pretraining/session.py): the thread policy, and every
setting given back when the run ends."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modeling_minibert.training.pretraining import session
from modeling_minibert.training.pretraining.session import (
    _denormals_flushed,
    busy_cores,
    choose_num_threads,
    cpu_jiffies,
    memory_kept,
    resolve_num_threads,
    run_settings,
)


@pytest.mark.parametrize(
    "cores, busy, processes, threads",
    [
        (2, 0.0, 1, 2),  # idle: every core
        (2, 0.4, 1, 2),  # a little background noise is not a taken core
        (2, 0.6, 1, 1),  # more than half a core taken
        (2, 1.0, 1, 1),  # one core busy (`python -c 'while True: pass'` beside the run)
        (2, 5.0, 1, 1),  # a crowded machine (busy counted from the load average can exceed the cores): one thread
        (8, 3.0, 1, 5),
        (8, 0.0, 1, 8),
        (8, 20.0, 1, 1),
        (8, 0.0, 2, 4),  # two training processes on the machine share its cores
        (8, 4.0, 2, 2),
        (1, 0.0, 4, 1),
    ],
)
def test_threads_are_the_idle_cores_shared_out(cores, busy, processes, threads):
    assert choose_num_threads(cores, busy, processes) == threads


# /proc/stat as Linux writes it: per core, user nice system idle iowait irq softirq steal guest guest_nice ticks.
PROC_STAT = """cpu  {total}
cpu0 {cpu0} 0 0
cpu1 {cpu1} 0 0
cpu2 900 0 100 9000 0 0 0 0 0 0
intr 123 0 0
ctxt 456
"""


def proc_stat(cpu0: tuple, cpu1: tuple) -> str:
    return PROC_STAT.format(total=" ".join(["0"] * 10), cpu0=" ".join(map(str, cpu0)), cpu1=" ".join(map(str, cpu1)))


def test_cpu_jiffies_counts_the_given_cores_busy_and_idle_ticks():
    text = proc_stat((100, 5, 20, 1000, 7, 1, 2, 3), (50, 0, 10, 2000, 0, 0, 0, 0))
    # busy: user + nice + system + irq + softirq + steal; idle and iowait only in the total; guest not twice
    assert cpu_jiffies(text, {0}) == (131, 1138)
    assert cpu_jiffies(text, {0, 1}) == (191, 3198)
    assert cpu_jiffies(text, {0, 1, 7}) == (191, 3198)  # a core /proc/stat does not list adds nothing


class _Snapshots:
    """Stands for /proc/stat: each read returns the next text."""

    def __init__(self, *texts: str):
        self.texts = list(texts)

    def read_text(self) -> str:
        return self.texts.pop(0)


def sampled(monkeypatch, first: str, second: str, own_seconds: float) -> None:
    """busy_cores' two reads of /proc/stat give `first` then `second`, 1 s apart, this process using `own_seconds`."""
    clock, own = iter([0.0, 1.0]), iter([0.0, own_seconds])
    monkeypatch.setattr(session, "PROC_STAT", _Snapshots(first, second))
    monkeypatch.setattr(session.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(session.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(session, "_own_cpu_seconds", lambda: next(own))


IDLE_START = proc_stat((0, 0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0, 0))


def test_busy_cores_are_the_ticks_busy_now_less_this_process_own(monkeypatch):
    # over 1 s at 100 ticks/s: core 0 fully busy, core 1 busy a quarter of the time, of which this process 0.2 s
    sampled(monkeypatch, IDLE_START, proc_stat((90, 0, 10, 0, 0, 0, 0, 0), (20, 0, 5, 75, 0, 0, 0, 0)), 0.2)
    assert busy_cores({0, 1}) == pytest.approx(1.05)
    sampled(monkeypatch, IDLE_START, proc_stat((0, 0, 0, 100, 0, 0, 0, 0), (10, 0, 0, 90, 0, 0, 0, 0)), 0.1)
    assert busy_cores({0, 1}) == pytest.approx(0.0)  # the only work on the machine is this process's own


def test_busy_cores_is_none_without_proc_stat(monkeypatch, tmp_path):
    monkeypatch.setattr(session, "PROC_STAT", tmp_path / "no-such-file")
    assert busy_cores({0, 1}) is None


def test_busy_cores_measures_this_machine():
    busy = busy_cores(session.usable_cores(), seconds=0.05)
    assert busy is None or 0.0 <= busy <= len(session.usable_cores()) + 0.5  # ticks are coarse over 0.05 s


def test_a_given_thread_count_wins_then_omp_num_threads_then_the_cores_busy_now(monkeypatch, tmp_path):
    monkeypatch.setattr(
        "modeling_minibert.utils.cpus.CGROUP", tmp_path
    )  # no CPU quota (tests/utils/test_cpus.py has one)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve_num_threads(5) == (5, "--num_threads")
    assert resolve_num_threads(0) == (3, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    # Right after another run ended: the 1-minute load still counts its core as taken, but the cores are idle now.
    monkeypatch.setattr("os.getloadavg", lambda: (1.7, 0.0, 0.0))
    sampled(monkeypatch, IDLE_START, proc_stat((2, 0, 1, 97, 0, 0, 0, 0), (0, 0, 0, 100, 0, 0, 0, 0)), 0.0)
    assert resolve_num_threads(0) == (2, "2 cores, 0.0 busy")
    # Beside a process spinning on one core.
    sampled(monkeypatch, IDLE_START, proc_stat((100, 0, 0, 0, 0, 0, 0, 0), (1, 0, 0, 99, 0, 0, 0, 0)), 0.0)
    assert resolve_num_threads(0) == (1, "2 cores, 1.0 busy")
    # Where /proc/stat is missing, the load average stands in.
    monkeypatch.setattr(session, "PROC_STAT", Path("/no/proc/stat"))
    assert resolve_num_threads(0) == (1, "2 cores, 1-minute load 1.7")
    monkeypatch.setattr("os.getloadavg", lambda: (0.1, 0.0, 0.0))
    assert resolve_num_threads(0) == (2, "2 cores, 1-minute load 0.1")


def test_run_settings_are_given_back_when_the_run_ends():
    log = logging.getLogger("accelerate.utils.other")
    before = (
        torch.get_num_threads(),
        _denormals_flushed(),
        list(log.filters),
        signal.getsignal(signal.SIGINT),
        signal.getsignal(signal.SIGTERM),
    )
    with pytest.raises(RuntimeError, match="inside"):
        with run_settings(3) as stop:
            assert torch.get_num_threads() == 3 and _denormals_flushed()
            assert len(log.filters) == len(before[2]) + 1
            assert signal.getsignal(signal.SIGINT) is stop and signal.getsignal(signal.SIGTERM) is stop
            raise RuntimeError("inside")
    assert (
        torch.get_num_threads(),
        _denormals_flushed(),
        list(log.filters),
        signal.getsignal(signal.SIGINT),
        signal.getsignal(signal.SIGTERM),
    ) == before


def test_a_signal_during_training_is_deferred_and_one_before_it_stops_at_once():
    with run_settings(1) as stop:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            stop(signal.SIGTERM, None)  # before training: stop now
        stop.deferring = True
        stop(signal.SIGTERM, None)  # in training: noted, the step finishes and is checkpointed
        assert stop.signal == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            stop(signal.SIGINT, None)  # a second one: stop now


# Run in a fresh process: in a test worker, other tests' threads and heap state decide where a freed block goes.
BLOCKS_SCRIPT = """
import json, resource, torch
from modeling_minibert.training.pretraining.session import memory_kept

def faults(blocks=8):  # minor page faults of each 40 MB block (above glibc's largest dynamic mmap threshold)
    counts = []
    for _ in range(blocks):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.ones(10 * 1024 * 1024)  # written, so every one of its 10,240 pages is touched
        del block
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return counts

given_back = faults()
with memory_kept() as kept:
    reused = faults()
print(json.dumps({"kept": kept, "given_back": given_back, "reused": reused, "after": faults()}))
"""


@pytest.mark.skipif(session._glibc() is None, reason="mallopt is glibc's")
def test_memory_kept_reuses_freed_blocks_and_gives_them_back_after():
    out = subprocess.run([sys.executable, "-c", BLOCKS_SCRIPT], capture_output=True, text=True, check=True)
    faults = json.loads(out.stdout.strip().splitlines()[-1])
    assert faults["kept"]
    assert min(faults["given_back"]) > 9_000, faults  # each block unmapped when freed, faulted in again
    # The heap grows for the first block, and may again now and then: a torch thread's allocation took the freed
    # space in between, or, on a loaded machine, the kernel reclaimed pages of the kept heap (one such run faulted
    # in a third block of six). Most blocks reuse pages already there, where without it every one faults them in.
    reused = sorted(faults["reused"])
    assert reused[len(reused) // 2] < 1_000, faults  # the median block reuses the heap
    assert sum(reused) < sum(faults["given_back"]) / 2, faults
    assert faults["after"][0] > 9_000, faults  # what was kept is given back (malloc_trim): faulted in again


def test_memory_kept_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(session, "_glibc", lambda: None)
    with memory_kept() as kept:
        assert kept is False
