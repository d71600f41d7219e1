"""`pretrain` (modeling_minibert/training/pretraining/loop.py): a tiny run end to end, resume (also after SIGKILL at
seeded points and with a larger max_steps), continued pretraining, the time budget, the Hub push, DDP."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import textwrap
from pathlib import Path

import matplotlib.image
import pytest
import torch
from fixtures.pretraining import (  # noqa: F401 (fixtures)
    PYTHON,
    cli_args,
    corpus,
    free_port,
    pytestmark,
    read_metrics,
    snapshot,
    subprocess_env,
    tiny,
    tokenizer_dir,
)
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer, pipeline

import modeling_minibert
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.sharing.bert_format import convert_bert_to_minibert, convert_minibert_to_bert
from modeling_minibert.training.pretraining import PretrainingArguments, pretrain
from modeling_minibert.training.pretraining.corpus import read_text_files, split_documents
from modeling_minibert.training.pretraining.data import (
    DataCollatorForPreTraining,
    RunBatches,
    RunExamples,
    build_nsp_dataset,
)
from modeling_minibert.training.pretraining.run_folder import ARGS_FILE
from modeling_minibert.utils.outputs import ALL_RESULTS_FILE, results_file
from modeling_minibert.utils.outputs import CURVES_FILE as PLOT_FILE

TRAIN_RESULTS_FILE, EVAL_RESULTS_FILE = results_file("train"), results_file("eval")
EVAL_KEYS = {"eval_loss", "eval_mlm_loss", "eval_mlm_accuracy", "eval_nsp_loss", "eval_nsp_accuracy", "perplexity"}

pytestmark = [pytestmark, pytest.mark.slow(seconds=58)]  # real jobs end to end: not in the quick tier (-m "not slow")


# --- a tiny run, end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "pretrained"
    settings = dict(tiny, max_steps=40, learning_rate=2e-3, save_total_limit=2, report_to=["tensorboard"])
    return out, pretrain(output_dir=str(out), **settings), settings


def test_run_writes_trainer_layout_results_history_plot_and_card(run):
    out, summary, _ = run
    assert summary["output_dir"] == str(out) and summary["global_step"] == 40
    train, evals = (json.loads((out / name).read_text()) for name in (TRAIN_RESULTS_FILE, EVAL_RESULTS_FILE))
    assert json.loads((out / ALL_RESULTS_FILE).read_text()) == {**train, **evals}
    assert EVAL_KEYS | {"eval_samples"} == set(evals)
    assert {"epoch", "train_loss", "train_runtime", "train_samples", "train_steps_per_second"} <= set(train)
    assert not {"step", "learning_rate", "global_step"} & set(train | evals), "history is not a result"
    assert {k: summary[k] for k in train | evals} == train | evals
    assert evals["perplexity"] == pytest.approx(torch.tensor(evals["eval_mlm_loss"]).exp().item(), rel=1e-6)
    assert evals["eval_loss"] == pytest.approx(evals["eval_mlm_loss"] + evals["eval_nsp_loss"])

    records = read_metrics(out)
    train_records = [r for r in records if "loss" in r]
    eval_records = [r for r in records if "eval_mlm_accuracy" in r]
    assert [r["step"] for r in train_records] == list(range(1, 41))
    assert [r["step"] for r in eval_records] == [10, 20, 30, 40]
    assert {k: v for k, v in eval_records[-1].items() if k != "step"}.items() <= evals.items()
    first, last = (sum(r["mlm_loss"] for r in part) / 5 for part in (train_records[:5], train_records[-5:]))
    assert last < first - 0.15, "the MLM loss falls"
    assert train_records[4]["learning_rate"] == pytest.approx(2e-3)  # peak at the end of warmup, then linear decay
    assert train_records[-1]["learning_rate"] == 0

    image = matplotlib.image.imread(out / PLOT_FILE)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    # Trainer's layout: checkpoint-N/ beside the model, only the newest 2 kept; nothing hidden left behind.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-30", "checkpoint-40"]
    assert not list(out.glob(".*")), "no lock, staging folder or temporary file is left"
    card = (out / "README.md").read_text()
    assert "fill-mask" in card and "news.txt" in card


def test_saved_model_loads_with_the_auto_classes_and_fill_mask(run):
    out, _, _ = run
    model = AutoModelForPreTraining.from_pretrained(out)
    assert isinstance(model, modeling_minibert.MiniBertForPreTraining)
    assert model.config.hidden_size == 32 and model.config.max_position_embeddings == 64
    # Pretrained without dropout; the saved config keeps the model's own dropout for fine-tuning.
    assert (
        model.config.hidden_dropout_prob
        == model.config.attention_probs_dropout_prob
        == MiniBertConfig().hidden_dropout_prob
    )
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert (out / "model.safetensors").stat().st_mode & 0o044, "readable by others, as a plain open() would make it"
    mlm = AutoModelForMaskedLM.from_pretrained(out)
    weights = load_file(out / "model.safetensors")
    assert torch.equal(mlm.bert.embeddings.word_embeddings.weight, weights["bert.embeddings.word_embeddings.weight"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == model.config.vocab_size
    predictions = pipeline("fill-mask", model=mlm, tokenizer=tokenizer, top_k=3)(
        "the company said [MASK] profits rose."
    )
    assert len(predictions) == 3 and predictions[0]["score"] >= predictions[1]["score"]


def held_out_metrics_of_a_plain_forward(out: Path, tiny: dict, corpus: Path) -> dict:
    """The saved model's ordinary forward (full logits, its own losses) on the run's held-out recipe: the document
    split with the run's seed, pairs seeded seed + 1, BERT's 15% token masks from the collator seeded seed + 1."""
    seed = PretrainingArguments().seed
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForPreTraining.from_pretrained(out).eval()
    _, held_out = split_documents(read_text_files([corpus]), tiny["validation_split_percentage"] / 100, seed)
    eval_set = build_nsp_dataset(held_out, tokenizer, tiny["max_seq_length"], seed + 1)
    collator = DataCollatorForPreTraining(tokenizer, mlm_probability=0.15, whole_word_mask=False, seed=seed + 1)
    correct = count = nsp_correct = 0
    mlm_loss_sum = nsp_loss_sum = 0.0
    size = tiny["per_device_eval_batch_size"]
    with torch.no_grad():
        for start in range(0, len(eval_set), size):
            batch = collator([eval_set[i] for i in range(start, min(start + size, len(eval_set)))])
            labels, nsp = batch.pop("labels"), batch.pop("next_sentence_label")
            outputs = model(**batch)
            masked = labels != -100
            correct += int((outputs.prediction_logits.argmax(-1)[masked] == labels[masked]).sum())
            count += int(masked.sum())
            nsp_correct += int((outputs.seq_relationship_logits.argmax(-1) == nsp).sum())
            mlm_loss_sum += float(
                torch.nn.functional.cross_entropy(outputs.prediction_logits[masked], labels[masked], reduction="sum")
            )
            nsp_loss_sum += float(
                torch.nn.functional.cross_entropy(outputs.seq_relationship_logits, nsp, reduction="sum")
            )
    return {
        "eval_samples": len(eval_set),
        "eval_mlm_accuracy": correct / count,
        "eval_nsp_accuracy": nsp_correct / len(eval_set),
        "eval_mlm_loss": mlm_loss_sum / count,
        "eval_nsp_loss": nsp_loss_sum / len(eval_set),
    }


def assert_same_held_out_metrics(summary: dict, expected: dict) -> None:
    assert summary["eval_samples"] == expected["eval_samples"]
    for key in ("eval_mlm_accuracy", "eval_nsp_accuracy"):
        assert summary[key] == pytest.approx(expected[key], abs=1e-9), key
    for key in ("eval_mlm_loss", "eval_nsp_loss"):
        assert summary[key] == pytest.approx(expected[key], rel=1e-5), key


def test_held_out_metrics_match_a_plain_forward_of_the_saved_model(run, tiny, corpus):
    """Recompute the final evaluation with the saved model's ordinary forward (full logits, its own losses)."""
    out, summary, _ = run
    assert_same_held_out_metrics(summary, held_out_metrics_of_a_plain_forward(out, tiny, corpus))


