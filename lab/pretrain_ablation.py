"""Ablation of the pretraining recipe: which changes to the default `minibert pretrain` buy held-out quality.

    python -m lab.pretrain_ablation                        # every row, 1,000 steps x 32 examples, 2 at a time
    python -m lab.pretrain_ablation --rows default lr_2e-3 --steps 2500
    python -m lab.pretrain_ablation --timing_rounds 3 --rows mask_0.30 batch_16 pre_ln   # steps/s ratios apart
    python -m lab.pretrain_ablation --report --steps 500   # rewrite the JSON from saved results, print the table

Every row trains for the same number of examples (steps x batch) and is scored the same way: held-out MLM
accuracy always at 15% token masking on the same held-out documents and masks (a row that trains at 40% or with
whole-word masking is scored like one at 15%), NSP on the same held-out 64-token pairs (a row that trains on longer
sequences is still evaluated on those). The table's steps/s is each row's own run (evaluation and checkpoints
excluded): compare rows run side by side on a quiet machine. `--timing_rounds` measures speed apart instead, in
short interleaved rounds against the default (ratios, median and range), for a machine too noisy for that.

Each run is a subprocess (`--worker`), with OMP_NUM_THREADS=1 when two run side by side. Rows differ from the
default only in what their `overrides` say; `vocab_size` rows change the task (a smaller vocabulary makes MLM
accuracy easier), which the table flags. The pre-LayerNorm rows use the config's `layer_norm_position="pre"`
(through `config_overrides`). Row overrides are `minibert pretrain` arguments (modeling_minibert.training.pretraining).

Writes --output (default runs/benchmarks/pretrain_ablation.json; rows, commands, and report.py's `run` block),
keeping the rows of an existing file; the ablation table is `readme_table` of that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import ROOT, command_line, default_output, markdown_table, write_results
from lab.pretrain_ablation_rows import ROWS, SAME_WORK, batch_size, run_kwargs

EVAL_MAX_LENGTH = 64  # the held-out pairs every row is scored on
TIMING_FILE = "pretrain_ablation_timing.json"  # the default's 100 of 2,500 steps; rows keep the fraction when the step count changes


# --- the worker: one run in this process ---------------------------------------------------------------------


def _score_on_64_token_pairs() -> None:
    """Rows trained on longer sequences are evaluated on the default's held-out 64-token pairs."""
    from modeling_minibert.training.pretraining import loop
    from modeling_minibert.training.pretraining.examples import PretrainingExamples, example_index

    build = loop.run_data

    def run_data(corpus, tokenizer, max_length=64, seed=42, *args, **kwargs):
        data = build(corpus, tokenizer, max_length, seed, *args, **kwargs)
        held_out = example_index(data.corpus, data.held_out_ids, EVAL_MAX_LENGTH, seed + 1, 1, 0.5)
        data.eval_set = PretrainingExamples(data.corpus, held_out, tokenizer)
        return data

    loop.run_data = run_data


