"""Threads on a busy machine: the default pretraining run's speed with torch's default thread count (one per
core) against `--num_threads` 0 (auto: one per core idle now, by /proc/stat over 0.3 s), idle and beside a busy core.

    python -m lab.pretrain_threads --before REF [--steps 200] [--repeats 2]

REF is a git revision whose `minibert pretrain` has no thread policy (e.g. `main` before it got one); its tree is
exported to a temporary folder and run with the same interpreter. Each run is `minibert pretrain --max_steps
STEPS` with the default recipe on BBC News (one tokenizer, trained once, given to every run, and one pass of NSP
pairs, `--dupe_factor 1`, so that the runs spend their time training: a step costs the same either way), and its
speed is the run's own `train_steps_per_second` (steps over the session, the evaluation and
checkpoint at the end included, the same for both). Runs are interleaved (before, after, after, before, ...) and
repeated, busy runs beside a `python -c 'while True: pass'` process; the table gives each one's median and
range, and each run the machine's 1-minute load and the cores other processes kept busy when it started. Writes
--output (default runs/benchmarks/pretrain_threads.json).
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
from benchmarks.report import ROOT as REPO
from benchmarks.report import command_line, default_output, write_results


def export_revision(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def one_run(code: Path, work: Path, tokenizer: Path, steps: int, spin: bool) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # each version picks its own threads
    env["PYTHONPATH"] = str(code)
    from modeling_minibert.training.pretraining.session import busy_cores, usable_cores  # this tree's

    busy = busy_cores(usable_cores())  # what the rest of the machine holds, before this run's spinner starts
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if spin else None
    try:
        load = os.getloadavg()[0]
        command = [
            sys.executable,
            "-m",
            "modeling_minibert.cli",
            "pretrain",
            "--output_dir",
            str(out / "run"),
            "--tokenizer_name",
            str(tokenizer),
            "--max_steps",
            str(steps),
            "--report_to",
            "none",
            "--dupe_factor",
            "1",
            "--disable_tqdm",
            "true",
        ]
        result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if result.returncode:
        raise RuntimeError(f"{command} failed: {result.stderr[-2000:]}")
    results = json.loads((out / "run" / "all_results.json").read_text())
    threads = next((line for line in result.stdout.splitlines() if "thread(s)" in line), "")
    return {
        "steps_per_second": results["train_steps_per_second"],
        "load_at_start": round(load, 2),
        "other_busy_cores_at_start": None if busy is None else round(busy, 2),
        "threads": threads.rsplit("), ", 1)[-1] if threads else "torch default",
    }


@dataclass
class ThreadsArguments:
    before: str = field(metadata={"help": "git revision without the thread policy"})
    steps: int = 200
    repeats: int = 2
    output: str = field(default=str(default_output("pretrain_threads")), metadata={"help": "the results JSON"})


def main(argv: list[str] | None = None) -> None:
    (options,) = parser(ThreadsArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    work = Path(tempfile.mkdtemp(prefix="pretrain-threads-"))
    codes = {"before": export_revision(options.before, Path(tempfile.mkdtemp(dir=work))), "after": REPO}
    from modeling_minibert.training.pretraining.data import load_bbc_news, split_documents
    from tokenization import train_tokenizer

    tokenizer = work / "tokenizer"
    train_docs, _ = split_documents(load_bbc_news(), 0.05, 42)
    train_tokenizer(
        train_data=train_docs, vocab_size=8192, output_dir=tokenizer, disable_tqdm=True, model_max_length=64
    )
    runs: list[dict] = []
    for repeat in range(options.repeats):
        for busy in (False, True):
            order = ("before", "after") if (repeat + busy) % 2 == 0 else ("after", "before")
            for version in order:
                run = {
                    "version": version,
                    "busy_core": busy,
                    **one_run(codes[version], work, tokenizer, options.steps, busy),
                }
                print(json.dumps(run), flush=True)
                runs.append(run)
    summary = []
    for busy in (False, True):
        for version in ("before", "after"):
            rates = [r["steps_per_second"] for r in runs if r["version"] == version and r["busy_core"] == busy]
            summary.append(
                {
                    "version": version,
                    "busy_core": busy,
                    "median_steps_per_second": statistics.median(rates),
                    "range": [min(rates), max(rates)],
                }
            )
    write_results(
        options.output,
        {"steps": options.steps, "before": options.before, "runs": runs, "summary": summary},
        command_line(__spec__.name, argv),
    )
    print("| version | busy core | steps/s (median) | range |\n| --- | --- | ---: | --- |")
    for row in summary:
        print(
            f"| {row['version']} | {'yes' if row['busy_core'] else 'no'} | {row['median_steps_per_second']:.2f} | "
            f"{row['range'][0]:.2f}-{row['range'][1]:.2f} |"
        )


if __name__ == "__main__":
    main()
