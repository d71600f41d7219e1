"""Pretraining objectives (modeling_minibert/training/pretraining/objectives/__init__.py): the table, the choice, and the seam a
new objective goes through without touching the loop."""

from __future__ import annotations

import matplotlib.image
import pytest
import torch
from fixtures.models import TINY
from fixtures.pretraining import (  # noqa: F401 (fixtures)
    corpus,
    pytestmark,
    read_metrics,
    tiny,
    tokenizer_dir,
)

from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM, MiniBertForPreTraining
from modeling_minibert.training.pretraining import OBJECTIVES, PretrainingArguments, pretrain
from modeling_minibert.training.pretraining.arguments import NO_STEP_LIMIT
from modeling_minibert.training.pretraining.objectives import Objective, pick_objective
from modeling_minibert.training.pretraining.objectives.base import Curve
from modeling_minibert.training.pretraining.objectives.mlm_nsp import MaskedLMWithNSP
from modeling_minibert.utils.outputs import CHECKPOINT_MODEL_DIR, CURVES_FILE


def test_the_table_names_each_objective_and_its_model():
    assert list(OBJECTIVES) == ["mlm_nsp", "mlm", "electra", "general_distillation"]
    assert (
        OBJECTIVES["mlm_nsp"].model_class is MiniBertForPreTraining
        and OBJECTIVES["mlm"].model_class is MiniBertForMaskedLM
    )
    for objective in OBJECTIVES.values():
        keys = {curve.key for curve in objective.curves}
        assert {"loss", "mlm_accuracy", "eval_mlm_accuracy"} <= keys


def test_unset_objective_follows_the_saved_models_heads(tmp_path):
    config = MiniBertConfig(**TINY)
    MiniBertForPreTraining(config).save_pretrained(tmp_path / "pretraining")
    MiniBertForMaskedLM(config).save_pretrained(tmp_path / "mlm")

    def pick(name, source):
        return pick_objective(PretrainingArguments(objective=name), source, config)

    assert isinstance(pick(None, None), MaskedLMWithNSP)
    assert isinstance(pick(None, tmp_path / "pretraining"), MaskedLMWithNSP)
    assert pick(None, tmp_path / "mlm").name == "mlm"
    assert pick("mlm", tmp_path / "pretraining").name == "mlm"
    with pytest.raises(ValueError, match=r"objective='t5' is not one of mlm_nsp, mlm, electra, general_distillation"):
        PretrainingArguments(objective="t5")


def test_unset_recipe_fields_come_from_the_objective():
    """The default run's recipe, unless the objective trains best with another; what the caller gives wins."""
    default = PretrainingArguments()
    assert (default.vocab_size, default.mlm_probability, default.max_steps) == (8192, 0.40, 4000)
    assert PretrainingArguments(objective="electra").max_steps == 4000
    taught = PretrainingArguments(teacher_model_name_or_path="t")  # read only by the objective, when the run starts
    assert (taught.vocab_size, taught.mlm_probability, taught.max_steps) == (None, 0.15, 1500)
    given = PretrainingArguments(teacher_model_name_or_path="t", vocab_size=3000, mlm_probability=0.3, max_steps=9)
    assert (given.vocab_size, given.mlm_probability, given.max_steps) == (3000, 0.3, 9)
    assert PretrainingArguments(max_time=5).max_steps == NO_STEP_LIMIT  # the time alone decides
    assert (default.mixed_precision, taught.mixed_precision) == ("no", "auto")
    assert PretrainingArguments(teacher_model_name_or_path="t", mixed_precision="no").mixed_precision == "no"
    with pytest.raises(ValueError, match=r"^vocab_size=0 must be at least 1$"):
        PretrainingArguments(vocab_size=0)


def test_metrics_are_made_from_the_summed_statistics():
    nsp = MaskedLMWithNSP()
    sums = dict(zip(nsp.stat_keys, [4.0, 10.0, 12.0, 3.0, 6.0, 2.0, 3.0]))
    assert nsp.train_metrics(sums) == {
        "loss": 2.5,
        "mlm_loss": 2.0,
        "mlm_accuracy": 0.5,
        "nsp_loss": 0.5,
        "nsp_accuracy": 0.75,
    }
    held_out = nsp.eval_metrics(sums)
    assert held_out["eval_loss"] == pytest.approx(2.5) and held_out["perplexity"] == pytest.approx(
        torch.tensor(2.0).exp().item()
    )


class CountedTokens(Objective):
    """A test objective: MLM plus a metric of its own (real tokens per example), added through the seam alone."""

    name = "mlm_counted"
    stat_keys = (*Objective.stat_keys, "tokens")
    curves = (*Objective.curves, Curve("loss", "tokens_per_example", "tokens per example / 10"))

    def statistics(self, outputs, batch):
        return torch.cat([super().statistics(outputs, batch), batch["attention_mask"].sum().float().reshape(1)])

    def train_metrics(self, sums):
        return {**super().train_metrics(sums), "tokens_per_example": sums["tokens"] / sums["examples"]}


