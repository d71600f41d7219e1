"""Texts longer than the model reads (`doc_stride`): cut into overlapping windows, trained on each and scored by the
mean of their logits, in `finetune`, `distill` and `classify_long_texts`; bad options refused before any work.

The data hides its label at the end of each text, past the first 16-token window: a model that reads the first
window only sits at chance, one that reads every window can learn it.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from datasets import Dataset
from fixtures.finetuning_checkpoint import FAST, NER_TRAIN, checkpoint  # noqa: F401 (checkpoint: a fixture)
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from modeling_minibert.cli import main
from modeling_minibert.deployment import classify_long_texts
from modeling_minibert.training.distillation import distill
from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.windows import check_doc_stride, per_text, text_windows
from modeling_minibert.utils.outputs import CONFUSION_FILE

pytestmark = pytest.mark.usefixtures("one_thread")

FILLER = ["the", "movie", "is", "a", "film", "and", "it"]
WINDOWS = {"max_seq_length": 16, "doc_stride": 4}


def cue_at_the_end(n: int, seed: int) -> Dataset:
    """20 to 40 filler words, then the sentence that says the label (where Ana lives, or whom she works for)."""
    rng = random.Random(seed)
    rows = {"text": [], "kind": []}
    for _ in range(n):
        lives = rng.random() < 0.5
        cue = (
            f"Ana lives in {rng.choice(['Lisbon', 'Paris', 'Oslo'])} ."
            if lives
            else f"Ana works for {rng.choice(['Acme', 'Globex'])} ."
        )
        rows["text"].append(" ".join(rng.choice(FILLER) for _ in range(rng.randint(20, 40))) + " " + cue)
        rows["kind"].append("place" if lives else "company")
    return Dataset.from_dict(rows)


TRAIN, VALIDATION = cue_at_the_end(256, 1), cue_at_the_end(64, 2)


def test_windows_overlap_cover_the_text_and_leave_a_short_text_whole(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    long, short = " ".join(FILLER * 6) + " Ana lives in Oslo .", "Ana works for Acme ."
    windows, owners = text_windows(tokenizer, [short, long, ""], max_length=16, doc_stride=4)
    assert windows[0] == short and windows[-1] == "" and owners[0] == 0 and owners[-1] == 2
    whole = tokenizer(long, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer(w, add_special_tokens=False)["input_ids"] for w, o in zip(windows, owners) if o == 1]
    # 14 text tokens a window (16 less [CLS] and [SEP]), each starting 4 before the last one ended, the first being
    # what truncation reads, the last holding the text's end.
    assert len(whole) > 30 and len(pieces) == -(-(len(whole) - 4) // 10)
    for i, piece in enumerate(pieces):
        assert piece == whole[10 * i : 10 * i + 14]
    assert pieces[-1][-1] == whole[-1]


def test_a_text_is_scored_by_the_mean_of_its_windows_logits_and_its_first_windows_label():
    logits, labels = per_text(np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 1.0]]), [1, 1, 0], [0, 0, 1])
    np.testing.assert_allclose(logits, [[1.0, 1.5], [0.0, 1.0]])
    assert labels.tolist() == [1, 0]


@pytest.mark.parametrize("stride", [-1, 14])
def test_a_stride_that_leaves_no_new_text_is_refused(checkpoint, stride):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    with pytest.raises(
        ValueError,
        match=rf"^doc_stride={stride} must be at least 0 and below 14, the text tokens of a "
        r"window with max_seq_length=16$",
    ):
        check_doc_stride(stride, 16, tokenizer)


@pytest.fixture(scope="module")
def windowed(checkpoint, tmp_path_factory):
    return finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=TRAIN,
        validation_data=VALIDATION,
        label_column_name="kind",
        output_dir=tmp_path_factory.mktemp("w") / "windows",
        num_train_epochs=3,
        **WINDOWS,
        **FAST,
    )


def test_finetune_in_windows_reads_a_label_the_first_window_misses(windowed, checkpoint, tmp_path):
    first = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=TRAIN,
        validation_data=VALIDATION,
        label_column_name="kind",
        output_dir=tmp_path / "first",
        max_seq_length=16,
        num_train_epochs=3,
        **FAST,
    )
    assert first.metrics["accuracy"] < 0.65 < 0.9 < windowed.metrics["accuracy"], (first.metrics, windowed.metrics)
    # Scores count texts; the windows beside them.
    assert windowed.metrics["samples"] == 64 and windowed.metrics["windows"] > 3 * 64
    assert windowed.train_metrics["samples"] == 256 < 3 * 256 < windowed.train_metrics["windows"]
    assert (windowed.output_dir / CONFUSION_FILE).stat().st_size > 0


def test_classify_long_texts_predicts_as_evaluation_scored(windowed):
    model = AutoModelForSequenceClassification.from_pretrained(windowed.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(windowed.output_dir)
    logits = classify_long_texts(model, tokenizer, VALIDATION["text"], doc_stride=4, max_length=16, batch_size=7)
    assert logits.shape == (64, 2)
    predicted = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    accuracy = np.mean([p == k for p, k in zip(predicted, VALIDATION["kind"])])
    assert accuracy == pytest.approx(windowed.metrics["accuracy"])


def test_distill_in_windows_labels_the_students_windows(windowed, checkpoint, tmp_path):
    result = distill(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        teacher_model_name_or_path=str(windowed.output_dir),
        train_data=TRAIN,
        validation_data=VALIDATION,
        label_column_name="kind",
        output_dir=tmp_path / "student",
        num_train_epochs=3,
        learning_rate=3e-3,
        show_progress=False,
        **WINDOWS,
    )
    # Same tokenizer and length: the teacher reads the windows it was trained and scored on, so it scores as then.
    assert result.metrics["teacher_accuracy"] == pytest.approx(windowed.metrics["accuracy"])
    assert result.metrics["accuracy"] > 0.9 and result.metrics["samples"] == 64
    # The transfer set: every training window and one augmented copy of each.
    assert result.transfer_size == result.train_metrics["samples"] == 2 * windowed.train_metrics["windows"]


def test_a_teacher_fine_tuned_for_distillation_reads_windows_too(checkpoint, tmp_path):
    result = distill(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        teacher_model_name_or_path=str(checkpoint),
        finetune_teacher=True,
        teacher_num_train_epochs=3,
        teacher_learning_rate=3e-3,
        train_data=TRAIN,
        validation_data=VALIDATION,
        label_column_name="kind",
        output_dir=tmp_path / "student",
        num_train_epochs=1,
        learning_rate=3e-3,
        show_progress=False,
        **WINDOWS,
    )
    teacher = json.loads((result.output_dir / "teacher" / "all_results.json").read_text())
    assert teacher["eval_windows"] == result.metrics["windows"] and teacher["eval_samples"] == 64
    assert (
        teacher["eval_accuracy"] == pytest.approx(result.metrics["teacher_accuracy"])
        and teacher["eval_accuracy"] > 0.9
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"task": "token-classification", "train_file": str(NER_TRAIN)},
            "doc_stride=4 applies to sequence-classification and question-answering, not task='token-classification'",
        ),
        (
            {"text_pair_column_name": "kind"},
            "doc_stride=4 cuts single texts into windows; it cannot read text pairs (text_pair_column_name='kind')",
        ),
        (
            {"doc_stride": 14},
            "doc_stride=14 must be at least 0 and below 14, the text tokens of a window with max_seq_length=16",
        ),
    ],
)
def test_bad_window_options_are_refused_before_any_work(checkpoint, tmp_path, options, message):
    options = {
        "task": "sequence-classification",
        "train_data": TRAIN,
        "label_column_name": "kind",
        **WINDOWS,
        **options,
    }
    if "train_file" in options:
        options.pop("train_data")
    with pytest.raises(ValueError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        finetune(model_name_or_path=checkpoint, output_dir=tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_windows_for_tagging_in_one_line(checkpoint, tmp_path, capsys):
    code = main(
        [
            "distill",
            "--task",
            "token-classification",
            "--doc_stride",
            "4",
            "--teacher_model_name_or_path",
            str(checkpoint),
            "--model_name_or_path",
            str(checkpoint),
            "--train_file",
            str(NER_TRAIN),
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "minibert distill: error: doc_stride=4 applies to sequence-classification and question-answering, not "
        "task='token-classification'"
    )


def test_no_texts_give_no_rows_and_a_text_of_one_window_its_own_logits(windowed):
    """[] is (0, labels), as `encode([])` is (0, hidden); a short text is one window, scored as the model scores it."""
    model = AutoModelForSequenceClassification.from_pretrained(windowed.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(windowed.output_dir)
    assert classify_long_texts(model, tokenizer, [], doc_stride=4, max_length=16).shape == (0, 2)
    one = classify_long_texts(model, tokenizer, ["Ana lives in Oslo ."], doc_stride=4, max_length=16)
    direct = model.eval()(**tokenizer(["Ana lives in Oslo ."], return_tensors="pt")).logits
    np.testing.assert_allclose(one.numpy(), direct.detach().numpy(), atol=1e-5)
