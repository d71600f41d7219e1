"""On a CUDA GPU (`pytest -m gpu`, or all of benchmarks/gpu_check.sh): every head's outputs against the CPU's,
bf16 autocast training against float32, the attention backends, the packed-attention kernel and the unpadded
encoder against each other, a training step on the collator's batches that never waits for the device, a pretraining
run that saves, resumes and reloads, and the training step compiled in one graph. Without a GPU the `gpu` tests are
skipped, saying so (tests/conftest.py); MINIBERT_GPU_TESTS_ON_CPU=1 runs them on the CPU, to try their code, and
GPU_CHECK_QUICK=1 (the check's dry run) at tiny sizes and few steps.

Unmarked, on every machine: the GPU benchmark (benchmarks/gpu_speed.py) at tiny sizes on the CPU, the script's
syntax, and the whole check rehearsed on the CPU in a venv of the GPU machine's packages (.ci/gpu_image).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
from fixtures.environment import REPO, clean_env
from fixtures.models import TINY, ragged_batch
from modeling.test_modeling_minibert import head_inputs  # the inputs every head is tested with on the CPU

import modeling_minibert
from modeling_minibert import MiniBertConfig
from modeling_minibert.sharing.bert_format import HEADS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run (MINIBERT_GPU_TESTS_ON_CPU=1)
QUICK = os.environ.get("GPU_CHECK_QUICK") == "1"  # the check's dry run: tiny sizes, few steps
# Mini-BERT's default size (the pretraining recipe's model), for the tests whose numbers depend on scale.
DEFAULT_SIZE = dict(
    vocab_size=8192,
    hidden_size=192,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=768,
    max_position_embeddings=64,
)
if QUICK:
    DEFAULT_SIZE = dict(DEFAULT_SIZE, vocab_size=512, hidden_size=32, intermediate_size=64)
# bf16 keeps 8 bits of mantissa (a relative rounding of 0.4%); after 20 AdamW steps the losses of a bf16 autocast
# run stay within 2% of float32's (the CPU's bf16 autocast, measured: within 0.5%).
BF16_LOSS_TOLERANCE = 0.02


@pytest.fixture(autouse=True)
def exact_float32():
    """float32 matmuls in float32, not TF32 (which transformers or a user may have turned on): the comparisons
    below hold float32 to 1e-4."""
    if DEVICE != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def on(device: str, inputs: dict) -> dict:
    return {k: v.to(device) for k, v in inputs.items()}


def assert_close_at_real_tokens(got, expected, mask: torch.Tensor, atol: float, rtol: float = 1e-4) -> None:
    """Every output field of two model outputs, token-level fields at real tokens only (padding is unspecified
    once the encoder runs unpadded), the pooled [CLS] of rows that start with a real token."""
    keep = mask.bool().cpu()
    fields = {k: v for k, v in expected.items() if v is not None}
    assert {k for k, v in got.items() if v is not None} == fields.keys()
    for key, want in fields.items():
        have = got[key]
        for w, h in zip(want, have) if isinstance(want, tuple) else [(want, have)]:
            w, h = w.float().cpu(), h.float().cpu()
            if w.dim() >= 2 and w.shape[:2] == keep.shape:
                w, h = w[keep], h[keep]
            elif key == "pooler_output":  # read at position 0, padding in a left-padded row
                w, h = w[keep[:, 0]], h[keep[:, 0]]
            torch.testing.assert_close(h, w, atol=atol, rtol=rtol, msg=lambda m: f"{key}: {m}")


# --- the model on the device --------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("head", HEADS)
def test_every_head_gives_the_cpus_outputs(head):
    """Padded inputs (the unpadded encoder), labels given (the losses), in evaluation and in training (no
    dropout): the device's float32 outputs are the CPU's to 1e-4."""
    config = MiniBertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = getattr(modeling_minibert, f"MiniBert{head}")(config)
    inputs = head_inputs(head, TINY["vocab_size"])
    mask = inputs["attention_mask"]
    for training in (False, True):
        model.train(training)
        with torch.no_grad():
            expected = model.cpu()(**inputs)
            got = model.to(DEVICE)(**on(DEVICE, inputs))
        assert_close_at_real_tokens(got, expected, mask, atol=1e-4)


def pretraining_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int) -> dict:
    from benchmarks.bench_model import make_batch

    return make_batch(batch_size, seq_len, vocab_size, mixed=False, seed=seed)


@pytest.mark.gpu
def test_bf16_autocast_training_follows_float32():
    """20 AdamW steps of the default-size MiniBertForPreTraining on new batches each step, in float32 and under
    bf16 autocast (float32 weights, as `--mixed_precision bf16` trains): every step's loss within 2% of float32's."""
    torch.manual_seed(0)
    config = MiniBertConfig(**DEFAULT_SIZE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    fp32 = modeling_minibert.MiniBertForPreTraining(config).to(DEVICE)
    bf16 = modeling_minibert.MiniBertForPreTraining(config).to(DEVICE)
    bf16.load_state_dict(fp32.state_dict())
    losses = {}
    for name, model in (("fp32", fp32), ("bf16", bf16)):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        autocast = torch.autocast(DEVICE, dtype=torch.bfloat16) if name == "bf16" else nullcontext()
        losses[name] = []
        for step in range(20):
            batch = on(DEVICE, pretraining_batch(8 if QUICK else 32, 64, config.vocab_size, seed=step))
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
    assert losses["fp32"][-1] < losses["fp32"][0] - (0.1 if QUICK else 0.5), "float32 learns"
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=BF16_LOSS_TOLERANCE)


def attention_backends() -> list[str]:
    return ["eager", "sdpa"] + (["flash_attention_2"] if importlib.util.find_spec("flash_attn") else [])


@pytest.mark.gpu
@pytest.mark.parametrize("attn", ["eager", "sdpa", "flash_attention_2"])
def test_attention_backends_and_the_unpadded_encoder_agree(attn):
    """A batch whose rows fall into several of the unpadded encoder's buckets (one left-padded, one with a hole),
    through each backend, unpadded and padded, against eager padded attention: float32 to 1e-4; flash-attention
    (half precision only) in bf16 against sdpa in bf16, to bf16's rounding."""
    if attn not in attention_backends():
        pytest.skip("flash_attention_2 needs the flash_attn package, which is not installed here")
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    inputs = on(DEVICE, dict(input_ids=ids, attention_mask=mask, token_type_ids=types))
    sizes = dict(TINY, max_position_embeddings=ids.shape[1])
    dtype = torch.bfloat16 if attn == "flash_attention_2" else torch.float32
    reference_attn = "sdpa" if attn == "flash_attention_2" else "eager"
    torch.manual_seed(0)
    reference = modeling_minibert.MiniBertModel(
        MiniBertConfig(**sizes, attn_implementation=reference_attn, unpad_inputs=False)
    )
    reference = reference.to(DEVICE, dtype).eval()
    with torch.no_grad():
        expected = reference(**inputs)
        for unpad in (True, False):
            model = modeling_minibert.MiniBertModel(
                MiniBertConfig(**sizes, attn_implementation=attn, unpad_inputs=unpad)
            )
            model.load_state_dict(reference.state_dict())
            got = model.to(DEVICE, dtype).eval()(**inputs)
            tolerance = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-4)
            assert_close_at_real_tokens(got, expected, mask, **tolerance)


