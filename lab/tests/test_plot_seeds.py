"""lab.plot_seeds, run as the lab notebook runs it: recipes over seeds from both benchmarks' result files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures.environment import REPO


def distilled(path: Path, validation: float, test: float) -> Path:
    """A distill_rotten_tomatoes.py result: the student is the 'Mini-BERT distilled' row."""
    row = {split: {"accuracy": value} for split, value in (("validation", validation), ("test", test))}
    path.write_text(
        json.dumps({"systems": {"teacher fine-tuned": {"test": {"accuracy": 0.83}}, "Mini-BERT distilled": row}})
    )
    return path


def finetuned(path: Path, validation: float, test: float) -> Path:
    """A finetune_rotten_tomatoes.py result: the student is under 'minibert'."""
    path.write_text(json.dumps({"minibert": {"validation": {"accuracy": validation}, "test": {"accuracy": test}}}))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab.plot_seeds", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_both_kinds_of_result_files_make_one_figure(tmp_path):
    output = tmp_path / "seeds.png"
    done = run(
        "--output",
        str(output),
        "--goal",
        "0.8",
        "--recipe",
        "distilled",
        str(distilled(tmp_path / "d42.json", 0.79, 0.80)),
        str(distilled(tmp_path / "d43.json", 0.80, 0.81)),
        "--recipe",
        "fine-tuned",
        str(finetuned(tmp_path / "f42.json", 0.77, 0.76)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {output}"
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_a_recipe_without_result_files_is_refused_in_one_line(tmp_path):
    done = run("--output", str(tmp_path / "seeds.png"), "--recipe", "750 steps")
    assert done.returncode == 2 and not (tmp_path / "seeds.png").exists()
    assert done.stderr.splitlines()[-1].endswith("error: --recipe '750 steps' names no result file")


def test_a_missing_or_foreign_result_file_is_refused_in_one_line(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": {"eval_loss": 1.0}}))
    for path, says in (
        (tmp_path / "nope.json", f"cannot read {tmp_path / 'nope.json'}: No such file or directory"),
        (
            other,
            f"{other} is not a result of benchmarks.distill_rotten_tomatoes or benchmarks.finetune_rotten_tomatoes",
        ),
    ):
        done = run("--output", str(tmp_path / "seeds.png"), "--recipe", "r", str(path))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert f"error: --recipe 'r': {says}" in done.stderr.splitlines()[-1]
