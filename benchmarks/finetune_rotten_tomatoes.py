"""Rotten Tomatoes sentiment: a fine-tuned Mini-BERT against a TF-IDF + logistic-regression baseline, same split.

The split is by movie (see `benchmarks/rotten_tomatoes.py`): about 10.2k training, 1.4k validation and
1.3k test snippets. The fine-tuned model keeps its best validation epoch; both are scored once on the test split.

    python benchmarks/finetune_rotten_tomatoes.py --model_name_or_path minibert-pretrained
    python benchmarks/finetune_rotten_tomatoes.py --model_name_or_path FOLDER --num_train_epochs 5 --learning_rate 5e-5

(The options are named as `minibert finetune`'s; the older --model, --epochs, --batch-size still work.)

Writes benchmarks/results/rotten_tomatoes.json, a bar chart beside it (rotten_tomatoes.png) and the fine-tuned
model to benchmarks/results/rotten_tomatoes-model/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matplotlib.figure import Figure  # noqa: E402

from modeling_minibert.utils.files import write_json  # noqa: E402
from modeling_minibert.training.finetuning import finetune  # noqa: E402
from rotten_tomatoes import load_rotten_tomatoes, tfidf_baseline  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def plot(results: dict, path: Path) -> None:
    """Test accuracy and macro-F1 of both systems, side by side."""
    systems = [("TF-IDF + logistic regression", results["baseline"]["test"]), ("Mini-BERT fine-tuned", results["minibert"]["test"])]
    figure = Figure(figsize=(6.5, 3.8))
    ax = figure.subplots()
    width = 0.38
    for k, metric in enumerate(("accuracy", "macro_f1")):
        xs = [i + (k - 0.5) * width for i in range(len(systems))]
        values = [scores[metric] for _, scores in systems]
        bars = ax.bar(xs, values, width, label=metric)
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_xticks(range(len(systems)), [name for name, _ in systems])
    ax.set_ylim(0, 1)
    ax.axhline(results["majority_test_accuracy"], color="grey", linestyle="--", linewidth=1, label="majority class")
    ax.set_title(f"Rotten Tomatoes test split ({results['sizes']['test']} snippets)")
    ax.legend(loc="upper right", fontsize=8)
    figure.savefig(path, dpi=120, bbox_inches="tight")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_name_or_path", "--model", dest="model", required=True,
                        help="a `minibert pretrain` output folder (model + tokenizer)")
    parser.add_argument("--output", default=str(RESULTS / "rotten_tomatoes.json"))
    parser.add_argument("--output_dir", "--model-dir", dest="model_dir", default=None,
                        help="where the fine-tuned model goes (default: beside --output)")
    parser.add_argument("--num_train_epochs", "--epochs", dest="epochs", type=float, default=3.0)
    parser.add_argument("--per_device_train_batch_size", "--batch-size", dest="batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", "--learning-rate", dest="learning_rate", type=float, default=1e-4)
    parser.add_argument("--learning_rates", type=float, nargs="+", default=None,
                        help="instead of --learning_rate: the job chooses among these on validation")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N training snippets (smoke runs)")
    args = parser.parse_args(argv)

    splits = load_rotten_tomatoes()
    if args.limit is not None:
        splits["train"] = splits["train"].select(range(min(args.limit, len(splits["train"]))))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model_dir) if args.model_dir else output.with_name(output.stem + "-model")

    start = time.perf_counter()
    baseline = tfidf_baseline(splits)
    baseline_seconds = time.perf_counter() - start
    print(f"TF-IDF + logistic regression (C={baseline['C']}): test accuracy {baseline['test']['accuracy']:.4f}")

    start = time.perf_counter()
    finetuned = finetune(task="sequence-classification", model_name_or_path=args.model,
        train_data=splits["train"], output_dir=model_dir, validation_data=splits["validation"],
        test_data=splits["test"], overwrite_output_dir=True, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        **({"learning_rates": args.learning_rates} if args.learning_rates else {"learning_rate": args.learning_rate}), seed=args.seed,
    )
    finetune_seconds = time.perf_counter() - start
    print(f"Mini-BERT fine-tuned: test accuracy {finetuned.test_metrics['accuracy']:.4f}")

    test_labels = list(splits["test"]["label"])
    results = {
        "model": str(args.model),
        "sizes": {split: len(data) for split, data in splits.items()},
        "majority_test_accuracy": max(test_labels.count(c) for c in set(test_labels)) / len(test_labels),
        "baseline": {**baseline, "seconds": baseline_seconds},
        "minibert": {
            "validation": finetuned.metrics,
            "test": finetuned.test_metrics,
            "seconds": finetune_seconds,
            "model_dir": str(model_dir),
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "learning_rate": finetuned.train_metrics.get("learning_rate", args.learning_rate),
            "learning_rates": args.learning_rates,
        },
    }
    write_json(output, results)
    plot(results, output.with_suffix(".png"))
    print(f"wrote {output} and {output.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
