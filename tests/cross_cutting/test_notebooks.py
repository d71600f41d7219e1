"""The notebooks in `notebooks/` run top to bottom, offline; they are committed without outputs, and each run here
leaves a copy with its outputs for the documentation site.

Each notebook is executed with nbclient in a fresh kernel of this interpreter, as a user opening it runs it: from
its own folder, `notebooks/`, with the installed package (this environment's editable install) and without the
repository root on `sys.path`, so a notebook that imports `benchmarks` or `tests` fails here as it would for
them. What the notebooks write goes to their own temporary folders, so nothing lands in the repository. The
notebooks hold their own assertions (shapes, parameter counts, outputs before and after a push, ...): a failing
assertion fails the cell, and the test.

They are committed without outputs (no figures, paths or widget state in the history), and every run here writes
the executed notebook to `build/notebooks/` (ignored by git; `rendered`: figures as PNG, progress bars as their
last state, the run's temporary folders and this clone's path shortened, execution counts from 1), which the
documentation site renders in their place (docs/hooks.py): `pytest tests/cross_cutting/test_notebooks.py` before `mkdocs build`
gives a site with the notebooks' outputs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from fixtures.environment import REPO
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

from tools.readme import command_problem, minibert_commands, notebook_prose, prose_commands

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# The notebooks there are, with one worker's seconds for each (pytest --durations, fresh clone, 2 workers), which
# only orders the suite: the longest start first, each on a worker of its own (tests/conftest.py).
SECONDS = {
    "01_architecture": 15,
    "02_tokenizer": 20,
    "03_pretraining": 61,
    "04_finetuning": 75,
    "05_hub": 20,
    "06_distillation": 280,
}
# Hang guards, not speed checks: notebook 06's teacher fine-tuning cell ran past 300 s on a 2-core machine at load
# 14 (other developers' jobs beside the suite).
CELL_TIMEOUT = 900  # seconds, per cell
# Run first in every kernel: the setting the test promises (a user's Jupyter started in notebooks/), checked where
# the notebook runs rather than assumed from the environment the kernel was given.
AS_A_USER_OPENS_IT = f"""
import sys
from pathlib import Path
assert Path.cwd() == Path({str(REPO / "notebooks")!r}), Path.cwd()
assert not [p for p in sys.path if p and Path(p).resolve() == Path({str(REPO)!r})], sys.path
"""


def kernel_spec_dir(root: Path) -> Path:
    """A `python3` kernel spec that starts this very interpreter (the venv's), whatever else is installed."""
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (test)",
                "language": "python",
            }
        )
    )
    return root


def test_notebooks_exist():
    assert [path.stem for path in NOTEBOOKS] == list(SECONDS)


# What a committed output may not hold: a path of the machine that ran it.
MACHINE_PATH = re.compile(r"/work/|/root/|/home/|pytest-of-|/private/var/")
MAX_BYTES = 200_000  # all notebooks together, without outputs


RENDERED = REPO / "build" / "notebooks"  # the executed copies the site renders


def rendered(nb: nbformat.NotebookNode, tmp_path: Path) -> nbformat.NotebookNode:
    """`nb` after a run here, as the site shows it: progress bars as their last state (carriage returns applied, a
    cell's stream outputs merged), the run's temporary folders as /tmp and this clone's root as `..` (the notebooks
    run from notebooks/), execution counts from 1 in order, no timing or widget metadata."""
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    replacements = ((str(tmp_path / "tmp"), "/tmp"), (str(tmp_path), "/tmp"), (str(REPO), ".."))
    # what is left of a run folder's path where a table cut it short ("/tmp/pytest-of-x/pytest-3/test_no...")
    cut = re.compile(re.escape(str(tmp_path.parent)) + r"/[\w.-]*")
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if output.get("execution_count") is not None:
                output.execution_count = count
            for key in ("text", "data"):
                if key not in output:
                    continue
                for mime, value in output[key].items() if key == "data" else [(None, output.text)]:
                    if mime is not None and not mime.startswith("text/"):
                        continue
                    for old, new in replacements:
                        value = value.replace(old, new)
                    value = cut.sub("/tmp", value)
                    if mime is None:
                        output.text = value
                    else:
                        output[key][mime] = value
    nb.metadata.pop("widgets", None)
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_committed_without_outputs(path: Path):
    """No outputs, execution counts or widget state in the repository: a run's figures and paths stay out of it."""
    nb = nbformat.read(path, as_version=4)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code_cells), (
        f"{path.name} is committed with outputs: clear them (jupyter nbconvert --clear-output --inplace)"
    )
    assert "widgets" not in nb.metadata


