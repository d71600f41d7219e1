"""Fine-tuning scores on hand-made predictions, and the QA span decoding shared by evaluation and the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from modeling_minibert.question_answering_pipeline import best_answers
from modeling_minibert.training.finetuning.metrics import (
    answer_f1,
    classification_metrics,
    is_bio_scheme,
    normalize_answer,
    squad_metrics,
    token_classification_metrics,
)


def test_classification_metrics_by_hand():
    # references 0 0 0 1 ; predictions 0 0 1 1 -> accuracy 3/4
    # class 0: P=2/2 R=2/3 F1=0.8 ; class 1: P=1/2 R=1/1 F1=2/3 ; macro = (0.8 + 2/3) / 2
    scores = classification_metrics([0, 0, 1, 1], [0, 0, 0, 1])
    assert scores["accuracy"] == pytest.approx(0.75)
    assert scores["macro_f1"] == pytest.approx((0.8 + 2 / 3) / 2)


def test_classification_metrics_length_mismatch():
    with pytest.raises(ValueError, match="3 predictions but 2 references"):
        classification_metrics([0, 1, 1], [0, 1])


def test_is_bio_scheme():
    assert is_bio_scheme(["O", "B-PER", "I-PER", "B-LOC"])
    assert is_bio_scheme(["O", "I-PER"])  # IOB1 starts entities with I-
    assert not is_bio_scheme(["NN", "VB", "DT"])
    assert not is_bio_scheme(["O"])
    assert not is_bio_scheme(["O", "B-PER", "NOUN"])


def test_entity_scores_by_hand():
    references = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    # PER found with the wrong right boundary (does not count), LOC right, ORG missed.
    predictions = [["B-PER", "O", "O", "B-LOC"], ["O", "O"]]
    scores = token_classification_metrics(predictions, references)
    # 3 true entities, 2 predicted (PER[0:1], LOC), 1 correct: precision and recall differ.
    assert scores["precision"] == pytest.approx(1 / 2)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert scores["accuracy"] == pytest.approx(4 / 6)  # tokens: B-PER, O, B-LOC, O right
    assert scores["f1_LOC"] == 1.0
    assert scores["f1_PER"] == 0 and scores["f1_ORG"] == 0


def test_tag_scores_without_entities_are_token_accuracy():
    references = [["DT", "NN", "VB"], ["NN"]]
    predictions = [["DT", "NN", "NN"], ["NN"]]
    scores = token_classification_metrics(predictions, references)
    assert set(scores) == {"accuracy", "macro_f1"}
    assert scores["accuracy"] == pytest.approx(3 / 4)
    # DT F1 1; NN P 2/3 R 1 F1 0.8; VB 0 -> macro 0.6
    assert scores["macro_f1"] == pytest.approx(0.6)


def test_token_scores_check_lengths():
    with pytest.raises(ValueError, match="predicted tags of sentence 0"):
        token_classification_metrics([["O"]], [["O", "O"]])
    with pytest.raises(ValueError, match="1 prediction sentences but 2 reference sentences"):
        token_classification_metrics([["O"]], [["O"], ["O"]])


def test_squad_normalisation_and_f1():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert answer_f1("the Eiffel tower", "Eiffel Tower") == 1.0
    # prediction "tower in paris" vs "eiffel tower": 1 common token, P 1/3, R 1/2 -> F1 0.4
    assert answer_f1("tower in Paris", "Eiffel Tower") == pytest.approx(0.4)
    assert answer_f1("", "") == 1.0 and answer_f1("x", "") == 0.0


def test_squad_metrics_by_hand_on_the_0_to_100_scale():
    references = {"a": ["Lisbon", "the city of Lisbon"], "b": ["Acme Corp"], "c": ["Oslo"]}
    predictions = {"a": "city of Lisbon", "b": "Acme", "c": "Paris"}
    scores = squad_metrics(predictions, references)
    # a: exact 1 (normalised "city of lisbon" == "city of lisbon"); b: F1 2/3; c: 0. Percentages, as `squad` has them.
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)
    # A question without a prediction scores 0 rather than being skipped.
    assert squad_metrics({"a": "Lisbon"}, references)["exact_match"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match=r"no reference answers: \['zzz'\]"):
        squad_metrics({"zzz": "x"}, references)


def _window(start: list[float], end: list[float], context_mask: list[bool], offsets: list[tuple[int, int]]):
    return np.array(start), np.array(end), np.array(offsets), np.array(context_mask)


def test_best_answers_reads_the_highest_span_inside_the_context():
    context = "Ana lives in Lisbon now"
    # tokens: [CLS] where [SEP] ana lives in lisbon now [SEP]
    offsets = [(0, 0), (0, 5), (0, 0), (0, 3), (4, 9), (10, 12), (13, 19), (20, 23), (0, 0)]
    mask = [False, False, False, True, True, True, True, True, False]
    start = [9, 9, 0, 0, 0, 0, 5, 0, 0]  # the question token and [CLS] score highest but are not allowed
    end = [9, 9, 0, 0, 0, 0, 5, 1, 0]
    answers = best_answers([_window(start, end, mask, offsets)], context, top_k=3, max_answer_len=5)
    assert answers[0]["answer"] == "Lisbon" and (answers[0]["start"], answers[0]["end"]) == (13, 19)
    assert [a["score"] for a in answers] == sorted((a["score"] for a in answers), reverse=True)
    assert all(context[a["start"] : a["end"]] == a["answer"] for a in answers)
    # With at most one token per answer, "Lisbon now" (2 tokens) can never be proposed.
    one = best_answers([_window(start, end, mask, offsets)], context, top_k=10, max_answer_len=1)
    assert "Lisbon now" not in {a["answer"] for a in one}
    assert {a["end"] - a["start"] for a in one} <= {3, 5, 2, 6}  # single tokens only


def test_best_answers_merges_overlapping_windows():
    context = "one two three"
    offsets = [(0, 0), (0, 3), (4, 7), (8, 13), (0, 0)]
    mask = [False, True, True, True, False]
    first = _window([0, 0, 3, 0, 0], [0, 0, 3, 0, 0], mask, offsets)
    second = _window([0, 0, 6, 0, 0], [0, 0, 6, 0, 0], mask, offsets)  # same span, more confident
    answers = best_answers([first, second], context, top_k=5)
    assert [a["answer"] for a in answers].count("two") == 1
    assert answers[0]["answer"] == "two"
    alone = best_answers([second], context, top_k=1)[0]
    assert answers[0]["score"] == pytest.approx(alone["score"])


def test_best_answers_widen_to_whole_words_when_given_the_words():
    context = "Ben lives in Oslo ."
    # tokens: [CLS] where [SEP] ben lives in os ##lo . [SEP]; the model likes the piece "##lo" best
    offsets = [(0, 0), (0, 5), (0, 0), (0, 3), (4, 9), (10, 12), (13, 15), (15, 17), (18, 19), (0, 0)]
    mask = [False, False, False, True, True, True, True, True, True, False]
    words = np.array([-1, -1, -1, 0, 1, 2, 3, 3, 4, -1])
    start = [0, 0, 0, 0, 0, 0, 1, 6, 0, 0]
    end = [0, 0, 0, 0, 0, 0, 0, 6, 0, 0]
    window = _window(start, end, mask, offsets)
    assert best_answers([window], context)[0]["answer"] == "lo"  # token spans, as SQuAD evaluation scores them
    aligned = best_answers([window], context, word_ids=[words])[0]
    assert (aligned["answer"], aligned["start"], aligned["end"]) == ("Oslo", 13, 17)
    assert aligned["score"] == pytest.approx(best_answers([window], context)[0]["score"])


# --- found by mutation testing (benchmarks/mutation.py): behaviour no other test looked at ------------------------


def test_a_class_never_predicted_scores_zero_without_warnings():
    # scikit-learn and seqeval warn (UndefinedMetricWarning) on a 0/0 precision unless told what it is worth.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tags = token_classification_metrics([["DT", "NN", "NN"]], [["DT", "NN", "VB"]])
        entities = token_classification_metrics([["B-PER", "O", "O"]], [["B-PER", "O", "B-ORG"]])
    assert tags["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)  # DT 1, NN P 1/2 R 1 F1 2/3, VB never predicted
    assert entities["f1_ORG"] == 0 and entities["f1_PER"] == 1


def test_recall_without_any_true_entity_is_zero():
    # The label set says BIO; the references hold no entity, so recall is 0/0: scored 0, not 1.
    scores = token_classification_metrics([["B-PER", "O"]], [["O", "O"]], label_names=["O", "B-PER", "I-PER"])
    assert scores["recall"] == 0 and scores["precision"] == 0 and scores["f1"] == 0


def test_empty_references_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^no tags to score: every reference sentence is empty$"):
        token_classification_metrics([[]], [[]])
