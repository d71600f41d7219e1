"""On a CUDA GPU (`pytest -m gpu`, or all of benchmarks/gpu_check.sh): every head's outputs against the CPU's,
bf16 autocast training against float32, the attention backends and the unpadded encoder against each other, a
pretraining run that saves, resumes and reloads, and `torch.compile`. Without a GPU the `gpu` tests are skipped,
saying so (tests/conftest.py); MINIBERT_GPU_TESTS_ON_CPU=1 runs them on the CPU, to try their code.

Unmarked, on every machine: the GPU benchmark (benchmarks/gpu_speed.py) at tiny sizes on the CPU, and the
script's syntax.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from contextlib import nullcontext

import pytest
import torch
from fixtures.environment import REPO
from fixtures.models import TINY, ragged_batch
from modeling.test_modeling_minibert import head_inputs  # the inputs every head is tested with on the CPU

import modeling_minibert
from modeling_minibert import MiniBertConfig
from modeling_minibert.sharing.bert_format import HEADS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run (MINIBERT_GPU_TESTS_ON_CPU=1)
# Mini-BERT's default size (the pretraining recipe's model), for the tests whose numbers depend on scale.
DEFAULT_SIZE = dict(vocab_size=8192, hidden_size=192, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=768, max_position_embeddings=64)
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
        for w, h in (zip(want, have) if isinstance(want, tuple) else [(want, have)]):
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
            batch = on(DEVICE, pretraining_batch(32, 64, config.vocab_size, seed=step))
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
    assert losses["fp32"][-1] < losses["fp32"][0] - 0.5, "float32 learns"
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
    reference = modeling_minibert.MiniBertModel(MiniBertConfig(**sizes, attn_implementation=reference_attn, unpad_inputs=False))
    reference = reference.to(DEVICE, dtype).eval()
    with torch.no_grad():
        expected = reference(**inputs)
        for unpad in (True, False):
            model = modeling_minibert.MiniBertModel(MiniBertConfig(**sizes, attn_implementation=attn, unpad_inputs=unpad))
            model.load_state_dict(reference.state_dict())
            got = model.to(DEVICE, dtype).eval()(**inputs)
            tolerance = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-4)
            assert_close_at_real_tokens(got, expected, mask, **tolerance)


@pytest.mark.gpu
def test_torch_compile_gives_the_eager_outputs_and_gradients():
    """inductor (the default backend) on the device: inference in one graph, and a training step's loss and
    gradients as eager's, on a full-length batch and on a padded one (a compiled graph stays padded)."""
    config = MiniBertConfig(**DEFAULT_SIZE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = modeling_minibert.MiniBertForPreTraining(config).to(DEVICE)
    batch = on(DEVICE, pretraining_batch(8, 64, config.vocab_size, seed=0))
    features = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        got, expected = compiled.eval()(**features), model.eval()(**features)
    torch.testing.assert_close(got.prediction_logits, expected.prediction_logits, atol=1e-3, rtol=1e-3)

    model.train()
    training = torch.compile(model)
    for padded in (False, True):
        if padded:
            batch["attention_mask"][1:, 40:] = 0
            batch["labels"] = batch["labels"].masked_fill(batch["attention_mask"] == 0, -100)
        eager_loss = model(**batch).loss
        eager_loss.backward()
        eager_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        compiled_loss = training(**batch).loss
        compiled_loss.backward()
        torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-4, rtol=1e-4)
        for name, grad in eager_grads.items():
            torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}")
        model.zero_grad(set_to_none=True)


# --- a pretraining run on the device ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_pretraining_run_saves_resumes_and_reloads(tmp_path):
    """300 steps of a tiny model on examples/pretraining.txt with `pretrain` (Accelerate puts it on the GPU), a
    checkpoint every 100; resumed from checkpoint-200 it logs the uninterrupted run's numbers again (to 1e-4:
    CUDA's sums are not bit-reproducible run to run, as the CPU's are), and the saved folder reloads with the Auto
    classes and fills masks on the device."""
    pytest.importorskip("datasets", reason="pretraining builds its examples with the datasets package")
    from transformers import AutoModelForPreTraining, AutoTokenizer, pipeline

    from modeling_minibert.training.pretraining import pretrain

    out = tmp_path / "run"
    settings = dict(train_file=[str(REPO / "examples" / "pretraining.txt")], vocab_size=1000, max_seq_length=64,
                    config_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=256",
                    max_steps=300, save_steps=100, eval_steps=100, logging_steps=10, warmup_steps=20,
                    per_device_train_batch_size=32, report_to=["none"], disable_tqdm=True, mixed_precision="no")
    summary = pretrain(output_dir=str(out), **settings)
    assert summary["global_step"] == 300
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 1.0, "the loss falls"

    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    again = pretrain(output_dir=str(resumed), resume_from_checkpoint=str(resumed / "checkpoint-200"), **settings)
    assert again["steps_this_session"] == 100
    replayed = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    timing = {"data_wait"}
    for got, want in zip(replayed, records, strict=True):
        got, want = ({k: v for k, v in r.items() if k not in timing} for r in (got, want))
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), (got, want)

    model = AutoModelForPreTraining.from_pretrained(out)
    assert isinstance(model, modeling_minibert.MiniBertForPreTraining)
    fill = pipeline("fill-mask", model=str(out), tokenizer=AutoTokenizer.from_pretrained(out), device=DEVICE, top_k=3)
    assert len(fill("the council met on [MASK] to discuss the plan.")) == 3


# --- the benchmark and the script, on any machine -----------------------------------------------------------------

def test_the_gpu_benchmark_runs_at_tiny_sizes_on_the_cpu(tmp_path):
    """benchmarks/gpu_speed.py end to end on the CPU at its tiny size: every measurement, the results file in the
    benchmarks' format, its table and figure; MFU is left out where the device's peak is unknown."""
    from benchmarks import gpu_speed
    from benchmarks.report import check_results

    output = tmp_path / "gpu_speed.json"
    gpu_speed.main(["--device", "cpu", "--sizes", "tiny", "--steps", "2", "--rounds", "1", "--step_repeats", "2",
                    "--step_size", "tiny", "--output", str(output)])
    results = json.loads(output.read_text())
    check_results(results)
    assert results["device"]["name"].startswith("cpu") and results["device"]["peak_bf16_flops"] is None
    rows = {(r["size"], r["mode"], r["impl"]): r for r in results["rows"]}
    assert set(rows) == {("tiny", mode, impl) for mode in ("training", "inference") for impl in ("transformers", "minibert")}
    for row in rows.values():
        assert row["tokens_per_second"] > 0 and row["mfu"] is None and row["batch_size"] >= 1
    assert results["step_8x64"]["milliseconds"] > 0 and results["step_8x64"]["goal_milliseconds"] == 1.0
    assert "| tiny | training |" in gpu_speed.readme_table(results)
    assert output.with_suffix(".png").stat().st_size > 1000


def test_the_gpu_check_script_is_valid_bash_and_names_its_parts():
    script = REPO / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    for part in ("pytest", "-m gpu", "benchmarks.gpu_speed", "accelerate.commands.launch", "fsdp", "$OUT"):
        assert part in text, part
