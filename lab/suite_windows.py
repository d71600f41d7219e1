"""BBC topics read in windows: does the rest of an article help the suite's models, trained on its first tokens?

The suite's BBC topics models (the teacher fine-tuned, the student fine-tuned alone, the student distilled) read each
article's first `max_seq_length` tokens, in training and in prediction, as the jobs do. Here the same models predict
each validation and test article twice: from its first window (what the jobs do), and from the mean of their logits
over windows covering the whole article (each model's own length, overlapping by a quarter, as question answering's
windows do). Nothing is trained here; training in windows is the jobs' `--doc_stride` (`suite --doc_stride`).

    python -m lab.suite_windows --models_dir runs/benchmarks/suite-models-p3
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmarks.arguments import parser
from benchmarks.report import command_line, default_output, markdown_table, write_results
from benchmarks.suite import DISTILLED, FINETUNED, TEACHER
from benchmarks.suite_data import bbc_topics

FOLDERS = {TEACHER: "teacher", FINETUNED: "finetuned", DISTILLED: "distilled"}


@dataclass
class WindowsArguments:
    models_dir: str = field(
        default="runs/benchmarks/suite-models",
        metadata={"help": "the suite's models (--output_dir of benchmarks.suite)"},
    )
    output: str = field(default=str(default_output("suite_windows")), metadata={"help": "the results JSON"})


def window_logits(folder: str, texts: list[str], batch_size: int = 64) -> tuple[list[np.ndarray], int]:
    """Each text's logits per window (windows x classes), and the window length (the model's positions, at most 128
    as distill reads)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from modeling_minibert.training.distillation.teacher import max_length_for

    model, tokenizer = (
        AutoModelForSequenceClassification.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )
    length = max_length_for(folder, tokenizer, 128)
    encoding = tokenizer(texts, truncation=True, max_length=length, stride=length // 4, return_overflowing_tokens=True)
    owner = encoding.pop("overflow_to_sample_mapping")
    rows = []
    with torch.inference_mode():
        for start in range(0, len(owner), batch_size):
            batch = tokenizer.pad(
                {name: values[start : start + batch_size] for name, values in encoding.items()}, return_tensors="pt"
            )
            rows.append(model(**batch).logits.float().numpy())
    logits, owner = np.concatenate(rows), np.asarray(owner)
    return [logits[owner == i] for i in range(len(texts))], length


def scores(per_text: list[np.ndarray], labels: np.ndarray) -> dict[str, float]:
    """Accuracy from the first window, and from the mean logits over every window."""
    first = np.array([windows[0].argmax() for windows in per_text])
    pooled = np.array([windows.mean(axis=0).argmax() for windows in per_text])
    return {"first_window": float((first == labels).mean()), "windows_pooled": float((pooled == labels).mean())}


def main(argv: list[str] | None = None) -> dict:
    (args,) = parser(WindowsArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    task = bbc_topics()
    models = Path(args.models_dir) / task.name
    results = {"models_dir": str(models), "systems": {}}
    splits = {split: task.splits[split] for split in ("validation", "test")}
    for system, name in FOLDERS.items():
        # One load and one pass per model: both splits' articles together, cut apart after.
        per_text, length = window_logits(
            str(models / name), [text for data in splits.values() for text in data["text"]]
        )
        label2id = json.loads((models / name / "config.json").read_text())["label2id"]
        row, start = {"window": length}, 0
        for split, data in splits.items():
            part, start = per_text[start : start + len(data)], start + len(data)
            row[split] = scores(part, np.array([label2id[label] for label in data["label"]]))
        row["windows_per_article"] = float(np.mean([len(w) for w in part]))  # the test articles'
        results["systems"][system] = row
        print(system, row, flush=True)
    write_results(args.output, results, command_line(__spec__.name, argv))
    print(table(results))
    return results


def table(results: dict) -> str:
    """Each model's accuracy on validation and test, from the first window and from every window pooled."""
    rows = [
        [
            system,
            f"{row['window']}",
            f"{row['windows_per_article']:.1f}",
            *[
                f"{row[split][way]:.3f}"
                for split in ("validation", "test")
                for way in ("first_window", "windows_pooled")
            ],
        ]
        for system, row in results["systems"].items()
    ]
    header = [
        "model",
        "window (tokens)",
        "windows per test article",
        "validation: first window",
        "validation: pooled",
        "test: first window",
        "test: pooled",
    ]
    return markdown_table(header, rows, "lrrrrrr")


if __name__ == "__main__":
    main()
