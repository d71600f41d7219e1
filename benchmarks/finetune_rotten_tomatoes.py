"""Rotten Tomatoes sentiment: a fine-tuned Mini-BERT against a TF-IDF + logistic-regression baseline, same split.

The split is by movie (see `examples/rotten_tomatoes.py`): about 10.2k training, 1.4k validation and
1.3k test snippets. The fine-tuned model keeps its best validation epoch; both are scored once on the test split.

    python -m benchmarks.finetune_rotten_tomatoes --model_name_or_path minibert-pretrained
    python -m benchmarks.finetune_rotten_tomatoes --model_name_or_path FOLDER --num_train_epochs 4 --learning_rate 3e-4

Every option of `minibert finetune` is an option here under its own name, with its defaults (the benchmark sets
the task and the data); --output and --limit are the benchmark's own. Writes --output (default
runs/benchmarks/finetune_rotten_tomatoes.json), a bar chart beside it (.png) and the fine-tuned model to
--output_dir (default: beside --output, NAME-model/).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from benchmarks.arguments import job_options, job_parser, parse, require, set_by_benchmark, take
from benchmarks.report import command_line, default_output, write_results
from examples.rotten_tomatoes import load_rotten_tomatoes, tfidf_baseline
from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.arguments import FinetuneArguments

# Data sources the benchmark reads itself (the split by movie), passed to `finetune` in memory.
DATA_OPTIONS = ("train_file", "validation_file", "test_file", "dataset_name")


@dataclass
class FinetuneBenchmarkArguments:
    """The benchmark's own options; every other one is `finetune`'s."""

    output: str = field(
        default=str(default_output("finetune_rotten_tomatoes")),
        metadata={"help": "the results JSON; its bar chart goes beside it (.png)"},
    )
    limit: int | None = field(default=None, metadata={"help": "use only the first N training snippets (smoke runs)"})


def parse_options(argv: list[str] | None) -> tuple[FinetuneBenchmarkArguments, dict, dict]:
    """The benchmark's options; `finetune`'s keyword options (the task, and the model folder beside --output
    unless --output_dir names one); and every option's value, defaults included."""
    built = job_parser(FinetuneBenchmarkArguments, FinetuneArguments, module=__spec__.name, doc=__doc__)
    values = parse(built, argv)
    require(built, values, model_name_or_path="a pretrained Mini-BERT folder, model and tokenizer")
    values = set_by_benchmark(
        built, values, task="sequence-classification", overwrite_output_dir=True, **dict.fromkeys(DATA_OPTIONS)
    )
    args = take(FinetuneBenchmarkArguments, values)
    options = job_options(values, FinetuneArguments)
    output = Path(args.output)
    options["output_dir"] = options.get("output_dir") or str(output.with_name(output.stem + "-model"))
    return args, options, values


def plot(results: dict, path: Path) -> None:
    """Test accuracy and macro-F1 of both systems, side by side."""
    systems = [
        ("TF-IDF + logistic regression", results["baseline"]["test"]),
        ("Mini-BERT fine-tuned", results["minibert"]["test"]),
    ]
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
    args, options, values = parse_options(argv)
    splits = load_rotten_tomatoes()
    if args.limit is not None:
        splits["train"] = splits["train"].select(range(min(args.limit, len(splits["train"]))))

    start = time.perf_counter()
    baseline = tfidf_baseline(splits)
    baseline_seconds = time.perf_counter() - start
    print(f"TF-IDF + logistic regression (C={baseline['C']}): test accuracy {baseline['test']['accuracy']:.4f}")

    start = time.perf_counter()
    finetuned = finetune(
        train_data=splits["train"], validation_data=splits["validation"], test_data=splits["test"], **options
    )
    finetune_seconds = time.perf_counter() - start
    print(f"Mini-BERT fine-tuned: test accuracy {finetuned.test_metrics['accuracy']:.4f}")

    test_labels = list(splits["test"]["label"])
    results = {
        "model": str(options["model_name_or_path"]),
        "sizes": {split: len(data) for split, data in splits.items()},
        "majority_test_accuracy": max(test_labels.count(c) for c in set(test_labels)) / len(test_labels),
        "baseline": {**baseline, "seconds": baseline_seconds},
        "minibert": {
            "validation": finetuned.metrics,
            "test": finetuned.test_metrics,
            "seconds": finetune_seconds,
            "model_dir": options["output_dir"],
            "epochs": values["num_train_epochs"],
            "batch_size": values["per_device_train_batch_size"],
            "learning_rate": finetuned.train_metrics.get("learning_rate", values["learning_rate"]),
            "learning_rates": values["learning_rates"],
        },
    }
    output = write_results(args.output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(f"wrote {output} and {output.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
