"""The default `minibert pretrain`, as the README's first command runs it, measured and recorded.

    python -m benchmarks.pretrain_default                      # the defaults (BBC News), into a temporary folder
    python -m benchmarks.pretrain_default -- --max_time 60     # anything after -- goes to `minibert pretrain`
    python -m benchmarks.pretrain_default --beside_busy_core   # with another process spinning on one core

Writes --output (default runs/benchmarks/pretrain_default.json): the command, wall-clock minutes, steps/s, the
final held-out scores, the evaluation curve, and fill-mask's top predictions on a few sentences; and a PNG of the
held-out curves beside it. The pretraining figures are `readme_table()` of that file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import command_line, default_output, markdown_table, write_results

PROBES = [
    "the government said the [MASK] would rise next year.",
    "the film won an [MASK] for best actress.",
    "shares in the company [MASK] sharply on monday.",
]


def fill_mask(folder: Path) -> dict[str, list[str]]:
    from modeling_minibert.deployment import fill_mask as predict

    return {probe: [p["token_str"] for p in predict(folder, probe, top_k=5)] for probe in PROBES}


def plot(curve: list[dict], path: Path, minutes_per_step: float | None = None) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.5))
    axis = figure.add_subplot()
    steps = [r["step"] for r in curve]
    for key, label in (("eval_mlm_accuracy", "held-out MLM accuracy"), ("eval_nsp_accuracy", "held-out NSP accuracy")):
        axis.plot(steps, [r[key] for r in curve], marker="o", markersize=3, label=label)
    axis.set_xlabel("step")
    if minutes_per_step:  # wall-clock minutes at the run's mean rate (train_runtime / steps, evaluations included)
        top = axis.secondary_xaxis("top", functions=(lambda s: s * minutes_per_step, lambda m: m / minutes_per_step))
        top.set_xlabel("minutes (at the run's mean rate)")
    axis.set_ylim(0, 1)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.savefig(path, dpi=120, bbox_inches="tight")


@dataclass
class PretrainDefaultArguments:
    """The benchmark's options; `minibert pretrain`'s go after `--`, as they are."""

    output: str = field(default=str(default_output("pretrain_default")), metadata={"help": "the results JSON"})
    output_dir: str | None = field(
        default=None, metadata={"help": "keep the pretrained model here (default: a temporary folder)"}
    )
    beside_busy_core: bool = field(
        default=False,
        metadata={
            "help": "run with a process spinning on one core (`python -c 'while True: pass'`), as on a busy machine"
        },
    )


def parse_options(argv: list[str] | None) -> tuple[PretrainDefaultArguments, list[str]]:
    """The benchmark's options, and the `minibert pretrain` arguments after `--`."""
    built = parser(PretrainDefaultArguments, module=__spec__.name, doc=__doc__)
    args, rest = built.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if rest and rest[0] != "--":
        built.error(f"unknown option(s) {' '.join(rest)}: `minibert pretrain`'s go after --")
    return args, rest[1:]


def main(argv: list[str] | None = None) -> None:
    args, pretrain_args = parse_options(argv)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.output_dir or Path(tmp) / "minibert-pretrained")
        command = [
            sys.executable,
            "-m",
            "modeling_minibert.cli",
            "pretrain",
            "--output_dir",
            str(folder),
            "--report_to",
            "none",
            *pretrain_args,
        ]
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.beside_busy_core else None
        try:
            start = time.perf_counter()
            threads = run_and_read_threads(command)
            minutes = (time.perf_counter() - start) / 60
        finally:
            if spinner:
                spinner.kill()
        results = json.loads((folder / "all_results.json").read_text())
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        curve = [r for r in records if "eval_mlm_accuracy" in r]
        predictions = fill_mask(folder)
    output = Path(args.output)
    write_results(
        output,
        dict(
            pretrain_args=pretrain_args,
            beside_busy_core=args.beside_busy_core,
            threads=threads,
            wall_minutes=minutes,
            results=results,
            curve=curve,
            fill_mask=predictions,
        ),
        command_line(__spec__.name, argv),
    )
    steps = curve[-1]["step"] if curve else 0
    plot(curve, output.with_suffix(".png"), results["train_runtime"] / 60 / steps if steps else None)
    print(readme_table(json.loads(output.read_text())))


def run_and_read_threads(command: list[str]) -> str:
    """Run `minibert pretrain`, echoing its output, and return what its first line says about its threads."""
    threads = ""
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            if not threads and "thread(s)" in line:
                threads = line.rsplit("process(es), ", 1)[-1].strip()
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    return threads


def readme_table(results: dict) -> str:
    r = results["results"]
    steps = r.get("train_steps") or r.get("global_step") or (results["curve"][-1]["step"] if results["curve"] else 0)
    row = [
        " ".join(["`minibert pretrain`", *results["pretrain_args"]]),
        f"{results['wall_minutes']:.1f}",
        f"{steps:,}",
        f"{r['eval_mlm_accuracy']:.3f}",
        f"{r['perplexity']:.0f}" if "perplexity" in r else "",
        f"{r['eval_nsp_accuracy']:.3f}" if "eval_nsp_accuracy" in r else "",
        "; ".join(
            f"{probe.replace('[MASK]', '__')} → {', '.join(top[:3])}" for probe, top in results["fill_mask"].items()
        ),
    ]
    header = ["run", "minutes", "steps", "held-out MLM accuracy", "perplexity", "NSP accuracy", "fill-mask top 3"]
    return markdown_table(header, [row], "lrrrrrl")


if __name__ == "__main__":
    main()
