"""What a pretraining run changes in its process while it runs, and gives back when it ends (`run_settings`):
torch's thread count, denormal flushing, how glibc's malloc keeps freed memory, a logging filter and the
SIGINT/SIGTERM handlers.

Each is process-wide state, so none is set at import time or left behind: `pretrain` enters `run_settings` and
every setting is restored when it returns or raises (a notebook that calls `pretrain` keeps its own settings).
In a distributed run, `stop_requested` tells every process whether a signal reached any of them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from modeling_minibert.utils.cpus import cpu_quota, usable_cores

if TYPE_CHECKING:
    from accelerate import Accelerator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --- threads -----------------------------------------------------------------------------------------------------

PROC_STAT = Path("/proc/stat")
BUSY_SAMPLE_SECONDS = 0.3  # long enough to average over the scheduler's ticks, short beside any run's start-up


def choose_num_threads(cores: int, busy: float, processes: int = 1) -> int:
    """Threads for torch's CPU kernels in each of `processes` training processes on this machine, given its
    usable `cores` and how many of them other processes keep `busy` (cores' worth of CPU time): the idle cores,
    shared out, at least one.

    torch's default, one thread per core, spins and collapses when other processes hold the cores: its threads
    wait at every kernel's barrier for a thread the scheduler has not run (the README gives the measurements).
    """
    share = max(1, cores // processes)
    idle = (cores - busy) / processes
    return max(1, min(share, int(idle + 0.5)))


def cpu_jiffies(proc_stat: str, cpus: set[int]) -> tuple[int, int]:
    """(busy, total) clock ticks the `cpus` have spent since boot, from the text of /proc/stat: idle and iowait
    are the idle ticks, everything else (user, nice, system, irq, softirq, steal) busy."""
    busy = total = 0
    for line in proc_stat.splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            counts = [int(tick) for tick in ticks[:8]]  # guest time (fields 9-10) is already counted in user
            busy += sum(counts) - counts[3] - counts[4]
            total += sum(counts)
    return busy, total


def busy_cores(cpus: set[int], seconds: float = BUSY_SAMPLE_SECONDS) -> float | None:
    """How many of `cpus` other processes keep busy now: their busy ticks over `seconds`, minus this process's
    own CPU time, in cores; None where there is no /proc/stat (macOS, Windows).

    The 1-minute load average would lag: right after another job ends it still counts that job's cores as taken.
    """
    try:
        first, own, start = cpu_jiffies(PROC_STAT.read_text(), cpus), _own_cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        second, own, wall = (
            cpu_jiffies(PROC_STAT.read_text(), cpus),
            _own_cpu_seconds() - own,
            time.monotonic() - start,
        )
    except OSError:
        return None
    ticks_busy, ticks_total = second[0] - first[0], second[1] - first[1]
    if ticks_total <= 0:
        return None
    return max(0.0, len(cpus) * ticks_busy / ticks_total - own / wall)


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def resolve_num_threads(num_threads: int, processes: int = 1) -> tuple[int, str]:
    """The thread count for `--num_threads` (0: the policy for `processes` training processes on this machine,
    from how busy its cores are now and, in a container, no more than its CPU quota allows, unless
    OMP_NUM_THREADS says), and why."""
    if num_threads > 0:
        return num_threads, "--num_threads"
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    cpus = usable_cores()
    busy = busy_cores(cpus)
    if busy is not None:
        why = f"{len(cpus)} cores, {busy:.1f} busy"
    else:  # no /proc/stat: the 1-minute load average (runnable processes), which lags, else an idle machine
        try:
            busy = os.getloadavg()[0]
        except (AttributeError, OSError):
            busy = 0.0
        why = f"{len(cpus)} cores, 1-minute load {busy:.1f}"
    threads = choose_num_threads(len(cpus), busy, processes)
    quota = cpu_quota()
    if quota is None:
        return threads, why
    # The quota is the container's CPU time, which /proc/stat (the host's cores) does not show: a cap, shared out.
    return min(threads, max(1, int(quota) // processes)), f"{why}, CPU quota {quota:g}"


# --- the rest of the run's process settings --------------------------------------------------------------------


class _TiedDecoderNote(logging.Filter):
    """Accelerate warns at every checkpoint that it saved the tied MLM decoder weight once ("Removed shared
    tensor"): expected, since it *is* the word embedding matrix, and restored with it on resume."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


# glibc's mallopt parameters (malloc.h) and its default for both: blocks above the mmap threshold are mapped on
# their own and unmapped when freed; free memory above the trim threshold at the heap's top goes back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
GLIBC_DEFAULT_THRESHOLD = 128 * 1024
KEEP_THRESHOLD = 1 << 30


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (whose mallopt this module tunes), else None (musl, macOS, Windows)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


@contextmanager
def memory_kept() -> Iterator[bool]:
    """Freed memory kept in the process for the body (True where that is glibc's to set): blocks up to 1 GiB come
    from the heap and freed ones are reused, not given back to the kernel; after it, glibc's default thresholds are
    set again and what was kept is released (`malloc_trim`). Yields whether it was set.

    Hand-written because torch has no caching allocator on CPU, and PyTorch's tuning guide suggests preloading
    jemalloc or tcmalloc, which a pip install cannot do. Every block above glibc's dynamic mmap threshold (at
    most 32 MiB) is unmapped when freed and faulted back in, zeroed, by the next allocation: general distillation's
    masked-LM logits over the teacher's 30,522 pieces (about 37 MB a batch) cost 27,000 page faults a step
    (README, General distillation). Afterwards glibc keeps fixed thresholds at its defaults: setting them ends its
    dynamic threshold for the process, which only makes it hand memory back sooner."""
    libc = _glibc()
    if libc is None:
        yield False
        return
    kept = libc.mallopt(M_MMAP_THRESHOLD, KEEP_THRESHOLD) == 1  # 1: set, 0: refused (an older glibc's limit)
    kept = libc.mallopt(M_TRIM_THRESHOLD, KEEP_THRESHOLD) == 1 and kept
    try:
        yield kept
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
        libc.malloc_trim(0)


def _denormals_flushed() -> bool:
    """Whether denormal floats are flushed to zero now (torch has a setter only): a denormal input reads as 0."""
    return bool((torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0)


class StopRequest:
    """SIGINT (Ctrl-C) and SIGTERM (a scheduler preempting the job): once training has started (`deferring`),
    the step in progress finishes, a checkpoint is written and the run stops; a second signal, or one before
    training starts, stops at once (`KeyboardInterrupt`)."""

    def __init__(self):
        self.signal: int | None = None
        self.deferring = False

    def __call__(self, signum: int, frame) -> None:
        if self.deferring and self.signal is None:
            self.signal = signum
            return
        raise TrainingInterrupted(
            signum,
            f"stopped by {signal.Signals(signum).name} at once: what is not in a "
            "checkpoint yet is lost; continue from the newest with --resume_from_checkpoint",
        )


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after saving where it was; the message says how to continue."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


def ignore_stop_signals(worker_id: int) -> None:
    """In a data-loader worker: leave SIGINT and SIGTERM to the training process. Ctrl-C reaches the terminal's
    whole process group, and a worker that stopped would fail the step that the run finishes before it saves;
    the workers end with the loader (or, should the training process die, when they see it gone)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def run_settings(num_threads: int) -> Iterator[StopRequest]:
    """Set the run's process state for the body and restore it after: `num_threads` torch threads, denormal
    flushing (on CPU, tiny squared gradients in AdamW's second moment otherwise slow each update many-fold),
    freed memory kept for reuse (`memory_kept`), the tied-decoder note filtered out of Accelerate's log, and
    SIGINT/SIGTERM handled by the returned `StopRequest` (in the main thread only: Python delivers signals there)."""
    threads, flushed = torch.get_num_threads(), _denormals_flushed()
    note, accelerate_log = _TiedDecoderNote(), logging.getLogger("accelerate.utils.other")
    stop = StopRequest()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    torch.set_num_threads(num_threads)
    torch.set_flush_denormal(True)
    accelerate_log.addFilter(note)
    try:
        with memory_kept():
            yield stop
    finally:
        accelerate_log.removeFilter(note)
        torch.set_flush_denormal(flushed)
        torch.set_num_threads(threads)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def stop_requested(stop: StopRequest, accelerator: Accelerator) -> bool:
    """Whether a signal asked the run to stop; in a distributed run, whether it reached any process.

    Asked every step, so the processes agree over a process group of the hosts (gloo, `host_group`) with a CPU
    tensor: over the GPUs' group (NCCL) the answer would be a device value, and reading it would make each host
    wait for its device to finish the step's queued work, every step."""
    if accelerator.num_processes == 1:
        return stop.signal is not None
    flag = torch.tensor([float(stop.signal is not None)])
    torch.distributed.all_reduce(flag, torch.distributed.ReduceOp.MAX, group=host_group(accelerator))
    return bool(flag.item())


_HOST_GROUPS: dict[int, object] = {}


def host_group(accelerator: Accelerator):
    """A gloo process group of the run's processes, for messages between hosts (made once, by every process
    together): None, the run's own group, where that already is gloo (a CPU run)."""
    if accelerator.device.type == "cpu":
        return None
    world = torch.distributed.group.WORLD
    if id(world) not in _HOST_GROUPS:
        _HOST_GROUPS[id(world)] = torch.distributed.new_group(backend="gloo")
    return _HOST_GROUPS[id(world)]
