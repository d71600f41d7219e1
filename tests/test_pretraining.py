"""`pretrain` / `minibert pretrain`: a tiny end-to-end run, resume after SIGKILL, DDP, and bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer, pipeline

import modeling_minibert
from modeling_minibert import cli
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.pretraining import (
    ARGS_FILE,
    CHECKPOINTS_DIR,
    METRICS_FILE,
    PLOT_FILE,
    RESULTS_FILE,
    PretrainingArguments,
    pretrain,
)
from modeling_minibert.pretraining_data import (
    DataCollatorForPreTraining,
    build_nsp_dataset,
    load_bbc_news,
    read_text_files,
    split_documents,
)
from tokenization import train_tokenizer

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~45 BBC articles as a text file, one document per block (paragraph breaks become line breaks)."""
    path = tmp_path_factory.mktemp("corpus") / "news.txt"
    docs = load_bbc_news()[::50]
    path.write_text("\n\n".join(doc.replace("\n\n", "\n") for doc in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(corpus, tmp_path_factory) -> Path:
    # Given to every run: a run's own vocabulary would differ between processes (tokenizers' trainer breaks
    # ties in hash order), and the resume test compares two runs.
    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer([corpus], vocab_size=800, output_dir=path, show_progress=False, overwrite=True)
    return path


@pytest.fixture(scope="module")
def tiny(corpus, tokenizer_dir) -> dict:
    return dict(
        train_files=[str(corpus)], tokenizer=str(tokenizer_dir), config_overrides=TINY_MODEL, max_length=32,
        batch_size=8, held_out_fraction=0.1, logging_steps=1, eval_steps=10, save_steps=10, warmup_steps=5,
        show_progress=False,
    )


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Tiny models run fastest single-threaded, and other test processes share the cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def subprocess_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"), TOKENIZERS_PARALLELISM="false")


def cli_args(**kwargs) -> list[str]:
    argv = []
    for key, value in kwargs.items():
        if isinstance(value, bool):
            argv += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            argv += [f"--{key}", *map(str, value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def read_metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / METRICS_FILE).read_text().splitlines()]


def last_logged_step(folder: Path) -> int:
    """The step of the last complete metrics record (-1 if none yet); tolerates a line being written."""
    try:
        return read_metrics(folder)[-1]["step"]
    except (FileNotFoundError, IndexError, json.JSONDecodeError):
        return -1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


# --- a tiny run, end to end ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("run") / "pretrained"
    summary = pretrain(output_dir=str(out), max_steps=40, learning_rate=2e-3, save_total_limit=2, **tiny)
    return out, summary


def test_run_writes_model_tokenizer_metrics_and_plot(run):
    out, summary = run
    assert summary["output_dir"] == str(out) and summary["steps"] == 40
    for key in ("eval_mlm_accuracy", "eval_nsp_accuracy"):
        assert 0 <= summary[key] <= 1
    assert summary["eval_mlm_perplexity"] == pytest.approx(torch.tensor(summary["eval_mlm_loss"]).exp().item(), rel=1e-6)
    assert json.loads((out / RESULTS_FILE).read_text()) == summary

    records = read_metrics(out)
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_mlm_accuracy" in r]
    assert [r["step"] for r in train] == list(range(1, 41))
    assert [r["step"] for r in evals] == [10, 20, 30, 40]
    assert {k: v for k, v in evals[-1].items() if k != "step"}.items() <= summary.items()
    first, last = (sum(r["mlm_loss"] for r in part) / 5 for part in (train[:5], train[-5:]))
    assert last < first - 0.15, "the MLM loss falls"
    assert train[4]["learning_rate"] == pytest.approx(2e-3)  # peak at the end of warmup, then linear decay
    assert train[-1]["learning_rate"] == 0

    image = matplotlib.image.imread(out / PLOT_FILE)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    # Checkpoints every 10 steps and at the end, only the newest 2 kept; no leftover temporary folder.
    assert sorted(p.name for p in (out / CHECKPOINTS_DIR).iterdir()) == ["checkpoint-00000030", "checkpoint-00000040"]
    assert not list(out.glob("**/.tmp*"))


def test_saved_model_loads_with_the_auto_classes_and_fill_mask(run):
    out, _ = run
    model = AutoModelForPreTraining.from_pretrained(out)
    assert isinstance(model, modeling_minibert.MiniBertForPreTraining)
    assert model.config.hidden_size == 32 and model.config.max_position_embeddings == 64
    # Pretrained without dropout; the saved config keeps the model's own dropout for fine-tuning.
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == MiniBertConfig().hidden_dropout_prob
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    mlm = AutoModelForMaskedLM.from_pretrained(out)
    weights = load_file(out / "model.safetensors")
    assert torch.equal(mlm.bert.embeddings.word_embeddings.weight, weights["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(mlm.cls.predictions.bias, weights["cls.predictions.bias"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == model.config.vocab_size
    predictions = pipeline("fill-mask", model=mlm, tokenizer=tokenizer, top_k=3)("the company said [MASK] profits rose.")
    assert len(predictions) == 3 and predictions[0]["score"] >= predictions[1]["score"]


def held_out_metrics_of_a_plain_forward(out: Path, tiny: dict, corpus: Path) -> tuple[float, float, int]:
    """(MLM accuracy, NSP accuracy, pairs) of the saved model's ordinary forward (full logits) on the run's
    held-out recipe: the document split with the run's seed, pairs seeded seed + 1, BERT's 15% token masks from
    the collator seeded seed + 1, batches of batch_size in order."""
    seed = PretrainingArguments().seed
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForPreTraining.from_pretrained(out).eval()
    _, held_out = split_documents(read_text_files([corpus]), tiny["held_out_fraction"], seed)
    eval_set = build_nsp_dataset(held_out, tokenizer, tiny["max_length"], seed + 1)
    collator = DataCollatorForPreTraining(tokenizer, mlm_probability=0.15, whole_word_mask=False, seed=seed + 1)
    correct = count = nsp_correct = 0
    with torch.no_grad():
        for start in range(0, len(eval_set), tiny["batch_size"]):
            batch = collator([eval_set[i] for i in range(start, min(start + tiny["batch_size"], len(eval_set)))])
            labels, nsp = batch.pop("labels"), batch.pop("next_sentence_label")
            outputs = model(**batch)
            masked = labels != -100
            correct += int((outputs.prediction_logits.argmax(-1)[masked] == labels[masked]).sum())
            count += int(masked.sum())
            nsp_correct += int((outputs.seq_relationship_logits.argmax(-1) == nsp).sum())
    return correct / count, nsp_correct / len(eval_set), len(eval_set)


def test_held_out_metrics_match_a_plain_forward_of_the_saved_model(run, tiny, corpus):
    """Recompute the final evaluation with the saved model's ordinary forward (full logits): same numbers."""
    out, summary = run
    mlm_accuracy, nsp_accuracy, pairs = held_out_metrics_of_a_plain_forward(out, tiny, corpus)
    assert summary["held_out_examples"] == pairs
    assert summary["eval_mlm_accuracy"] == pytest.approx(mlm_accuracy, abs=1e-9)
    assert summary["eval_nsp_accuracy"] == pytest.approx(nsp_accuracy, abs=1e-9)


def test_held_out_masking_is_15_percent_tokens_whatever_the_training_masking(tiny, corpus, tmp_path):
    """A run trained at 40% whole-word masking is scored on the default's held-out masks (15%, token level), so
    its accuracy compares with a default run's."""
    out = tmp_path / "masked-40"
    summary = pretrain(output_dir=str(out), max_steps=10, mlm_probability=0.4, whole_word_mask=True, **tiny)
    mlm_accuracy, nsp_accuracy, _ = held_out_metrics_of_a_plain_forward(out, tiny, corpus)
    assert summary["eval_mlm_accuracy"] == pytest.approx(mlm_accuracy, abs=1e-9)
    assert summary["eval_nsp_accuracy"] == pytest.approx(nsp_accuracy, abs=1e-9)


# --- the run folder --------------------------------------------------------------------------------------------

def test_a_folder_holding_a_run_is_refused_unless_resume_or_overwrite(run, tiny, tmp_path):
    out, summary = run
    before = snapshot(out)
    with pytest.raises(FileExistsError, match=r"already holds a pretraining run; pass --resume .*, --overwrite to replace it"):
        pretrain(output_dir=str(out), max_steps=40, learning_rate=2e-3, save_total_limit=2, **tiny)
    with pytest.raises(ValueError, match=r"cannot resume the run in .*: .*max_steps=40 \(now 50\)"):
        pretrain(output_dir=str(out), max_steps=50, learning_rate=2e-3, save_total_limit=2, resume=True, **tiny)
    assert snapshot(out) == before, "nothing was touched"

    # Resuming a finished run trains no further and reports the same held-out numbers.
    again = pretrain(output_dir=str(out), max_steps=40, learning_rate=2e-3, save_total_limit=2, resume=True, **tiny)
    assert again["steps_this_session"] == 0
    assert again["eval_mlm_accuracy"] == summary["eval_mlm_accuracy"]

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"already holds files; pass --resume"):
        pretrain(output_dir=str(other), max_steps=5, **tiny)
    with pytest.raises(FileExistsError, match=r"holds files but no pretraining run to resume"):
        pretrain(output_dir=str(other), max_steps=5, resume=True, **tiny)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_overwrite_replaces_the_run_and_keeps_other_files(tiny, tmp_path):
    out = tmp_path / "run"
    pretrain(output_dir=str(out), max_steps=10, **tiny)
    (out / "notes.txt").write_text("mine")
    pretrain(**dict(tiny, output_dir=str(out), max_steps=6, save_steps=3, overwrite=True))
    assert json.loads((out / ARGS_FILE).read_text())["max_steps"] == 6
    assert max(r["step"] for r in read_metrics(out)) == 6
    assert sorted(p.name for p in (out / CHECKPOINTS_DIR).iterdir()) == ["checkpoint-00000003", "checkpoint-00000006"]
    assert (out / "notes.txt").read_text() == "mine"


def test_resume_after_sigkill_gives_the_losses_of_an_uninterrupted_run(tiny, tmp_path):
    """Kill a run (SIGKILL) after its checkpoint at step 50, resume it: every logged number and the final weights
    equal those of a run that was never interrupted. Step 50 lies inside the second epoch, with gradient
    accumulation and dropout, so the data order, the masks and the dropout noise must all be restored."""
    env = subprocess_env(tmp_path)
    settings = dict(tiny, max_steps=80, save_steps=10, eval_steps=20, gradient_accumulation_steps=2, save_total_limit=3,
                    pretraining_dropout=0.1, dupe_factor=1)
    command = [sys.executable, "-m", "modeling_minibert.cli", "pretrain", *cli_args(**settings)]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    uninterrupted = subprocess.Popen([*command, "--output_dir", str(whole)], env=env, cwd=tmp_path,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    victim = subprocess.Popen([*command, "--output_dir", str(killed)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not ((killed / CHECKPOINTS_DIR / "checkpoint-00000050").is_dir() and last_logged_step(killed) >= 54):
            assert victim.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL
    finally:
        victim.kill()
    _, err = uninterrupted.communicate(timeout=240)
    assert uninterrupted.returncode == 0, err[-2000:]

    latest = max(p.name for p in (killed / CHECKPOINTS_DIR).glob("checkpoint-*"))
    resumed_at = int(latest.split("-")[1])
    assert resumed_at >= 50
    assert read_metrics(killed)[-1]["step"] > resumed_at, "the killed run logged steps its checkpoint does not hold"
    batches_per_epoch = json.loads((whole / RESULTS_FILE).read_text())["train_examples"] // settings["batch_size"]
    batch = resumed_at * settings["gradient_accumulation_steps"]
    assert batch > batches_per_epoch and batch % batches_per_epoch, "the resume point lies inside the second epoch"

    result = subprocess.run([*command, "--output_dir", str(killed), "--resume"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resuming at step {resumed_at}" in result.stdout
    assert read_metrics(killed) == read_metrics(whole)  # every loss, accuracy and learning rate, exactly
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_accelerate_launch_two_processes_trains_a_valid_model(tiny, tmp_path):
    """DDP over gloo on CPU; `--multi_gpu` is how `accelerate launch` starts several processes (its `--cpu`
    flag starts one), and `pretrain` picks the CPU/gloo backend itself when there is no GPU."""
    out = tmp_path / "ddp"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        "-m", "modeling_minibert.cli", "pretrain", "--output_dir", str(out), "--whole_word_mask",
        *cli_args(**dict(tiny, max_steps=12, save_steps=6, eval_steps=6, logging_steps=3)),
    ]
    result = subprocess.run(command, env=subprocess_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 process(es)" in result.stdout
    assert result.stdout.count("saved the pretrained model and tokenizer to") == 1  # the main process reports
    # Each process saved its random state in the checkpoint: two ranks took part.
    assert sorted(p.name for p in (out / CHECKPOINTS_DIR / "checkpoint-00000012").glob("random_states_*")) == [
        "random_states_0.pkl", "random_states_1.pkl"
    ]
    model = AutoModelForPreTraining.from_pretrained(out)
    initial = modeling_minibert.MiniBertForPreTraining(model.config)
    assert not torch.equal(model.bert.encoder.layer[0].attention.self.query.weight, initial.bert.encoder.layer[0].attention.self.query.weight)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    summary = json.loads((out / RESULTS_FILE).read_text())
    assert summary["epochs"] == pytest.approx(12 * 8 * 2 / summary["train_examples"], abs=0.01)  # 2 x 8 per step
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [3, 6, 9, 12]


# --- arguments and bad input -----------------------------------------------------------------------------------

def test_cli_defaults_are_the_api_defaults():
    namespace = cli.build_parser().parse_args(["pretrain"])
    names = {f.name for f in dataclasses.fields(PretrainingArguments)}
    assert PretrainingArguments(**{k: v for k, v in vars(namespace).items() if k in names}) == PretrainingArguments()
    defaults = PretrainingArguments()
    assert defaults.train_files is None and defaults.dataset is None  # BBC News
    assert defaults.max_length <= MiniBertConfig().max_position_embeddings
    parsed = cli.build_parser().parse_args(["pretrain", "--max-steps", "7", "--whole_word_mask", "--train-files", "a", "b"])
    assert (parsed.max_steps, parsed.whole_word_mask, parsed.train_files) == (7, True, ["a", "b"])


def test_bad_input_fails_early_and_writes_nothing(tiny, tmp_path, corpus):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    three = tmp_path / "three.txt"
    three.write_text("One doc.\n\nTwo docs.\n\nThree docs.\n")
    cases = [
        (dict(train_files=[str(tmp_path / "missing.txt")]), FileNotFoundError, r"text file not found: .*missing\.txt"),
        (dict(train_files=[str(empty)]), ValueError, r"text file .*empty\.txt is empty"),
        (dict(train_files=[str(three)]), ValueError, r"corpus is too small for a held-out split: 3 document\(s\)"),
        (dict(batch_size=4096), ValueError, r"corpus is too small: \d+ training example\(s\) .* batch needs batch_size x processes = 4096"),
        (dict(max_length=80), ValueError, r"max_length=80 exceeds max_position_embeddings=64"),
        (dict(config_overrides="hidden_size=30,num_attention_heads=4"), ValueError, r"hidden_size \(30\) must be divisible"),
        (dict(config_overrides="colour=3"), ValueError, r"config_overrides='colour=3': key colour isn't in the original config"),
        (dict(save_steps=15), ValueError, r"save_steps=15 must be a multiple of logging_steps=10"),
        (dict(max_steps=0), ValueError, r"max_steps=0 must be at least 1"),
        (dict(mixed_precision="fp8"), ValueError, r"mixed_precision='fp8' must be one of"),
        (dict(resume=True, overwrite=True), ValueError, r"resume and overwrite exclude each other"),
        (dict(held_out_fraction=0), ValueError, r"held_out_fraction=0 must be between 0 and 1"),
        (dict(dupe_factor=0), ValueError, r"dupe_factor=0 must be at least 1"),
        (dict(pretraining_dropout=1.0), ValueError, r"pretraining_dropout=1.0 must be in \[0, 1\)"),
        (dict(tokenizer=str(tmp_path / "no-tokenizer")), FileNotFoundError, r"tokenizer folder not found: .*no-tokenizer"),
    ]
    for change, error, message in cases:
        settings = dict(tiny, output_dir=str(out), max_steps=5, logging_steps=10 if "save_steps" in change else 1, save_steps=10)
        settings.update(change)
        with pytest.raises(error, match=message):
            pretrain(**settings)
        assert not out.exists(), f"{change} wrote {list(out.rglob('*'))}"


def test_cli_reports_bad_input_cleanly(tmp_path, capsys):
    code = cli.main(["pretrain", "--output_dir", str(tmp_path / "out"), "--train_files", str(tmp_path / "nope.txt")])
    assert code == 2
    assert "minibert pretrain: error: text file not found:" in capsys.readouterr().err
