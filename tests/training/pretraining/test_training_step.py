"""A training step ready for a GPU, proven on the CPU (modeling_minibert.py's `plan_batch`, `BatchPlan`, `Packing`,
`packed_attention_kernel`; the objectives' statistics): on the collator's batches the step (forward, loss, backward,
the logged sums) reads nothing back from the device, gives the losses and gradients of the step without a plan,
compiles to one graph, and runs attention with the kernel its device allows."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from fixtures.host_syncs import HostSyncs
from fixtures.models import TINY, ragged_batch
from fixtures.pretraining import corpus, pytestmark, tiny, tokenizer_dir  # noqa: F401 (fixtures)
from safetensors.torch import load_file

import modeling_minibert.modeling_minibert as modeling
from modeling_minibert import MiniBertConfig, checks_minibert
from modeling_minibert.modeling_minibert import (
    BatchPlan,
    Packing,
    masked_capacity,
    packed_attention_kernel,
    plan_batch,
)
from modeling_minibert.training.pretraining.data import DataCollatorForPreTraining, build_nsp_dataset
from modeling_minibert.training.pretraining.objectives import OBJECTIVES

MLM_PROBABILITY = 0.4
SEQ_LEN = 32


@pytest.fixture(scope="module")
def examples(corpus, tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    documents = [block for block in corpus.read_text().split("\n\n") if block.strip()]
    dataset = build_nsp_dataset(documents, tokenizer, max_length=SEQ_LEN, seed=0)
    return tokenizer, [dataset[i] for i in range(len(dataset))]


def collated(examples, full_length: bool, size: int = 8) -> dict:
    """Today's collator on `size` examples, all of the longest length (`full_length`: no padding) or of mixed ones."""
    tokenizer, rows = examples
    longest = max(len(r["input_ids"]) for r in rows)
    chosen = [r for r in rows if (len(r["input_ids"]) == longest) == full_length][:size]
    batch = DataCollatorForPreTraining(tokenizer, MLM_PROBABILITY, seed=0)(chosen)
    assert bool(batch["attention_mask"].all()) == full_length
    # The tensors alone, as a collator that does not plan gives them (the tests plan them, or do not).
    return {k: v for k, v in batch.items() if k not in ("batch_plan", "masked_positions")}


@pytest.fixture
def on_an_accelerator(monkeypatch):
    """The input checks as they run on a GPU in training (queued device asserts, no value read back): on the CPU
    they read values on the host, for free, and would be counted."""
    monkeypatch.setattr(checks_minibert, "read_on_host", lambda tensor, training: not training)


