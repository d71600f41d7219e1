"""The GPU check's report (benchmarks/gpu_check.sh): what its pretraining runs did (runs.json beside its other
results), and the tables its summary.txt ends with.

    python -m benchmarks.gpu_check_report --out OUT                          # the tables of OUT's results
    python -m benchmarks.gpu_check_report --out OUT --record RUN             # RUN's numbers into OUT/runs.json
    python -m benchmarks.gpu_check_report --out OUT --record RUN --resumes WHOLE   # and whether resumed RUN
                                                                                   # continued WHOLE's curve

A resumed run continues the uninterrupted curve when it logs the same steps with losses within 1e-3 (relative)
and accuracies within 2e-3 (absolute, a token or two of a logging window's): on a GPU, attention's backward is not
deterministic, so the two runs part by rounding after the resume, which a tolerance of 1e-4 does not allow for.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser

RUNS_FILE = "runs.json"
SPEED_FILE = "gpu_speed.json"
LOSS_RTOL = 1e-3
ACCURACY_ATOL = 2e-3
TIMINGS = ("data_wait",)  # measured times, which differ between any two runs


def records(folder: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMINGS}
        for line in (folder / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]


def run_numbers(folder: Path) -> dict:
    """A finished run's speed and last numbers, or what is missing."""
    train = folder / "train_results.json"
    if not train.is_file():
        return {"run": folder.name, "finished": False}
    numbers = json.loads(train.read_text())
    keep = ("train_steps_per_second", "train_samples_per_second", "train_data_wait", "train_runtime", "train_loss")
    evaluated = (
        json.loads((folder / "eval_results.json").read_text()) if (folder / "eval_results.json").is_file() else {}
    )
    return {
        "run": folder.name,
        "finished": True,
        **{k: numbers.get(k) for k in keep},
        **{k: v for k, v in evaluated.items() if k.startswith("eval_")},
    }


def same_curve(resumed: Path, whole: Path) -> dict:
    """How far the resumed run's records are from the uninterrupted run's, and whether within the tolerances."""
    ours, theirs = records(resumed), records(whole)
    steps_match = [r["step"] for r in ours] == [r["step"] for r in theirs]
    loss_gap = accuracy_gap = 0.0
    for a, b in zip(ours, theirs):
        for key, value in b.items():
            if key == "step" or not isinstance(value, float) or not isinstance(a.get(key), float):
                continue
            if "accuracy" in key:
                accuracy_gap = max(accuracy_gap, abs(a[key] - value))
            else:
                loss_gap = max(loss_gap, abs(a[key] - value) / max(abs(value), 1e-12))
    same = steps_match and loss_gap <= LOSS_RTOL and accuracy_gap <= ACCURACY_ATOL
    return {
        "resumes": whole.name,
        "same_curve": same,
        "same_steps": steps_match,
        "largest_loss_gap": loss_gap,
        "largest_accuracy_gap": accuracy_gap,
        "tolerances": {"loss_rtol": LOSS_RTOL, "accuracy_atol": ACCURACY_ATOL},
    }


def record(out: Path, folder: Path, whole: Path | None) -> dict:
    """Add (or replace) `folder`'s entry in OUT/runs.json, written whole each time (a cut check keeps the others)."""
    path = out / RUNS_FILE
    runs = json.loads(path.read_text()) if path.is_file() else {}
    entry = run_numbers(folder)
    if whole is not None:
        entry.update(same_curve(folder, whole))
    runs[folder.name] = entry
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(runs, indent=2) + "\n")
    os.replace(tmp, path)
    return entry


def tables(out: Path) -> str:
    lines = []
    speed = out / SPEED_FILE
    if speed.is_file():
        from benchmarks.gpu_speed import readme_table

        results = json.loads(speed.read_text())
        device = results["device"]
        datasheet = f"{device['peak_bf16_flops'] / 1e12:.0f} TFLOP/s" if device["peak_bf16_flops"] else "unknown"
        lines += [
            f"\n{device['name']}, {results['precision']}; matmul measured "
            f"{device['measured_matmul_flops'] / 1e12:.1f} TFLOP/s, datasheet {datasheet}; parts done: "
            f"{results.get('parts_done')}"
        ]
        if results["rows"]:
            lines.append(readme_table(results))
        step = results["step_8x64"]
        lines.append(f"8 x 64 step: {step['variants_milliseconds']} (goal {step['goal_milliseconds']} ms)")
    runs = out / RUNS_FILE
    if runs.is_file():
        for name, entry in json.loads(runs.read_text()).items():
            text = (
                f"{name}: {entry.get('train_steps_per_second')} steps/s, data wait {entry.get('train_data_wait')}"
                if entry.get("finished")
                else f"{name}: did not finish"
            )
            if "same_curve" in entry:
                verdict = "continues" if entry["same_curve"] else "DIFFERS FROM"
                text += (
                    f"; {verdict} {entry['resumes']}'s curve (largest loss gap {entry['largest_loss_gap']:.1e}, "
                    f"accuracy gap {entry['largest_accuracy_gap']:.1e})"
                )
            lines.append(text)
    return "\n".join(lines)


@dataclass
class ReportArguments:
    out: str = field(metadata={"help": "the check's results folder ($OUT)"})
    record: str | None = field(default=None, metadata={"help": "a run folder to add to runs.json"})
    resumes: str | None = field(
        default=None,
        metadata={"help": "the uninterrupted run that --record resumed (exit 1 unless it continued its curve)"},
    )


def main(argv: list[str] | None = None) -> int:
    (args,) = parser(ReportArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    out = Path(args.out)
    if args.record is None:
        print(tables(out))
        return 0
    entry = record(out, Path(args.record), Path(args.resumes) if args.resumes else None)
    print(json.dumps(entry))
    return 0 if entry.get("finished") and entry.get("same_curve", True) else 1


if __name__ == "__main__":
    sys.exit(main())
