"""How much CPU a process may use (modeling_minibert/utils/cpus.py): the cores of its affinity, capped in a
container by the cgroup's CPU quota, read from cgroup files (fakes under tmp_path here); and the thread policies
that use it (pretraining's torch threads, onnxruntime sessions' default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modeling_minibert.utils import cpus
from modeling_minibert.utils.cpus import check_thread_count, cpu_quota, usable_cpus


def cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    """A fake cgroup folder holding `files` (relative paths -> text)."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "files, quota",
    [
        ({"cpu.max": "250000 100000\n"}, 2.5),  # cgroup v2: `docker --cpus 2.5`
        ({"cpu.max": "max 100000\n"}, None),  # cgroup v2 without a limit
        ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.5),  # cgroup v1
        ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # cgroup v1 without a limit
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),  # no cgroup files at all (macOS, a bare host)
    ],
)
def test_the_cpu_quota_is_read_from_either_cgroup_version(tmp_path, files, quota):
    assert cpu_quota(cgroup(tmp_path, files)) == quota


def test_usable_cpus_are_the_cores_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert usable_cpus(cgroup(tmp_path / "none", {})) == 16
    assert usable_cpus(cgroup(tmp_path / "v2", {"cpu.max": "250000 100000"})) == 2  # 2.5 CPUs: 2 threads, not 3
    assert usable_cpus(cgroup(tmp_path / "small", {"cpu.max": "20000 100000"})) == 1  # at least one
    assert usable_cpus(cgroup(tmp_path / "big", {"cpu.max": "6400000 100000"})) == 16  # no more than the cores


def test_pretraining_threads_stay_within_the_quota(tmp_path, monkeypatch):
    """On 16 idle cores in a container of 2.5 CPUs, auto picks 2 threads and says why; the quota is shared
    between training processes."""
    from modeling_minibert.training.pretraining import session

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(session, "busy_cores", lambda cores: 0.0)
    monkeypatch.setattr(cpus, "CGROUP", cgroup(tmp_path, {"cpu.max": "250000 100000"}))
    assert session.resolve_num_threads(0) == (2, "16 cores, 0.0 busy, CPU quota 2.5")
    assert session.resolve_num_threads(0, processes=2) == (1, "16 cores, 0.0 busy, CPU quota 2.5")
    assert session.resolve_num_threads(4) == (4, "--num_threads")  # a given count wins
    monkeypatch.setattr(cpus, "CGROUP", tmp_path / "no-cgroup")
    assert session.resolve_num_threads(0) == (16, "16 cores, 0.0 busy")


def test_onnxruntime_sessions_default_to_the_quota(tmp_path, monkeypatch):
    from modeling_minibert.deployment import onnx_session

    made = []

    class Options:
        intra_op_num_threads = inter_op_num_threads = 0

    class Runtime:
        SessionOptions = Options

        @staticmethod
        def InferenceSession(path, options, providers):
            made.append(options.intra_op_num_threads)

    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", Runtime)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(cpus, "CGROUP", cgroup(tmp_path, {"cpu.max": "300000 100000"}))
    onnx_session.make_session(tmp_path / "model.onnx")
    monkeypatch.setattr(cpus, "CGROUP", tmp_path / "no-cgroup")
    onnx_session.make_session(tmp_path / "model.onnx")
    onnx_session.make_session(tmp_path / "model.onnx", threads=5)
    assert made == [3, 0, 5]  # 0: onnxruntime's own default, one per core


def test_a_thread_count_above_the_cores_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    check_thread_count("num_threads", 2)
    with pytest.raises(
        ValueError, match=r"^num_threads=3000 exceeds the 2 CPU cores this process may run on; use at most 2"
    ):
        check_thread_count("num_threads", 3000)