def test_held_out_masking_is_15_percent_of_tokens_whatever_the_training_masking(tiny, corpus, tmp_path):
    """A run trained at 40% whole-word masking is scored on the default's held-out masks (15%, token level), so
    its accuracy compares with a default run's."""
    out = tmp_path / "masked-40"
    summary = pretrain(output_dir=str(out), max_steps=4, mlm_probability=0.4, whole_word_mask=True, **tiny)
    assert_same_held_out_metrics(summary, held_out_metrics_of_a_plain_forward(out, tiny, corpus))


def test_each_epoch_draws_new_masks(tiny, tokenizer_dir, corpus):
    """Dynamic masking: the same example is masked differently in the next epoch (and identically on replay)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    examples = build_nsp_dataset(read_text_files([corpus])[:6], tokenizer, 32, seed=0)
    collator = DataCollatorForPreTraining(tokenizer, seed=0)

    def batches(start: int):  # one batch per epoch: the whole set
        return iter(
            torch.utils.data.DataLoader(
                RunExamples(examples),
                sampler=RunBatches(len(examples), len(examples), 0, start=start),
                batch_size=None,
                collate_fn=collator,
            )
        )

    first, second = next(batches(0)), next(batches(1))
    assert sorted(first["next_sentence_label"].tolist()) == sorted(second["next_sentence_label"].tolist())
    assert not torch.equal(first["labels"], second["labels"]), "epoch 2 masks like epoch 1"
    assert torch.equal(next(batches(1))["labels"], second["labels"]), "a resumed run entering epoch 2 masks alike"


# --- the run folder: refusing, resuming, overwriting -----------------------------------------------------------


def test_a_folder_holding_a_run_is_refused_unless_resume_or_overwrite(run, tiny, tmp_path):
    out, summary, settings = run
    before = snapshot(out)
    with pytest.raises(
        FileExistsError,
        match=r"is not empty; pass --resume_from_checkpoint to continue the run saved there, --overwrite_output_dir",
    ):
        pretrain(output_dir=str(out), **settings)
    with pytest.raises(ValueError, match=r"cannot resume the run in .*: .*learning_rate=0.002 \(now 0.001\)"):
        pretrain(output_dir=str(out), **dict(settings, learning_rate=1e-3, resume_from_checkpoint=True))
    assert snapshot(out) == before, "nothing was touched"

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"other is not empty; pass --resume_from_checkpoint"):
        pretrain(output_dir=str(other), max_steps=5, **tiny)
    with pytest.raises(FileExistsError, match=r"holds files but no pretraining run to resume"):
        pretrain(output_dir=str(other), max_steps=5, resume_from_checkpoint=True, **tiny)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_resuming_may_raise_max_steps_and_the_schedule_follows_the_new_total(run, tmp_path):
    out, summary, settings = run
    copy = tmp_path / "longer"
    shutil.copytree(out, copy)
    again = pretrain(output_dir=str(copy), **dict(settings, resume_from_checkpoint=True))  # a finished run
    assert again["steps_this_session"] == 0 and again["eval_mlm_accuracy"] == summary["eval_mlm_accuracy"]

    longer = pretrain(output_dir=str(copy), **dict(settings, max_steps=60, resume_from_checkpoint=True))
    assert longer["global_step"] == 60 and longer["steps_this_session"] == 20
    records = [r for r in read_metrics(copy) if "loss" in r]
    assert records[:40] == [r for r in read_metrics(out) if "loss" in r], "the first 40 steps are kept as they were"
    # After step s the rate is the new schedule's at s: peak x (60 - s) / (60 - warmup), as a 60-step run has it.
    peak, warmup = settings["learning_rate"], settings["warmup_steps"]
    for record in records[40:]:
        assert record["learning_rate"] == pytest.approx(peak * (60 - record["step"]) / (60 - warmup), rel=1e-6)
    assert sorted(p.name for p in copy.glob("checkpoint-*")) == ["checkpoint-50", "checkpoint-60"]

    # From a chosen checkpoint: the steps after it are replayed, exactly.
    history = read_metrics(copy)
    replay = pretrain(
        output_dir=str(copy), **dict(settings, max_steps=60, resume_from_checkpoint=str(copy / "checkpoint-50"))
    )
    assert replay["steps_this_session"] == 10 and read_metrics(copy) == history


def test_a_masking_rate_schedule_falls_to_the_final_rate_and_resumes_exactly(tiny, corpus, tmp_path):
    """final_mlm_probability: the training masks go linearly from mlm_probability at the first step to the final
    rate at the last (each step's rate logged); a run resumed from its middle checkpoint masks as the uninterrupted
    run did (the data loader collates a batch ahead, so the rate follows the batch, not the step being run);
    held-out scores stay at 15%."""
    settings = dict(tiny, max_steps=10, save_steps=5, logging_steps=1, mlm_probability=0.5, final_mlm_probability=0.1)
    out = tmp_path / "scheduled"
    summary = pretrain(output_dir=str(out), **settings)
    rates = [r["mlm_probability"] for r in read_metrics(out) if "loss" in r]
    assert rates == pytest.approx([0.5 - 0.4 * step / 9 for step in range(10)])
    assert_same_held_out_metrics(summary, held_out_metrics_of_a_plain_forward(out, tiny, corpus))

    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    history = read_metrics(out)
    again = pretrain(output_dir=str(resumed), **dict(settings, resume_from_checkpoint=str(resumed / "checkpoint-5")))
    assert again["steps_this_session"] == 5 and read_metrics(resumed) == history
    assert load_file(str(resumed / "model.safetensors")).keys() == load_file(str(out / "model.safetensors")).keys()
    torch.testing.assert_close(
        load_file(str(resumed / "model.safetensors")), load_file(str(out / "model.safetensors")), rtol=0, atol=0
    )


def test_overwrite_replaces_the_run_and_keeps_other_files(tiny, tmp_path):
    out = tmp_path / "run"
    pretrain(output_dir=str(out), max_steps=10, **tiny)
    (out / "notes.txt").write_text("mine")
    pretrain(**dict(tiny, output_dir=str(out), max_steps=6, save_steps=3, overwrite_output_dir=True))
    assert json.loads((out / ARGS_FILE).read_text())["max_seq_length"] == 32
    assert max(r["step"] for r in read_metrics(out)) == 6
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    assert (out / "notes.txt").read_text() == "mine"


def test_checkpoints_load_with_from_pretrained_like_the_final_model(run):
    """checkpoint-N/ holds config.json and the tokenizer beside Accelerate's model.safetensors (as Trainer's
    checkpoints do), so the Auto classes load it; the last checkpoint is the final model."""
    out, _, _ = run
    checkpoint = out / "checkpoint-40"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in checkpoint.iterdir()}
    final = AutoModelForPreTraining.from_pretrained(out)
    loaded = AutoModelForPreTraining.from_pretrained(checkpoint)
    assert isinstance(loaded, modeling_minibert.MiniBertForPreTraining)
    assert loaded.config.hidden_dropout_prob == final.config.hidden_dropout_prob  # the model's own, not 0
    for name, tensor in final.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    mlm = AutoModelForMaskedLM.from_pretrained(out / "checkpoint-30")
    assert not torch.equal(mlm.bert.embeddings.word_embeddings.weight, final.bert.embeddings.word_embeddings.weight)
    assert len(AutoTokenizer.from_pretrained(checkpoint)) == final.config.vocab_size


def test_a_checkpoint_loads_with_trust_remote_code_where_the_package_is_not_installed(run, tmp_path):
    """checkpoint-N/ carries the model's code and an auto_map of every head, as the final folder does: a
    colleague without this package loads it with any Auto class and gets the checkpoint's own outputs."""
    from fixtures.environment import run_python

    out, _, _ = run
    checkpoint = out / "checkpoint-40"
    assert {"modeling_minibert.py", "configuration_minibert.py", "checks_minibert.py"} <= {
        p.name for p in checkpoint.iterdir()
    }
    ids = [[2, 7, 9, 4, 3]]
    with torch.no_grad():
        expected = AutoModelForMaskedLM.from_pretrained(checkpoint).eval()(torch.tensor(ids)).logits.sum().item()
    code = (
        "import torch\n"
        "from transformers import AutoModelForMaskedLM\n"
        f"model = AutoModelForMaskedLM.from_pretrained({str(checkpoint)!r}, trust_remote_code=True).eval()\n"
        f"print(type(model).__module__.startswith('transformers_modules'), model(torch.tensor({ids})).logits.sum().item())\n"
    )
    remote, total = run_python(code, tmp_path).split()
    assert remote == "True" and float(total) == pytest.approx(expected, rel=1e-5)


