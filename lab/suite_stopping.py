"""Early stopping replayed on the suite's runs: what each run would have kept had it stopped after PATIENCE
evaluations without a better validation score.

Stopping does not change a run's schedule (Trainer's EarlyStoppingCallback only ends it), so a stopped run is the
whole run cut short: its model is the best checkpoint among the evaluations it made, by the run's own
`metric_for_best_model` (accuracy for the teacher and the fine-tuned student, the distillation loss for the
distilled one; ties keep the earlier). For each system of each labelled task in --results, from the
trainer_state.json in its model folder: the epoch it would stop at, the epoch kept, that epoch's validation
accuracy, and its CPU-minutes scaled by the epochs run (training dominates a row; its final test scoring is not
shortened, so this is a slight underestimate). A distilled student whose teacher would keep another checkpoint
learns from another teacher: its replay is marked, and only a run says what it scores.

    python -m lab.suite_stopping --results runs/benchmarks/suite.json --patience 3 5 \
        --output lab/results/suite_stopping.json
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import command_line, markdown_table, write_results
from benchmarks.suite import DISTILLED, FINETUNED, TEACHER

# Each system's metric_for_best_model, as the suite's jobs set it, and whether larger is better.
STOPPING_METRIC = {
    TEACHER: ("eval_accuracy", True),
    FINETUNED: ("eval_accuracy", True),
    DISTILLED: ("eval_loss", False),
}


@dataclass
class StoppingArguments:
    results: str = field(
        default="runs/benchmarks/suite.json", metadata={"help": "a suite results JSON whose model folders exist"}
    )
    root: str = field(default=".", metadata={"help": "where the results' relative model folders are found"})
    patience: list[int] = field(default_factory=lambda: [3, 5], metadata={"help": "the candidates", "nargs": "+"})
    output: str = field(default="runs/benchmarks/suite_stopping.json", metadata={"help": "the replay's JSON"})


def evaluations(state: dict) -> list[dict]:
    """The run's evaluations, in order: each a log_history entry with eval_loss."""
    return [entry for entry in state["log_history"] if "eval_loss" in entry]


def replay(history: list[dict], metric: str, greater_is_better: bool, patience: int | None) -> dict:
    """Where a run with these evaluations stops (None: never) and which evaluation it keeps, as Trainer's
    EarlyStoppingCallback and load_best_model_at_end decide: a score is better only if strictly so."""
    best, waited = None, 0
    for i, entry in enumerate(history):
        value = entry[metric]
        if best is None or (value > history[best][metric] if greater_is_better else value < history[best][metric]):
            best, waited = i, 0
        else:
            waited += 1
        if patience and waited >= patience:
            return {
                "stopped_at": entry["epoch"],
                "kept": history[best]["epoch"],
                "accuracy": history[best]["eval_accuracy"],
            }
    return {"stopped_at": None, "kept": history[best]["epoch"], "accuracy": history[best]["eval_accuracy"]}


def replay_task(systems: dict, root: Path, patience: list[int]) -> dict:
    rows = {}
    for system, (metric, greater) in STOPPING_METRIC.items():
        if system not in systems:
            continue
        folder = root / systems[system]["model_dir"]
        history = evaluations(json.loads((folder / "trainer_state.json").read_text()))
        epochs = history[-1]["epoch"]
        row = {
            "epochs": epochs,
            "cpu_minutes": systems[system]["cpu_minutes"],
            "history": [
                {"epoch": e["epoch"], "accuracy": e["eval_accuracy"], "loss": e["eval_loss"]} for e in history
            ],
        }
        for p in [None, *patience]:
            kept = replay(history, metric, greater, p)
            ran = kept["stopped_at"] or epochs
            row[str(p or 0)] = {**kept, "cpu_minutes": systems[system]["cpu_minutes"] * ran / epochs}
        rows[system] = row
    if TEACHER in rows and DISTILLED in rows:
        for p in map(str, patience):
            rows[DISTILLED][p]["teacher_changed"] = rows[TEACHER][p]["kept"] != rows[TEACHER]["0"]["kept"]
    return rows


def main(argv: list[str] | None = None) -> dict:
    built = parser(StoppingArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    results = json.loads(Path(args.results).read_text())
    tasks = {
        name: replay_task(task["systems"], Path(args.root), args.patience)
        for name, task in results["tasks"].items()
        if TEACHER in task["systems"]
    }
    payload = {"results": args.results, "patience": args.patience, "tasks": tasks}
    write_results(args.output, payload, command_line(__spec__.name, argv))
    print(readme_table(payload))
    return payload


def readme_table(payload: dict) -> str:
    """One row per patience and system: each task's kept validation accuracy (epochs run of all), the mean, and
    the CPU-minutes of those runs. † marks a distilled student whose teacher would keep another checkpoint: its
    replay is not its score (a run must say)."""
    tasks = payload["tasks"]
    header = ["patience", "system", *[f"{t} (validation)" for t in tasks], "mean", "CPU-min"]
    rows = []
    for p in ["0", *map(str, payload["patience"])]:
        for system in STOPPING_METRIC:
            cells, scores, cpu = [], [], 0.0
            for name, systems in tasks.items():
                row = systems[system]
                kept = row[p]
                changed = kept.get("teacher_changed", False)
                ran = kept["stopped_at"] or row["epochs"]
                cells.append(f"{kept['accuracy']:.3f}{'†' if changed else ''} ({ran:g} of {row['epochs']:g})")
                scores.append(None if changed else kept["accuracy"])
                cpu += kept["cpu_minutes"]
            mean = f"**{statistics.fmean(scores):.3f}**" if None not in scores else "†"
            rows.append([p if p != "0" else "none", system, *cells, mean, f"{cpu:.1f}"])
    return markdown_table(header, rows)


def candidate_table(before: dict, after: dict) -> str:
    """Two suite runs side by side on the tasks the second ran (no stopping, then the candidate): each trained
    system's validation and test accuracy and CPU-minutes, before -> after."""
    rows = []
    for name, task in after["tasks"].items():
        for system in STOPPING_METRIC:
            old, new = before["tasks"][name]["systems"][system], task["systems"][system]
            rows.append(
                [
                    name,
                    system,
                    *[
                        f"{old[split]['accuracy']:.3f} → {new[split]['accuracy']:.3f}"
                        for split in ("validation", "test")
                    ],
                    f"{old['cpu_minutes']:.1f} → {new['cpu_minutes']:.1f}",
                ]
            )
    return markdown_table(["task", "system", "validation", "test", "CPU-min"], rows, "llrrr")


if __name__ == "__main__":
    main()
