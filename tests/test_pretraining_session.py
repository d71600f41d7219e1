"""What a run sets in its process (modeling_minibert/pretraining/session.py): the thread policy, and every
setting given back when the run ends."""

from __future__ import annotations

import logging
import signal

import pytest
import torch

from modeling_minibert.pretraining.session import (
    _denormals_flushed,
    choose_num_threads,
    resolve_num_threads,
    run_settings,
)


@pytest.mark.parametrize("cores, load, processes, threads", [
    (2, 0.0, 1, 2),    # idle: every core
    (2, 0.4, 1, 2),    # a little background noise is not a taken core
    (2, 0.6, 1, 1),    # more than half a core taken
    (2, 1.0, 1, 1),    # one core busy (`python -c 'while True: pass'` beside the run)
    (2, 5.0, 1, 1),    # a crowded machine: one thread, never none
    (8, 3.0, 1, 5),
    (8, 0.0, 1, 8),
    (8, 20.0, 1, 1),
    (8, 0.0, 2, 4),    # two training processes on the machine share its cores
    (8, 4.0, 2, 2),
    (1, 0.0, 4, 1),
])
def test_threads_are_the_idle_cores_shared_out(cores, load, processes, threads):
    assert choose_num_threads(cores, load, processes) == threads


def test_a_given_thread_count_wins_then_omp_num_threads_then_the_load(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve_num_threads(5) == (5, "--num_threads")
    assert resolve_num_threads(0) == (3, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("os.getloadavg", lambda: (1.0, 0.0, 0.0))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert resolve_num_threads(0) == (1, "2 cores, 1-minute load 1.0")
    monkeypatch.setattr("os.getloadavg", lambda: (0.1, 0.0, 0.0))
    assert resolve_num_threads(0) == (2, "2 cores, 1-minute load 0.1")


def test_run_settings_are_given_back_when_the_run_ends():
    log = logging.getLogger("accelerate.utils.other")
    before = (torch.get_num_threads(), _denormals_flushed(), list(log.filters),
              signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with pytest.raises(RuntimeError, match="inside"):
        with run_settings(3) as stop:
            assert torch.get_num_threads() == 3 and _denormals_flushed()
            assert len(log.filters) == len(before[2]) + 1
            assert signal.getsignal(signal.SIGTERM) is stop
            raise RuntimeError("inside")
    assert (torch.get_num_threads(), _denormals_flushed(), list(log.filters),
            signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_signal_during_training_is_deferred_and_one_before_it_stops_at_once():
    with run_settings(1) as stop:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            stop(signal.SIGTERM, None)  # before training: stop now
        stop.deferring = True
        stop(signal.SIGTERM, None)  # in training: noted, the step finishes and is checkpointed
        assert stop.signal == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            stop(signal.SIGINT, None)  # a second one: stop now
