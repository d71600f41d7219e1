"""Tests for `modeling_minibert.utils.files`: outputs appear whole or not at all, with ordinary permissions."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from modeling_minibert.utils.files import (
    check_output_dir,
    staged_files,
    staged_folder,
    sweep_stale,
    write_bytes,
    write_json,
    write_text,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_027():
    """A umask other than the usual 022, set for the test and restored (the writers must follow it)."""
    before = os.umask(0o027)
    yield 0o027
    os.umask(before)


@pytest.fixture
def umask_untouched(monkeypatch):
    """Fail any call to os.umask: it is process-wide, and the local Hub writes from handler threads."""

    def refuse(mask):
        raise AssertionError(f"os.umask({mask:#o}) called")

    monkeypatch.setattr(os, "umask", refuse)


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path: Path, umask_027, umask_untouched):
    path = tmp_path / "results.json"
    path.write_text("old")
    write_json(path, {"eval_accuracy": 0.5, "path": tmp_path})
    assert path.read_text() == f'{{\n  "eval_accuracy": 0.5,\n  "path": "{tmp_path}"\n}}\n'
    assert mode(path) == 0o640  # what open() gives under this umask, not mkstemp's private 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_writers_in_threads_never_change_the_umask(tmp_path: Path, umask_027):
    """Many threads writing at once (as the local Hub's handlers do) leave every file with the same mode."""

    def write(i: int) -> None:
        write_bytes(tmp_path / f"f{i}", b"x")
        with staged_folder(tmp_path / f"d{i}") as staging:
            (staging / "x").write_bytes(b"x")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {mode(tmp_path / f"f{i}") for i in range(16)} == {0o640}
    assert {mode(tmp_path / f"d{i}") for i in range(16)} == {0o750}
    assert os.umask(0o027) == 0o027  # still the process's own


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "card.md"
    write_text(path, "old")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.md"]


def test_staged_folder_replaces_the_output_only_on_success(tmp_path: Path, umask_027, umask_untouched):
    output = tmp_path / "model"
    output.mkdir()
    (output / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with staged_folder(output) as staging:
            (staging / "new.txt").write_text("half")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in output.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]

    with staged_folder(output) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".model.partial-")
        (staging / "new.txt").write_text("whole")
        (staging / "private.bin").write_bytes(b"w")
        (staging / "private.bin").chmod(0o600)  # as transformers' save_pretrained writes model.safetensors
    assert sorted(p.name for p in output.iterdir()) == ["new.txt", "private.bin"]
    assert mode(output) == 0o750  # mkdir's under this umask, not mkdtemp's private 0700
    assert mode(output / "private.bin") == mode(output / "new.txt") == 0o640  # like every other file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_staged_files_moves_every_file_beside_the_output(tmp_path: Path, umask_027, umask_untouched):
    output = tmp_path / "out" / "model.onnx"
    with staged_files(output) as staging:
        (staging / "model.onnx").write_bytes(b"graph")
        (staging / "model.onnx.data").write_bytes(b"weights")
        (staging / "model.onnx.data").chmod(0o600)
    assert sorted(p.name for p in output.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert {mode(p) for p in output.parent.iterdir()} == {0o640}

    with pytest.raises(RuntimeError):
        with staged_files(tmp_path / "other.onnx") as staging:
            (staging / "other.onnx").write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert not (tmp_path / "other.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staged_files_refuses_a_place_that_cannot_be_written_before_any_work(tmp_path: Path):
    (tmp_path / "a-file").write_text("x")  # a folder cannot be made here, even by root
    with pytest.raises(OSError, match="cannot write .*model.onnx"):
        with staged_files(tmp_path / "a-file" / "model.onnx"):
            pytest.fail("the work ran")


def test_check_output_dir(tmp_path: Path):
    assert check_output_dir(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert check_output_dir(tmp_path / "empty") == tmp_path / "empty"
    used = tmp_path / "used"
    used.mkdir()
    (used / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"output_dir .*used is not empty; pass --overwrite_output_dir"):
        check_output_dir(used)
    with pytest.raises(FileExistsError, match="--resume_from_checkpoint to continue the run saved there"):
        check_output_dir(used, resume_hint=True)
    assert check_output_dir(used, overwrite=True) == used
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="exists and is not a folder"):
        check_output_dir(tmp_path / "file")


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_new_staging_sweeps_what_dead_writers_left_beside_the_output(tmp_path: Path):
    host = socket.gethostname()
    output = tmp_path / "model"
    output.mkdir()
    (output / "config.json").write_text("{}")
    dead = tmp_path / f".model.partial-{host}-{dead_pid()}-0123abcd"
    alive = tmp_path / f".model.partial-{host}-{os.getpid()}-0123abcd"  # a run still writing
    elsewhere = tmp_path / f".model.partial-other-host-{dead_pid()}-0123abcd"  # cannot be checked from here
    other_output = tmp_path / f".other.partial-{host}-{dead_pid()}-0123abcd"
    for folder in (dead, alive, elsewhere, other_output):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    with staged_folder(output) as staging:
        (staging / "config.json").write_text('{"new": 1}')
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [alive.name, elsewhere.name, other_output.name, "model"]
    )
    assert (output / "config.json").read_text() == '{"new": 1}'


def test_a_writer_killed_between_the_two_renames_gets_its_old_output_back(tmp_path: Path):
    """Killed after moving the old output aside and before moving the new one in: the old one is restored."""
    output = tmp_path / "model"
    previous = tmp_path / f".model.previous-{socket.gethostname()}-{dead_pid()}-0123abcd"
    previous.mkdir()
    (previous / "config.json").write_text("old")
    sweep_stale(output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert (output / "config.json").read_text() == "old"


def test_sigkill_inside_a_staged_folder_then_rerun_leaves_only_the_output(tmp_path: Path):
    code = (
        "import os, signal, sys\n"
        "from modeling_minibert.utils.files import staged_folder\n"
        "with staged_folder(sys.argv[1]) as staging:\n"
        "    (staging / 'model.safetensors').write_bytes(b'half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".out.partial-")
    with staged_files(tmp_path / "out") as staging:  # staged_files sweeps as well
        (staging / "out").write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