def test_a_run_gives_back_the_process_settings_it_changed(tiny, tmp_path):
    """Threads, denormal flushing and Accelerate's log filter are the run's, set for it and restored after."""
    import logging

    from modeling_minibert.training.pretraining.session import _denormals_flushed

    log = logging.getLogger("accelerate.utils.other")
    before = (torch.get_num_threads(), _denormals_flushed(), list(log.filters))
    pretrain(output_dir=str(tmp_path / "run"), **dict(tiny, max_steps=2, num_threads=2))
    assert (torch.get_num_threads(), _denormals_flushed(), list(log.filters)) == before


def test_resuming_a_run_without_checkpoint_says_so_in_one_line_and_starts_at_step_0(run, tmp_path, capsys):
    from modeling_minibert import cli

    out, _, settings = run
    copy = tmp_path / "no-checkpoint"
    shutil.copytree(out, copy)
    for checkpoint in copy.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    argv = cli_args(**dict(settings, output_dir=copy, max_steps=3, report_to=["none"]))
    assert cli.main(["pretrain", *argv, "--resume_from_checkpoint"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"minibert pretrain: warning: no checkpoint in {copy} to resume from yet: training starts at step 0"
    ]
    assert [r["step"] for r in read_metrics(copy) if "loss" in r] == [1, 2, 3]


# --- continued pretraining, time budget, Hub ------------------------------------------------------------------


def test_continued_pretraining_starts_from_the_model_and_its_tokenizer(run, tiny, tmp_path):
    """Domain-adaptive pretraining: MLM + NSP from a pretrained folder; MLM only from a folder without NSP head."""
    source, summary, _ = run
    settings = {k: v for k, v in tiny.items() if k not in ("tokenizer_name", "config_overrides")}
    continued = pretrain(
        output_dir=str(tmp_path / "continued"), model_name_or_path=str(source), max_steps=5, **settings
    )
    fresh_start = read_metrics(source)[0]["mlm_loss"]
    first = read_metrics(tmp_path / "continued")[0]
    assert first["mlm_loss"] < fresh_start - 0.3, "training starts from the pretrained weights, not a new init"
    assert (tmp_path / "continued" / "vocab.txt").read_text() == (source / "vocab.txt").read_text()
    assert "nsp_accuracy" in first and "eval_nsp_accuracy" in continued
    card = (tmp_path / "continued" / "README.md").read_text()
    assert str(source) in card and "base_model:" not in card  # a local folder is named in the text; the Hub's
    # base_model metadata takes Hub ids only

    mlm_only = tmp_path / "mlm-only"
    AutoModelForMaskedLM.from_pretrained(source).save_pretrained(mlm_only)
    AutoTokenizer.from_pretrained(source).save_pretrained(mlm_only)
    with pytest.raises(ValueError, match=r"has no NSP head .*pass --objective mlm"):
        pretrain(
            output_dir=str(tmp_path / "refused"),
            model_name_or_path=str(mlm_only),
            objective="mlm_nsp",
            max_steps=5,
            **settings,
        )
    result = pretrain(output_dir=str(tmp_path / "mlm"), model_name_or_path=str(mlm_only), max_steps=5, **settings)
    assert "eval_nsp_accuracy" not in result and result["eval_loss"] == result["eval_mlm_loss"]
    assert "nsp_loss" not in read_metrics(tmp_path / "mlm")[0]
    saved = json.loads((tmp_path / "mlm" / "config.json").read_text())
    assert saved["architectures"] == ["MiniBertForMaskedLM"]

    # A transformers BERT folder is converted first (`minibert convert-bert`), then continued like any Mini-BERT.
    bert, converted = tmp_path / "bert", tmp_path / "converted"
    convert_minibert_to_bert(source, bert)
    with pytest.raises(ValueError, match=r"holds a 'bert' model, not a Mini-BERT; .* `minibert convert-bert"):
        pretrain(output_dir=str(tmp_path / "x"), model_name_or_path=str(bert), max_steps=3, **settings)
    convert_bert_to_minibert(bert, converted)
    from_bert = pretrain(
        output_dir=str(tmp_path / "from-bert"), model_name_or_path=str(converted), max_steps=3, **settings
    )
    assert "eval_nsp_accuracy" in from_bert
    assert read_metrics(tmp_path / "from-bert")[0]["mlm_loss"] < fresh_start - 0.3
    with pytest.raises(ValueError, match="config_overrides shapes a new model"):
        pretrain(output_dir=str(tmp_path / "x"), model_name_or_path=str(source), **dict(tiny, max_steps=5))


def test_continuing_from_a_classifier_says_the_mlm_head_is_new_in_one_line(run, tiny, tmp_path, capsys):
    from transformers import AutoModelForSequenceClassification

    from modeling_minibert import cli

    source = run[0]
    classifier = tmp_path / "classifier"
    AutoModelForSequenceClassification.from_pretrained(source, num_labels=2).save_pretrained(classifier)
    AutoTokenizer.from_pretrained(source).save_pretrained(classifier)
    capsys.readouterr()
    settings = {k: v for k, v in tiny.items() if k not in ("tokenizer_name", "config_overrides")}
    argv = cli_args(**dict(settings, output_dir=tmp_path / "out", model_name_or_path=classifier, max_steps=2))
    assert cli.main(["pretrain", *argv]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"minibert pretrain: warning: model_name_or_path={classifier} has no MLM head (a fine-tuned "
        "model?): its encoder is continued, its MLM head starts from random weights"
    ], err
    assert "nsp_loss" not in read_metrics(tmp_path / "out")[0], "no NSP head either: MLM alone"


def test_a_tokenizer_other_than_the_models_vocabulary_is_refused(run, tiny, corpus, tmp_path):
    from tokenization import train_tokenizer

    other = tmp_path / "other-tokenizer"
    train_tokenizer(
        train_file=[corpus], vocab_size=500, output_dir=other, disable_tqdm=True, overwrite_output_dir=True
    )
    settings = {k: v for k, v in tiny.items() if k not in ("tokenizer_name", "config_overrides")}
    with pytest.raises(
        ValueError,
        match=rf"tokenizer_name={other} has another vocabulary \(\d+ tokens\) than the "
        rf"model {run[0]} \(\d+ tokens\), .* leave tokenizer_name unset",
    ):
        pretrain(
            output_dir=str(tmp_path / "out"),
            model_name_or_path=str(run[0]),
            tokenizer_name=str(other),
            max_steps=2,
            **settings,
        )
    assert not (tmp_path / "out").exists()
    same = pretrain(
        output_dir=str(tmp_path / "same"),
        model_name_or_path=str(run[0]),
        tokenizer_name=tiny["tokenizer_name"],
        max_steps=2,
        **settings,
    )
    assert same["global_step"] == 2


def test_max_time_fits_the_schedule_stops_evaluates_and_saves(tiny, tmp_path):
    out = tmp_path / "timed"
    seconds = 4.0
    summary = pretrain(
        output_dir=str(out),
        **dict(
            tiny,
            max_steps=100_000,
            max_time=seconds / 60,
            learning_rate=2e-3,
            logging_steps=5,
            eval_steps=25,
            save_steps=25,
        ),
    )
    steps = summary["global_step"]
    assert 10 < steps < 100_000
    assert summary["train_runtime"] < seconds + 3, (
        "stopped when the budget ran out (less the final evaluation and save)"
    )
    records = read_metrics(out)
    assert records[-1]["step"] == steps and "eval_mlm_accuracy" in records[-1], "evaluated where it stopped"
    assert (out / f"checkpoint-{steps}").is_dir() and (out / "model.safetensors").is_file()
    lr = [r["learning_rate"] for r in records if "loss" in r]
    # Fitted to the budget: decayed most of the way to 0 by the end (a 100,000-step schedule would be at peak).
    assert lr[-1] < 0.35 * 2e-3, lr


def test_push_to_hub_uploads_the_model_folder_and_never_writes_the_token(tiny, tmp_path):
    from tools.local_hub import LocalHub

    token, user = "hf_PretrainSecret" + "7" * 20, "pretrainer"
    out = tmp_path / "pushed"
    with LocalHub(tmp_path / "hub", token=token, user=user) as hub:
        hub.configure_clients()
        pretrain(
            output_dir=str(out),
            **dict(
                tiny,
                max_steps=4,
                push_to_hub=True,
                hub_model_id=f"{user}/tiny-bert",
                hub_token=token,
                report_to=["tensorboard"],
            ),
        )
        files = hub.repo_files(f"{user}/tiny-bert")
    assert {"model.safetensors", "config.json", "vocab.txt", "README.md", ALL_RESULTS_FILE, PLOT_FILE} <= set(files)
    assert not [name for name in files if name.startswith("checkpoint-") or name.endswith((".bin", ".pkl"))]
    assert files["model.safetensors"] == (out / "model.safetensors").read_bytes()
    for path in out.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), f"the token was written to {path}"