def planned(batch: dict) -> dict:
    """A batch as the collator gives it (`plan_batch`, on the host), on the device."""
    from modeling_minibert.modeling_minibert import plan_batch

    return {k: v.to(DEVICE) for k, v in plan_batch(batch, 0.15).items()}


@contextmanager
def no_host_sync():
    """On CUDA, torch's own sync check raises at any operation that would make the host wait for the device; on the
    CPU, the dry run counts such operations (tests/fixtures/host_syncs.py) and the input checks take their device
    path."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return
    from fixtures.host_syncs import HostSyncs

    from modeling_minibert import checks_minibert

    read_on_host, checks_minibert.read_on_host = checks_minibert.read_on_host, lambda tensor, training: not training
    try:
        with HostSyncs() as syncs:
            yield
    finally:
        checks_minibert.read_on_host = read_on_host
    assert syncs.seen == []


@pytest.mark.gpu
@pytest.mark.parametrize("mixed", [False, True], ids=["full-length", "mixed-length"])
def test_a_training_step_on_the_collators_batches_never_waits_for_the_device(mixed):
    """Forward, backward and the objective's sums on planned batches under bf16 autocast: no operation makes the
    host wait for the device, so the data loader prepares the next batch while the step runs."""
    from benchmarks.bench_model import make_batch
    from modeling_minibert.training.pretraining.objectives import OBJECTIVES

    objective = OBJECTIVES["mlm_nsp"]()
    model = modeling_minibert.MiniBertForPreTraining(MiniBertConfig(**DEFAULT_SIZE)).to(DEVICE).train()
    batch = planned(make_batch(8, 64, DEFAULT_SIZE["vocab_size"], mixed=mixed, seed=0))
    autocast = torch.autocast(DEVICE, dtype=torch.bfloat16)
    model(**objective.model_inputs(batch)).loss.backward()  # warm-up: first calls may sync (allocator, handles)
    with no_host_sync(), autocast:
        outputs = model(**objective.model_inputs(batch))
        outputs.loss.backward()
        sums = objective.statistics(outputs, batch)
    assert torch.isfinite(sums).all()


@pytest.mark.gpu
def test_the_packed_attention_kernel_gives_the_padded_encoders_outputs():
    """Where flash_attn is installed, its varlen kernel on the packed tokens (bf16), else sdpa per bucket: against
    the padded encoder in the same precision, at real tokens."""
    from modeling_minibert.modeling_minibert import packed_attention_kernel

    ids, mask, types = ragged_batch(TINY["vocab_size"])
    inputs = on(DEVICE, dict(input_ids=ids, attention_mask=mask, token_type_ids=types))
    sizes = dict(TINY, max_position_embeddings=ids.shape[1])
    torch.manual_seed(0)
    padded = modeling_minibert.MiniBertModel(MiniBertConfig(**sizes, unpad_inputs=False)).to(DEVICE).eval()
    packed = modeling_minibert.MiniBertModel(MiniBertConfig(**sizes)).to(DEVICE).eval()
    packed.load_state_dict(padded.state_dict())
    flash_attn = DEVICE == "cuda" and importlib.util.find_spec("flash_attn") is not None
    print(f"packed attention on {DEVICE}: {packed_attention_kernel('sdpa', DEVICE, torch.bfloat16, flash_attn)}")
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
        got, expected = packed(**inputs), padded(**inputs)
    assert_close_at_real_tokens(got, expected, mask, atol=3e-2, rtol=3e-2)


@pytest.mark.gpu
def test_torch_compile_gives_the_eager_outputs_and_gradients_in_one_graph():
    """inductor (the default backend; aot_eager in the CPU dry run, which traces the same graph without C++
    builds) on the device: inference in one graph, and a training step (forward, loss, backward) in one graph
    (`fullgraph=True`) on the collator's batches, full-length and padded (a compiled graph stays padded), with the
    eager step's loss and gradients."""
    backend = "aot_eager" if QUICK and DEVICE == "cpu" else "inductor"
    config = MiniBertConfig(**DEFAULT_SIZE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = modeling_minibert.MiniBertForPreTraining(config).to(DEVICE)
    batch = pretraining_batch(8, 64, config.vocab_size, seed=0)
    features = on(DEVICE, {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with torch.no_grad():
        got, expected = compiled.eval()(**features), model.eval()(**features)
    torch.testing.assert_close(got.prediction_logits, expected.prediction_logits, atol=1e-3, rtol=1e-3)

    model.train()
    training = torch.compile(model, fullgraph=True, backend=backend)
    for padded in (False, True):
        if padded:
            batch["attention_mask"][1:, 40:] = 0
            batch["labels"] = batch["labels"].masked_fill(batch["attention_mask"] == 0, -100)
        inputs = planned(batch)
        eager_loss = model(**inputs).loss
        eager_loss.backward()
        eager_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        compiled_loss = training(**inputs).loss
        compiled_loss.backward()
        torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-4, rtol=1e-4)
        for name, grad in eager_grads.items():
            torch.testing.assert_close(
                model.get_parameter(name).grad, grad, atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}"
            )
        model.zero_grad(set_to_none=True)


# --- a pretraining run on the device ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_a_pretraining_run_saves_resumes_and_reloads(tmp_path):
    """300 steps of a tiny model on examples/pretraining.txt with `pretrain` (Accelerate puts it on the GPU), a
    checkpoint every 100; resumed from checkpoint-200 it logs the uninterrupted run's numbers again (losses to 1e-3,
    accuracies to 2e-3: attention's backward on CUDA is not deterministic, so the runs part by rounding, which can
    move an accuracy by a token; see benchmarks/gpu_check_report.py), and the saved folder reloads with the Auto
    classes and fills masks on the device."""
    from transformers import AutoModelForPreTraining, AutoTokenizer, pipeline

    from benchmarks.gpu_check_report import same_curve
    from modeling_minibert.training.pretraining import pretrain

    out = tmp_path / "run"
    settings = dict(
        train_file=[str(REPO / "examples" / "pretraining.txt")],
        vocab_size=1000,
        max_seq_length=64,
        config_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=256",
        max_steps=30 if QUICK else 300,
        save_steps=10 if QUICK else 100,
        eval_steps=10 if QUICK else 100,
        logging_steps=10,
        warmup_steps=20,
        per_device_train_batch_size=32,
        report_to=["none"],
        disable_tqdm=True,
        mixed_precision="no",
    )
    summary = pretrain(output_dir=str(out), **settings)
    steps = settings["max_steps"]
    assert summary["global_step"] == steps
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - (0.1 if QUICK else 1.0), "the loss falls"

    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    checkpoint = f"checkpoint-{steps - settings['save_steps']}"
    again = pretrain(output_dir=str(resumed), resume_from_checkpoint=str(resumed / checkpoint), **settings)
    assert again["steps_this_session"] == settings["save_steps"]
    compared = same_curve(resumed, out)
    assert compared["same_curve"], compared

    model = AutoModelForPreTraining.from_pretrained(out)
    assert isinstance(model, modeling_minibert.MiniBertForPreTraining)
    fill = pipeline("fill-mask", model=str(out), tokenizer=AutoTokenizer.from_pretrained(out), device=DEVICE, top_k=3)
    assert len(fill("the council met on [MASK] to discuss the plan.")) == 3


# --- the benchmark and the script, on any machine -----------------------------------------------------------------


def test_the_gpu_benchmark_runs_at_tiny_sizes_on_the_cpu(tmp_path):
    """benchmarks/gpu_speed.py end to end on the CPU at its tiny size: every measurement, the results file in the
    benchmarks' format, its table and figure; MFU over the datasheet is left out where the device's peak is
    unknown, MFU over the measured matmul rate is there, from the same FLOP count for both implementations."""
    from benchmarks import gpu_speed
    from benchmarks.report import check_results

    output = tmp_path / "gpu_speed.json"
    gpu_speed.main(
        [
            "--device",
            "cpu",
            "--sizes",
            "tiny",
            "--steps",
            "2",
            "--rounds",
            "1",
            "--step_repeats",
            "2",
            "--step_size",
            "tiny",
            "--output",
            str(output),
        ]
    )
    results = json.loads(output.read_text())
    check_results(results)
    assert results["device"]["name"].startswith("cpu") and results["device"]["peak_bf16_flops"] is None
    rows = {(r["size"], r["mode"], r["batch"], r["impl"]): r for r in results["rows"]}
    cases = (("training", "full"), ("training", "mixed"), ("inference", "mixed"))
    assert set(rows) == {("tiny", *case, impl) for case in cases for impl in ("transformers", "minibert")}
    for row in rows.values():
        assert row["tokens_per_second"] > 0 and row["mfu"] is None and row["batch_size"] >= 1
        assert row["mfu_measured_peak"] == pytest.approx(
            row["useful_flops"] / row["step_seconds"] / results["device"]["measured_matmul_flops"]
        )
    for case in cases:
        assert (
            rows[("tiny", *case, "minibert")]["useful_flops"] == rows[("tiny", *case, "transformers")]["useful_flops"]
        )
    assert results["parts_done"] == ["training tiny", "inference tiny", "step"]
    assert results["step_8x64"]["milliseconds"] > 0 and results["step_8x64"]["goal_milliseconds"] == 1.0
    assert "| tiny | training |" in gpu_speed.readme_table(results)
    assert output.with_suffix(".png").stat().st_size > 1000


# A venv of the GPU machine's packages (.ci/setup dev): transformers 5.17, no datasets (its wheels beside it).
GPU_IMAGE = REPO / ".ci" / "gpu_image"
REHEARSED_PARTS = (
    "pytest",
    "speed",
    *(f"{run}{suffix}" for run in ("single", "fsdp", "ddp") for suffix in ("", "_resume", "_resume_same_curve")),
    "data_wait_workers_0",
    "data_wait_workers_2",
    "compile",
)


def gpu_image_python() -> Path:
    python = GPU_IMAGE / "bin" / "python"
    if not python.is_file() or not list((GPU_IMAGE / "wheels").glob("datasets-*.whl")):
        pytest.skip(f"no venv of the GPU machine's packages and wheels in {GPU_IMAGE} (bash .ci/setup dev builds it)")
    return python


def rehearse(tmp_path: Path, python: Path, **env: str) -> subprocess.CompletedProcess:
    """benchmarks/gpu_check.sh's dry run on the CPU with the GPU machine's packages, as the machine runs it."""
    settings = dict(
        OUT=str(tmp_path / "out"),
        PYTHON=str(python),
        MINIBERT_WHEELS=str(GPU_IMAGE / "wheels"),
        GPU_CHECK_QUICK="1",
        MINIBERT_GPU_TESTS_ON_CPU="1",
        GPU_CHECK_WORK=str(tmp_path / "work"),
        GPU_CHECK_BUDGET="900",
        OMP_NUM_THREADS="1",
    )
    return subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh")],
        env=clean_env(**{**settings, **env}),
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.mark.slow(seconds=300)
@pytest.mark.timeout(1200)
def test_the_gpu_check_rehearsed_on_the_cpu_runs_every_part_with_the_gpu_machines_packages(tmp_path):
    """The whole check, every part passing (a skipped part would fail it), in transformers 5.17 without datasets
    until the carried wheels bring it; at most 8 files come back, no folder; each part's results are there."""
    python = gpu_image_python()
    image = subprocess.run(
        [
            str(python),
            "-c",
            "import transformers, importlib.util; "
            "print(transformers.__version__, importlib.util.find_spec('datasets') is None)",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert image.stdout.split() == ["5.17.0", "True"], image.stdout + image.stderr
    done = rehearse(tmp_path, python)
    out = tmp_path / "out"
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 0, summary + done.stdout[-3000:]
    verdicts = dict(line.split(": ", 1) for line in summary.splitlines()[1 : len(REHEARSED_PARTS) + 1])
    assert list(verdicts) == list(REHEARSED_PARTS) and all(v.startswith("passed") for v in verdicts.values()), verdicts
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "gpu_check.log",
        "gpu_speed.json",
        "gpu_speed.png",
        "pytest_gpu.xml",
        "runs.json",
        "summary.txt",
        "versions.json",
    ], "at most 8 files and no folder come back from a GPU machine"
    versions = json.loads((out / "versions.json").read_text())
    assert versions["transformers"] == "5.17.0" and versions["datasets_from"].startswith(
        str(tmp_path / "work" / "site")
    )
    speed = json.loads((out / "gpu_speed.json").read_text())
    assert speed["parts_done"] == ["training tiny", "inference tiny", "step", "compile"]
    assert {(r["mode"], r["batch"]) for r in speed["rows"]} == {
        ("training", "full"),
        ("training", "mixed"),
        ("inference", "mixed"),
    }
    assert all(r["mfu_measured_peak"] > 0 and r["useful_flops"] > 0 for r in speed["rows"])
    assert len(speed["step_8x64"]["variants_milliseconds"]) == 3
    runs = json.loads((out / "runs.json").read_text())
    assert all(runs[f"{run}-resumed"]["same_curve"] for run in ("single", "fsdp", "ddp")), runs


@pytest.mark.slow(seconds=18)
def test_the_gpu_check_counts_a_skipped_part_as_not_passed(tmp_path):
    """A budget spent before the parts start: each is skipped, said so, and the check fails."""
    (tmp_path / "no-wheels").mkdir()  # nothing to install: no part runs
    done = rehearse(tmp_path, gpu_image_python(), GPU_CHECK_BUDGET="1", MINIBERT_WHEELS=str(tmp_path / "no-wheels"))
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert done.returncode == 1, summary
    assert "pytest: skipped, the budget of 1 s is spent (not passed)" in summary
    assert "compile: skipped, the budget of 1 s is spent (not passed)" in summary
    assert "passed in" not in summary


def test_a_resumed_run_continues_the_curve_within_rounding_and_not_past_it(tmp_path, capsys):
    """The check's verdict on a resumed run (benchmarks/gpu_check_report.py): the same steps, losses within 1e-3 and
    accuracies within 2e-3 of the uninterrupted run's pass (CUDA's attention backward is not deterministic);
    a loss 1% off, or a step missing, fails."""
    from benchmarks.gpu_check_report import main

    whole = [
        {"step": 10, "loss": 5.0, "mlm_accuracy": 0.2, "data_wait": 0.1},
        {"step": 20, "loss": 4.0, "mlm_accuracy": 0.3},
    ]
    cases = {
        "rounding": [dict(whole[0], loss=5.004, data_wait=0.5), dict(whole[1], mlm_accuracy=0.3015)],
        "a loss 1% off": [whole[0], dict(whole[1], loss=4.04)],
        "a step missing": whole[:1],
    }
    out = tmp_path / "out"
    out.mkdir()
    for name, records in {"whole": whole, **cases}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (tmp_path / name / "train_results.json").write_text(json.dumps({"train_steps_per_second": 1.0}))
    codes = {
        name: main(["--out", str(out), "--record", str(tmp_path / name), "--resumes", str(tmp_path / "whole")])
        for name in cases
    }
    assert codes == {"rounding": 0, "a loss 1% off": 1, "a step missing": 1}
    runs = json.loads((out / "runs.json").read_text())
    assert runs["a loss 1% off"]["largest_loss_gap"] == pytest.approx(0.01)
    capsys.readouterr()
    main(["--out", str(out)])
    assert "a loss 1% off: 1.0 steps/s, data wait None; DIFFERS FROM whole's curve" in capsys.readouterr().out


def test_the_gpu_check_script_is_valid_bash_and_names_its_parts():
    script = REPO / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    for part in ("pytest", "-m gpu", "benchmarks.gpu_speed", "accelerate.commands.launch", "fsdp", "$OUT"):
        assert part in text, part
