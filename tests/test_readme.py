"""The README runs as pasted, its figures are its committed results', and its stated defaults are the code's.

Shell blocks run in order from the root of a fresh copy of the repository (its tracked files, with this `.venv`),
as a user pasting them would; training commands are shortened by appending step limits (`SHORTEN`), which
argparse lets win over earlier values. Python blocks run with the venv's interpreter from the same root.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.environment import REPO
from tools.readme import README, blocks, rendered, result_tables

# Appended to each training command of a README block: enough steps to exercise every stage of the job.
SHORTEN = {
    "minibert pretrain": "--max_steps 4 --eval_steps 2 --save_steps 2 --logging_steps 1 --per_device_train_batch_size 8",
    "minibert finetune": "--max_steps 2 --per_device_train_batch_size 8",
    "minibert distill": "--max_steps 2 --per_device_train_batch_size 8",
}
# Sections whose tables are measurements: each must be a results table backed by a committed file.
MEASURED_SECTIONS = ("Speed", "Pretraining", "Fine-tuning", "Distillation")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def shortened(code: str) -> str:
    """`code` with continuation lines joined and each training command given its step limits."""
    lines = code.replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        command = line.split("#", 1)[0].rstrip()
        for prefix, limits in SHORTEN.items():
            if prefix in command:
                line = f"{command} {limits}"
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    """The repository's tracked files, as a fresh clone has them, with this environment's .venv."""
    root = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def test_readme_blocks_run_as_pasted(fresh_copy: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(fresh_copy / ".hf-home"), TOKENIZERS_PARALLELISM="false", MPLBACKEND="Agg")
    ran = 0
    for block in blocks(readme()):
        if block.skip or block.language not in ("bash", "python"):
            continue
        if block.language == "bash":
            argv = ["bash", "-euo", "pipefail", "-c", shortened(block.code)]
        else:
            argv = [str(fresh_copy / ".venv" / "bin" / "python"), "-c", block.code]
        result = subprocess.run(argv, cwd=fresh_copy, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"README line {block.line}:\n{block.code}\n{result.stderr[-3000:]}"
        ran += 1
    assert ran >= 8, f"only {ran} README blocks ran"


def test_only_the_setup_and_long_runs_are_skipped():
    skipped = [block.skip for block in blocks(readme()) if block.skip]
    assert skipped and all(len(reason) > 10 for reason in skipped), skipped


@pytest.mark.parametrize(
    ("line", "results_file", "script", "written"), result_tables(readme()), ids=lambda v: str(v)[:40]
)
def test_result_tables_are_their_committed_results(line: int, results_file: str, script: str, written: str):
    assert (REPO / results_file).is_file(), f"README line {line}: {results_file} is not committed"
    assert written == rendered(results_file, script), (
        f"README line {line} differs from {results_file}: run `python tools/readme.py` after the benchmark"
    )


def test_measured_sections_hold_only_backed_tables():
    text = readme()
    sections = re.split(r"^## ", text, flags=re.M)
    checked = 0
    for section in sections:
        title = section.splitlines()[0] if section else ""
        if not title.startswith(MEASURED_SECTIONS):
            continue
        lines = section.splitlines()
        for i, line in enumerate(lines):
            starts_table = line.startswith("|") and not lines[i - 1].startswith("|")
            if starts_table and not lines[i - 1].startswith("<!-- results:"):
                # the one other kind of table there: documented defaults, which test_documented_* check
                assert lines[i - 1].startswith("<!-- defaults:"), (
                    f"a table in README section {title!r} is not backed by a results file: {line}"
                )
            checked += starts_table


def defaults_table(name: str) -> dict[str, str]:
    """The `| field | value |` rows after `<!-- defaults: NAME -->`."""
    lines = readme().splitlines()
    start = lines.index(f"<!-- defaults: {name} -->")
    rows = {}
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1].split(" (")[0]  # a remark in brackets may follow the value
    return rows


def as_written(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def test_documented_model_defaults_are_the_config_defaults():
    from modeling_minibert import MiniBertConfig

    config = MiniBertConfig()
    documented = defaults_table("model")
    assert len(documented) >= 10
    for field, value in documented.items():
        assert as_written(getattr(config, field)) == value, field


def test_documented_pretraining_defaults_are_the_job_defaults():
    from modeling_minibert.pretraining import PretrainingArguments

    fields = {f.name: f.default for f in dataclasses.fields(PretrainingArguments)}
    documented = defaults_table("pretraining")
    assert len(documented) >= 8
    for field, value in documented.items():
        assert as_written(fields[field]) == value, field
