"""Sequence classification: pairs reach the model, Rotten Tomatoes end to end, label ids are kept, bad labels
stop the run before training."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from fixtures.finetuning_checkpoint import (  # noqa: F401 (checkpoint: a fixture)
    FAST,
    QUIET,
    assert_clean_output,
    checkpoint,
    head,
    pair_data,
    rotten_tomatoes_slice,
    rotten_tomatoes_splits,
)
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, pipeline

from examples.rotten_tomatoes import tfidf_baseline
from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.data import DataError
from modeling_minibert.utils.outputs import CONFUSION_FILE

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sentence_pairs_train_with_accumulation_and_step_wise_evaluation(checkpoint, tmp_path):
    train, validation = pair_data(256, seed=1), pair_data(64, seed=2)
    result = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=train,
        output_dir=tmp_path / "pairs",
        validation_data=validation,
        text_column_name="question",
        text_pair_column_name="fact",
        label_column_name="kind",
        # Trainer options pass through: accumulation, step-wise evaluation and saving, length-grouped batches, bf16.
        gradient_accumulation_steps=2,
        eval_strategy="steps",
        eval_steps=8,
        group_by_length=True,
        bf16=True,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        num_train_epochs=4,
        **QUIET,
    )
    # The label is in the second text only: a model that did not see the pair would sit at chance (0.5).
    assert result.metrics["accuracy"] > 0.8, result.metrics
    state = json.loads((result.output_dir / "trainer_state.json").read_text())
    assert state["eval_steps"] == state["save_steps"] == 8 and state["train_batch_size"] == 16
    # 256 rows / (16 x 2) = 8 optimizer steps per epoch: evaluations (and checkpoints) every 8 steps.
    evaluations = {e["step"]: e["eval_accuracy"] for e in state["log_history"] if "eval_accuracy" in e}
    assert list(evaluations) == [8, 16, 24, 32]
    assert evaluations[state["best_global_step"]] == max(evaluations.values()) == result.metrics["accuracy"]
    classifier = pipeline("text-classification", model=str(result.output_dir))
    predictions = classifier([{"text": q, "text_pair": f} for q, f in zip(validation["question"], validation["fact"])])
    accuracy = sum(p["label"] == k for p, k in zip(predictions, validation["kind"])) / len(validation)
    assert accuracy == pytest.approx(result.metrics["accuracy"])
    assert (result.output_dir / CONFUSION_FILE).stat().st_size > 0


@pytest.fixture(scope="module")
def rotten_tomatoes():
    return rotten_tomatoes_slice()


@pytest.fixture(scope="module")
def sentiment_model(checkpoint, rotten_tomatoes, tmp_path_factory):
    return finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=rotten_tomatoes["train"],
        output_dir=tmp_path_factory.mktemp("rt") / "sentiment",
        validation_data=rotten_tomatoes["validation"],
        test_data=rotten_tomatoes["test"],
        num_train_epochs=1,
        **FAST,
    )


def test_rotten_tomatoes_end_to_end_matches_the_recorded_run(sentiment_model, rotten_tomatoes):
    result = sentiment_model
    assert result.labels == ["fresh", "rotten"]
    # A model this small (random weights, 480 snippets, one epoch) learns the label prior, not yet sentiment:
    # beating the majority rate takes about 40 times this test's time budget. So the run's scores are checked
    # against those recorded for it (it is seeded, on one thread; recorded with transformers 5.23, torch 2.13, and the reproducible tokenizer
    # training of this release):
    # a change in the split, the label ids, the training data or the scoring moves at least one of them.
    assert result.test_metrics["accuracy"] == pytest.approx(0.44375, abs=1 / 160)  # one snippet either way
    assert result.metrics["accuracy"] == pytest.approx(0.65, abs=1 / 160)
    assert result.train_metrics["loss"] == pytest.approx(0.6784, abs=2e-4)
    assert result.metrics["loss"] == pytest.approx(0.6517, abs=2e-4)
    assert result.test_metrics["loss"] == pytest.approx(0.7397, abs=2e-4)
    assert_clean_output(result.output_dir)
    assert (result.output_dir / CONFUSION_FILE).exists()
    results = json.loads((result.output_dir / "all_results.json").read_text())
    assert results["test_accuracy"] == result.test_metrics["accuracy"] and results["test_samples"] == 160
    # The pipeline gives the model's own answers: its test accuracy is the one Trainer measured.
    classifier = pipeline("text-classification", model=str(result.output_dir))
    predictions = classifier(list(rotten_tomatoes["test"]["text"]), truncation=True, batch_size=32)
    assert {p["label"] for p in predictions} <= {"fresh", "rotten"}
    accuracy = sum(p["label"] == y for p, y in zip(predictions, rotten_tomatoes["test"]["label"])) / 160
    assert accuracy == pytest.approx(result.test_metrics["accuracy"])
    # Weights on disk are the final model's, stored as safetensors and reloadable.
    state = load_file(result.output_dir / "model.safetensors")
    reloaded = AutoModelForSequenceClassification.from_pretrained(result.output_dir)
    assert reloaded.config.id2label == {0: "fresh", 1: "rotten"}
    assert set(state) >= {"classifier.weight", "bert.embeddings.word_embeddings.weight"}


def test_tfidf_baseline_beats_the_majority_class():
    splits = head(rotten_tomatoes_splits(), 4000, 500)
    scores = tfidf_baseline(splits, c_values=(1.0, 4.0))
    labels = list(splits["test"]["label"])
    majority = max(labels.count(c) for c in set(labels)) / len(labels)
    assert scores["test"]["accuracy"] > majority
    assert scores["C"] in (1.0, 4.0) and set(scores["validation"]) == {"accuracy", "macro_f1"}


def test_starting_from_a_finetuned_classifier_keeps_its_label_ids(checkpoint, tmp_path):
    data = Dataset.from_dict({"text": ["good film", "bad film"] * 4, "label": ["pos", "neg"] * 4})
    first = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        output_dir=tmp_path / "a",
        labels=["pos", "neg"],
        max_steps=1,
        **QUIET,
    )
    assert first.metrics == {}  # no validation data: the last model is saved
    second = finetune(
        task="sequence-classification",
        model_name_or_path=first.output_dir,
        train_data=data,
        output_dir=tmp_path / "b",
        max_steps=1,
        **QUIET,
    )
    assert second.labels == ["pos", "neg"]  # not re-sorted to ["neg", "pos"]


def test_bad_validation_labels_fail_before_training(checkpoint, tmp_path):
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    (tmp_path / "validation.csv").write_text("text,label\nfine,pos\nmeh,neutral\n")
    with pytest.raises(
        DataError,
        match=r"validation\.csv, row 2, field 'label': label 'neutral' is not one of the labels \['neg', 'pos'\]",
    ):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_file=tmp_path / "train.csv",
            output_dir=tmp_path / "out",
            validation_file=tmp_path / "validation.csv",
        )
    assert not (tmp_path / "out").exists()
