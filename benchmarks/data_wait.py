"""Does the data loader keep up? The share of pretraining step time spent waiting for batches (`data_wait` in
metrics.jsonl, `train_data_wait` in the results: see `loop.DataWait`) with 1 and 2 processes.

    python -m benchmarks.data_wait                                  # 1 and 2 processes, 3 runs each
    python -m benchmarks.data_wait --steps 20 --repeats 1           # a quick look

Each run is `minibert pretrain` with the default model and recipe on BBC News for --steps steps (one tokenizer,
trained once and given to every run, and one pass of NSP pairs, `--dupe_factor 1`, so that a run starts quickly),
one torch thread per process, the batches collated in the training process (`--dataloader_num_workers 0`, the
default). The global batch is the same for both: 2 processes of 32 examples a step, or 1 process with 2
micro-batches of 32 (gradient accumulation). 2 processes run as DDP over gloo (`accelerate launch --multi_gpu`).
Runs alternate (1, 2, 2, 1, ...); the machine may be shared, so each count's median and range over the runs are
given, and each run's 1-minute load when it started. Writes --output (default runs/benchmarks/data_wait.json) and
a PNG beside it: the share per logging window along each run, and each run's share of its session.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import ROOT, command_line, default_output, markdown_table, write_results

GOAL = 0.05  # the data wait the issue asks for: under 5% of step time
GLOBAL_BATCH_MICRO_BATCHES = 2  # micro-batches of 32 in each optimizer step, shared among the processes


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pretrain_command(
    processes: int, out: Path, tokenizer: Path, steps: int, logging_steps: int, workers: int, corpus: str | None
) -> list[str]:
    launcher = [sys.executable, "-m", "modeling_minibert.cli"]
    if processes > 1:
        launcher = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),
            "-m",
            "modeling_minibert.cli",
        ]
    return [
        *launcher,
        "pretrain",
        "--output_dir",
        str(out),
        "--tokenizer_name",
        str(tokenizer),
        "--max_steps",
        str(steps),
        "--logging_steps",
        str(logging_steps),
        "--save_steps",
        str(steps),
        "--eval_steps",
        str(steps),
        "--gradient_accumulation_steps",
        str(GLOBAL_BATCH_MICRO_BATCHES // processes),
        "--dataloader_num_workers",
        str(workers),
        "--num_threads",
        "1",
        "--dupe_factor",
        "1",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        *(["--train_file", corpus] if corpus else []),
    ]


def one_run(processes: int, work: Path, tokenizer: Path, options: DataWaitArguments) -> dict:
    out = Path(tempfile.mkdtemp(dir=work)) / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    load = os.getloadavg()[0]
    command = pretrain_command(
        processes,
        out,
        tokenizer,
        options.steps,
        options.logging_steps,
        options.dataloader_num_workers,
        options.train_file,
    )
    result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{command} failed: {result.stderr[-3000:]}")
    train = json.loads((out / "train_results.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    windows = [{"step": r["step"], "data_wait": r["data_wait"]} for r in records if "data_wait" in r]
    return {
        "processes": processes,
        "load_at_start": round(load, 2),
        "steps_per_second": train["train_steps_per_second"],
        "data_wait": train["train_data_wait"],
        "windows": windows,
    }


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for processes in sorted({r["processes"] for r in runs}):
        mine = [r for r in runs if r["processes"] == processes]
        waits = [r["data_wait"] for r in mine]
        rows.append(
            {
                "processes": processes,
                "micro_batches_per_process": GLOBAL_BATCH_MICRO_BATCHES // processes,
                "runs": len(mine),
                "median_data_wait": statistics.median(waits),
                "range": [min(waits), max(waits)],
                "worst_window": max(w["data_wait"] for r in mine for w in r["windows"]),
                "median_steps_per_second": statistics.median(r["steps_per_second"] for r in mine),
            }
        )
    return rows


def readme_table(results: dict) -> str:
    rows = [
        [
            str(r["processes"]),
            str(r["micro_batches_per_process"]),
            f"{r['median_steps_per_second']:.2f}",
            f"**{100 * r['median_data_wait']:.1f}%** ({100 * r['range'][0]:.1f}–{100 * r['range'][1]:.1f}%)",
            f"{100 * r['worst_window']:.1f}%",
            str(r["runs"]),
        ]
        for r in results["summary"]
    ]
    header = [
        "processes",
        "micro-batches of 32 per process and step",
        "steps/s (median)",
        "data wait, share of step time (range)",
        "worst logging window",
        "runs",
    ]
    return markdown_table(header, rows, "rrrrrr")


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.6))
    windows, sessions = figure.subplots(1, 2)
    colours = {1: "tab:blue", 2: "tab:orange"}
    for run in results["runs"]:
        colour = colours.get(run["processes"], "tab:grey")
        windows.plot(
            [w["step"] for w in run["windows"]],
            [100 * w["data_wait"] for w in run["windows"]],
            marker="o",
            markersize=3,
            color=colour,
            alpha=0.7,
        )
    for processes, colour in colours.items():
        windows.plot([], [], color=colour, label=f"{processes} process(es)")
        shares = [100 * r["data_wait"] for r in results["runs"] if r["processes"] == processes]
        sessions.plot([processes] * len(shares), shares, "o", color=colour, alpha=0.7)
    for axis in (windows, sessions):
        axis.axhline(100 * GOAL, color="tab:red", linestyle="--", linewidth=1, label="goal: 5%")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    windows.set(
        xlabel="step (end of the logging window)", ylabel="% of step time waiting for data", title="Per logging window"
    )
    sessions.set(
        xlabel="processes", ylabel="% of step time waiting for data", title="Per run", xticks=[1, 2], xlim=(0.5, 2.5)
    )
    windows.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


@dataclass
class DataWaitArguments:
    processes: list[int] = field(default_factory=lambda: [1, 2], metadata={"choices": [1, 2]})
    steps: int = field(default=60, metadata={"help": "training steps per run"})
    logging_steps: int = field(default=10, metadata={"help": "steps per logging window"})
    repeats: int = field(default=3, metadata={"help": "runs per number of processes, alternating"})
    dataloader_num_workers: int = field(default=0, metadata={"help": "`minibert pretrain`'s option, for every run"})
    train_file: str | None = field(default=None, metadata={"help": "a text file instead of BBC News (a quick test)"})
    output: str = field(
        default=str(default_output("data_wait")), metadata={"help": "the results JSON (a PNG beside it)"}
    )


def main(argv: list[str] | None = None) -> None:
    (options,) = parser(DataWaitArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    from modeling_minibert.training.pretraining.data import load_documents, split_documents
    from tokenization import train_tokenizer

    work = Path(tempfile.mkdtemp(prefix="data-wait-"))
    tokenizer = work / "tokenizer"
    train_docs, _ = split_documents(load_documents([options.train_file] if options.train_file else None), 0.05, 42)
    train_tokenizer(
        train_data=train_docs, vocab_size=8192, output_dir=tokenizer, disable_tqdm=True, model_max_length=64
    )
    runs = []
    for repeat in range(options.repeats):
        order = options.processes if repeat % 2 == 0 else options.processes[::-1]
        for processes in order:
            run = one_run(processes, work, tokenizer, options)
            print(json.dumps({k: v for k, v in run.items() if k != "windows"}), flush=True)
            runs.append(run)
    results = {
        "steps": options.steps,
        "logging_steps": options.logging_steps,
        "dataloader_num_workers": options.dataloader_num_workers,
        "threads_per_process": 1,
        "global_batch": 32 * GLOBAL_BATCH_MICRO_BATCHES,
        "goal": GOAL,
        "runs": runs,
        "summary": summarise(runs),
    }
    output = write_results(options.output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(readme_table(results))
    print(f"wrote {output} and {output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
