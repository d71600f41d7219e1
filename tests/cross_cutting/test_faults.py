"""Faults, table-driven: a fine-tuning run killed with SIGKILL, a disk that fills up, a folder that turns read-only.

Pretraining's own faults (SIGKILL inside steps and checkpoint writes, a torn metrics line, a truncated newest
checkpoint, leftovers of interrupted saves, disk full and read-only through the CLI, two runs on one folder) are
tested in tests/training/pretraining/test_pretraining_loop.py and tests/training/pretraining/test_pretraining_run_folder.py; this module covers the rest:

- `minibert finetune` in a real process, killed with SIGKILL at points drawn from a seeded generator: inside a
  training step, and inside a checkpoint save while one of its files (model.safetensors, optimizer.pt,
  trainer_state.json) is half-written. `--resume_from_checkpoint` must then finish with the same final weights,
  the same per-step losses and the same evaluation results as an uninterrupted run.
- A disk that fills up, and a filesystem that turns read-only, in the middle of a fine-tuning run (a small tmpfs,
  filled or remounted read-only from inside a training step), and under `convert-bert`, `export-onnx` and
  `train-tokenizer`: one line, exit code 2, no traceback; the output is whole or absent, what was saved before
  the fault (finished checkpoints) is intact, and once the disk is fixed the run resumes to the same result.

A checkpoint the fault left unfinished (a kill inside a save, a full disk) is skipped by `--resume_from_checkpoint`
with a one-line warning naming it, for the previous finished one (or the beginning, if it was the first save).

The tmpfs needs root (`mount`); without it these rows are skipped (pretraining's tests patch a writer instead).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fixtures.environment import REPO, clean_env
from fixtures.models import TINY
from fixtures.pretraining import corpus, tokenizer_dir  # noqa: F401 (fixtures of the stop-signal rows)
from safetensors.torch import load_file

from modeling_minibert.cli import main
from modeling_minibert.utils.outputs import LOCK_FILE

pytestmark = pytest.mark.slow(seconds=75)  # real jobs end to end: not in the quick tier (-m "not slow")

TEXTS_BY_LABEL = {
    "pos": ["a good film", "a great story", "good acting and a fine plot", "truly great fun", "a fine good time"],
    "neg": ["a bad film", "a dull story", "bad acting and a poor plot", "truly awful fun", "a poor bad time"],
}

# A child process that runs `minibert` after arranging one fault, described by the MINIBERT_FAULT environment
# variable (JSON): where ({"at": "step", "n": N} the N-th training step; {"at": "save", "n": N, "file": F} the N-th
# checkpoint save, once its file F is written; {"at": "staged"} a `files.staged_folder` / `staged_files` write, all
# written but not yet renamed into place) and what ("kill": SIGKILL, leaving F half-written when inside a save;
# "fill": fill the disk at `place`; "read-only": remount `place` read-only).
LAUNCHER = r"""
import json, os, signal, subprocess, sys, time
fault = json.loads(os.environ["MINIBERT_FAULT"])

