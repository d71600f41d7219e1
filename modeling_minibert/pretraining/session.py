"""What a pretraining run changes in its process while it runs, and gives back when it ends (`run_settings`):
torch's thread count, denormal flushing, a logging filter and the SIGINT/SIGTERM handlers.

Each is process-wide state, so none is set at import time or left behind: `pretrain` enters `run_settings` and
every setting is restored when it returns or raises (a notebook that calls `pretrain` keeps its own settings).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --- threads -----------------------------------------------------------------------------------------------------

def choose_num_threads(cores: int, load: float, processes: int = 1) -> int:
    """Threads for torch's CPU kernels in each of `processes` training processes on this machine, given its
    usable `cores` and the 1-minute `load` average (runnable processes): the idle cores, shared out, at least one.

    torch's default, one thread per core, spins and collapses when other processes hold the cores: its threads
    wait at every kernel's barrier for a thread the scheduler has not run (the README gives the measurements).
    """
    share = max(1, cores // processes)
    idle = (cores - load) / processes
    return max(1, min(share, int(idle + 0.5)))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and `taskset` narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def resolve_num_threads(num_threads: int, processes: int = 1) -> tuple[int, str]:
    """The thread count for `--num_threads` (0: the load policy for `processes` training processes on this
    machine, unless OMP_NUM_THREADS says), and why."""
    if num_threads > 0:
        return num_threads, "--num_threads"
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume an idle machine
        load = 0.0
    return choose_num_threads(cores, load, processes), f"{cores} cores, 1-minute load {load:.1f}"


# --- the rest of the run's process settings --------------------------------------------------------------------

class _TiedDecoderNote(logging.Filter):
    """Accelerate warns at every checkpoint that it saved the tied MLM decoder weight once ("Removed shared
    tensor"): expected, since it *is* the word embedding matrix, and restored with it on resume."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


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
        raise TrainingInterrupted(signum, f"stopped by {signal.Signals(signum).name} at once: what is not in a "
                                  "checkpoint yet is lost; continue from the newest with --resume_from_checkpoint")


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after saving where it was; the message says how to continue."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars ("Loading weights", "Writing model shards") and load report silenced for the
    body, and restored: the run says in one line what a load leaves out (`Objective.check_source`), and its own
    bar is the one to watch."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


@contextmanager
def run_settings(num_threads: int) -> Iterator[StopRequest]:
    """Set the run's process state for the body and restore it after: `num_threads` torch threads, denormal
    flushing (on CPU, tiny squared gradients in AdamW's second moment otherwise slow each update many-fold),
    the tied-decoder note filtered out of Accelerate's log, and SIGINT/SIGTERM handled by the returned
    `StopRequest` (in the main thread only: Python delivers signals there)."""
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
        yield stop
    finally:
        accelerate_log.removeFilter(note)
        torch.set_flush_denormal(flushed)
        torch.set_num_threads(threads)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