def trained_module(objective_name: str, dropout: float = 0.1):
    objective = OBJECTIVES[objective_name]()
    config = MiniBertConfig(
        **dict(TINY, vocab_size=800, max_position_embeddings=SEQ_LEN),
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    torch.manual_seed(0)
    return objective, objective.build_model(config, None).train()


def step(objective, model, batch: dict) -> tuple[torch.Tensor, dict]:
    """The loop's micro-batch: forward, backward, the objective's sums. -> (sums, gradients)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    outputs = model(**objective.model_inputs(batch))
    outputs.loss.backward()
    with torch.no_grad():
        sums = objective.statistics(outputs, batch)
    return sums, {
        n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


# --- no host sync --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("full_length", [False, True], ids=["padded", "full-length"])
@pytest.mark.parametrize("objective_name", ["mlm_nsp", "mlm", "electra"])
def test_a_step_on_the_collators_planned_batches_reads_nothing_back(
    examples, on_an_accelerator, objective_name, full_length
):
    """0 sync-causing operations in a training step on `plan_batch`'s batches; without the plan the same step
    makes the device's values travel to the host (the count this test would see from an unplanned collator)."""
    objective, model = trained_module(objective_name)
    batch = collated(examples, full_length)
    with HostSyncs() as unplanned:
        step(objective, model, batch)
    assert unplanned.seen, "the unplanned step searches the labels (and the mask) on the host"
    planned_batch = plan_batch(batch, MLM_PROBABILITY)  # the collator's work, on the host
    with HostSyncs() as planned:
        step(objective, model, planned_batch)
    assert planned.seen == []


@pytest.mark.parametrize("full_length", [False, True], ids=["padded", "full-length"])
@pytest.mark.parametrize("objective_name", ["mlm_nsp", "electra"])
def test_a_planned_step_gives_the_unplanned_losses_sums_and_gradients(examples, objective_name, full_length):
    objective, model = trained_module(objective_name)
    batch = collated(examples, full_length)
    sums, grads = step(objective, model, batch)
    planned_sums, planned_grads = step(objective, model, plan_batch(batch, MLM_PROBABILITY))
    torch.testing.assert_close(planned_sums, sums, rtol=1e-5, atol=1e-5)
    assert planned_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(planned_grads[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


# --- what the plan holds ---------------------------------------------------------------------------------------


def test_the_plan_holds_the_packing_and_the_masked_positions_padded_to_the_shapes_capacity():
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[2, 30], labels[5, 0] = 7, 8, 9
    planned = plan_batch(dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels), 0.15)
    plan = planned["batch_plan"]
    assert isinstance(plan, BatchPlan) and plan.masked_count == 3
    expected = Packing.from_mask(mask)
    assert plan.packing.bucket_shapes == expected.bucket_shapes and torch.equal(plan.packing.indices, expected.indices)
    capacity = masked_capacity(8, 40, 0.15)
    positions = planned["masked_positions"]
    assert positions.shape == (capacity,) and positions.dtype == torch.long
    assert positions[:3].tolist() == [3, 2 * 40 + 30, 5 * 40]
    assert (labels.flatten()[positions[3:]] == -100).all(), "the padding rows point at positions that score nothing"
    assert torch.equal(planned["labels"], labels) and planned["input_ids"] is ids

    full = plan_batch(dict(input_ids=ids, attention_mask=torch.ones_like(mask)))  # no labels, no padding
    assert full["batch_plan"] == BatchPlan(None, None) and "masked_positions" not in full
    exact = plan_batch(dict(input_ids=ids, attention_mask=mask, labels=labels))  # no rate: exactly the labelled ones
    assert exact["masked_positions"].tolist() == positions[:3].tolist()


def test_the_capacity_is_a_function_of_shape_and_rate_with_room_for_six_deviations():
    assert masked_capacity(32, 64, 0.4) == 960  # 819.2 + 6 x 22.17 = 952.2, rounded up to a multiple of 8
    assert masked_capacity(8, 64, 0.15) == 128  # 76.8 + 6 x 8.08 = 125.3
    for shape, rate in (((8, 64), 0.15), ((32, 128), 0.15), ((256, 64), 0.4)):
        capacity = masked_capacity(*shape, rate)
        draws = torch.rand(500, shape[0] * shape[1], generator=torch.Generator().manual_seed(0)) < rate
        assert capacity % 8 == 0 and capacity <= shape[0] * shape[1]
        assert draws.sum(1).max() < capacity, "no draw of 500 comes near the capacity"
    assert masked_capacity(1, 4, 0.99) == 4, "never more than the batch's positions"


def test_a_batch_past_the_capacity_keeps_its_first_labels_and_scores_no_others():
    ids = torch.arange(2 * 16).view(2, 16) + 5
    labels = ids.clone()  # every position labelled: 32, far past the capacity at 15%
    planned = plan_batch(dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels), 0.15)
    capacity = masked_capacity(2, 16, 0.15)
    assert capacity < 32 and planned["batch_plan"].masked_count == capacity
    assert planned["masked_positions"].tolist() == list(range(capacity))
    assert (planned["labels"].flatten()[:capacity] == labels.flatten()[:capacity]).all()
    assert (planned["labels"].flatten()[capacity:] == -100).all()


def test_the_plan_travels_like_a_tensor_and_keeps_its_numbers_on_the_host():
    _, mask, _ = ragged_batch(TINY["vocab_size"])
    plan = BatchPlan(Packing.from_mask(mask), 5)
    moved = plan.to("meta", non_blocking=True)
    assert moved.packing.indices.device.type == "meta" and moved.masked_count == 5
    assert moved.packing.bucket_shapes == plan.packing.bucket_shapes and moved.packing.max_length == 40
    assert plan.packing.indices.device.type == "cpu", "the original stays where it was"
    again = pickle.loads(pickle.dumps(plan))  # to and from data-loader workers
    assert again.packing.bucket_shapes == plan.packing.bucket_shapes and torch.equal(
        again.packing.gather, plan.packing.gather
    )


# --- one graph -----------------------------------------------------------------------------------------------


def test_a_compiled_training_step_is_one_graph_for_padded_and_full_length_batches(examples):
    """fullgraph=True: any graph break is an error. aot_eager traces forward and backward exactly as inductor
    would, without its C++ builds. The compiled step stays padded (static shapes) and scores every one of the
    capacity's rows: loss, sums and gradients as eager's; a second batch of the same shape is no recompile."""
    torch._dynamo.reset()
    objective, model = trained_module("mlm_nsp", dropout=0.0)  # compiled, torch's dropout draws other masks
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    for full_length in (False, True):
        batches = [plan_batch(collated(examples, full_length, size=8), MLM_PROBABILITY) for _ in range(2)]
        # The same (B, T) for both, so that one graph serves them (the collator pads to the longest).
        length = max(b["input_ids"].shape[1] for b in batches)
        batches = [plan_batch(pad_to(b, length), MLM_PROBABILITY) for b in batches]
        for k, batch in enumerate(batches):
            sums, grads = step(objective, model, batch)
            with torch._dynamo.config.patch(error_on_recompile=k > 0):
                compiled_sums, compiled_grads = step(objective, compiled, batch)
            torch.testing.assert_close(compiled_sums, sums, rtol=1e-4, atol=1e-4)
            for name, grad in grads.items():
                torch.testing.assert_close(
                    compiled_grads[name], grad, rtol=1e-3, atol=1e-5, msg=lambda m: f"{name}: {m}"
                )
        torch._dynamo.reset()


def pad_to(batch: dict, length: int) -> dict:
    """A collated batch's (B, T) tensors padded on the right to `length` (labels with -100, the rest with 0)."""
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            value = torch.nn.functional.pad(value, (0, length - value.shape[1]), value=-100 if key == "labels" else 0)
        if key not in ("batch_plan", "masked_positions"):
            out[key] = value
    return out


# --- which attention kernel ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attn, device, dtype, flash_attn, expected",
    [
        ("sdpa", "cuda", torch.bfloat16, True, "flash_attn_varlen"),
        ("flash_attention_2", "cuda", torch.float16, True, "flash_attn_varlen"),
        ("sdpa", "cuda", torch.bfloat16, False, "buckets"),  # no flash_attn: torch's sdpa per bucket
        ("sdpa", "cuda", torch.float32, True, "buckets"),  # flash-attention computes in half precision only
        ("eager", "cuda", torch.bfloat16, True, "buckets"),  # asked for eager: eager it is
        ("sdpa", "cpu", torch.bfloat16, True, "buckets"),
        ("sdpa", "cpu", torch.float32, False, "buckets"),
    ],
)
def test_the_packed_attention_kernel_is_chosen_by_device_precision_and_what_is_installed(
    attn, device, dtype, flash_attn, expected
):
    assert packed_attention_kernel(attn, device, dtype, flash_attn) == expected