def test_every_command_the_notebooks_prose_shows_parses():
    """A notebook's Markdown is read as the docs' code is: each complete `minibert` command it shows (a code span of
    a command and its flags, a line of a fenced block) takes its flags as written, so an old spelling fails here."""
    commands = [
        (f"{path.name} line {line}", argv)
        for path in NOTEBOOKS
        for text in [notebook_prose(path)]
        for line, argv in [*prose_commands(text), *minibert_commands(text)]
    ]
    assert any(argv[:2] == ["push", "--model_name_or_path"] for _, argv in commands), commands
    assert [f"{where}: {problem}" for where, argv in commands if (problem := command_problem(argv))] == []


def test_the_prose_check_reads_commands_and_refuses_an_old_spelling():
    """The spelling notebook 05 once showed is refused; a command's name, or a flag named with it, is no command."""
    text = (
        "Push with `minibert push FOLDER\nREPO_ID`; `minibert finetune` and `minibert pretrain\n"
        "--teacher_model_name_or_path` are words.\n```bash\n.venv/bin/minibert x `minibert y --z w`\n```\n"
    )
    assert prose_commands(text) == [(1, ["push", "FOLDER", "REPO_ID"])]
    assert command_problem(["push", "FOLDER", "REPO_ID"]).startswith("`minibert push FOLDER REPO_ID` does not parse")


def test_the_notebooks_stay_small():
    assert sum(path.stat().st_size for path in NOTEBOOKS) < MAX_BYTES


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(path, marks=pytest.mark.slow(seconds=SECONDS.get(path.stem, 60)), id=path.stem)
        for path in NOTEBOOKS
    ],
)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells, f"{path.name} has no code"
    for cell in code_cells:  # run afresh: what the committed outputs show must still come out
        cell.outputs, cell.execution_count = [], None

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # The kernel inherits this environment: no PYTHONPATH (the package comes from the install, not the clone), a
    # private Hugging Face cache, our interpreter as the `python3` kernel, and the notebooks' own temporary
    # folders (tempfile.mkdtemp) under pytest's tmp_path, which pytest cleans up.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_spec_dir(tmp_path / "jupyter")))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    # The notebooks train tiny models, for which one thread is as fast as two; a second OpenMP thread only
    # busy-waits when the cores are shared (with other tests, or this process), which made steps 10x slower.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    before = sorted(p.name for p in (REPO / "notebooks").iterdir())

    nb.cells.insert(0, nbformat.v4.new_code_cell(AS_A_USER_OPENS_IT))
    client = NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(REPO / "notebooks")}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails

    outputs = [output for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if not path.name.startswith("05_"):  # every notebook but the Hub one shows its results as plots
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} drew no figure"
    assert sorted(p.name for p in (REPO / "notebooks").iterdir()) == before
    assert any(tmpdir.iterdir()) or path.name.startswith("01_"), "the notebook wrote nothing to its temporary folder"
    nb.cells.pop(0)  # AS_A_USER_OPENS_IT
    shown = rendered(nb, tmp_path)
    assert not MACHINE_PATH.search(
        json.dumps(
            [
                o
                for c in shown.cells
                if c.cell_type == "code"
                for o in c.outputs
                if "image/png" not in o.get("data", {})
            ]
        )
    )
    RENDERED.mkdir(parents=True, exist_ok=True)
    staged = RENDERED / f".{path.name}.partial"
    nbformat.write(shown, staged)
    os.replace(staged, RENDERED / path.name)  # whole or not at all
