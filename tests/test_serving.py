"""Serving paths and `minibert benchmark-deploy` (deployment/serving_paths.py, deployment/serving_benchmark.py).

Every path this machine can run gives float32's predictions within its precision's tolerance; the benchmark keeps
the path it measured fastest (by the objective) among those whose predictions hold, as a folder `load_serving`
opens as a text-classification pipeline; bad input is refused in one line before any work.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.deploy import assert_near_fp32

from modeling_minibert import MiniBertForSequenceClassification
from modeling_minibert.cli import main as cli_main
from modeling_minibert.deployment import serving_benchmark
from modeling_minibert.deployment.serving_benchmark import benchmark_deploy
from modeling_minibert.deployment.serving_paths import REFERENCE, SERVING_FILE, SERVING_PATHS, load_serving

SAVED = Path(__file__).parent / "fixtures" / "saved" / "0.1" / "classifier"  # hidden 16, its own tokenizer
WORDS = "the a good bad film story plot acting great dull fine poor fun time truly".split()
RUNNABLE = [name for name, path in SERVING_PATHS.items() if not path.missing()]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """The saved tiny classifier with its head scaled up: predictions with margins, as a trained model's."""
    folder = tmp_path_factory.mktemp("serving") / "classifier"
    shutil.copytree(SAVED, folder)
    model = MiniBertForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        model.classifier.weight.mul_(30)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS, rng.integers(1, 30))) for _ in range(24)) + "\n\n")
    return path


@pytest.fixture(scope="module")
def labelled_file(texts_file) -> Path:
    path = texts_file.with_name("labelled.csv")
    rows = [f"{text},{'positive' if 'good' in text else 'negative'}" for text in texts_file.read_text().split()[:30]]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def served(model_folder, texts_file, labelled_file, tmp_path_factory) -> tuple[Path, dict, Path]:
    """One benchmark of every runnable path, briefly, by latency: (the ready folder, its info, every path's folder)."""
    output, work = tmp_path_factory.mktemp("served") / "ready", tmp_path_factory.mktemp("served") / "paths"
    info = benchmark_deploy(model_folder, texts_file, output, labelled_file=labelled_file, rounds=1, seconds=0.05,
                            batch_size=8, threads=1, work_dir=work)
    return output, info, work


def test_every_runnable_path_gives_float32s_logits(served, model_folder, texts_file):
    """The paths' own folders, reopened: fp32 paths within 1e-4, bf16 and int8 within their tolerance."""
    from transformers import AutoTokenizer

    _, info, work = served
    assert set(info["table"]) == set(RUNNABLE) and REFERENCE in RUNNABLE
    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    batch = tokenizer(texts_file.read_text().split("\n")[:16], padding=True, truncation=True, return_tensors="np")
    ids, mask = batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)
    types = batch["token_type_ids"].astype(np.int64)
    reference = None
    for name in RUNNABLE:
        path = SERVING_PATHS[name]
        folder = next(work / other for other in RUNNABLE if SERVING_PATHS[other].write is path.write)
        logits = torch.from_numpy(path.open(folder, 1)(ids, mask, types))
        if reference is None:
            reference = logits
        elif name.endswith("fp32"):  # pytorch-compiled-fp32 too: the same float32 arithmetic
            torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4, msg=name)
        else:
            assert_near_fp32(reference, logits)


def test_the_choice_is_the_fastest_path_whose_predictions_hold(served, model_folder, texts_file, tmp_path):
    output, info, _ = served
    table = info["table"]
    assert all(0 <= row["accuracy"] <= 1 for row in table.values())  # scored on the labelled file
    eligible = {n: row for n, row in table.items() if row["agreement"] >= 0.99
                and row["accuracy"] >= table[REFERENCE]["accuracy"] - 0.005}
    assert info["path"] in eligible
    assert table[info["path"]]["p50_ms"] <= 1.05 * min(row["p50_ms"] for row in eligible.values())
    throughput = benchmark_deploy(model_folder, texts_file, tmp_path / "throughput", objective="throughput",
                                  paths=["pytorch-int8"], rounds=1, seconds=0.05, threads=1)
    best = max(row["tokens_per_second"] for row in throughput["table"].values() if row["agreement"] >= 0.99)
    assert throughput["table"][throughput["path"]]["tokens_per_second"] >= best / 1.05
    assert set(throughput["table"]) == {REFERENCE, "pytorch-int8"}  # fp32: the reference, always measured


