"""Scores of the fine-tuning tasks, as plain functions of predictions and references.

Classification and tagging scores are fractions in [0, 1] (scikit-learn, seqeval); SQuAD's exact match and F1 are
percentages in [0, 100], as the `squad` metric and run_qa.py report them. The SQuAD scores are written here
because `evaluate` fetches its metrics from the Hub at run time, which does not work offline.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence

from seqeval import metrics as seqeval_metrics
from sklearn.metrics import accuracy_score, f1_score


def classification_metrics(predictions: Sequence[int], references: Sequence[int]) -> dict[str, float]:
    """Accuracy and macro-F1 (the unweighted mean of per-class F1, so a rare class counts as much as a common one)."""
    _check_lengths(predictions, references, "predictions", "references")
    return {
        "accuracy": float(accuracy_score(references, predictions)),
        "macro_f1": float(f1_score(references, predictions, average="macro", zero_division=0)),
    }


_BIO_TAG = re.compile(r"^[BI]-.+$")


def is_bio_scheme(tags: Iterable[str]) -> bool:
    """True when the tags are BIO/IOB entity tags: "O", or "B-TYPE" / "I-TYPE", with at least one entity tag."""
    tags = set(tags)
    entity_tags = {tag for tag in tags if tag != "O"}
    return bool(entity_tags) and all(_BIO_TAG.match(tag) for tag in entity_tags)


def token_classification_metrics(
    predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]], label_names: Iterable[str] | None = None
) -> dict[str, float]:
    """Scores of tag sequences (one list of tags per sentence).

    With BIO/IOB tags (judged on `label_names`, default: the tags of `references`): entity-level precision, recall
    and F1 as in CoNLL (seqeval; an entity counts only if its type and both boundaries are right), the F1 of each
    entity type (`f1_TYPE`), and token accuracy. With any other tag set (part-of-speech tags, say): token accuracy
    and macro-F1 over tags.
    """
    _check_lengths(predictions, references, "prediction sentences", "reference sentences")
    for i, (pred, ref) in enumerate(zip(predictions, references)):
        _check_lengths(pred, ref, f"predicted tags of sentence {i}", "reference tags")
    flat_pred = [tag for sentence in predictions for tag in sentence]
    flat_ref = [tag for sentence in references for tag in sentence]
    if not flat_ref:
        raise ValueError("no tags to score: every reference sentence is empty")
    if is_bio_scheme(label_names if label_names is not None else flat_ref):
        pred_lists, ref_lists = [list(s) for s in predictions], [list(s) for s in references]
        scores = {
            "precision": float(seqeval_metrics.precision_score(ref_lists, pred_lists, zero_division=0)),
            "recall": float(seqeval_metrics.recall_score(ref_lists, pred_lists, zero_division=0)),
            "f1": float(seqeval_metrics.f1_score(ref_lists, pred_lists, zero_division=0)),
            "accuracy": float(seqeval_metrics.accuracy_score(ref_lists, pred_lists)),
        }
        report = seqeval_metrics.classification_report(ref_lists, pred_lists, output_dict=True, zero_division=0)
        for entity_type, row in report.items():
            if not entity_type.endswith(" avg"):
                scores[f"f1_{entity_type}"] = float(row["f1-score"])
        return scores
    return {
        "accuracy": float(accuracy_score(flat_ref, flat_pred)),
        "macro_f1": float(f1_score(flat_ref, flat_pred, average="macro", zero_division=0)),
    }


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answer_f1(prediction: str, reference: str) -> float:
    """Bag-of-words F1 between two normalised answers (SQuAD's partial credit)."""
    pred_tokens, ref_tokens = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred_tokens or not ref_tokens:
        return float(pred_tokens == ref_tokens)  # both empty: a match; one empty: nothing in common
    common = sum((collections.Counter(pred_tokens) & collections.Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Exact match and F1 (percentages, 0-100) of predicted answers against the reference answers of each question id.

    Each question scores its best match over its references (SQuAD lists several correct answers); the scores
    are averaged over the questions of `references`, and a question without a prediction scores 0.
    """
    if not references:
        raise ValueError("no reference answers to score")
    unknown = set(predictions) - set(references)
    if unknown:
        raise ValueError(f"predictions for question ids with no reference answers: {sorted(unknown)[:5]}")
    exact = f1 = 0.0
    for question_id, answers in references.items():
        if not answers:
            raise ValueError(f"question {question_id!r} has no reference answer")
        prediction = predictions.get(question_id, None)
        if prediction is None:
            continue
        exact += max(float(normalize_answer(prediction) == normalize_answer(a)) for a in answers)
        f1 += max(answer_f1(prediction, a) for a in answers)
    return {"exact_match": 100 * exact / len(references), "f1": 100 * f1 / len(references)}


def _check_lengths(a: Sequence, b: Sequence, a_name: str, b_name: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} {a_name} but {len(b)} {b_name}: they must pair up one to one")


__all__ = [
    "answer_f1",
    "classification_metrics",
    "is_bio_scheme",
    "normalize_answer",
    "squad_metrics",
    "token_classification_metrics",
]