def _exclude_eval_and_save_time() -> dict:
    """Time spent evaluating and checkpointing, to subtract from the loop's time in timing runs."""
    from modeling_minibert.training.pretraining import loop, run_folder

    spent = {"seconds": 0.0}
    for module, name in ((loop, "evaluate"), (run_folder, "save_checkpoint")):
        original = getattr(module, name)

        def timed(*args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent["seconds"] += time.perf_counter() - start

        setattr(module, name, timed)
    return spent


def worker(spec: dict) -> dict:
    if spec["kwargs"].get("dupe_factor", 5) == 1 and spec["kwargs"].get("max_seq_length", 64) != EVAL_MAX_LENGTH:
        raise ValueError("a dupe_factor=1 row cannot change max_seq_length (the held-out set is told apart by it)")
    _score_on_64_token_pairs()
    spent = _exclude_eval_and_save_time()
    from modeling_minibert.training.pretraining import pretrain

    summary = pretrain(**spec["kwargs"])
    result = result_of_run(Path(summary["output_dir"]), batch_size(spec["kwargs"]))
    result["steps_per_second"] = summary["steps_this_session"] / (summary["train_runtime"] - spent["seconds"])
    return result


def result_of_run(folder: Path, batch_size: int) -> dict:
    """A row's numbers from a finished run's folder (all_results.json and metrics.jsonl)."""
    from modeling_minibert.utils.outputs import ALL_RESULTS_FILE, METRICS_FILE

    curve = [json.loads(line) for line in (folder / METRICS_FILE).read_text().splitlines()]
    evaluations = [r for r in curve if "eval_mlm_accuracy" in r]
    evals = [{k: r[k] for k in ("step", "eval_mlm_accuracy", "eval_nsp_accuracy")} for r in evaluations]
    last = evaluations[-1]
    if not (folder / ALL_RESULTS_FILE).is_file():
        # A run that stopped after its last evaluation but before saving (e.g. its ablation process was stopped).
        return {
            "steps": last["step"],
            "train_examples_seen": last["step"] * batch_size,
            "train_pairs": None,
            "held_out_pairs": None,
            "epochs": None,
            "eval_mlm_accuracy": last["eval_mlm_accuracy"],
            "perplexity": last.get("perplexity"),
            "eval_nsp_accuracy": last["eval_nsp_accuracy"],
            "steps_per_second": None,
            "wall_seconds": None,
            "eval_curve": evals,
        }
    summary = json.loads((folder / ALL_RESULTS_FILE).read_text())
    return {
        "steps": last["step"],
        "train_examples_seen": last["step"] * batch_size,
        "train_pairs": summary["train_samples"],
        "held_out_pairs": summary["eval_samples"],
        "epochs": summary["epoch"],
        "eval_mlm_accuracy": summary["eval_mlm_accuracy"],
        "eval_mlm_loss": summary["eval_mlm_loss"],
        "perplexity": summary["perplexity"],
        "eval_nsp_accuracy": summary["eval_nsp_accuracy"],
        # Includes evaluation and checkpoint time when read from a folder (the worker subtracts them).
        "steps_per_second": summary["train_steps_per_second"],
        "wall_seconds": summary["train_runtime"],
        "eval_curve": evals,
    }


def timing_worker(name: str, steps: int, warmup_steps: int = 5) -> dict:
    """Steps/s of a row's training step (collate, forward, backward, clip, AdamW), on synthetic full-length pairs.

    Only what a row changes in the work matters here (masked rows, batch, length, vocabulary, block order), so the
    text is synthetic: random ids in the row's vocabulary, ~75% of tokens starting a word.
    """
    import random

    import torch

    from modeling_minibert import MiniBertForPreTraining
    from modeling_minibert.training import PretrainingArguments
    from modeling_minibert.training.pretraining.data import DataCollatorForPreTraining
    from modeling_minibert.training.pretraining.loop import build_config
    from modeling_minibert.training.pretraining.optimization import param_groups
    from tokenization import make_tokenizer

    kwargs, _ = run_kwargs(name, steps, "unused")
    args = PretrainingArguments(**{k: v for k, v in kwargs.items() if k != "max_steps"}, max_steps=steps)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(args.vocab_size - 5)]
    tokenizer = make_tokenizer({t: i for i, t in enumerate(vocab)})
    config = build_config(args)
    config.vocab_size, config.hidden_dropout_prob, config.attention_probs_dropout_prob = len(tokenizer), 0.0, 0.0
    rng = random.Random(0)
    half = (args.max_seq_length - 3) // 2
    examples = [
        {
            "input_ids": [
                2,
                *(rng.randrange(5, len(tokenizer)) for _ in range(half)),
                3,
                *(rng.randrange(5, len(tokenizer)) for _ in range(args.max_seq_length - 3 - half)),
                3,
            ],
            "token_type_ids": [0] * (half + 2) + [1] * (args.max_seq_length - 2 - half),
            "special_tokens_mask": [1] + [0] * half + [1] + [0] * (args.max_seq_length - 3 - half) + [1],
            "word_starts": [0] + [int(rng.random() < 0.75) for _ in range(args.max_seq_length - 2)] + [0],
            "next_sentence_label": rng.randrange(2),
            "example_id": k,
        }
        for k in range(args.per_device_train_batch_size * 8)
    ]
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    model = MiniBertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.learning_rate, fused=True)
    collator = DataCollatorForPreTraining(tokenizer, args.mlm_probability, args.whole_word_mask)
    started = 0.0
    for step in range(warmup_steps + steps):
        if step == warmup_steps:
            started = time.perf_counter()
        first = (step % 8) * args.per_device_train_batch_size
        collator.epoch = step
        batch = collator(examples[first : first + args.per_device_train_batch_size])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {
        "steps_per_second": steps / (time.perf_counter() - started),
        "batch_size": args.per_device_train_batch_size,
    }


