"""Tests for `modeling_minibert.cli`: a missing extra is named with a command that installs it, and option names
are taken whole (an abbreviation or a dropped 0.1 name is refused)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from fixtures.environment import REPO

from modeling_minibert import cli


def without_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `names` look uninstalled to the extra check, as on a plain install."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else find_spec(name, *a))


def test_a_missing_extra_names_a_command_that_installs_it_from_the_clone(monkeypatch, capsys, tmp_path):
    without_modules(monkeypatch, "onnxscript")
    assert (
        cli.main(
            [
                "export-onnx",
                "--model_name_or_path",
                str(tmp_path / "model"),
                "--output_dir",
                str(tmp_path / "model.onnx"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        f"minibert export-onnx: error: needs the [onnx] extra (missing module 'onnxscript'); install it "
        f"with: {sys.executable} -m pip install -e '{REPO}[onnx]'\n"
    )
    assert "minibert[" not in err  # the PyPI project named minibert is someone else's
    assert not (tmp_path / "model.onnx").exists()


def test_a_module_missing_later_is_traced_back_to_its_extra(monkeypatch, capsys):
    """A job that imports part of an extra lazily, deep inside, gets the same one line."""
    import modeling_minibert.deployment.mask_filling as fill_mask

    def needs_seqeval(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'seqeval'", name="seqeval")

    monkeypatch.setattr(fill_mask, "fill_mask", needs_seqeval)
    assert cli.main(["fill-mask", "--model_name_or_path", "folder", "--text", "text [MASK]"]) == 2
    assert capsys.readouterr().err == (
        f"minibert fill-mask: error: needs the [train] extra (missing module 'seqeval'); install it with: "
        f"{sys.executable} -m pip install -e '{REPO}[train]'\n"
    )


def test_an_install_outside_a_clone_says_to_install_from_one(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site-packages" / "modeling_minibert" / "cli.py"))
    assert cli.install_hint("train") == "pip install -e '.[train]' in a clone of Mini-BERT"


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["train-tokenizer", "--train_file", "x.txt", "--output_dir", "out", "--overwrite"], "--overwrite"),
        (["train-tokenizer", "--input", "x.txt", "--output_dir", "out"], "--input"),
        (["train-tokenizer", "--train_file", "x.txt", "--output_dir", "out", "--cased"], "--cased"),
        (
            ["train-tokenizer", "--train_file", "x.txt", "--output_dir", "out", "--no-strip-accents"],
            "--no-strip-accents",
        ),
        (["train-tokenizer", "--train_file", "x.txt", "--output_dir", "out", "--quiet"], "--quiet"),
        (["train-tokenizer", "--train_file", "x.txt", "--output_dir", "out", "--vocab", "100"], "--vocab"),
        (["convert-bert", "--model_name_or_path", "src", "--output_dir", "out", "--overwrite"], "--overwrite"),
        (["push", "--model_name_or_path", "folder", "--hub_model_id", "me/model", "--commit", "message"], "--commit"),
    ],
)
def test_dropped_and_abbreviated_option_names_are_refused(argv, refused, capsys, tmp_path, monkeypatch):
    """The 0.1 names are gone (there was no release), and argparse's prefix matching no longer maps an old or a
    shortened name onto a current option: exit 2 naming it, before any work."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minibert {argv[0]}: error: unrecognized arguments: {refused}") and err.count("\n") == 1, (
        err
    )
    assert f"(see minibert {argv[0]} --help)" in err
    assert list(tmp_path.iterdir()) == []


def test_a_job_interrupted_says_so_in_one_line_and_exits_130(monkeypatch, capsys):
    """A bare KeyboardInterrupt (Ctrl-C while a job starts) has no text: the line says "interrupted"."""

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run", ctrl_c)
    assert cli.main(["fill-mask", "--model_name_or_path", "folder", "--text", "text [MASK]"]) == 130
    assert capsys.readouterr().err == "minibert fill-mask: interrupted\n"


def test_a_real_ctrl_c_during_start_up_is_one_line(tmp_path):
    """SIGINT 0.3 s after `minibert` starts, while torch and transformers are still being imported (before
    `cli.main` can catch anything): one line, not a traceback of Python's import machinery, and the process ends
    as interrupted (by SIGINT: 130 in a shell)."""
    import signal
    import subprocess
    import time

    from fixtures.environment import clean_env

    launcher = "import sys; from modeling_minibert.cli import console_main; sys.exit(console_main())"  # what the console script runs
    process = subprocess.Popen(
        [sys.executable, "-c", launcher, "fill-mask", "--help"],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out, err) == (-signal.SIGINT, "", "interrupted (while importing modeling_minibert)\n")
    assert list(tmp_path.iterdir()) == []


def test_the_import_hook_is_put_back_once_the_package_is_imported():
    import modeling_minibert

    assert sys.excepthook is not modeling_minibert._interrupted_while_importing


def test_the_package_import_gives_the_cycle_collector_back_as_the_caller_had_it():
    """The import pauses the collector; a failed import gives it back on, an import under a caller who had turned
    it off leaves it off."""
    import subprocess

    from fixtures.environment import clean_env

    code = (
        "import gc, sys\n"
        "sys.modules['transformers'] = None\n"
        "try:\n    import modeling_minibert\nexcept ImportError:\n    print(gc.isenabled())\n"
        "del sys.modules['transformers']\n"
        "gc.disable()\nimport modeling_minibert\nprint(gc.isenabled())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]


@pytest.mark.parametrize("omp, quota, expected", [(None, 1, 1), (None, 64, "all"), ("2", 1, "all")])
def test_a_jobs_torch_threads_stay_within_the_cpu_quota(monkeypatch, omp, quota, expected):
    """A container's CPU quota caps torch's threads for every job (fine-tuning, distillation, export...), unless
    OMP_NUM_THREADS says otherwise."""
    import torch

    from modeling_minibert.utils import cpus

    before = torch.get_num_threads()
    monkeypatch.setattr(cpus, "usable_cpus", lambda: quota)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    try:
        torch.set_num_threads(2)
        cli.fit_threads_to_the_cpu_quota()
        assert torch.get_num_threads() == (2 if expected == "all" else expected)
    finally:
        torch.set_num_threads(before)
