"""The run folder (modeling_minibert/training/pretraining/run_folder.py): the lock, and recovery from the faults a run
meets: a torn metrics line, a broken newest checkpoint, leftovers of interrupted saves, a full disk, a folder
that cannot be written."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess

import pytest
from fixtures.pretraining import (  # noqa: F401 (fixtures)
    cli_args,
    corpus,
    pytestmark,
    read_metrics,
    snapshot,
    tiny,
    tokenizer_dir,
)

from modeling_minibert import cli
from modeling_minibert.training.pretraining import pretrain
from modeling_minibert.training.pretraining.run_folder import MetricsLog
from modeling_minibert.utils.outputs import LOCK_FILE, METRICS_FILE, acquire_lock, release_lock


@pytest.fixture(scope="module")
def saved_run(tiny, tmp_path_factory):
    """A finished 20-step run with checkpoints at 10 and 20; tests work on copies."""
    out = tmp_path_factory.mktemp("saved") / "run"
    settings = dict(tiny, max_steps=20, save_steps=10, logging_steps=5, eval_steps=10)
    pretrain(output_dir=str(out), **settings)
    return out, settings


@pytest.fixture
def copy(saved_run, tmp_path):
    out, settings = saved_run
    target = tmp_path / "run"
    shutil.copytree(out, target)
    return target, dict(settings, output_dir=str(target), resume_from_checkpoint=True, max_steps=30)


def write_lock(folder, pid: int, host: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_FILE).write_text(
        json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "earlier"})
    )


# --- the lock --------------------------------------------------------------------------------------------------


def test_a_second_run_into_a_folder_in_use_is_refused_naming_the_holder(copy, tmp_path):
    out, resume = copy
    holder = subprocess.Popen(["sleep", "60"])
    try:
        write_lock(out, holder.pid)
        before = snapshot(out)
        with pytest.raises(
            FileExistsError,
            match=rf"in use by another pretraining run \(pid {holder.pid} on host {socket.gethostname()}",
        ):
            pretrain(**resume)
        assert snapshot(out) == before
        fresh = tmp_path / "fresh"
        write_lock(fresh, holder.pid, host="elsewhere")  # another machine's process cannot be checked: it holds
        with pytest.raises(FileExistsError, match=r"pid \d+ on host elsewhere"):
            pretrain(**dict(resume, output_dir=str(fresh), resume_from_checkpoint=None))
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_dead_run_is_taken_over_and_released_at_the_end(copy):
    out, resume = copy
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_lock(out, dead.pid)
    with pytest.warns(
        UserWarning, match=rf"taking over the lock of a pretraining run that is gone: .*'pid': {dead.pid}"
    ):
        summary = pretrain(**resume)
    assert summary["global_step"] == 30
    assert not (out / LOCK_FILE).exists()


def test_lock_names_this_process_and_only_its_holder_releases_it(tmp_path):
    lock = acquire_lock(tmp_path)
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    with pytest.raises(FileExistsError, match=rf"pid {os.getpid()}"):
        acquire_lock(tmp_path)
    write_lock(tmp_path, os.getppid())
    release_lock(tmp_path)  # not ours: left alone
    assert lock.exists()


# --- the metrics history ---------------------------------------------------------------------------------------


def test_a_torn_last_metrics_line_is_dropped_on_resume(copy):
    out, resume = copy
    whole = read_metrics(out)
    with (out / METRICS_FILE).open("a") as f:
        f.write('{"step": 25, "loss": 3.')  # a kill in the middle of an append
    with pytest.warns(UserWarning, match=rf"{METRICS_FILE}: dropping the torn last line {len(whole) + 1}"):
        pretrain(**resume)
    records = read_metrics(out)
    assert records[: len(whole)] == whole and records[-1]["step"] == 30


def test_a_bad_line_inside_the_history_is_named_with_file_and_line(tmp_path):
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=rf"{METRICS_FILE}, line 2: not a JSON record"):
        MetricsLog(path, keep_until=2, enabled=True)


# --- checkpoints -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_broken_newest_checkpoint_falls_back_to_the_previous_one(copy, damage, capsys):
    out, resume = copy
    weights = out / "checkpoint-20" / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])  # caught by the sizes recorded at save time
    else:
        weights.write_bytes(b"\0" * len(data))  # same size: caught when loading fails
    why = r"model.safetensors has \d+ bytes, \d+ were written" if damage == "truncated" else r"SafetensorError"
    with pytest.warns(
        UserWarning, match=rf"skipping the unfinished checkpoint .*checkpoint-20 \({why}.*\); falling back"
    ):
        pretrain(**resume)
    assert "resuming at step 10" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [5, 10, 15, 20, 25, 30]


def test_leftovers_of_interrupted_saves_are_removed(copy):
    out, resume = copy
    (out / ".tmp-checkpoint-25").mkdir()
    (out / ".tmp-checkpoint-25" / "model.safetensors").write_bytes(b"half")
    (out / ".saving-12345").mkdir()
    (out / ".all_results.json.abc123.tmp").write_text("{")
    pretrain(**resume)
    assert not list(out.glob(".*"))


# --- places that cannot be written -----------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["checkpoint", "model"])
def test_disk_full_ends_in_one_line_with_the_checkpoints_intact(copy, writer, monkeypatch, capsys):
    """The disk fills while a checkpoint is written (Accelerate's writer), or while the final model is saved
    (transformers' writer, after checkpoint-30 was written whole)."""
    out, resume = copy
    import accelerate.utils.other
    import transformers.modeling_utils

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    owner = accelerate.utils.other if writer == "checkpoint" else transformers.modeling_utils
    monkeypatch.setattr(owner, "safe_save_file", full)
    checkpoints = {k: v for k, v in snapshot(out).items() if k.startswith("checkpoint-")}
    code = cli.main(
        [
            "pretrain",
            *cli_args(**{k: v for k, v in resume.items() if k != "resume_from_checkpoint"}),
            "--resume_from_checkpoint",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    if writer == "checkpoint":
        expected = (
            f"cannot write checkpoint-30 in {out}: No space left on device; "
            "the checkpoints already there are intact (checkpoint-10, checkpoint-20)"
        )
    else:
        expected = f"cannot write into {out}: No space left on device"
    assert err.strip().splitlines() == [f"minibert pretrain: error: [Errno 28] {expected}"]
    after = {k: v for k, v in snapshot(out).items() if k.startswith("checkpoint-")}
    if writer == "checkpoint":
        assert after == checkpoints
    else:  # checkpoint-30 was written whole, and checkpoint-10 rotated out (save_total_limit=2)
        assert {k: v for k, v in after.items() if k.startswith("checkpoint-20/")} == {
            k: v for k, v in checkpoints.items() if k.startswith("checkpoint-20/")
        }
        assert sorted({k.split("/")[0] for k in after}) == ["checkpoint-20", "checkpoint-30"]
    assert not list(out.glob(".*")), "no half-written checkpoint, and the lock is released"


def test_a_folder_that_cannot_be_written_ends_in_one_line(copy, monkeypatch, capsys):
    """As root (the test machine) chmod does not stop writes, so the refusal of a read-only filesystem is
    simulated at the first write into the folder, the lock."""
    out, resume = copy
    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(out)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    before = snapshot(out)
    code = cli.main(
        [
            "pretrain",
            *cli_args(**{k: v for k, v in resume.items() if k != "resume_from_checkpoint"}),
            "--resume_from_checkpoint",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"minibert pretrain: error: [Errno 30] cannot write to output_dir {out}: Read-only file system"
    ]
    assert snapshot(out) == before


# --- a stop before the first checkpoint ------------------------------------------------------------------------


def test_a_stop_before_the_first_checkpoint_keeps_nothing(tmp_path):
    """What the run wrote goes (the folder too, when the run made it; the user's own files stay); once a checkpoint
    is there, the folder is the run's to continue and the stop's own message stands."""
    import signal

    from modeling_minibert.training.pretraining.run_folder import nothing_kept_before_a_checkpoint
    from modeling_minibert.training.pretraining.session import TrainingInterrupted

    out = tmp_path / "run"
    with pytest.raises(
        TrainingInterrupted, match=rf"^stopped by SIGINT before the first checkpoint: nothing was kept in {out}$"
    ):
        with nothing_kept_before_a_checkpoint(out):
            out.mkdir()
            (out / "vocab.txt").write_text("[PAD]\n")
            raise KeyboardInterrupt
    assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(TrainingInterrupted, match="^stopped by SIGTERM before the first checkpoint") as stopped:
        with nothing_kept_before_a_checkpoint(out):
            (out / "tensorboard").mkdir()
            (out / "pretraining_args.json").write_text("{}")
            raise TrainingInterrupted(signal.SIGTERM, "stopped by SIGTERM at once")
    assert stopped.value.signum == signal.SIGTERM and sorted(os.listdir(out)) == ["notes.txt"]
    with pytest.raises(TrainingInterrupted, match="^stopped by SIGINT after step 2: saved"):
        with nothing_kept_before_a_checkpoint(out):
            (out / "checkpoint-2").mkdir()
            raise TrainingInterrupted(signal.SIGINT, "stopped by SIGINT after step 2: saved")
    assert sorted(os.listdir(out)) == ["checkpoint-2", "notes.txt"]


def test_ctrl_c_during_start_up_ends_in_one_line_and_leaves_no_folder(tiny, tmp_path, monkeypatch, capsys):
    """Ctrl-C once the folder holds the run's tokenizer and arguments, before training: exit 130, one line, and
    no half-made run (which the same command would then refuse)."""
    from modeling_minibert.training.pretraining import run_folder

    real = run_folder.start_run_folder

    def then_ctrl_c(*args):
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(run_folder, "start_run_folder", then_ctrl_c)
    out = tmp_path / "run"
    assert cli.main(["pretrain", *cli_args(**dict(tiny, output_dir=str(out), max_steps=2))]) == 130
    assert (
        capsys.readouterr().err
        == f"minibert pretrain: stopped by SIGINT before the first checkpoint: nothing was kept in {out}\n"
    )
    assert not out.exists()