def test_a_new_objective_is_a_class_and_a_line_in_the_table(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(OBJECTIVES, CountedTokens.name, CountedTokens)
    out = tmp_path / "run"
    summary = pretrain(output_dir=str(out), objective="mlm_counted", **dict(tiny, max_steps=3))
    records = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(8 < r["tokens_per_example"] <= tiny["max_seq_length"] for r in records)
    assert "eval_nsp_accuracy" not in summary and "nsp_loss" not in records[0]
    assert matplotlib.image.imread(out / CURVES_FILE).ndim == 3


def test_objectives_without_nsp_train_on_contiguous_text_and_all_are_scored_on_the_same_pairs(
    tiny, tmp_path, monkeypatch
):
    """`random_next`: NSP's objective (and general distillation, as its recipe was measured) train on pairs with a
    random B half the time, the others on contiguous windows; every objective's held-out set is the same pairs."""
    assert {name: cls.random_next for name, cls in OBJECTIVES.items()} == {
        "mlm_nsp": 0.5,
        "mlm": 0.0,
        "electra": 0.0,
        "general_distillation": 0.5,
    }
    from modeling_minibert.training.pretraining import data

    built, build = [], data.example_index
    monkeypatch.setattr(data, "example_index", lambda *args: built.append(args[3:]) or build(*args))
    for objective in ("mlm", "mlm_nsp"):
        pretrain(output_dir=str(tmp_path / objective), objective=objective, **dict(tiny, max_steps=1))
    seed, dupe = tiny.get("seed", 42), tiny.get("dupe_factor", 5)
    assert built == [(seed, dupe, 0.0), (seed + 1, 1, 0.5), (seed, dupe, 0.5), (seed + 1, 1, 0.5)]


def test_an_objectives_own_options_are_flags_named_in_its_module_only():
    """`Objective.arguments` (general distillation's teacher options) become `PretrainingArguments` fields and
    `minibert pretrain` flags without being written in arguments.py; given, they pick their objective."""
    import dataclasses

    from modeling_minibert import cli
    from modeling_minibert.training.pretraining.arguments import RunArguments
    from modeling_minibert.training.pretraining.objectives.general_distillation import TeacherArguments

    assert OBJECTIVES["general_distillation"].arguments is TeacherArguments
    own = [f.name for f in dataclasses.fields(TeacherArguments)]
    names = [f.name for f in dataclasses.fields(PretrainingArguments)]
    assert not set(own) & {f.name for f in dataclasses.fields(RunArguments)}
    assert names == [f.name for f in dataclasses.fields(RunArguments)] + own  # the run's options first
    line = cli.command_line("pretrain")
    namespace = line.parser("minibert pretrain").parse_args(
        ["--teacher_model_name_or_path", "t", "--teacher-layer", "2"]
    )
    parsed = PretrainingArguments(**line.keywords(namespace))
    assert (parsed.teacher_model_name_or_path, parsed.teacher_layer, parsed.max_steps) == ("t", 2, 1500)
    assert OBJECTIVES["general_distillation"].given_arguments(parsed) == [
        "teacher_model_name_or_path=t",
        "teacher_layer=2",
    ]
    assert OBJECTIVES["electra"].given_arguments(parsed) == []


def test_electra_trains_the_discriminator_and_a_resumed_run_replays_it_exactly(tiny, tmp_path):
    """`--objective electra` through the seam: generator MLM + 50 x replaced-token detection, the discriminator
    saved as an encoder, and the steps after a checkpoint replayed to the same losses and weights."""
    from safetensors.torch import load_file
    from transformers import AutoModel

    from modeling_minibert import MiniBertModel

    out = tmp_path / "electra"
    settings = dict(tiny, objective="electra", max_steps=6, save_steps=3, eval_steps=3, learning_rate=2e-3)
    summary = pretrain(output_dir=str(out), **settings)
    records = read_metrics(out)
    train = [r for r in records if "loss" in r]
    assert {"loss", "mlm_loss", "mlm_accuracy", "rtd_loss", "rtd_accuracy"} == set(train[0]) - {
        "step",
        "learning_rate",
    }
    assert all(r["loss"] > 50 * 0.1 for r in train), "the replaced-token loss weighs 50"
    assert summary["eval_loss"] == pytest.approx(summary["eval_mlm_loss"] + 50 * summary["eval_rtd_loss"])
    assert 0.5 < summary["eval_rtd_accuracy"] <= 1
    weights = load_file(out / "model.safetensors")
    assert weights and not any(k.startswith(("generator", "rtd_head", "discriminator")) for k in weights)
    saved = AutoModel.from_pretrained(out)
    assert isinstance(saved, MiniBertModel)
    assert "feature-extraction" in (out / "README.md").read_text()
    # A checkpoint holds the whole module for resuming, and the discriminator alone, loadable, in model/.
    state = load_file(out / "checkpoint-3" / "model.safetensors")
    at_step_3 = AutoModel.from_pretrained(out / "checkpoint-3", subfolder=CHECKPOINT_MODEL_DIR)
    assert isinstance(at_step_3, MiniBertModel)
    shape = ("hidden_size", "num_hidden_layers", "vocab_size", "architectures")
    assert [getattr(at_step_3.config, k) for k in shape] == [getattr(saved.config, k) for k in shape]
    for name, tensor in load_file(out / "checkpoint-3" / CHECKPOINT_MODEL_DIR / "model.safetensors").items():
        assert torch.equal(tensor, state[f"discriminator.{name}"]), name

    replay = pretrain(output_dir=str(out), **dict(settings, resume_from_checkpoint=str(out / "checkpoint-3")))
    assert replay["steps_this_session"] == 3 and read_metrics(out) == records
    for name, tensor in load_file(out / "model.safetensors").items():
        assert torch.equal(tensor, weights[name]), name


def test_a_truncated_source_model_is_named_by_the_one_header_reader(tmp_path):
    """Which objective a saved model continues with is read from its weights' header, by the reader every load
    check uses: a file cut short is named in one line, not a safetensors library error."""
    import os

    MiniBertForMaskedLM(MiniBertConfig(**TINY)).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    with pytest.raises(
        ValueError, match=r"model\.safetensors has \d+ bytes, its header says \d+ \(truncated or corrupted\)"
    ):
        pick_objective(PretrainingArguments(), tmp_path, MiniBertConfig(**TINY))
