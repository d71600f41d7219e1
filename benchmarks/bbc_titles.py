"""BBC News headlines -> topic: a fine-tuned Mini-BERT against TF-IDF on the fine-tuning example's data.

The data are `examples.bbc_titles`' fixed split of the 2,096 distinct BBC News headlines (1,467 / 210 / 419), which
this benchmark also writes to --data_dir as CSV files:

    python -m benchmarks.bbc_titles --model_name_or_path minibert-pretrained --num_train_epochs 6 \\
        --output_dir runs/bbc-titles-model --output benchmarks/results/bbc_titles.json

It fine-tunes --model_name_or_path (every `minibert finetune` option passes through under its own name, with
finetune's defaults; the benchmark sets the task and the data) into --output_dir, fits TF-IDF + logistic
regression (C and the features' min_df chosen on validation), scores both once on the test headlines and writes
--output (default runs/benchmarks/bbc_titles.json) with a bar chart beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from datasets import DatasetDict
from matplotlib.figure import Figure

from benchmarks.arguments import job_options, job_parser, parse, require, set_by_benchmark, take
from benchmarks.report import command_line, default_output, markdown_table, write_results
from examples.bbc_titles import load_bbc_titles, write_splits
from examples.rotten_tomatoes import tfidf_baseline
from modeling_minibert.training.finetuning import FinetuneArguments, finetune


@dataclass
class BBCTitlesArguments:
    """The benchmark's own options; every other one is `finetune`'s."""

    data_dir: str = field(default="runs/bbc-titles", metadata={"help": "where the split's CSV files go"})
    output: str = field(
        default=str(default_output("bbc_titles")),
        metadata={"help": "with --model_name_or_path: the results JSON (its bar chart goes beside it, .png)"},
    )


def measure(splits: DatasetDict, options: dict) -> dict:
    """TF-IDF and the fine-tuned model, each scored once on the test split."""
    start = time.perf_counter()
    # Headlines are a few words long: a word pair seen once may be all a headline has (min_df 1 or 2, on validation).
    baseline = {**tfidf_baseline(splits, min_df_values=(1, 2)), "seconds": time.perf_counter() - start}
    start = time.perf_counter()
    result = finetune(
        train_data=splits["train"], validation_data=splits["validation"], test_data=splits["test"], **options
    )
    labels = list(splits["test"]["label"])
    return {
        "model": str(options["model_name_or_path"]),
        "sizes": {name: len(split) for name, split in splits.items()},
        "majority_test_accuracy": max(labels.count(label) for label in set(labels)) / len(labels),
        "baseline": baseline,
        "minibert": {
            "validation": result.metrics,
            "test": result.test_metrics,
            "seconds": time.perf_counter() - start,
        },
    }


def readme_table(results: dict) -> str:
    rows = [
        ["TF-IDF + logistic regression", results["baseline"]["test"]],
        ["Mini-BERT fine-tuned", results["minibert"]["test"]],
    ]
    return markdown_table(
        ["system", "test accuracy", "test macro-F1"],
        [[name, f"{scores['accuracy']:.3f}", f"{scores['macro_f1']:.3f}"] for name, scores in rows],
        "lrr",
    )


def plot(results: dict, path: Path) -> None:
    """Test accuracy of both systems, against the majority class."""
    figure = Figure(figsize=(5.5, 3.5))
    ax = figure.subplots()
    names = ["TF-IDF + LR", "Mini-BERT fine-tuned"]
    bars = ax.bar(names, [results["baseline"]["test"]["accuracy"], results["minibert"]["test"]["accuracy"]])
    ax.bar_label(bars, fmt="%.3f")
    ax.axhline(results["majority_test_accuracy"], color="grey", linestyle="--", linewidth=1, label="majority topic")
    ax.set_ylim(0, 1)
    ax.set_title(f"BBC News headline -> topic, test split ({results['sizes']['test']} headlines)")
    ax.legend(loc="lower right", fontsize=8)
    figure.savefig(path, dpi=120, bbox_inches="tight")


def main(argv: list[str] | None = None) -> dict:
    built = job_parser(BBCTitlesArguments, FinetuneArguments, module=__spec__.name, doc=__doc__)
    values = set_by_benchmark(
        built,
        parse(built, argv),
        task="sequence-classification",
        train_file=None,
        validation_file=None,
        test_file=None,
        dataset_name=None,
        overwrite_output_dir=True,
    )
    require(built, values, model_name_or_path="a pretrained Mini-BERT folder, model and tokenizer")
    args = take(BBCTitlesArguments, values)
    splits = load_bbc_titles()
    out = write_splits(splits, args.data_dir)
    options = job_options(values, FinetuneArguments)
    options["output_dir"] = options.get("output_dir") or str(out / "model")
    results = measure(splits, options)
    output = write_results(args.output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(readme_table(results), f"\nwrote {output}", sep="\n")
    return results


if __name__ == "__main__":
    main()