def varlen_reference(query, key, value, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal):
    """flash_attn_varlen_func's contract, one sequence at a time with torch's sdpa: (N, nh, hd) each."""
    assert torch.equal(cu_q, cu_k) and max_q == max_k and not causal and dropout_p == 0.0
    assert cu_q.dtype == torch.int32 and max_q == int((cu_q[1:] - cu_q[:-1]).max())
    out = torch.empty_like(query)
    for first, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
        q, k, v = (t[first:end].transpose(0, 1) for t in (query, key, value))  # (nh, n, hd)
        out[first:end] = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=softmax_scale).transpose(0, 1)
    return out


def test_the_varlen_path_attends_within_each_packed_sequence_as_the_padded_encoder_does(monkeypatch):
    """flash_attn_varlen_func stood in for by its reference (flash_attn runs on CUDA only): the packed tokens, the
    sequences' offsets and the longest length it is given make the padded encoder's hidden states."""
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    config = dict(TINY, max_position_embeddings=40)
    padded = modeling.MiniBertModel(MiniBertConfig(**config, unpad_inputs=False)).eval()
    packed = modeling.MiniBertModel(MiniBertConfig(**config)).eval()
    packed.load_state_dict(padded.state_dict())
    monkeypatch.setattr(modeling, "flash_attn_varlen_func", varlen_reference, raising=False)
    monkeypatch.setattr(modeling, "packed_attention_kernel", lambda *args: "flash_attn_varlen")
    with torch.no_grad():
        expected = padded(ids, mask, types).last_hidden_state
        got = packed(
            ids, mask, types, batch_plan=plan_batch(dict(attention_mask=mask))["batch_plan"]
        ).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


