"""PyTorch int8 (with each quantized engine's kernels) and bfloat16: outputs near fp32 and the same predictions
(tolerance: tests/fixtures/deploy.py), a folder that reloads in a fresh process, bad input refused before any
work."""

import json

import pytest
import torch
from fixtures.deploy import assert_missing_weights_refused, assert_near_fp32, classifier, fixture_set
from fixtures.environment import REPO, run_python
from fixtures.models import TINY, ragged_batch

from modeling_minibert import MiniBertForSequenceClassification
from modeling_minibert.deployment.quantization import (
    load_quantized,
    packing_engine,
    quantize,
    quantize_dynamic_int8,
    quantized_engine,
)
from modeling_minibert.utils.outputs import QUANTIZED_INFO_FILE, QUANTIZED_WEIGHTS_FILE

# The engines whose kernels Mini-BERT's int8 layers can run on (x86 picks fbgemm for these layers).
ENGINES = [e for e in ("fbgemm", "onednn") if e in torch.backends.quantized.supported_engines]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("classifier")
    classifier().save_pretrained(path)
    return path


def logits(model, ids, mask, types, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, attention_mask=mask, token_type_ids=types, **kwargs).logits


@pytest.mark.parametrize("engine", ENGINES)
def test_int8_logits_near_fp32_and_predictions_agree(engine):
    fp32 = classifier()
    int8 = quantize_dynamic_int8(classifier(), engine=engine)
    batch = fixture_set(TINY["vocab_size"])
    assert_near_fp32(logits(fp32, *batch), logits(int8, *batch))


def test_bfloat16_logits_near_fp32_and_predictions_agree(folder):
    """bfloat16 is the other fast path on CPUs with AMX (bench_deploy.py): the model loads in it as any
    transformers model does, and runs the unpadded path in it."""
    bf16 = MiniBertForSequenceClassification.from_pretrained(folder, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    batch = fixture_set(TINY["vocab_size"])
    got = logits(bf16, *batch)
    assert got.dtype == torch.bfloat16
    assert_near_fp32(logits(classifier(), *batch), got.float())


def test_the_engine_is_chosen_by_measuring_and_restored(monkeypatch, tmp_path):
    """oneDNN or torch's setting, whichever measures faster on int8 layers here (remembered); the block packs for
    the engine and puts torch's process-wide setting back, also after an error; an unknown engine is refused in one
    line."""
    from modeling_minibert.deployment import quantization
    from modeling_minibert.utils import measured

    before = torch.backends.quantized.engine
    monkeypatch.setenv("MINIBERT_CACHE", str(tmp_path))
    if "onednn" in ENGINES and before != "onednn":
        timed = []
        real = measured.timings
        monkeypatch.setattr(
            measured, "timings", lambda candidates: timed.append(sorted(candidates)) or real(candidates)
        )
        chosen = packing_engine()  # measured for real: both engines' kernels run
        assert chosen in (before, "onednn") and timed == [sorted({before, "onednn"})]
        assert packing_engine() == chosen and len(timed) == 1  # remembered
        for fake, expected in (({before: 1.0, "onednn": 0.5}, "onednn"), ({before: 1.0, "onednn": 0.95}, before)):
            monkeypatch.setattr(measured, "machine", lambda fake=fake: f"a CPU timed {fake}")
            monkeypatch.setattr(measured, "timings", lambda candidates, fake=fake: dict(fake))
            assert quantization.packing_engine() == expected
    assert torch.backends.quantized.engine == before
    for engine in ENGINES:
        with pytest.raises(RuntimeError, match="inside"), quantized_engine(engine) as chosen:
            assert chosen == engine == torch.backends.quantized.engine
            raise RuntimeError("inside")
        assert torch.backends.quantized.engine == before
    with pytest.raises(ValueError, match=r"^engine='tpu' is not one of torch's quantized engines here: .*fbgemm"):
        quantize_dynamic_int8(classifier(), engine="tpu")
    assert torch.backends.quantized.engine == before


def test_int8_keeps_embeddings_layernorms_and_head_in_fp32():
    model = quantize_dynamic_int8(classifier())
    int8 = {name for name, m in model.named_modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)}
    assert int8 == {
        f"bert.encoder.layer.{i}.{part}"
        for i in range(TINY["num_hidden_layers"])
        for part in ("attention.self.qkv", "attention.output.dense", "intermediate.dense", "output.dense")
    }
    assert type(model.classifier) is torch.nn.Linear and type(model.bert.pooler.dense) is torch.nn.Linear
    assert model.bert.embeddings.word_embeddings.weight.dtype == torch.float32


