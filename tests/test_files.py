"""Tests for `modeling_minibert.files`: outputs appear whole or not at all, with ordinary permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from modeling_minibert.files import (
    check_output_dir,
    staged_files,
    staged_folder,
    umask,
    write_bytes,
    write_json,
    write_text,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_umask_reads_without_changing_it():
    before = os.umask(0o027)
    try:
        assert umask() == 0o027
        assert umask() == 0o027
    finally:
        os.umask(before)


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "results.json"
    path.write_text("old")
    write_json(path, {"eval_accuracy": 0.5, "path": tmp_path})
    assert path.read_text() == f'{{\n  "eval_accuracy": 0.5,\n  "path": "{tmp_path}"\n}}\n'
    assert mode(path) == 0o666 & ~umask()  # not mkstemp's private 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


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


def test_staged_folder_replaces_the_output_only_on_success(tmp_path: Path):
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
    assert sorted(p.name for p in output.iterdir()) == ["new.txt"]
    assert mode(output) == 0o777 & ~umask()  # not mkdtemp's private 0700
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_staged_files_moves_every_file_beside_the_output(tmp_path: Path):
    output = tmp_path / "out" / "model.onnx"
    with staged_files(output) as staging:
        (staging / "model.onnx").write_bytes(b"graph")
        (staging / "model.onnx.data").write_bytes(b"weights")
    assert sorted(p.name for p in output.parent.iterdir()) == ["model.onnx", "model.onnx.data"]

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
