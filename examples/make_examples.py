"""Writes the small example inputs that the README's commands read, in the formats users bring their own data in.

    pretraining.txt                            plain text, one document per paragraph block, blank lines between
    sentiment_{train,validation,test}.csv      columns text,label (positive / negative)

The sentences follow templates, so the files are small, license-free, and learnable in seconds; they show the
formats, not what a real corpus gives. Rerun to regenerate: `python examples/make_examples.py`.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).parent

SUBJECTS = ["The film", "This movie", "The story", "The sequel", "The documentary", "The new series", "The play"]
ASPECTS = ["acting", "script", "music", "pacing", "camera work", "dialogue", "ending", "cast"]
GOOD = ["superb", "moving", "clever", "delightful", "gripping", "beautiful", "sharp", "warm"]
BAD = ["dull", "clumsy", "tedious", "lifeless", "muddled", "shallow", "forgettable", "painful"]
SENTIMENT_TEMPLATES = [
    "{subject} is {adj} from start to finish .",
    "The {aspect} is {adj} and the {aspect2} is {adj2} .",
    "{subject} has a {adj} {aspect} .",
    "I found the {aspect} {adj} , and the {aspect2} {adj2} .",
    "Few films this year are as {adj} .",
    "{subject} feels {adj} , with a {adj2} {aspect} .",
]

TOWNS = ["Alderton", "Brookfield", "Carrow", "Dunmore", "Elmstead", "Fairholm", "Glenbury", "Harwick"]
TOPICS = {
    "council": ["The council met on {day} to discuss the budget for {town} .",
                "Members voted to spend more on roads and schools .",
                "The mayor of {town} said the plan would take two years .",
                "Residents asked for more buses between {town} and {town2} ."],
    "market": ["Shares in the {town} bank rose on {day} .",
               "Analysts said profits were higher than expected .",
               "The company plans to open a new office in {town2} .",
               "Prices for energy and food went up again this month ."],
    "sport": ["{town} won the cup final against {town2} on {day} .",
              "The coach praised the team for a strong second half .",
              "More than ten thousand fans watched the match .",
              "The captain said the season had been the best in years ."],
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def sentiment_row(rng: random.Random) -> tuple[str, str]:
    label = rng.choice(["positive", "negative"])
    words = GOOD if label == "positive" else BAD
    adj, adj2 = rng.sample(words, 2)
    aspect, aspect2 = rng.sample(ASPECTS, 2)
    text = rng.choice(SENTIMENT_TEMPLATES).format(
        subject=rng.choice(SUBJECTS), adj=adj, adj2=adj2, aspect=aspect, aspect2=aspect2
    )
    return text, label


def document(rng: random.Random) -> str:
    topic = rng.choice(list(TOPICS))
    town, town2 = rng.sample(TOWNS, 2)
    sentences = [s.format(town=town, town2=town2, day=rng.choice(DAYS)) for s in TOPICS[topic]]
    rest = sentences[1:]  # the first sentence opens the story; the others come in any order
    rng.shuffle(rest)
    return " ".join(sentences[:1] + rest)


def write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(0)
    for split, n in (("train", 400), ("validation", 80), ("test", 80)):
        write_csv(HERE / f"sentiment_{split}.csv", [sentiment_row(rng) for _ in range(n)])
    (HERE / "pretraining.txt").write_text("\n\n".join(document(rng) for _ in range(300)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