def test_a_path_whose_predictions_drift_is_not_chosen():
    row = {"p50_ms": 1.0, "tokens_per_second": 100.0, "agreement": 1.0, "accuracy": 0.80}
    table = {REFERENCE: row, "fast": {**row, "p50_ms": 0.1, "agreement": 0.95},
             "faster-but-less-accurate": {**row, "p50_ms": 0.05, "accuracy": 0.79}, "quick": {**row, "p50_ms": 0.5}}
    chosen, why = serving_benchmark.choose(table, "latency", min_agreement=0.99, max_accuracy_drop=0.005)
    assert chosen == "quick"
    assert why.endswith("left out for their predictions: fast, faster-but-less-accurate")


def test_the_ready_folder_is_a_text_classification_pipeline(served, model_folder):
    output, info, _ = served
    saved = json.loads((output / SERVING_FILE).read_text())
    assert saved["path"] == info["path"] and saved["threads"] == 1 and saved["cpu"]
    assert (output / "serving_benchmark.png").stat().st_size > 10_000
    assert f"# Serving folder: {info['path']}" in (output / "README.md").read_text()
    classify = load_serving(output)
    texts = ["a good film", "the plot was dull and poor"]
    one = classify(texts[0])
    assert len(one) == 1 and set(one[0]) == {"label", "score"} and one[0]["label"] in ("negative", "positive")
    both = classify(texts, top_k=None)
    assert [len(r) for r in both] == [2, 2] and all(abs(sum(d["score"] for d in r) - 1) < 1e-5 for r in both)
    # the same labels and scores as transformers' pipeline on the float32 model
    from transformers import AutoTokenizer, pipeline

    reference = pipeline("text-classification", model=MiniBertForSequenceClassification.from_pretrained(model_folder),
                         tokenizer=AutoTokenizer.from_pretrained(model_folder))
    for mine, theirs in zip(classify(texts), reference(texts)):
        assert mine["label"] == theirs["label"] and mine["score"] == pytest.approx(theirs["score"], abs=0.05)