# --- faults: SIGKILL at seeded points --------------------------------------------------------------------------

# Runs `minibert pretrain` and kills itself with SIGKILL at a given point: after writing half of a metrics
# line at step K ("metrics:K"), or inside the checkpoint write of step K, with the files written but not yet
# renamed into place ("save:K").
KILLER = textwrap.dedent("""
    import os, signal, sys
    from modeling_minibert.training.pretraining import run_folder
    where, at = sys.argv[1].split(":")
    at = int(at)
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    if where == "metrics":
        write = run_folder.MetricsLog.write
        def torn(self, record):
            if record["step"] == at and "loss" in record:
                with self.path.open("a") as f:
                    f.write('{"step": %d, "lo' % at)
                die()
            write(self, record)
        run_folder.MetricsLog.write = torn
    else:
        write_json = run_folder.write_json
        def killed_in_save(path, payload):
            if path.name == run_folder.PROGRESS_FILE and payload["step"] == at:
                die()
            write_json(path, payload)
        run_folder.write_json = killed_in_save
    from modeling_minibert.cli import console_main
    sys.exit(console_main(sys.argv[2:]))
""")


@pytest.mark.slow(seconds=43)  # one worker's time (pytest --durations): orders the suite, tests/conftest.py
def test_sigkill_at_seeded_points_then_resume_equals_an_uninterrupted_run(tiny, tmp_path, capfd):
    """Kill a run (SIGKILL) at seeded random points, mid-line in metrics.jsonl and then inside a checkpoint write,
    resuming each time: every logged number and the final weights equal an uninterrupted run's. The first
    resume lies inside the second epoch, with gradient accumulation and dropout, so the data order, the masks
    and the dropout noise must all be restored."""
    env = subprocess_env(tmp_path)
    settings = dict(
        tiny,
        max_steps=80,
        save_steps=10,
        eval_steps=20,
        gradient_accumulation_steps=2,
        save_total_limit=3,
        pretraining_dropout=0.1,
        dupe_factor=1,
        logging_steps=2,
    )
    command = ["-m", "modeling_minibert.cli", "pretrain", *cli_args(**settings)]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    uninterrupted = subprocess.Popen(
        [PYTHON, *command, "--output_dir", str(whole)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rng = random.Random(17)
    torn_at, save_at = rng.randrange(52, 59, 2), rng.choice([60, 70])
    for kill, resume in ((f"metrics:{torn_at}", []), (f"save:{save_at}", ["--resume_from_checkpoint"])):
        # (the first victim runs beside the uninterrupted run: two cores)
        victim = subprocess.run(
            [PYTHON, "-c", KILLER, kill, *command[2:], "--output_dir", str(killed), *resume],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert victim.returncode == -9, (kill, victim.stderr[-2000:])
        if resume:
            assert "resuming at step 50" in victim.stdout
            assert (killed / f".tmp-checkpoint-{save_at}").is_dir() and not (killed / f"checkpoint-{save_at}").exists()
        else:
            assert not (killed / "metrics.jsonl").read_text().endswith("\n"), "the last line is torn"
    # The last resume, which only reads the files the kills left, runs in this process.
    from modeling_minibert import cli

    capfd.readouterr()
    code = cli.main(["pretrain", *cli_args(**settings), "--output_dir", str(killed), "--resume_from_checkpoint"])
    said = capfd.readouterr()
    assert code == 0, said.err[-2000:]
    assert f"resuming at step {save_at - 10}" in said.out
    _, err = uninterrupted.communicate(timeout=240)
    assert uninterrupted.returncode == 0, err[-2000:]
    batches_per_epoch = (
        json.loads((whole / TRAIN_RESULTS_FILE).read_text())["train_samples"]
        // settings["per_device_train_batch_size"]
    )
    batch = 50 * settings["gradient_accumulation_steps"]
    assert batch > batches_per_epoch and batch % batches_per_epoch, "the first resume lies inside the second epoch"
    assert read_metrics(killed) == read_metrics(whole)  # every loss, accuracy and learning rate, exactly
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not list(killed.glob(".*")), "leftovers of the interrupted save and the dead run's lock are gone"


# --- bad input -------------------------------------------------------------------------------------------------


def test_bad_input_fails_early_and_writes_nothing(tiny, tmp_path, run):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    three = tmp_path / "three.txt"
    three.write_text("One doc.\n\nTwo docs.\n\nThree docs.\n")
    source = run[0]
    cases = [
        (dict(train_file=[str(tmp_path / "missing.txt")]), FileNotFoundError, r"text file not found: .*missing\.txt"),
        (dict(train_file=[str(empty)]), ValueError, r"text file .*empty\.txt is empty"),
        (dict(train_file=[str(three)]), ValueError, r"corpus is too small for a held-out split: 3 document\(s\)"),
        (
            dict(per_device_train_batch_size=4096),
            ValueError,
            r"corpus is too small: \d+ training example\(s\) .* per_device_train_batch_size x processes = 4096",
        ),
        (dict(max_seq_length=80), ValueError, r"max_seq_length=80 exceeds max_position_embeddings=64"),
        (
            dict(final_mlm_probability=1.0),
            ValueError,
            r"^final_mlm_probability=1.0 must be between 0 and 1 \(exclusive\)$",
        ),
        (
            dict(config_overrides="hidden_size=30,num_attention_heads=4"),
            ValueError,
            r"hidden_size \(30\) must be divisible",
        ),
        (
            dict(config_overrides="colour=3"),
            ValueError,
            r"config_overrides='colour=3': key colour isn't in the original config",
        ),
        (
            dict(tokenizer_name=str(tmp_path / "no-tokenizer")),
            FileNotFoundError,
            r"tokenizer folder not found: .*no-tokenizer",
        ),
        (
            dict(config_overrides=None, model_name_or_path=str(tmp_path)),
            FileNotFoundError,
            r"is not a saved model folder \(no config.json\)",
        ),
        (
            dict(config_overrides=None, model_name_or_path=str(source), max_seq_length=80),
            ValueError,
            r"max_seq_length=80 exceeds max_position_embeddings=64$",
        ),
        (
            dict(resume_from_checkpoint=str(tmp_path / "checkpoint-5")),
            FileNotFoundError,
            r"no pretraining run to resume in",
        ),
    ]
    for change, error, message in cases:
        settings = dict(tiny, output_dir=str(out), max_steps=5)
        settings.update(change)
        with pytest.raises(error, match=message):
            pretrain(**settings)
        assert not out.exists(), f"{change} wrote {list(out.rglob('*'))}"


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    from modeling_minibert import cli

    code = cli.main(["pretrain", "--output_dir", str(tmp_path / "out"), "--train_file", str(tmp_path / "nope.txt")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        f"minibert pretrain: error: text file not found: {tmp_path / 'nope.txt'}"
    ]


# --- the prepared corpus: made once, found by every later run ---------------------------------------------------


def test_preprocessing_only_prepares_and_the_run_after_it_prepares_nothing(
    tiny, corpus, tmp_path, monkeypatch, capsys
):
    from modeling_minibert import cli
    from modeling_minibert.training.pretraining import preparation

    cache, out = tmp_path / "cache", tmp_path / "run"
    settings = dict(tiny, cache_dir=str(cache), max_steps=2)
    code = cli.main(["pretrain", "--output_dir", str(out), "--preprocessing_only", *cli_args(**settings)])
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    (folder,) = (cache / "corpora").iterdir()
    assert code == 0 and not out.exists()
    assert (
        printed.startswith("prepared ")
        and f"in {folder}: " in printed
        and printed.endswith("held-out examples; the same command without --preprocessing_only trains on them")
    )
    assert len(list((folder / "examples").glob("*.bin"))) == 2  # this run's training and held-out examples
    monkeypatch.setattr(preparation, "build", lambda *args: pytest.fail("prepared again"))
    summary = pretrain(output_dir=str(out), **settings)
    assert summary["global_step"] == 2
    assert json.loads((out / ARGS_FILE).read_text())["prepared_corpus"] == folder.name


def test_a_resume_after_the_corpus_changed_is_refused_in_one_line(tiny, corpus, tmp_path):
    text = tmp_path / "news.txt"
    shutil.copy(corpus, text)
    out = tmp_path / "run"
    settings = dict(tiny, train_file=[str(text)], cache_dir=str(tmp_path / "cache"))
    pretrain(output_dir=str(out), max_steps=10, **settings)
    text.write_text(text.read_text() + "\nOne more document. It was added later.\n")
    with pytest.raises(
        ValueError,
        match=rf"^cannot resume the run in {out}: its corpus has changed since it started "
        r"\(prepared as \w+, now \w+: a training file's size or modification time "
        r"differs\); restore the files, or start a new run$",
    ):
        pretrain(output_dir=str(out), max_steps=20, resume_from_checkpoint=True, **settings)