def act(path=None):
    if fault["action"] == "kill":
        if path is not None:  # the file is torn: half of it on disk, as a crash in the middle of the write leaves it
            os.truncate(path, os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault["action"] == "fill":
        with open(os.path.join(fault["place"], "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
    elif fault["action"] == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", fault["place"]], check=True)
    elif fault["action"] == "signal":  # SIGINT or SIGTERM to this process, as Ctrl-C or a scheduler sends it
        os.kill(os.getpid(), fault["signum"])
    elif fault["action"] == "pause":  # hold the run here (say so in `place`) until the test creates `place`/go
        open(os.path.join(fault["place"], "paused"), "w").close()
        while not os.path.exists(os.path.join(fault["place"], "go")):
            time.sleep(0.05)

import torch
import transformers.modeling_utils as modeling_utils
from transformers import Trainer, TrainerState

count, saving = 0, False
if fault["at"] == "step":
    training_step = Trainer.training_step
    def patched_step(self, *args, **kwargs):
        global count
        count += 1
        if count == fault["n"]:
            act()
        return training_step(self, *args, **kwargs)
    Trainer.training_step = patched_step
elif fault["at"] == "save":
    save_checkpoint = Trainer._save_checkpoint
    def patched_save(self, *args, **kwargs):
        global count, saving
        count, saving = count + 1, True
        try:
            return save_checkpoint(self, *args, **kwargs)
        finally:
            saving = False
    Trainer._save_checkpoint = patched_save

    def after(write, path_of):
        def patched(*args, **kwargs):
            result = write(*args, **kwargs)
            path = str(path_of(args, kwargs))
            if saving and count == fault["n"] and os.path.basename(path) == fault["file"]:
                act(path)
            return result
        return patched
    torch.save = after(torch.save, lambda a, k: a[1])
    modeling_utils.safe_save_file = after(modeling_utils.safe_save_file, lambda a, k: a[1])
    TrainerState.save_to_json = after(TrainerState.save_to_json, lambda a, k: a[1])

elif fault["at"] == "staged":  # the output fully written into its staging folder, not yet renamed into place
    import modeling_minibert.utils.files as files
    files.plain_permissions = lambda folder: act()

from modeling_minibert.cli import console_main

sys.exit(console_main(sys.argv[1:]))
"""

MAX_STEPS, SAVE_STEPS = 8, 2  # checkpoints at steps 2, 4, 6, 8


def kill_points(seed: int = 16) -> list:
    """The seeded schedule: a kill inside a training step, two inside checkpoint saves (which save and which of
    its files drawn too). Reproducible: the same seed gives the same points. (Pretraining's own kill test covers
    more points; each point here costs two fine-tuning processes, and the suite's time is bounded.)"""
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(2, MAX_STEPS + 1), 2))[:1]
    saves = [
        (rng.randint(1, MAX_STEPS // SAVE_STEPS - 1), file)
        for file in rng.sample(["model.safetensors", "optimizer.pt", "trainer_state.json"], 2)
    ]
    return [pytest.param({"at": "step", "n": n, "action": "kill"}, id=f"kill-in-step-{n}") for n in steps] + [
        pytest.param({"at": "save", "n": n, "file": file, "action": "kill"}, id=f"kill-in-save-{n}-{file}")
        for n, file in saves
    ]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny 'pretrained' folder and a classification CSV (train and validation)."""
    from modeling_minibert import MiniBertConfig, MiniBertForPreTraining
    from tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("inputs")
    texts = [text for group in TEXTS_BY_LABEL.values() for text in group]
    tokenizer = train_tokenizer(train_data=texts * 4, vocab_size=100, min_frequency=1, disable_tqdm=True)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        MiniBertForPreTraining(MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(
            root / "model"
        )
    tokenizer.save_pretrained(root / "model")
    rows = [f"{text},{label}" for label, group in TEXTS_BY_LABEL.items() for text in group]
    (root / "train.csv").write_text("text,label\n" + "\n".join(rows * 4) + "\n")
    (root / "validation.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    return root


def finetune_argv(inputs: Path, output: Path, *extra: str) -> list[str]:
    return [
        "finetune",
        "--task",
        "sequence-classification",
        "--model_name_or_path",
        str(inputs / "model"),
        "--train_file",
        str(inputs / "train.csv"),
        "--validation_file",
        str(inputs / "validation.csv"),
        "--output_dir",
        str(output),
        "--max_steps",
        str(MAX_STEPS),
        "--per_device_train_batch_size",
        "4",
        "--save_strategy",
        "steps",
        "--save_steps",
        str(SAVE_STEPS),
        "--eval_strategy",
        "steps",
        "--eval_steps",
        str(SAVE_STEPS),
        "--logging_steps",
        "1",
        "--learning_rate",
        "1e-3",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def run_minibert(argv: list[str], cwd: Path, fault: dict | None = None) -> subprocess.CompletedProcess:
    env = clean_env(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MINIBERT_FAULT=json.dumps(fault or {"at": "none"}))
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def run_in_this_process(argv: list[str], capfd) -> SimpleNamespace:
    """`minibert ARGV` as `cli.main` runs it here: its exit code and its stderr, as `run_minibert` gives them (read
    at the file descriptor, so that a library's line written there counts too). Where only the fault needs a
    process of its own (a kill), what follows it runs here: a new run reads nothing but the files."""
    capfd.readouterr()
    returncode = main(argv)
    return SimpleNamespace(returncode=returncode, stderr=capfd.readouterr().err)


def results_of(output: Path) -> tuple[dict, dict, dict]:
    """Final weights, per-step training losses and evaluation entries of the history, and the eval_* results.

    Throughput keys differ between any two runs. `train_loss` in all_results.json is left out too: Trainer averages
    it over the steps of the last session only, so a resumed run reports the mean of fewer steps (its per-step
    losses, compared here, are the same)."""
    state = json.loads((output / "trainer_state.json").read_text())
    history = {}
    for entry in state["log_history"]:
        for key in ("loss", "eval_loss", "eval_accuracy"):
            if key in entry:
                history[(entry["step"], key)] = entry[key]
    results = json.loads((output / "all_results.json").read_text())
    evaluation = {
        k: v for k, v in results.items() if k.startswith("eval_") and not k.endswith(("runtime", "per_second"))
    }
    return load_file(output / "model.safetensors"), history, evaluation


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory):
    output = tmp_path_factory.mktemp("uninterrupted") / "run"
    result = run_minibert(finetune_argv(inputs, output), output.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return results_of(output)


def check_finished_checkpoints(output: Path) -> list[str]:
    """The checkpoint-N folders Trainer finished saving (trainer_state.json is its last write) must be whole:
    their weights and state load. Returns their names."""
    finished = []
    for folder in sorted(output.glob("checkpoint-*")):
        if (folder / "trainer_state.json").is_file():
            try:
                state = json.loads((folder / "trainer_state.json").read_text())
            except json.JSONDecodeError:  # torn: the fault came inside this last write, the save never finished
                continue
            assert state["global_step"] == int(folder.name.split("-")[1])
            load_file(folder / "model.safetensors")
            torch.load(folder / "optimizer.pt", weights_only=True)
            finished.append(folder.name)
    return finished


@pytest.mark.slow(seconds=21)
@pytest.mark.parametrize("fault", kill_points())
def test_finetune_killed_then_resumed_equals_an_uninterrupted_run(fault, inputs, uninterrupted, tmp_path, capfd):
    output = tmp_path / "run"
    killed = run_minibert(finetune_argv(inputs, output), tmp_path, fault)
    assert killed.returncode == -9, killed.stderr[-3000:]
    finished = check_finished_checkpoints(output)
    assert not (output / "model.safetensors").exists()  # no final model claimed before the run finished
    saves_before = (fault["n"] - 1) // SAVE_STEPS if fault["at"] == "step" else fault["n"] - 1
    assert bool(finished) == (saves_before > 0)  # a save finished before the kill is kept, whole

    resume = ["--resume_from_checkpoint"] if list(output.glob("checkpoint-*")) else []
    resumed = run_in_this_process(finetune_argv(inputs, output, *resume), capfd)  # only the kill needs a process
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if fault["at"] == "save":  # the checkpoint the kill tore is skipped, in one line that names it
        skipped = [line for line in resumed.stderr.splitlines() if "skipping the unfinished" in line]
        assert len(skipped) == 1 and f"checkpoint-{fault['n'] * SAVE_STEPS} " in skipped[0], resumed.stderr[-3000:]
    weights, history, evaluation = results_of(output)
    expected_weights, expected_history, expected_evaluation = uninterrupted
    # Bit-identical: Trainer restores the optimizer, scheduler, RNG states and data order from the checkpoint.
    assert weights.keys() == expected_weights.keys()
    for name in weights:
        torch.testing.assert_close(weights[name], expected_weights[name], rtol=0, atol=0, msg=name)
    assert history == expected_history
    assert evaluation == expected_evaluation
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging folder left beside it


# ----------------------------------------------------------------------------------------------------------------
# A disk that fills up, a filesystem that turns read-only
# ----------------------------------------------------------------------------------------------------------------


def second_run_argv(job: str, inputs: Path, output: Path) -> list[str]:
    if job == "finetune":
        return finetune_argv(inputs, output)
    return [
        "distill",
        "--task",
        "sequence-classification",
        "--teacher_model_name_or_path",
        str(inputs / "model"),
        "--finetune_teacher",
        "true",
        "--model_name_or_path",
        str(inputs / "model"),
        "--train_file",
        str(inputs / "train.csv"),
        "--output_dir",
        str(output),
        "--max_steps",
        "2",
        "--disable_tqdm",
        "true",
    ]


@pytest.mark.slow(seconds=21)
@pytest.mark.parametrize("second", ["finetune", "distill"])
def test_a_second_run_into_a_folder_in_use_is_refused_and_the_first_is_unharmed(
    second, inputs, uninterrupted, tmp_path, capfd
):
    """Concurrency: run B into the folder of a living run A (held inside its third step) fails in one line, exit
    2, without writing; A then finishes exactly as if alone."""
    output = tmp_path / "run"
    env = clean_env(
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
        MINIBERT_FAULT=json.dumps({"at": "step", "n": 3, "action": "pause", "place": str(tmp_path)}),
    )
    log = tmp_path / "first.log"  # a file, not a pipe: a full pipe would stall the run before it pauses
    with open(log, "w") as stderr:
        first = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, *finetune_argv(inputs, output)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        for _ in range(6000):
            if (tmp_path / "paused").exists() or first.poll() is not None:
                break
            time.sleep(0.1)
        assert (tmp_path / "paused").exists(), log.read_text()[-3000:]
        before = sorted(p.name for p in output.rglob("*"))
        result = run_in_this_process(second_run_argv(second, inputs, output), capfd)
        assert result.returncode == 2, result.stderr[-3000:]
        errors = [line for line in result.stderr.splitlines() if f"minibert {second}: error:" in line]
        assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert f"output_dir {output} is in use by another finetune run (pid {first.pid}" in errors[0], errors[0]
        assert sorted(p.name for p in output.rglob("*")) == before
    finally:
        (tmp_path / "go").touch()
        first.wait(timeout=600)
    assert first.returncode == 0, log.read_text()[-3000:]
    weights, history, evaluation = results_of(output)
    expected_weights, expected_history, expected_evaluation = uninterrupted
    assert history == expected_history and evaluation == expected_evaluation
    assert weights.keys() == expected_weights.keys() and all(
        torch.equal(weights[k], expected_weights[k]) for k in weights
    )
    assert not (output / LOCK_FILE).exists()


@pytest.fixture
def disk(tmp_path):
    """A small tmpfs of its own (8 MB), unmounted at the end."""
    place = tmp_path / "disk"
    mount_tmpfs(place)
    yield place
    subprocess.run(["umount", str(place)], check=True)


def fill(place: Path) -> None:
    """Leave no free block at `place`."""
    with open(place / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def read_only(place: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(place)], check=True)


def writable_again(place: Path) -> None:
    subprocess.run(["mount", "-o", "remount,rw", str(place)], check=True)
    (place / "filler").unlink(missing_ok=True)


FS_ERRORS = {"fill": "No space left on device", "read-only": "Read-only file system"}


def check_one_line_error(result: subprocess.CompletedProcess | SimpleNamespace, command: str, action: str) -> None:
    """Exit code 2, no traceback, and the last line of stderr is the one error line, naming the cause."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if f"minibert {command}: error:" in line]
    assert len(errors) == 1 and result.stderr.rstrip("\n").endswith(errors[0]), result.stderr[-3000:]
    assert FS_ERRORS[action] in errors[0], errors[0]


def mount_tmpfs(place: Path) -> None:
    place.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(place)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")


@pytest.fixture(scope="module", params=["fill", "read-only"])
def faulted_run(request, inputs, tmp_path_factory):
    """A fine-tuning run on its own tmpfs whose disk fills up (or turns read-only) at step 3: the checkpoint of
    step 2 is saved, the one of step 4 meets the fault. The disk is then made writable again, as a user would."""
    action, place = request.param, tmp_path_factory.mktemp("faulted") / "disk"
    mount_tmpfs(place)
    output = place / "run"
    result = run_minibert(
        finetune_argv(inputs, output),
        place.parent,
        {"at": "step", "n": SAVE_STEPS + 1, "action": action, "place": str(place)},
    )
    writable_again(place)
    after = SimpleNamespace(
        finished=check_finished_checkpoints(output),
        listing=sorted(p.name for p in place.iterdir()),
        final_model=(output / "model.safetensors").exists(),
    )
    yield SimpleNamespace(action=action, result=result, output=output, after=after)
    subprocess.run(["umount", str(place)], check=True)


@pytest.mark.slow(seconds=12)
def test_finetune_disk_fault_mid_run_is_one_line_and_keeps_what_was_saved(faulted_run):
    check_one_line_error(faulted_run.result, "finetune", faulted_run.action)
    assert faulted_run.after.finished == [f"checkpoint-{SAVE_STEPS}"]  # what was saved is kept, whole
    assert not faulted_run.after.final_model
    assert faulted_run.after.listing == ["run"]  # no staging folder


@pytest.mark.slow(seconds=12)
def test_finetune_resumed_after_a_disk_fault_equals_an_uninterrupted_run(faulted_run, inputs, uninterrupted, capfd):
    output = faulted_run.output
    unfinished = (output / f"checkpoint-{2 * SAVE_STEPS}").exists()  # the save that met the fault
    resumed = run_in_this_process(finetune_argv(inputs, output, "--resume_from_checkpoint"), capfd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if unfinished:  # skipped, and said so in one line
        assert f"skipping the unfinished checkpoint {output}/checkpoint-{2 * SAVE_STEPS} " in resumed.stderr, (
            resumed.stderr[-3000:]
        )
    weights, history, evaluation = results_of(output)
    for name, expected in uninterrupted[0].items():
        torch.testing.assert_close(weights[name], expected, rtol=0, atol=0, msg=name)
    assert (history, evaluation) == uninterrupted[1:]


def convert_argv(inputs: Path, output: Path) -> list[str]:
    return ["convert-bert", "--to-bert", "--model_name_or_path", str(inputs / "model"), "--output_dir", str(output)]


def export_argv(inputs: Path, output: Path) -> list[str]:
    return ["export-onnx", "--model_name_or_path", str(inputs / "model"), "--output_dir", str(output) + ".onnx"]


def tokenizer_argv(inputs: Path, output: Path) -> list[str]:
    return [
        "train-tokenizer",
        "--train_file",
        str(inputs / "train.csv"),
        "--output_dir",
        str(output),
        "--vocab_size",
        "100",
        "--disable_tqdm",
        "true",
    ]


# The disk is full or read-only before the command starts, so no fault needs arranging inside it: the command runs in
# this process (a real process's exit 2 without a traceback on an unwritable place is a row of
# tests/cross_cutting/test_bad_inputs.py::test_a_real_process_exits_2_without_a_traceback).
@pytest.mark.parametrize("action", ["fill", "read-only"])
@pytest.mark.parametrize(
    "argv", [convert_argv, export_argv, tokenizer_argv], ids=["convert-bert", "export-onnx", "train-tokenizer"]
)
def test_writing_to_a_full_or_read_only_disk_is_one_line_and_leaves_nothing(argv, action, inputs, disk, capfd):
    output = disk / "out"
    (fill if action == "fill" else read_only)(disk)
    before = sorted(p.name for p in disk.iterdir())
    words = argv(inputs, output)
    check_one_line_error(run_in_this_process(words, capfd), words[0], action)
    assert sorted(p.name for p in disk.iterdir()) == before  # no output, no hidden staging leftovers


# export-onnx stages its files the same way (files.staged_files; tests/utils/test_files.py kills one), at twice the time.
@pytest.mark.parametrize("argv", [convert_argv, tokenizer_argv], ids=["convert-bert", "train-tokenizer"])
def test_killed_while_writing_then_rerun_leaves_no_staging_behind(argv, inputs, tmp_path, capfd):
    """SIGKILL just before the staged output is renamed into place: the hidden staging folder stays, and the
    next run of the same command (in this process: only the kill needs a process of its own) removes it (its
    writer is dead) and writes the output."""
    output = tmp_path / "out"
    killed = run_minibert(argv(inputs, output), tmp_path, {"at": "staged", "action": "kill"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert [p.name.split(".partial-")[0] for p in tmp_path.iterdir()] in ([".out"], [".out.onnx"])
    rerun = run_in_this_process(argv(inputs, output), capfd)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


# --- stop signals: Ctrl-C (SIGINT) and a scheduler's SIGTERM in the middle of a run ----------------------------------
# A job stopped by a signal saves where it is (or says where to resume) in one line, exits 128 + the signal's number
# and releases its folder; the same command with --resume_from_checkpoint then continues. One row per job.


def pretrain_argv(output: Path, corpus: Path, tokenizer: Path, max_steps: int) -> list[str]:
    from fixtures.pretraining import TINY_MODEL

    return [
        "pretrain",
        "--train_file",
        str(corpus),
        "--tokenizer_name",
        str(tokenizer),
        "--config_overrides",
        TINY_MODEL,
        "--max_seq_length",
        "32",
        "--per_device_train_batch_size",
        "8",
        "--validation_split_percentage",
        "10",
        "--dupe_factor",
        "1",
        "--logging_steps",
        "1",
        "--eval_steps",
        "10",
        "--save_steps",
        "50",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(output),
        "--max_steps",
        str(max_steps),
    ]


# SIGTERM takes the same path as Ctrl-C (one `StopRequest` handles both): that it is installed for both, and what
# each does before and during training, is checked in tests/training/pretraining/test_pretraining_session.py without a process.
STOP_SIGNAL_ROWS = [
    pytest.param("pretrain", signal.SIGINT, id="pretrain-ctrl-c"),
]


def wait_for_training(output: Path, process: subprocess.Popen, records: int = 3, timeout: float = 300) -> None:
    """Until the run has logged `records` training steps (metrics.jsonl), failing if it ends or takes too long."""
    from modeling_minibert.utils.outputs import METRICS_FILE

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = output / METRICS_FILE
        if history.is_file() and history.read_text().count("\n") >= records:
            return
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"no {records} training steps in {timeout} s")


@pytest.mark.parametrize("job, signum", STOP_SIGNAL_ROWS)
def test_a_stop_signal_saves_where_the_run_is_in_one_line_and_releases_the_folder(
    job, signum, corpus, tokenizer_dir, tmp_path, capfd
):
    from modeling_minibert.utils.outputs import LOCK_FILE, METRICS_FILE

    output = tmp_path / "run"
    env = clean_env(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, "-m", "modeling_minibert.cli"]
    process = subprocess.Popen(
        [*command, *pretrain_argv(output, corpus, tokenizer_dir, 10**6)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_training(output, process)
    process.send_signal(signum)
    _, err = process.communicate(timeout=300)
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    stopped = re.fullmatch(
        rf"minibert {job}: stopped by {name} after step (\d+): saved {output}/checkpoint-(\d+); "
        r"continue with --resume_from_checkpoint",
        lines[0],
    )
    assert stopped and stopped.group(1) == stopped.group(2), lines[0]
    assert not (output / LOCK_FILE).exists(), "the folder is released"
    step = int(stopped.group(1))
    resumed = run_in_this_process(
        [*pretrain_argv(output, corpus, tokenizer_dir, step + 2), "--resume_from_checkpoint"], capfd
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = [json.loads(line) for line in (output / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, step + 3)), "continued where it stopped"


# --- no non-finite success: a run whose weights, losses or cached targets become NaN or infinite ------------------
# stops with one line naming the step and the likely cause (a learning rate, a non-finite teacher, a cache file),
# exits 2, keeps its last good checkpoint (every checkpoint it keeps is finite) and writes no model and no results
# (an all-NaN model was saved with exit 0 and train_loss 0.0). One row per job; each runs in this process (`cli.main`),
# a few steps of a tiny model.

HUGE = (
    "1e12"  # a learning rate that diverges within three steps (after a warmup step at rate 0, which saves a good one)
)
DIVERGE = [
    "--learning_rate",
    HUGE,
    "--warmup_steps",
    "2",
    "--save_strategy",
    "steps",
    "--save_steps",
    "1",
    "--logging_steps",
    "1",
    "--max_steps",
    "6",
    "--per_device_train_batch_size",
    "4",
    "--disable_tqdm",
    "true",
]
STEP = r"at step (?P<step>\d+)"
CAUSE = r"the learning rate 1e\+12 is likely too high \(lower --learning_rate\)"
KEPT = r"nothing was saved as the model; the last good checkpoint, {output}/checkpoint-(?P<kept>\d+), is kept"
NON_FINITE_TEACHER = r"a non-finite teacher cannot teach; fix it or fine-tune it again \(nothing was trained\)"
# What a finished run writes besides its checkpoints: none of it may be there after a non-finite stop.
SUCCESS_FILES = (
    "config.json",
    "model.safetensors",
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "trainer_state.json",
    "README.md",
    "training_curves.png",
)


def teacher_classifier(inputs: Path, name: str, poisoned: bool) -> Path:
    """A tiny pos/neg classifier on `inputs`'s tokenizer; `poisoned`: one weight (of its classifier) NaN."""
    from transformers import AutoTokenizer

    from modeling_minibert import MiniBertConfig, MiniBertForSequenceClassification

    folder = inputs / name
    if not folder.is_dir():
        tokenizer = AutoTokenizer.from_pretrained(inputs / "model")
        with torch.random.fork_rng():
            torch.manual_seed(1)
            model = MiniBertForSequenceClassification(
                MiniBertConfig(
                    **{**TINY, "vocab_size": len(tokenizer)},
                    id2label={0: "neg", 1: "pos"},
                    label2id={"neg": 0, "pos": 1},
                )
            )
        if poisoned:
            with torch.no_grad():
                model.classifier.weight[0, 0] = float("nan")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def distill_argv(inputs: Path, output: Path, teacher: Path, *extra: str) -> list[str]:
    return [
        "distill",
        "--task",
        "sequence-classification",
        "--teacher_model_name_or_path",
        str(teacher),
        "--model_name_or_path",
        str(inputs / "model"),
        "--train_file",
        str(inputs / "train.csv"),
        "--output_dir",
        str(output),
        "--max_steps",
        "1",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def nan_in_cached_logits(inputs: Path, output: Path) -> list[str]:
    """The teacher's logits cached by a finished run (reused by a rerun of the same teacher and data), one row
    then set to NaN in the file; the rerun goes into a folder holding only that cache."""
    from safetensors.torch import save_file

    from modeling_minibert.utils.outputs import TEACHER_LOGITS_FILE, TEACHER_LOGITS_INFO_FILE

    teacher = teacher_classifier(inputs, "teacher", poisoned=False)
    first = output.parent / "first"
    assert main(distill_argv(inputs, first, teacher)) == 0
    output.mkdir()
    logits = load_file(first / TEACHER_LOGITS_FILE)
    logits["transfer.logits"][3] = float("nan")
    save_file(logits, output / TEACHER_LOGITS_FILE)
    (output / TEACHER_LOGITS_INFO_FILE).write_bytes((first / TEACHER_LOGITS_INFO_FILE).read_bytes())
    shutil.rmtree(first)
    return distill_argv(inputs, output, teacher, "--overwrite_output_dir", "true")


def pretrain_diverging(inputs: Path, output: Path, corpus: Path, tokenizer: Path) -> list[str]:
    return [*pretrain_argv(output, corpus, tokenizer, 8), "--learning_rate", HUGE, "--save_steps", "2"]


NON_FINITE_ROWS = [
    pytest.param(
        lambda inputs, output, **_: [
            "finetune",
            "--task",
            "sequence-classification",
            "--model_name_or_path",
            str(inputs / "model"),
            "--train_file",
            str(inputs / "train.csv"),
            "--output_dir",
            str(output),
            *DIVERGE,
        ],
        rf"the weights are not finite {STEP} \(41 of 41 tensors, the first: [\w.]+\): {CAUSE}; {KEPT}",
        id="finetune-huge-learning-rate",
    ),
    pytest.param(
        lambda inputs, output, **_: distill_argv(
            inputs, output, teacher_classifier(inputs, "nan-teacher", poisoned=True)
        ),
        r"labelling with the teacher: the teacher {inputs}/nan-teacher has non-finite weights \(1 of 41 tensors, the "
        rf"first: classifier.weight\): {NON_FINITE_TEACHER}",
        id="distill-teacher-with-a-nan-weight",
    ),
    pytest.param(
        lambda inputs, output, **_: nan_in_cached_logits(inputs, output),
        r"the cached teacher logits {output}/teacher_logits.safetensors hold non-finite values \(1 of 80 transfer "
        r"row\(s\), the first: row 3\); delete it and teacher_logits.json beside it to label again with the teacher "
        r"\(nothing was trained\)",
        id="distill-nan-in-cached-teacher-logits",
    ),
    pytest.param(
        lambda inputs, output, corpus, tokenizer: pretrain_diverging(inputs, output, corpus, tokenizer),
        rf"the training loss is nan {STEP}: {CAUSE}; {KEPT}",
        id="pretrain-huge-learning-rate",
    ),
]


class TestNoNonFiniteSuccess:
    @pytest.mark.parametrize("argv, message", NON_FINITE_ROWS)
    def test_a_non_finite_run_stops_in_one_line_and_saves_nothing_as_a_success(
        self, argv, message, inputs, corpus, tokenizer_dir, tmp_path, capsys, monkeypatch
    ):
        from modeling_minibert import cli
        from modeling_minibert.utils.finite import NonFiniteError

        output = tmp_path / "run"
        words = argv(inputs, output, corpus=corpus, tokenizer=tokenizer_dir)
        raised = []

        def run(command, argv):  # cli.run, recording what it raised: main() says it in one line
            try:
                return real_run(command, argv)
            except BaseException as err:
                raised.append(err)
                raise

        real_run = cli.run
        monkeypatch.setattr(cli, "run", run)
        capsys.readouterr()
        assert main(words) == 2
        err = capsys.readouterr().err
        assert len(raised) == 1 and type(raised[0]) is NonFiniteError, raised
        errors = [line for line in err.splitlines() if f"minibert {words[0]}: error:" in line]
        assert len(errors) == 1 and err.rstrip("\n").endswith(errors[0]) and "Traceback" not in err, err[-3000:]
        assert errors[0] == f"minibert {words[0]}: error: {raised[0]}"
        expected = message.replace("{output}", re.escape(str(output))).replace("{inputs}", re.escape(str(inputs)))
        found = re.fullmatch(expected, str(raised[0]))
        assert found, str(raised[0])
        # Nothing saved as a success: no model, no results (all_results.json never reports a NaN, as 0 or at all).
        present = [name for name in SUCCESS_FILES if (output / name).exists()]
        assert not present, present
        assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["run"]), "no staging folder left beside it"
        # Every checkpoint kept is finite, and the one the message names is whole and the newest.
        checkpoints = sorted(output.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        for checkpoint in checkpoints:
            for weights in checkpoint.rglob("*.safetensors"):
                assert all(torch.isfinite(t).all() for t in load_file(weights).values()), weights
        if "kept" in found.groupdict():
            kept = int(found["kept"])
            assert 0 < kept < int(found["step"]) and checkpoints[-1].name == f"checkpoint-{kept}"
            from modeling_minibert.training.pretraining.run_folder import checkpoint_problem
            from modeling_minibert.utils.outputs import trainer_checkpoint_problem

            problem = checkpoint_problem if words[0] == "pretrain" else trainer_checkpoint_problem
            assert problem(checkpoints[-1]) is None
        else:
            assert not checkpoints
        assert not (output / LOCK_FILE).exists(), "the folder is released"


# --- stop signals in the Trainer jobs: the step in progress kept, said in one line, resumed exactly -----------------
# As pretraining's row above: a run stopped by SIGINT or SIGTERM finishes the step it is in, saves it as a whole
# checkpoint, says in one line where and how to continue (exit 128 + the signal's number), releases its folder and
# writes no final model; `--resume_from_checkpoint` then says what it resumes from and ends where the uninterrupted
# run ends (bit-identical weights, the same losses and scores: Trainer's own checkpoint, its RNG and data order).
# One row a real process (the signal from outside Python's control), the others in this process (a second each).
STOP_AT = 5  # the signal arrives inside step 5, between two checkpoints (steps 2, 4, 6, 8)
SCHEDULE = finetune_argv(Path("in"), Path("out"))[finetune_argv(Path("in"), Path("out")).index("--max_steps") :]


def distill_schedule_argv(inputs: Path, output: Path, *extra: str) -> list[str]:
    """`minibert distill` of a tiny teacher on fine-tuning's data, on fine-tuning's schedule (`finetune_argv`)."""
    teacher = teacher_classifier(inputs, "teacher", poisoned=False)
    return [
        "distill",
        "--task",
        "sequence-classification",
        "--teacher_model_name_or_path",
        str(teacher),
        "--model_name_or_path",
        str(inputs / "model"),
        "--train_file",
        str(inputs / "train.csv"),
        "--validation_file",
        str(inputs / "validation.csv"),
        "--output_dir",
        str(output),
        *SCHEDULE,
        *extra,
    ]


JOB_ARGV = {"finetune": finetune_argv, "distill": distill_schedule_argv}


def run_here(argv: list[str], signum: int | None = None) -> tuple[int, str, str]:
    """`minibert` in this process, `signum` sent to it inside training step STOP_AT: (exit code, stdout, stderr)."""
    import contextlib
    import io
    import os

    from transformers import Trainer

    step, count = Trainer.training_step, [0]

    def patched(self, *args, **kwargs):
        count[0] += 1
        if signum is not None and count[0] == STOP_AT:
            os.kill(os.getpid(), signum)
        return step(self, *args, **kwargs)

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setattr(Trainer, "training_step", patched)
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def check_stopped(code: int, stderr: str, job: str, signum: int, output: Path) -> None:
    """Exit 128 + signum; the last line, the job's only one, says which step was saved where and how to continue;
    that checkpoint is whole (Trainer's own, with its optimizer and RNG states); no final model; the folder free."""
    from modeling_minibert.utils.outputs import trainer_checkpoint_problem

    assert code == 128 + signum, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith(f"minibert {job}:")]
    assert "Traceback" not in stderr and len(lines) == 1 and stderr.rstrip("\n").endswith(lines[0]), stderr[-3000:]
    stopped = re.fullmatch(
        rf"minibert {job}: stopped by {signal.Signals(signum).name} after step (\d+): saved "
        rf"{re.escape(str(output))}/checkpoint-(\d+); continue with --resume_from_checkpoint",
        lines[0],
    )
    assert stopped and stopped[1] == stopped[2] == str(STOP_AT), lines[0]
    assert trainer_checkpoint_problem(output / f"checkpoint-{STOP_AT}") is None
    assert not (output / "model.safetensors").exists() and not (output / LOCK_FILE).exists()


@pytest.fixture(scope="module")
def stopped_runs(inputs, tmp_path_factory) -> dict:
    """A fine-tuning run stopped by Ctrl-C and a distillation stopped by SIGTERM, each inside step STOP_AT, in this
    process: job -> (its folder, exit code, stderr)."""
    runs = {}
    for job, signum in (("finetune", signal.SIGINT), ("distill", signal.SIGTERM)):
        output = tmp_path_factory.mktemp(f"stopped-{job}") / "run"
        code, _, err = run_here(JOB_ARGV[job](inputs, output), signum)
        runs[job] = (output, signum, code, err)
    return runs


@pytest.fixture(scope="module")
def uninterrupted_distill(inputs, tmp_path_factory):
    output = tmp_path_factory.mktemp("uninterrupted-distill") / "run"
    code, _, err = run_here(distill_schedule_argv(inputs, output))
    assert code == 0, err[-3000:]
    return results_of(output)


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize(
    "job, where",
    [("finetune", "a real process"), ("finetune", "this process"), ("distill", "this process")],
    ids=["finetune-sigterm-a-real-process", "finetune-ctrl-c", "distill-sigterm"],
)
def test_a_trainer_job_stopped_by_a_signal_keeps_its_step_and_resumes_to_the_same_result(
    job, where, inputs, stopped_runs, uninterrupted, uninterrupted_distill, tmp_path
):
    output = tmp_path / "run"
    if where == "a real process":
        signum = signal.SIGTERM
        result = run_minibert(
            finetune_argv(inputs, output),
            tmp_path,
            {"at": "step", "n": STOP_AT, "action": "signal", "signum": int(signum)},
        )
        check_stopped(result.returncode, result.stderr, job, signum, output)
        code, out, err = run_here(
            finetune_argv(inputs, output, "--resume_from_checkpoint")
        )  # the stop's process ended
        said = out + err
    else:
        stopped, signum, code, err = stopped_runs[job]
        check_stopped(code, err, job, signum, stopped)
        shutil.copytree(stopped, output)
        code, out, err = run_here(JOB_ARGV[job](inputs, output, "--resume_from_checkpoint"))
        said = out + err
    assert code == 0, said[-3000:]
    assert f"resuming from {output}/checkpoint-{STOP_AT}" in said, said[-3000:]
    weights, history, evaluation = results_of(output)
    expected_weights, expected_history, expected_evaluation = (
        uninterrupted if job == "finetune" else uninterrupted_distill
    )
    assert weights.keys() == expected_weights.keys()
    for name in weights:
        torch.testing.assert_close(weights[name], expected_weights[name], rtol=0, atol=0, msg=name)
    assert history == expected_history and evaluation == expected_evaluation


def test_the_stop_check_sees_a_run_that_kept_nothing_or_said_nothing(tmp_path):
    """The rows above can fail: a run killed by SIGTERM's default (no message, no checkpoint of its step), and one
    that says it saved a checkpoint it did not write, are both caught."""
    with pytest.raises(AssertionError):
        check_stopped(-15, "", "finetune", signal.SIGTERM, tmp_path)
    with pytest.raises(AssertionError):
        check_stopped(
            143,
            f"minibert finetune: stopped by SIGTERM after step {STOP_AT}: saved {tmp_path}/checkpoint-"
            f"{STOP_AT}; continue with --resume_from_checkpoint\n",
            "finetune",
            signal.SIGTERM,
            tmp_path,
        )


# --- a resume refuses options that change the run ------------------------------------------------------------------
# Each checkpoint records the options of the run that saved it (`run_options.json`); resuming with options that
# change what the run trains on or how is one line naming each, exit 2, nothing written (Trainer would restore the
# old scheduler, so a new learning rate would never be used, and new data would train the rest of the run on it).
# What does not change the run (logging, saving cadence, reporting, evaluation batch size, the test data) may
# change; `--resume_with_changed_options` continues anyway, saying what changed.
CHANGED = [
    pytest.param(
        "finetune", ["--learning_rate", "3e-3"], "learning_rate=0.001 (now 0.003)", id="finetune-learning-rate"
    ),
    pytest.param(
        "finetune",
        ["--train_file", "{inputs}/validation.csv"],
        "train_file='{inputs}/train.csv' (now '{inputs}/validation.csv')",
        id="finetune-train-file",
    ),
    pytest.param("finetune", ["--max_seq_length", "12"], "max_seq_length=None (now 12)", id="finetune-max-seq-length"),
    pytest.param(
        "finetune",
        ["--doc_stride", "2", "--max_seq_length", "12"],
        "doc_stride=None (now 2)",
        id="finetune-doc-stride",
    ),
    pytest.param(
        "finetune",
        ["--per_device_train_batch_size", "8"],
        "per_device_train_batch_size=4 (now 8)",
        id="finetune-batch-size",
    ),
    pytest.param("finetune", ["--max_steps", "12"], "max_steps=8 (now 12)", id="finetune-max-steps"),
    pytest.param("finetune", ["--seed", "7"], "seed=42 (now 7)", id="finetune-seed"),
    pytest.param("distill", ["--temperature", "4"], "temperature=2.0 (now 4.0)", id="distill-temperature"),
]
MAY_CHANGE = [
    ["--logging_steps", "2"],
    ["--save_steps", "4"],
    ["--report_to", "none"],
    ["--disable_tqdm", "false"],
    ["--per_device_eval_batch_size", "16"],
    ["--test_file", "{inputs}/validation.csv"],
]


def resume_copy(stopped_runs: dict, job: str, tmp_path: Path) -> Path:
    output = tmp_path / "run"
    shutil.copytree(stopped_runs[job][0], output)
    return output


def check_refused(job: str, change: list[str], names: str, inputs: Path, output: Path, capsys) -> None:
    """The resume with `change` exits 2 in one line naming the changed option as `names`, and writes nothing."""
    from fixtures.tree import tree

    before = tree(output)
    capsys.readouterr()
    words = [word.replace("{inputs}", str(inputs)) for word in change]
    code = main(JOB_ARGV[job](inputs, output, "--resume_from_checkpoint", *words))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"minibert {job}:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(
        f"minibert {job}: error: cannot resume from {output}/checkpoint-{STOP_AT}: it was trained with other options: "
    ), lines[0]
    assert names.replace("{inputs}", str(inputs)) in lines[0] and "--resume_with_changed_options" in lines[0], lines[0]
    assert tree(output) == before, "something was written"


@pytest.mark.parametrize("job, change, names", CHANGED)
def test_a_resume_with_options_that_change_the_run_is_refused_in_one_line(
    job, change, names, inputs, stopped_runs, tmp_path, capsys
):
    check_refused(job, change, names, inputs, resume_copy(stopped_runs, job, tmp_path), capsys)


class ReachedTheData(ValueError):
    """Raised where a resume past its checks would read the data: the checks let it through (`main` says it as
    the one error line, exit 2)."""


def reach_the_data(*args, **kwargs):
    raise ReachedTheData("reached the data")


@pytest.mark.parametrize(
    "change",
    MAY_CHANGE + [["--resume_with_changed_options", "--learning_rate", "3e-3"]],
    ids=[c[0].lstrip("-") for c in MAY_CHANGE] + ["resume_with_changed_options"],
)
def test_a_resume_may_change_what_does_not_change_the_run(change, inputs, stopped_runs, tmp_path, monkeypatch, capsys):
    from modeling_minibert.training.finetuning import flow

    monkeypatch.setattr(flow, "load_splits", reach_the_data)
    output = resume_copy(stopped_runs, "finetune", tmp_path)
    words = [word.replace("{inputs}", str(inputs)) for word in change]
    capsys.readouterr()
    assert main(finetune_argv(inputs, output, "--resume_from_checkpoint", *words)) == 2
    said = capsys.readouterr()
    assert said.err.rstrip("\n").endswith("minibert finetune: error: reached the data"), said.err[-3000:]
    assert f"resuming from {output}/checkpoint-{STOP_AT}" in said.out
    if "--resume_with_changed_options" in change:  # continued, saying what changed
        assert "with changed options (resume_with_changed_options): learning_rate=0.001 (now 0.003)" in said.err


def test_the_resume_rows_can_fail(inputs, stopped_runs, tmp_path, monkeypatch, capsys):
    """A resume check that overlooked the learning rate lets its row through, and the row says so."""
    from modeling_minibert.training.finetuning import flow, resume

    monkeypatch.setattr(flow, "load_splits", reach_the_data)  # past the check, no training
    monkeypatch.setattr(resume, "MAY_CHANGE", resume.MAY_CHANGE | {"learning_rate"})
    with pytest.raises(AssertionError):
        check_refused(
            "finetune",
            ["--learning_rate", "3e-3"],
            "learning_rate",
            inputs,
            resume_copy(stopped_runs, "finetune", tmp_path),
            capsys,
        )
