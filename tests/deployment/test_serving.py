"""Serving paths and `minibert benchmark-deploy` (deployment/serving_paths.py, deployment/serving_benchmark.py).

Every path this machine can run gives float32's predictions within its precision's tolerance; the benchmark keeps
the path it measured fastest (by the objective) among those whose predictions hold, as a folder `load_serving`
opens as a text-classification pipeline; bad input is refused in one line before any work.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
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

SAVED = Path(__file__).parents[1] / "fixtures" / "saved" / "0.1" / "classifier"  # hidden 16, its own tokenizer
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
    info = benchmark_deploy(
        model_folder,
        texts_file,
        output,
        labelled_file=labelled_file,
        rounds=1,
        seconds=0.05,
        batch_size=8,
        threads=1,
        work_dir=work,
    )
    return output, info, work


@pytest.mark.slow(seconds=35)  # every serving path built: not in the quick tier
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
    eligible = {
        n: row
        for n, row in table.items()
        if row["agreement"] >= 0.99 and row["accuracy"] >= table[REFERENCE]["accuracy"] - 0.005
    }
    assert info["path"] in eligible
    assert table[info["path"]]["p50_ms"] <= 1.05 * min(row["p50_ms"] for row in eligible.values())
    throughput = benchmark_deploy(
        model_folder,
        texts_file,
        tmp_path / "throughput",
        objective="throughput",
        paths=["pytorch-int8"],
        rounds=1,
        seconds=0.05,
        threads=1,
    )
    best = max(row["tokens_per_second"] for row in throughput["table"].values() if row["agreement"] >= 0.99)
    assert throughput["table"][throughput["path"]]["tokens_per_second"] >= best / 1.05
    assert set(throughput["table"]) == {REFERENCE, "pytorch-int8"}  # fp32: the reference, always measured


def test_the_command_says_what_it_chose_and_how_it_held_and_no_library_chatter(
    model_folder, texts_file, labelled_file, tmp_path, capfd
):
    """On success: the table, the choice, and how the chosen path's predictions held against float32's; the paths'
    own steps (an export's check, transformers' bars, torch's deprecations) unsaid."""
    capfd.readouterr()
    code = cli_main(
        [
            "benchmark-deploy",
            "--model_name_or_path",
            str(model_folder),
            "--texts_file",
            str(texts_file),
            "--labelled_file",
            str(labelled_file),
            "--output_dir",
            str(tmp_path / "out"),
            "--paths",
            "pytorch-int8",
            "onnxruntime-fp32",
            "--rounds",
            "1",
            "--seconds",
            "0.05",
            "--threads",
            "1",
        ]
    )
    assert code == 0
    out, err = capfd.readouterr()
    info = json.loads((tmp_path / "out" / "serving.json").read_text())
    held = info["table"][info["path"]]
    assert out.endswith(
        f"chose {info['path']}: wrote {tmp_path / 'out'}\nchecked: {info['path']} predicts as float32 on "
        f"{held['agreement']:.1%} of the 24 texts (at least 99% needed), accuracy "
        f"{held['accuracy']:.4f}\n"
    ), out
    assert out.count("checked:") == 1
    for chatter in ("Loading weights", "Warning", "\x1b[A", "torchvision"):
        assert chatter not in err, err


def test_a_path_whose_predictions_drift_is_not_chosen():
    row = {"p50_ms": 1.0, "tokens_per_second": 100.0, "agreement": 1.0, "accuracy": 0.80}
    table = {
        REFERENCE: row,
        "fast": {**row, "p50_ms": 0.1, "agreement": 0.95},
        "faster-but-less-accurate": {**row, "p50_ms": 0.05, "accuracy": 0.79},
        "quick": {**row, "p50_ms": 0.5},
    }
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

    reference = pipeline(
        "text-classification",
        model=MiniBertForSequenceClassification.from_pretrained(model_folder),
        tokenizer=AutoTokenizer.from_pretrained(model_folder),
    )
    for mine, theirs in zip(classify(texts), reference(texts)):
        assert mine["label"] == theirs["label"] and mine["score"] == pytest.approx(theirs["score"], abs=0.05)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"texts_file": "EMPTY"}, r"holds no text \(one request text per line\)$"),
        ({"model_name_or_path": "NOWEIGHTS"}, r"holds no model weights \(no model\.safetensors\)$"),
        ({"paths": ["tensorrt"]}, r"^unknown serving path 'tensorrt'; choose from pytorch-fp32, "),
        ({"threads": 100_000}, r"^threads=100000 must be between 1 and this machine's \d+ CPUs$"),
        (
            {"labelled_file": "BADLABELS"},
            r"has labels the model does not know: neutral \(the model's: negative, positive\)$",
        ),
        (
            {"objective": "cost"},
            r"^argument --objective: invalid choice: 'cost' \(choose from 'latency', 'throughput'\)",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_work(model_folder, texts_file, tmp_path, capsys, change, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    bad_labels = tmp_path / "labels.csv"
    bad_labels.write_text("text,label\na film,neutral\n")
    weightless = tmp_path / "weightless"
    shutil.copytree(model_folder, weightless)
    (weightless / "model.safetensors").unlink()
    options = {"model_name_or_path": model_folder, "texts_file": texts_file, **change}
    options = {
        k: {"EMPTY": empty, "NOWEIGHTS": weightless, "BADLABELS": bad_labels}.get(v, v) if isinstance(v, str) else v
        for k, v in options.items()
    }
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
    code = cli_main(
        [
            "benchmark-deploy",
            "--model_name_or_path",
            str(model_folder),
            "--texts_file",
            str(texts_file),
            "--output_dir",
            str(tmp_path / "out"),
            "--paths",
            "pytorch-bf16",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        "minibert benchmark-deploy: error: serving path pytorch-bf16 cannot run on this machine: the CPU has no bf16 "
        "instructions (AVX-512 BF16 or AMX): bf16 would be emulated, slower than fp32\n"
    )


def test_a_head_other_than_sequence_classification_is_refused(texts_file, tmp_path):
    from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM

    MiniBertForMaskedLM(
        MiniBertConfig(
            vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    ).save_pretrained(tmp_path / "mlm")
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
        "compiled.json",
        "config.json",
        "model.pt2",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    build = json.loads((folder / "compiled.json").read_text())
    assert build == {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    (folder / "compiled.json").write_text(json.dumps({**build, "cpu_capability": "AMX-FUTURE"}))
    version = re.escape(torch.__version__)
    with pytest.raises(
        RuntimeError,
        match=rf"^{re.escape(str(folder))} was compiled with torch {version} for AMX-FUTURE; "
        rf"this is torch {version} on {build['cpu_capability']}: compile it again here$",
    ):
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
    MiniBertForMultipleChoice(
        MiniBertConfig(
            vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    ).save_pretrained(tmp_path / "choice")
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


# -- every serving path checks its graph against its config, and bounds its inputs the same way -----------------------
# A folder whose graph and config disagree (2 outputs, 5 labels) would answer a label from a softmax over the wrong
# columns: each path refuses it when it opens, in one line. Each path refuses, in one line naming the input and the
# limit, what its tables cannot hold (OpenVINO and a compiled package check no index themselves: an id past the
# vocabulary, a negative one, or a text past the positions came back as logits, or as a page of C++ asserts).
def path_param(name: str) -> pytest.param:
    why = SERVING_PATHS[name].missing()
    return pytest.param(
        name, id=name, marks=[pytest.mark.skip(reason=f"{name} cannot run here: {why}")] if why else []
    )


def path_folder(work: Path, name: str) -> Path:
    """The folder of `name` in the benchmark's work folder (paths that run the same files share one)."""
    return next(work / other for other in RUNNABLE if SERVING_PATHS[other].write is SERVING_PATHS[name].write)


def relabelled(folder: Path, copy: Path, labels: int) -> Path:
    """A copy of a path's folder whose config names `labels` labels (the graph is left as it is)."""
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config["id2label"] = {str(i): "abcde"[i] for i in range(labels)}
    config["label2id"] = {name: int(i) for i, name in config["id2label"].items()}
    config["problem_type"] = None if labels == 1 else config.get("problem_type")
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def check_refused(run, error: type[BaseException], *names: str) -> None:
    """`run()` raises `error` in one line naming each of `names`."""
    with pytest.raises(error) as raised:
        run()
    message = str(raised.value)
    assert "\n" not in message and all(name in message for name in names), message


# (ids, mask, types) of one bad batch, and what the refusal names; the saved classifier: vocab 200, 2 segments, 64
# positions. The last one is 15,002 tokens, as the issue's.
def batch(ids: int = 5, types: int = 0, length: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = (2, length)
    return np.full(shape, ids, np.int64), np.ones(shape, np.int64), np.full(shape, types, np.int64)


BAD_INPUTS = {
    "id-at-the-vocabulary": (batch(ids=200), ("input_ids contains 200", "vocab_size=200")),
    "id-100000": (batch(ids=100_000), ("input_ids contains 100000", "vocab_size=200")),
    "id-negative": (batch(ids=-1), ("input_ids contains -1", "vocab_size=200")),
    "token-type-7": (batch(types=7), ("token_type_ids contains 7", "type_vocab_size=2")),
    "past-the-positions": (batch(length=15_002), ("position 15002", "max_position_embeddings=64")),
}


@pytest.fixture(scope="module")
def opened(served) -> dict:
    """Each runnable path opened on its folder, once."""
    _, _, work = served
    return {name: SERVING_PATHS[name].open(path_folder(work, name), 1) for name in RUNNABLE}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("name", [path_param(name) for name in SERVING_PATHS])
def test_every_path_refuses_inputs_outside_its_tables(name, case, opened):
    arrays, names = BAD_INPUTS[case]
    check_refused(lambda: opened[name](*arrays), ValueError, *names)


@pytest.mark.parametrize("labels", [5, 1])
@pytest.mark.parametrize("name", [path_param(name) for name in SERVING_PATHS])
def test_every_path_refuses_a_config_that_does_not_match_its_graph(name, labels, served, tmp_path):
    _, _, work = served
    folder = relabelled(path_folder(work, name), tmp_path / "relabelled", labels)
    names = (
        ("classifier.weight", f"[{labels}, 16]") if name == "pytorch-int8" else (str(folder), f"num_labels={labels}")
    )
    check_refused(lambda: SERVING_PATHS[name].open(folder, 1), ValueError, *names)


@pytest.mark.skipif("onnxruntime-fp32" not in RUNNABLE, reason="onnxruntime is not installed (the [onnx] extra)")
def test_the_serving_rows_can_fail(served, tmp_path, monkeypatch):
    """The checks above can fail: onnxruntime's own session answers a negative id with logits, and a graph opened
    without its config check answers for a config of 5 labels."""
    from modeling_minibert.deployment import serving_paths
    from modeling_minibert.deployment.onnx_session import INPUT_NAMES, LengthBucketedSession

    _, _, work = served
    session = LengthBucketedSession(path_folder(work, "onnxruntime-fp32"), 1).session
    arrays, names = BAD_INPUTS["id-negative"]
    with pytest.raises(pytest.fail.Exception):
        check_refused(lambda: session.run(None, dict(zip(INPUT_NAMES, arrays))), ValueError, *names)
    monkeypatch.setattr(serving_paths, "_bounded", lambda folder, graph, limits: graph)
    folder = relabelled(path_folder(work, "onnxruntime-fp32"), tmp_path / "relabelled", 5)
    with pytest.raises(pytest.fail.Exception):
        check_refused(lambda: SERVING_PATHS["onnxruntime-fp32"].open(folder, 1), ValueError, "num_labels=5")


# -- nothing native loaded from a folder unless asked: a compiled package ------------------------------------------------
# A compiled folder's model.pt2 holds a shared library, which runs as soon as it loads. It loads only where this user
# compiled it (recorded outside the folder, by the package's SHA-256), or with allow_compiled=True; before torch's
# loader extracts it, every entry is checked. Each row's folder is made by hand: a zip in AOTInductor's layout whose
# library, where a C++ compiler is at hand, is one whose constructor writes a marker file (the reproduction).
# The row: refused in one line naming the file, the marker never written, nothing written outside the folder, no
# temporary folder left behind.
ENTRY = "model/data/aotinductor/model/"
CONSTRUCTOR = '#include <cstdio>\n__attribute__((constructor)) static void ran() { if (FILE* f = std::fopen(MARKER, "w")) std::fclose(f); }\n'


def marker_library(folder: Path, marker: Path) -> bytes:
    """A shared library whose constructor creates `marker` (or, without a C++ compiler, bytes that stand for one)."""
    import shutil as which

    compiler = which.which("g++") or which.which("clang++")
    if compiler is None:
        return b"\x7fELF not really a library"
    source = folder / "marker.cpp"
    source.write_text(CONSTRUCTOR)
    import subprocess

    subprocess.run(
        [compiler, "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(folder / "marker.so"), str(source)],
        check=True,
        capture_output=True,
    )
    return (folder / "marker.so").read_bytes()


def compiled_folder(root: Path, entries: dict[str, bytes], build: object = None, links: tuple[str, ...] = ()) -> Path:
    """A serving folder of the compiled path holding `entries` in model.pt2 (and `links`: entries that are links)."""
    import zipfile

    folder = root / "compiled"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SAVED / name, folder / name)
    build = (
        {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
        if build is None
        else build
    )
    (folder / "compiled.json").write_text(build if isinstance(build, str) else json.dumps(build))
    (folder / SERVING_FILE).write_text(json.dumps({"path": COMPILED, "threads": None}))
    with zipfile.ZipFile(folder / "model.pt2", "w") as archive:
        archive.writestr("model/archive_format", "pt2")
        archive.writestr("model/archive_version", "0")
        archive.writestr("model/byteorder", "little")
        archive.writestr(f"{ENTRY}cmarker.wrapper_metadata.json", json.dumps({"AOTI_DEVICE_KEY": "cpu"}))
        for name, data in entries.items():
            archive.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/passwd")
    return folder


def damage(folder: Path, how: str) -> None:
    package = folder / "model.pt2"
    data = package.read_bytes()
    if how == "truncate":
        package.write_bytes(data[: len(data) // 2])
    else:  # a byte of the library's data flipped: its CRC no longer matches
        at = data.index(b"\x7fELF") + 40
        package.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])


@dataclass(frozen=True)
class NativeRow:
    id: str
    names: tuple[str, ...]
    allow: bool = False  # the caller allows compiled code: the checks of the archive still hold
    entries: tuple[str, ...] = (f"{ENTRY}cmarker.wrapper.so",)  # names of the library's copies in the package
    links: tuple[str, ...] = ()
    build: object = None
    damage: str | None = None
    error: type[BaseException] = ValueError


NATIVE_ROWS = [
    # compiled.json says this torch and CPU (anyone can write it): the package was still not compiled here
    NativeRow(
        "a-package-compiled-elsewhere",
        ("model.pt2", "native code", "not compiled on this machine", "allow_compiled=True"),
    ),
    NativeRow(
        "an-entry-with-dot-dot",
        ("model.pt2", "leads out of its folder", "../"),
        allow=True,
        entries=(f"{ENTRY}cmarker.wrapper.so", ENTRY + "../" * 12 + "{escape}"),
    ),
    NativeRow(
        "an-absolute-entry",
        ("model.pt2", "leads out of its folder", "/{escape}"),
        allow=True,
        entries=(f"{ENTRY}cmarker.wrapper.so", "/{escape}"),
    ),
    NativeRow("an-entry-that-is-a-link", ("model.pt2", "is a link"), allow=True, links=(f"{ENTRY}passwd",)),
    NativeRow("a-truncated-package", ("model.pt2", "not a whole AOTInductor package"), allow=True, damage="truncate"),
    NativeRow("a-damaged-entry", ("model.pt2", "damaged", "CRC"), allow=True, damage="flip"),
    NativeRow("compiled-json-a-list", ("compiled.json", "JSON object", "list"), build=["2.13", "AVX512"]),
    NativeRow("compiled-json-not-json", ("compiled.json", "not valid JSON"), build="{oops"),
]


def check_native_row(row: NativeRow, root: Path, load=None) -> None:
    """`load(folder)` (default: load_serving, allowing compiled code as the row says) refuses the row's folder in one
    line naming what it must; the library's constructor never ran; nothing was written outside the folder; no
    temporary folder was left."""
    import tempfile

    marker, escape = root / "constructor-ran", root / "escaped"
    library = marker_library(root, marker)
    entries = {name.replace("{escape}", str(escape).lstrip("/")): library for name in row.entries}
    folder = compiled_folder(root, entries, row.build, row.links)
    if row.damage:
        damage(folder, row.damage)
    temporary = set(os.listdir(tempfile.gettempdir()))
    load = load or (lambda folder: load_serving(folder, allow_compiled=row.allow))
    check_refused(
        lambda: load(folder), row.error, *(name.replace("{escape}", str(escape).lstrip("/")) for name in row.names)
    )
    assert not marker.exists(), "the package's native code ran"
    assert not escape.exists(), "an entry was written outside the folder"
    left = {
        name
        for name in set(os.listdir(tempfile.gettempdir())) - temporary
        if name.startswith(("aotinductor", "minibert-compiled-", "minibert-package-"))
    }
    assert not left, left


@pytest.mark.parametrize("row", NATIVE_ROWS, ids=[row.id for row in NATIVE_ROWS])
def test_a_compiled_package_is_never_loaded_unasked_nor_unchecked(row, tmp_path):
    check_native_row(row, tmp_path)


@pytest.mark.skipif(compiled_missing := SERVING_PATHS[COMPILED].missing(), reason=f"{compiled_missing}")
def test_the_native_rows_can_fail(tmp_path):
    """The check above can fail: torch's own loader, given the same package, runs the library's constructor (then
    fails to find the model in it), though it is refused in the very words afterwards."""
    import tempfile

    from modeling_minibert.deployment.compiled import NativeCodeRefused

    def torch_loads(folder: Path):
        with tempfile.TemporaryDirectory() as private, pytest.MonkeyPatch.context() as patch:
            patch.setenv("TMPDIR", private)  # where torch's loader extracts it, removed after
            try:
                torch._inductor.aoti_load_package(str(folder / "model.pt2"))
            except RuntimeError:
                pass
        raise NativeCodeRefused(
            f"{folder / 'model.pt2'} is native code, not compiled on this machine: allow_compiled=True"
        )

    with pytest.raises(AssertionError, match="native code ran"):
        check_native_row(NATIVE_ROWS[0], tmp_path, load=torch_loads)


@pytest.mark.skipif(COMPILED not in RUNNABLE, reason="no C++ compiler for AOTInductor on this machine")
def test_a_package_this_user_compiled_loads_and_a_copy_elsewhere_needs_allowing(served, tmp_path, monkeypatch):
    """The record is this user's, outside the folder: the benchmark's compiled folder loads here without the flag;
    the same folder for a user whose cache never recorded it needs allow_compiled=True, and then loads."""
    from modeling_minibert.deployment.compiled import NativeCodeRefused, load_compiled

    _, _, work = served
    assert load_compiled(work / COMPILED) is not None
    monkeypatch.setenv("MINIBERT_CACHE", str(tmp_path / "another-users-cache"))
    with pytest.raises(NativeCodeRefused, match=r"model.pt2 is native code .* allow_compiled=True"):
        load_compiled(work / COMPILED)
    runner = load_compiled(work / COMPILED, allow_compiled=True)
    ids = torch.ones(1, 4, dtype=torch.long)
    assert runner(ids, torch.ones_like(ids), torch.zeros_like(ids))[0].shape == (1, 2)


def test_a_benchmark_stopped_by_sigterm_leaves_no_temporary_folder(
    model_folder, texts_file, tmp_path, monkeypatch, capsys
):
    """SIGTERM (Python's default would end the process on the spot, leaving /tmp/minibert-serving-*) stops the
    benchmark in one line, exit 143, its temporary folder removed and nothing written."""
    import signal
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    measure = serving_benchmark.measure_paths

    def stopped(folder, paths, work, *args):
        assert work.parent == temporary and work.is_dir()  # the temporary folder is in use
        os.kill(os.getpid(), signal.SIGTERM)
        return measure(folder, paths, work, *args)

    monkeypatch.setattr(serving_benchmark, "measure_paths", stopped)
    capsys.readouterr()
    code = cli_main(
        [
            "benchmark-deploy",
            "--model_name_or_path",
            str(model_folder),
            "--texts_file",
            str(texts_file),
            "--output_dir",
            str(tmp_path / "out"),
            "--paths",
            "pytorch-int8",
            "--rounds",
            "1",
        ]
    )
    assert code == 128 + signal.SIGTERM
    assert (
        capsys.readouterr().err
        == f"minibert benchmark-deploy: stopped by SIGTERM: nothing was written to {tmp_path / 'out'}\n"
    )
    assert list(temporary.iterdir()) == [] and not (tmp_path / "out").exists()