def test_int8_runs_the_unpadded_path_like_the_padded_one():
    """Ragged rows (left padding, a hole, one token) through the buckets of the unpadded encoder give the
    padded encoder's outputs at real tokens: the fused int8 Q/K/V attention is wired like the fp32 one."""
    model = quantize_dynamic_int8(classifier())
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    ids, mask, types = ids[:, :24], mask[:, :24], types[:, :24]
    with torch.no_grad():
        unpadded = model.bert(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        padded = model.bert(ids, attention_mask=mask, token_type_ids=types, unpad_inputs=False).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(unpadded[keep], padded[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_quantized_folder_reloads_and_runs_in_a_fresh_process(folder, tmp_path):
    out = quantize(folder, tmp_path / "int8")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "configuration_minibert.py",
        QUANTIZED_WEIGHTS_FILE,
        QUANTIZED_INFO_FILE,
    ]
    assert json.loads((out / QUANTIZED_INFO_FILE).read_text())["scheme"] == "int8-dynamic-per-channel"
    batch = fixture_set(TINY["vocab_size"], rows=6)
    in_memory = logits(quantize_dynamic_int8(MiniBertForSequenceClassification.from_pretrained(folder)), *batch)
    reloaded = logits(load_quantized(out), *batch)
    torch.testing.assert_close(reloaded, in_memory, atol=1e-6, rtol=1e-6)
    printed = run_python(
        "import json, torch\n"
        "from modeling_minibert.deployment.quantization import load_quantized\n"
        f"ids, mask, types = (torch.tensor(x) for x in {json.dumps([t.tolist() for t in batch])})\n"
        f"model = load_quantized({str(out)!r})\n"
        "with torch.no_grad():\n"
        "    print(json.dumps(model(ids, attention_mask=mask, token_type_ids=types).logits.tolist()))\n",
        cwd=tmp_path,
        without_package=False,
        PYTHONPATH=str(REPO),
    )
    torch.testing.assert_close(
        torch.tensor(json.loads(printed.strip().splitlines()[-1])), in_memory, atol=1e-6, rtol=1e-6
    )
    # The file is the same for every engine: packed for another, the layers give fp32's outputs as closely.
    fp32 = logits(MiniBertForSequenceClassification.from_pretrained(folder), *batch)
    for engine in ENGINES:
        assert_near_fp32(fp32, logits(load_quantized(out, engine=engine), *batch))
    with pytest.raises(ValueError, match=r"^engine='tpu' is not one of"):
        load_quantized(out, engine="tpu")


def test_from_pretrained_refuses_an_int8_folder(folder, tmp_path):
    """int8 values must never load as floats: the folder has no model.safetensors."""
    out = quantize(folder, tmp_path / "int8")
    with pytest.raises(OSError, match=r"model.safetensors"):
        MiniBertForSequenceClassification.from_pretrained(out)
    with pytest.raises(FileNotFoundError, match=rf"{folder} holds no int8 weights \(no {QUANTIZED_WEIGHTS_FILE}\)"):
        load_quantized(folder)


def test_bad_input_is_refused_before_any_work(folder, tmp_path, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the quantization started")

    monkeypatch.setattr("modeling_minibert.deployment.quantization.quantize_dynamic_int8", no_work)
    empty = assert_missing_weights_refused(folder, tmp_path, lambda source: quantize(source, tmp_path / "out"))
    with pytest.raises(FileExistsError, match=rf"output_dir {empty} is not empty"):
        quantize(folder, empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-weights"]  # nothing written