# --- --torch_compile -------------------------------------------------------------------------------------------


@pytest.mark.slow(seconds=30)
def test_torch_compile_pretrains_the_compiled_module_to_the_eager_runs_numbers(tiny, tmp_path):
    """`--torch_compile` (TrainingArguments' names; a backend given implies it): Accelerate compiles the module it
    prepares, and the run logs the uncompiled run's losses (no dropout in pretraining by default)."""
    from fixtures.pretraining import read_metrics

    from modeling_minibert.training.pretraining import PretrainingArguments, pretrain

    assert PretrainingArguments(torch_compile_backend="aot_eager").torch_compile is True
    settings = dict(tiny, max_steps=2, save_steps=2, eval_steps=2)
    pretrain(output_dir=str(tmp_path / "eager"), **settings)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    pretrain(output_dir=str(tmp_path / "compiled"), torch_compile_backend="aot_eager", **settings)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1, "the module that trained was compiled"
    torch._dynamo.reset()
    for compiled, eager in zip(read_metrics(tmp_path / "compiled"), read_metrics(tmp_path / "eager"), strict=True):
        assert compiled == pytest.approx(eager, rel=1e-4), (compiled, eager)
    for folder in (
        tmp_path / "compiled",
        tmp_path / "compiled" / "checkpoint-2",
    ):  # the model's names, not the wrapper's
        assert set(load_file(folder / "model.safetensors")) == set(load_file(tmp_path / "eager" / "model.safetensors"))
        assert json.loads((folder / "config.json").read_text())["architectures"] == ["MiniBertForPreTraining"]


# --- the run's own loader --------------------------------------------------------------------------------------


def test_the_runs_loader_gives_batches_that_train_without_a_host_sync_and_compile_to_one_graph(
    examples, corpus, on_an_accelerator
):
    """What `pretrain`'s loader yields (`RunExamples` batches through `DataCollatorForPreTraining`, which plans
    them): 0 sync-causing operations a step; padded to the sequence length (as `--torch_compile` asks), one graph
    for every batch, no recompile."""
    from itertools import islice

    from torch.utils.data import DataLoader

    from modeling_minibert.training.pretraining.data import RunBatches, RunExamples

    tokenizer, _ = examples
    documents = [block for block in corpus.read_text().split("\n\n") if block.strip()]
    dataset = build_nsp_dataset(documents, tokenizer, max_length=SEQ_LEN, seed=0)

    def loader(**options):
        collator = DataCollatorForPreTraining(tokenizer, MLM_PROBABILITY, seed=0, **options)
        return DataLoader(
            RunExamples(dataset), sampler=RunBatches(len(dataset), 8, seed=0), batch_size=None, collate_fn=collator
        )

    objective, model = trained_module("mlm_nsp")
    for batch in islice(loader(), 4):
        assert "batch_plan" in batch and "masked_positions" in batch
        with HostSyncs() as syncs:
            step(objective, model, batch)
        assert syncs.seen == []
    torch._dynamo.reset()
    objective, model = trained_module("mlm_nsp", dropout=0.0)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    for k, batch in enumerate(islice(loader(pad_to_length=SEQ_LEN), 3)):
        assert batch["input_ids"].shape == (8, SEQ_LEN)
        with torch._dynamo.config.patch(error_on_recompile=k > 0):
            compiled_sums, _ = step(objective, compiled, batch)
        torch.testing.assert_close(compiled_sums, step(objective, model, batch)[0], rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