@pytest.mark.parametrize("change, message", [
    ({"texts_file": "EMPTY"}, r"holds no text \(one request text per line\)$"),
    ({"model_name_or_path": "NOWEIGHTS"}, r"holds no model weights \(no model\.safetensors\)$"),
    ({"paths": ["tensorrt"]}, r"^unknown serving path 'tensorrt'; choose from pytorch-fp32, "),
    ({"threads": 100_000}, r"^threads=100000 must be between 1 and this machine's \d+ CPUs$"),
    ({"labelled_file": "BADLABELS"}, r"has labels the model does not know: neutral \(the model's: negative, positive\)$"),
    ({"objective": "cost"}, r"^argument --objective: invalid choice: 'cost' \(choose from 'latency', 'throughput'\)"),
])
def test_bad_input_is_one_line_before_any_work(model_folder, texts_file, tmp_path, capsys, change, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    bad_labels = tmp_path / "labels.csv"
    bad_labels.write_text("text,label\na film,neutral\n")
    weightless = tmp_path / "weightless"
    shutil.copytree(model_folder, weightless)
    (weightless / "model.safetensors").unlink()
    options = {"model_name_or_path": model_folder, "texts_file": texts_file, **change}
    options = {k: {"EMPTY": empty, "NOWEIGHTS": weightless, "BADLABELS": bad_labels}.get(v, v) if isinstance(v, str) else v
               for k, v in options.items()}
    argv = ["benchmark-deploy", "--output_dir", str(tmp_path / "out")]
    for key, value in options.items():
        argv += [f"--{key}", *(map(str, value) if isinstance(value, list) else [str(value)])]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("minibert benchmark-deploy: error: "), err
    assert re.search(message, err.strip().removeprefix("minibert benchmark-deploy: error: ")), err
    assert not (tmp_path / "out").exists()


def test_a_path_this_cpu_cannot_run_is_refused_when_asked_for(model_folder, texts_file, tmp_path, monkeypatch, capsys):
    from modeling_minibert.deployment import serving_paths

    monkeypatch.setattr(serving_paths, "native_bf16", lambda device: False)
    code = cli_main(["benchmark-deploy", "--model_name_or_path", str(model_folder), "--texts_file", str(texts_file),
                     "--output_dir", str(tmp_path / "out"), "--paths", "pytorch-bf16"])
    assert code == 2
    assert capsys.readouterr().err == (
        "minibert benchmark-deploy: error: serving path pytorch-bf16 cannot run on this machine: the CPU has no bf16 "
        "instructions (AVX-512 BF16 or AMX): bf16 would be emulated, slower than fp32\n")


def test_a_head_other_than_sequence_classification_is_refused(texts_file, tmp_path):
    from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM

    MiniBertForMaskedLM(MiniBertConfig(vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).save_pretrained(tmp_path / "mlm")
    with pytest.raises(ValueError, match=r"holds a MiniBertForMaskedLM; benchmark-deploy serves sequence classifiers"):
        benchmark_deploy(tmp_path / "mlm", texts_file, tmp_path / "out")


def test_a_folder_that_is_not_a_serving_folder_is_refused(model_folder):
    with pytest.raises(FileNotFoundError, match=r"is not a serving folder \(no serving.json\); write one with"):
        load_serving(model_folder)


# -- the compiled path (deployment/compiled.py) ---------------------------------------------------------------------
COMPILED = "pytorch-compiled-fp32"


@pytest.mark.skipif(COMPILED not in RUNNABLE, reason="no C++ compiler for AOTInductor on this machine")
def test_a_compiled_package_is_refused_on_another_torch_or_cpu(served, tmp_path):
    """The package is bound to the torch and CPU capability it was compiled for: another one is one line, not a
    crash inside the kernels."""
    from modeling_minibert.deployment import load_compiled

    _, _, work = served
    folder = tmp_path / "compiled"
    shutil.copytree(work / COMPILED, folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "compiled.json", "config.json", "model.pt2", "tokenizer.json", "tokenizer_config.json"]
    build = json.loads((folder / "compiled.json").read_text())
    assert build == {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    (folder / "compiled.json").write_text(json.dumps({**build, "cpu_capability": "AMX-FUTURE"}))
    version = re.escape(torch.__version__)
    with pytest.raises(RuntimeError, match=rf"^{re.escape(str(folder))} was compiled with torch {version} for AMX-FUTURE; "
                       rf"this is torch {version} on {build['cpu_capability']}: compile it again here$"):
        load_compiled(folder)
    (folder / "compiled.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"holds no compiled model \(model.pt2 and compiled.json\)"):
        load_compiled(folder)


def test_compile_model_refuses_before_any_work(model_folder, tmp_path, monkeypatch):
    from modeling_minibert import MiniBertConfig, MiniBertForMultipleChoice
    from modeling_minibert.deployment import compile_model, compiled
    from modeling_minibert.deployment.serving_paths import serving_path

    with pytest.raises(FileNotFoundError, match=r"model folder .*nothing does not exist"):
        compile_model(tmp_path / "nothing", tmp_path / "out")
    MiniBertForMultipleChoice(MiniBertConfig(vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32)).save_pretrained(tmp_path / "choice")
    with pytest.raises(ValueError, match=r"MiniBertForMultipleChoice's are \(batch, choice, sequence\)"):
        compile_model(tmp_path / "choice", tmp_path / "out")
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"^no C\+\+ compiler \(\S+ or clang\+\+\) on PATH: AOTInductor compiles"):
        compile_model(model_folder, tmp_path / "out")
    with pytest.raises(ValueError, match=r"^serving path pytorch-compiled-fp32 cannot run on this machine: no C\+\+"):
        serving_path(COMPILED)
    assert not (tmp_path / "out").exists()


def test_a_compiled_model_that_disagrees_leaves_nothing_behind(model_folder, tmp_path, monkeypatch):
    from modeling_minibert.deployment import compiled

    def wrong(model, package):
        raise ValueError(f"{package}: the compiled model differs from PyTorch by 1.00e+00 (> 1e-04)")

    monkeypatch.setattr(compiled, "_compile", lambda model, package: package.write_bytes(b"not a package"))
    monkeypatch.setattr(compiled, "check_against_eager", wrong)
    with pytest.raises(ValueError, match=r"differs from PyTorch"):
        compiled.compile_model(model_folder, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