def launch(name: str, steps: int, threads: int, eval_steps: int | None, log_dir: Path) -> dict:
    """Run one row in a subprocess; its result (or the tail of its error)."""
    with tempfile.TemporaryDirectory(prefix=f"ablation-{name}-") as tmp:
        extra = {"eval_steps": eval_steps} if eval_steps else {}
        kwargs, switches = run_kwargs(name, steps, tmp, extra)
        kwargs.setdefault("eval_steps", kwargs["max_steps"])
        kwargs.setdefault("logging_steps", 10)
        kwargs["save_steps"] = (
            kwargs["max_steps"] - kwargs["max_steps"] % kwargs["logging_steps"] or kwargs["logging_steps"]
        )
        spec = {"kwargs": kwargs, "switches": switches}
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(threads),
            "PYTHONPATH": str(ROOT),
            "TOKENIZERS_PARALLELISM": "false",
        }
        log = log_dir / f"{name}-{steps}.log"
        with log.open("w") as f:
            proc = subprocess.run(
                [sys.executable, "-m", __spec__.name, "--worker", json.dumps(spec)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=f,
                text=True,
            )
        if proc.returncode:
            tail = log.read_text().strip().splitlines()[-3:]
            return {"error": " | ".join(tail) or f"exit status {proc.returncode}", "kwargs": kwargs}
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        kwargs.pop("output_dir")
        return {**result, "kwargs": kwargs, "switches": switches}


# --- the table -----------------------------------------------------------------------------------------------

VOCAB_FLAG = " (other vocabulary: MLM accuracy not comparable)"


def _ordered(rows: list[dict]) -> list[dict]:
    order = list(ROWS)
    return sorted(rows, key=lambda r: (r["budget_steps"], order.index(r["row"]) if r["row"] in order else len(order)))


def readme_table(results: dict) -> str:
    """The README's ablation table from a results file of this script: each row's held-out scores and its own
    training steps/s (evaluation and checkpoints excluded; one thread, two runs side by side on 2 cores)."""
    header = ["change", "steps x batch", "held-out MLM acc.", "NSP acc.", "steps/s", "examples/s"]
    lines = []
    for row in _ordered(results["rows"]):
        change = row["change"] + (VOCAB_FLAG if row.get("switches", {}).get("vocab_changed") else "")
        if "error" in row:
            lines.append([change, "failed: " + row["error"][:80].replace("|", "/"), "", "", "", ""])
            continue
        rate = row.get("steps_per_second")
        lines.append(
            [
                change,
                f"{row['steps']} x {batch_size(row['kwargs'])}",
                f"{row['eval_mlm_accuracy']:.3f}",
                f"{row['eval_nsp_accuracy']:.3f}",
                f"{rate:.2f}" if rate else "",
                f"{rate * batch_size(row['kwargs']):.0f}" if rate else "",
            ]
        )
    return markdown_table(header, lines, "lrrrrr")


@dataclass
class AblationArguments:
    rows: list[str] = field(
        default_factory=lambda: list(ROWS),
        metadata={"choices": list(ROWS), "metavar": "ROW", "help": f"rows to run (default: all): {', '.join(ROWS)}"},
    )
    steps: int = field(
        default=1000, metadata={"help": "optimizer steps at batch 32 (rows with another batch size keep the examples)"}
    )
    eval_steps: int | None = field(
        default=None, metadata={"help": "held-out evaluation every N steps (default: at the end)"}
    )
    jobs: int = field(default=2, metadata={"help": "runs side by side (each with OMP_NUM_THREADS=1 when > 1)"})
    timing_rounds: int = field(
        default=0,
        metadata={"help": "instead of quality runs: rounds of interleaved speed runs of --rows and the default"},
    )
    timing_steps: int = field(default=40, metadata={"help": "timed steps of each speed run"})
    collect: list[str] | None = field(
        default=None,
        metadata={
            "metavar": ("ROW", "FOLDER"),
            "help": "add the finished run in FOLDER (e.g. one whose ablation process was stopped) as ROW",
        },
    )
    report: bool = field(
        default=False, metadata={"help": "only rewrite the JSON from the saved results (and print its table)"}
    )
    timing_threads: int = field(default=1, metadata={"help": "OMP threads of each speed run"})
    output: str = field(
        default=str(default_output("pretrain_ablation")),
        metadata={"help": "results JSON (rows of an existing file are kept unless re-run)"},
    )
    worker: str | None = field(default=None, metadata={"help": argparse.SUPPRESS})
    timing_worker: str | None = field(default=None, metadata={"help": argparse.SUPPRESS})


def main(argv: list[str] | None = None) -> int:
    built = parser(AblationArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    if args.collect is not None and len(args.collect) != 2:
        built.error("--collect takes a row and a folder: --collect ROW FOLDER")
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.timing_worker:
        print(json.dumps(timing_worker(args.timing_worker, args.timing_steps)))
        return 0

    command = command_line(__spec__.name, argv)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    log_dir = output.parent / "pretrain_ablation_logs"
    log_dir.mkdir(exist_ok=True)
    saved = json.loads(output.read_text()) if output.is_file() else {}
    results = {(r["row"], r["budget_steps"]): r for r in saved.get("rows", [])}
    threads = 1 if args.jobs > 1 else (os.cpu_count() or 1)

    def quality(name: str) -> dict:
        started = time.time()
        result = launch(name, args.steps, threads, args.eval_steps, log_dir)
        result.update(row=name, change=ROWS[name][0], budget_steps=args.steps, threads=threads)
        status = result.get("error") or (
            f"MLM {result['eval_mlm_accuracy']:.3f}, NSP {result['eval_nsp_accuracy']:.3f}, "
            f"{result['steps_per_second']:.2f} steps/s"
        )
        print(f"{name} ({args.steps} steps): {status} [{time.time() - started:.0f} s]", flush=True)
        return result

    if args.collect:
        results[(args.collect[0], args.steps)] = collected(*args.collect, args.steps)
    quality_rows = [] if (args.report or args.timing_rounds or args.collect) else args.rows
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result in pool.map(quality, quality_rows):
            results[(result["row"], args.steps)] = result
            write(output, results, command)  # after every row: an interrupted ablation keeps what it measured

    if args.timing_rounds:
        timing(args, output.with_name(TIMING_FILE), command)
    print(readme_table(write(output, results, command)))
    return 0


def collected(name: str, folder: str, steps: int) -> dict:
    """The row `name` read from the finished run in `folder`; SystemExit if the run is not that row's."""
    kwargs, switches = run_kwargs(name, steps, folder)
    result = result_of_run(Path(folder), batch_size(kwargs))
    saved_args = json.loads((Path(folder) / "pretraining_args.json").read_text())
    ignored = ("output_dir", "eval_steps", "save_steps", "logging_steps", "save_total_limit")
    differing = {
        k: saved_args.get(k) for k, v in kwargs.items() if k in saved_args and k not in ignored and saved_args[k] != v
    }
    if differing:
        raise SystemExit(f"{folder} is not a run of row {name}: it differs in {differing}")
    if result["steps"] != kwargs["max_steps"]:
        raise SystemExit(
            f"{folder} ran {result['steps']} steps; row {name} at --steps {steps} has {kwargs['max_steps']}"
        )
    kwargs.pop("output_dir")
    return {
        **result,
        "kwargs": kwargs,
        "switches": switches,
        "row": name,
        "change": ROWS[name][0],
        "budget_steps": steps,
        "threads": 1,
        "collected_from_folder": True,
    }


def timing(args: AblationArguments, path: Path, command: str) -> None:
    """Interleaved rounds, one run at a time, order reversed every round; ratios to the default of the same round."""
    names = ["default", *[n for n in args.rows if n != "default" and n not in SAME_WORK]]
    saved = json.loads(path.read_text()) if path.is_file() else {}
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": str(args.timing_threads),
    }
    rates: dict[str, list[float]] = {n: [] for n in names}
    for round_ in range(args.timing_rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    __spec__.name,
                    "--timing_worker",
                    name,
                    "--timing_steps",
                    str(args.timing_steps),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rates[name].append(json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_second"])
        print(f"timing round {round_ + 1}: " + ", ".join(f"{n} {r[-1]:.2f}" for n, r in rates.items()), flush=True)
    for name in names[1:]:
        ratios = [r / d for r, d in zip(rates[name], rates["default"])]
        saved[name] = {
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "ratios": ratios,
            "steps_per_second": rates[name],
            "default_steps_per_second": rates["default"],
        }
    saved["_measured"] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "rounds": args.timing_rounds,
        "timed_steps": args.timing_steps,
        "threads": args.timing_threads,
        "load_average": os.getloadavg()[0],
        "command": command,
    }
    write_results(path, {k: v for k, v in saved.items() if k != "run"}, command)


# Rows whose step is another row's step (only the optimizer's numbers differ): timed as that row.
# batch_16_mask_0.30 is approximated by batch_16 (the 30% masking step measured within noise of the default's).
TIMED_AS = {
    "pre_ln_lr_2e-3": "pre_ln",
    "pre_ln_lr_4e-3": "pre_ln",
    "pre_ln_lr_4e-3_warmup_10pct": "pre_ln",
    "mask_0.15_lr_2e-3_warmup_10pct": "mask_0.15",
    "batch_64_lr_2e-3": "batch_64",
    "batch_16_mask_0.30": "batch_16",
}


def attach_timing(rows: list[dict], path: Path) -> None:
    saved = json.loads(path.read_text()) if path.is_file() else {}
    saved.update({row: saved[timed] for row, timed in TIMED_AS.items() if timed in saved})
    for row in rows:
        if row["row"] == "default":
            row["timing"] = {"ratio_median": 1.0, "ratio_min": 1.0, "ratio_max": 1.0}
        elif row["row"] in SAME_WORK:
            row["timing"] = {
                "ratio_median": 1.0,
                "ratio_min": 1.0,
                "ratio_max": 1.0,
                "note": "the same computation as the default",
            }
        elif row["row"] in saved:
            row["timing"] = saved[row["row"]]


def write(output: Path, results: dict, command: str) -> dict:
    # Another ablation process may have added rows since this one started: keep them (ours win on a clash).
    previous = json.loads(output.read_text()) if output.is_file() else {}
    on_disk = {(r["row"], r["budget_steps"]): r for r in previous.get("rows", [])}
    results = {**on_disk, **results}
    commands = [c for c in previous.get("commands", []) if c != command] + [command]
    rows = _ordered(list(results.values()))
    attach_timing(rows, output.with_name(TIMING_FILE))
    timing_file = output.with_name(TIMING_FILE)
    record = {
        "commands": commands,  # every command that added to this file, the last one last
        "notes": (
            "quality at a fixed number of examples (steps x batch = budget_steps x 32), held-out MLM accuracy at 15% "
            "token masking and NSP accuracy on the same held-out 64-token pairs for every row; timing ratios from "
            "separate interleaved runs"
        ),
        "timing_run": json.loads(timing_file.read_text()).get("_measured") if timing_file.is_file() else None,
        "rows": rows,
    }
    # Notes added by hand (status, partial rows) stay; the machine and versions are report.py's `run` block now
    # (files written before it had them at the top level).
    record.update(
        {
            k: v
            for k, v in previous.items()
            if k not in record and k not in ("command", "run", "date", "cpu_count", "versions")
        }
    )
    write_results(output, record, command)
    return record


if __name__ == "__main__":
    sys.exit(main())
