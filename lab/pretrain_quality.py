"""Time to quality: `minibert pretrain` against transformers' `BertForPreTraining` + `Trainer`, same budget.

    python -m lab.pretrain_quality                               # 5, 10 and 15 minutes, side by side (35 min)
    python -m lab.pretrain_quality --budgets 5 10 15 --repeats 2 # repeats: machine noise shows
    python -m lab.pretrain_quality --sequential                  # one run at a time, all cores each (about 1 h)
    python -m lab.pretrain_quality --budgets 0.25 --output /tmp/pq/pretrain_quality.json   # a smoke run

Both sides get the same things: the BBC News corpus, one WordPiece tokenizer (trained once on the training
documents), the same held-out documents, the same 64-token NSP pairs (`build_nsp_dataset`), the same masking
(`DataCollatorForPreTraining`, transformers' MLM masking at 15%), the same sizes (hidden 192, 3 layers, 4 heads,
FFN 768, no dropout while pretraining), the same recipe (RECIPE below: `minibert pretrain`'s defaults) and the
same wall-clock budget for training, with the learning-rate schedule fitted to that budget. Each budget is its own
run, as a user who says "train for 10 minutes" gets it.
- Mini-BERT: `minibert pretrain` as a subprocess, with `--max_time` (minutes): it fits its schedule to the budget.
- transformers: `BertForPreTraining(config, attn_implementation="sdpa")` trained by `Trainer` (fused AdamW, the
  same linear schedule), in a subprocess too. `Trainer` has no time budget: its `max_steps` is set from a short
  calibration run's steps/s, and a callback stops it if the budget runs out first.
Both saved models are then scored by this script on the same held-out batches and masks: MLM accuracy over the
masked tokens, NSP accuracy over the pairs.

By default the two systems of a budget train side by side, each pinned to its own core with one torch thread
(`taskset`, OMP_NUM_THREADS=1; the cores swap every run): whatever else the shared machine does hits both at the
same time, and a budget costs its minutes once. `--sequential` runs one at a time with every core instead, the
order alternating between budgets and repeats.

Writes --output (default runs/benchmarks/pretrain_quality.json: report.py's `run` block, the runs and their
medians) and a PNG beside it (accuracy against wall-clock minutes); the table is `readme_table` of the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
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
from modeling_minibert.training import PretrainingArguments

_DEFAULTS = PretrainingArguments()
SEED = _DEFAULTS.seed
HELD_OUT_FRACTION = _DEFAULTS.held_out_fraction
MAX_LENGTH = _DEFAULTS.max_seq_length
VOCAB_SIZE = _DEFAULTS.vocab_size
EVAL_BATCH_SIZE = 64
# The recipe both sides train with: `minibert pretrain`'s defaults, read from PretrainingArguments so that they
# cannot drift. The warmup is the CLI's fixed number of steps (capped at the run's steps, as the CLI caps it).
RECIPE = {
    name: getattr(_DEFAULTS, name)
    for name in (
        "per_device_train_batch_size",
        "learning_rate",
        "lr_scheduler_type",
        "warmup_steps",
        "weight_decay",
        "max_grad_norm",
        "mlm_probability",
        "dupe_factor",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "pretraining_dropout",
    )
}
MODEL_SIZES = dict(
    hidden_size=192,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=768,
    max_position_embeddings=MAX_LENGTH,
)

# `minibert pretrain` flags (HELPERS.md, contract 7) for what the benchmark sets, in ONE place; each is checked
# against `pretrain --help` before any run (`cli_flags`).
PRETRAIN_FLAGS = {
    "output_dir": "--output_dir",
    "overwrite": "--overwrite_output_dir",
    "tokenizer": "--tokenizer_name",
    "max_length": "--max_seq_length",
    "mlm_probability": "--mlm_probability",
    "dupe_factor": "--dupe_factor",
    "batch_size": "--per_device_train_batch_size",
    "learning_rate": "--learning_rate",
    "lr_scheduler_type": "--lr_scheduler_type",
    "weight_decay": "--weight_decay",
    "warmup_steps": "--warmup_steps",
    "max_grad_norm": "--max_grad_norm",
    "adam_beta1": "--adam_beta1",
    "adam_beta2": "--adam_beta2",
    "adam_epsilon": "--adam_epsilon",
    "pretraining_dropout": "--pretraining_dropout",
    "max_steps": "--max_steps",
    "max_time": "--max_time",
    "eval_steps": "--eval_steps",
    "save_steps": "--save_steps",
    "logging_steps": "--logging_steps",
    "seed": "--seed",
    "held_out_fraction": "--validation_split_percentage",
    "report_to": "--report_to",
    "quiet": "--disable_tqdm",
}
NEVER = 10**7  # eval_steps / save_steps: no evaluation or checkpoint inside the budget, only at the end


# --- shared data ---------------------------------------------------------------------------------------------


def documents() -> tuple[list[str], list[str]]:
    from modeling_minibert.training.pretraining.data import load_documents, split_documents

    return split_documents(load_documents(None), HELD_OUT_FRACTION, SEED)


def make_tokenizer(folder: Path) -> None:
    from tokenization import train_tokenizer

    train_docs, _ = documents()
    train_tokenizer(
        train_data=train_docs, vocab_size=VOCAB_SIZE, output_dir=folder, disable_tqdm=True, model_max_length=MAX_LENGTH
    )


def datasets_for(tokenizer_dir: Path):
    """(training pairs, held-out pairs) exactly as `minibert pretrain` builds them."""
    from modeling_minibert.training.pretraining.data import build_nsp_dataset
    from tokenization import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    train_docs, held_out_docs = documents()
    train_set = build_nsp_dataset(train_docs, tokenizer, MAX_LENGTH, SEED, RECIPE["dupe_factor"])
    eval_set = build_nsp_dataset(held_out_docs, tokenizer, MAX_LENGTH, SEED + 1)
    return tokenizer, train_set, eval_set


def score(model_dir: Path, kind: str, tokenizer_dir: Path) -> dict:
    """Held-out MLM accuracy (masked tokens, 15%) and NSP accuracy of a saved model, on fixed batches and masks."""
    import torch
    from torch.utils.data import DataLoader

    from modeling_minibert.training.pretraining.data import DataCollatorForPreTraining

    if kind == "minibert":
        from modeling_minibert import MiniBertForPreTraining as Model
    else:
        from transformers import BertForPreTraining as Model
    model = Model.from_pretrained(model_dir).eval()
    tokenizer, _, eval_set = datasets_for(tokenizer_dir)
    collator = DataCollatorForPreTraining(tokenizer, 0.15, whole_word_mask=False, seed=SEED + 1)
    mlm_correct = mlm_count = nsp_correct = n = 0
    with torch.no_grad():
        for batch in DataLoader(eval_set, batch_size=EVAL_BATCH_SIZE, collate_fn=collator):
            out = model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"],
            )
            selected = batch["labels"] != -100
            mlm_correct += (out.prediction_logits[selected].argmax(-1) == batch["labels"][selected]).sum().item()
            mlm_count += selected.sum().item()
            nsp_correct += (out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum().item()
            n += len(batch["next_sentence_label"])
    return {
        "eval_mlm_accuracy": mlm_correct / mlm_count,
        "eval_nsp_accuracy": nsp_correct / n,
        "held_out_pairs": n,
        "held_out_masked_tokens": mlm_count,
    }


# --- Mini-BERT: the CLI --------------------------------------------------------------------------------------


def pretrain_command() -> list[str]:
    return [sys.executable, "-m", "modeling_minibert.cli", "pretrain"]


def cli_flags() -> dict[str, str]:
    """PRETRAIN_FLAGS, once `pretrain --help` of this checkout is seen to list every one of them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    help_text = subprocess.run([*pretrain_command(), "--help"], env=env, capture_output=True, text=True).stdout
    listed = set(re.findall(r"--[\w-]+", help_text))
    missing = sorted(flag for flag in PRETRAIN_FLAGS.values() if flag not in listed)
    if missing:
        raise SystemExit(f"lab.pretrain_quality: error: `minibert pretrain --help` lists no {', '.join(missing)}")
    return dict(PRETRAIN_FLAGS)


def minibert_args(flags: dict, values: dict) -> list[str]:
    args = []
    for meaning, value in values.items():
        flag = flags[meaning]
        if meaning == "held_out_fraction":
            value = value * 100
        if value is True:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args


def pinned(core: int | None) -> tuple[list[str], dict]:
    """Command prefix and environment of a worker: on one core with one thread, or (None) on the whole machine."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    if core is None:
        return [], env
    return ["taskset", "-c", str(core)], {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_minibert(
    budget_minutes: float, work: Path, tokenizer_dir: Path, flags: dict, log, core: int | None = None
) -> dict:
    out = work / f"minibert-{budget_minutes}"
    recipe = {("batch_size" if k == "per_device_train_batch_size" else k): v for k, v in RECIPE.items()}
    values = dict(
        output_dir=out,
        overwrite=True,
        tokenizer=tokenizer_dir,
        max_length=MAX_LENGTH,
        **recipe,
        # The CLI fits its schedule to the budget (max_steps stays its upper bound) and evaluates and saves once,
        # when the budget runs out.
        max_time=budget_minutes,
        eval_steps=NEVER,
        save_steps=NEVER,
        logging_steps=10,
        seed=SEED,
        held_out_fraction=HELD_OUT_FRACTION,
        report_to="none",
        quiet=True,
    )
    prefix, env = pinned(core)
    started = time.perf_counter()
    subprocess.run(
        [*prefix, *pretrain_command(), *minibert_args(flags, values)], env=env, check=True, stdout=log, stderr=log
    )
    wall = time.perf_counter() - started
    summary = read_summary(out)
    return {
        "model_dir": str(out),
        "steps": last_step(out),
        "train_seconds": summary["train_runtime"],
        "process_seconds": wall,
        "own_eval": {k: v for k, v in summary.items() if k.startswith("eval_") or k == "perplexity"},
    }


def read_summary(folder: Path) -> dict:
    from modeling_minibert.utils.outputs import ALL_RESULTS_FILE

    return json.loads((folder / ALL_RESULTS_FILE).read_text())


def last_step(folder: Path) -> int:
    """The run's last optimizer step, from its history (metrics.jsonl: one record per logging/eval step)."""
    from modeling_minibert.utils.outputs import METRICS_FILE

    return max(json.loads(line)["step"] for line in (folder / METRICS_FILE).read_text().splitlines())


# --- transformers: BertForPreTraining + Trainer ----------------------------------------------------------------


def hf_worker(spec: dict) -> dict:
    """Train transformers' BERT with Trainer for the budget (in this subprocess), save it, return the timing."""
    import torch
    from transformers import BertConfig, BertForPreTraining, Trainer, TrainerCallback, TrainingArguments

    from modeling_minibert.training.pretraining.data import DataCollatorForPreTraining

    tokenizer_dir, out, budget = Path(spec["tokenizer_dir"]), Path(spec["output_dir"]), spec["budget_minutes"] * 60
    tokenizer, train_set, _ = datasets_for(tokenizer_dir)
    collator = DataCollatorForPreTraining(tokenizer, RECIPE["mlm_probability"], seed=SEED, plan_batches=False)

    class NewMasksEachEpoch(TrainerCallback):
        """The collator draws its masks from (seed, epoch, example ids): tell it the epoch, as pretrain does."""

        def on_epoch_begin(self, args, state, control, **kwargs):
            collator.epoch = int(state.epoch or 0)

    class StopAtBudget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - self.started >= budget:
                control.should_training_stop = True

    def trainer(max_steps: int, output_dir: Path) -> Trainer:
        torch.manual_seed(SEED)
        dropout = RECIPE["pretraining_dropout"]
        config = BertConfig(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            attn_implementation="sdpa",
            **MODEL_SIZES,
        )
        model = BertForPreTraining(config)
        assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
        args = TrainingArguments(
            output_dir=str(output_dir),
            max_steps=max_steps,
            per_device_train_batch_size=RECIPE["per_device_train_batch_size"],
            learning_rate=RECIPE["learning_rate"],
            weight_decay=RECIPE["weight_decay"],
            warmup_steps=min(RECIPE["warmup_steps"], max_steps),
            lr_scheduler_type=RECIPE["lr_scheduler_type"],
            max_grad_norm=RECIPE["max_grad_norm"],
            adam_beta1=RECIPE["adam_beta1"],
            adam_beta2=RECIPE["adam_beta2"],
            adam_epsilon=RECIPE["adam_epsilon"],
            optim="adamw_torch_fused",
            logging_steps=50,
            save_strategy="no",
            eval_strategy="no",
            report_to=[],
            seed=SEED,
            data_seed=SEED,
            dataloader_drop_last=True,
            remove_unused_columns=False,  # the collator needs example_id and special_tokens_mask
            disable_tqdm=True,
            use_cpu=True,
        )
        return Trainer(
            model=model,
            args=args,
            train_dataset=train_set,
            data_collator=collator,
            callbacks=[NewMasksEachEpoch(), StopAtBudget()],
        )

    torch.set_flush_denormal(True)  # as pretrain does: denormals in AdamW's second moment are slow on CPU
    # Trainer has no time budget: measure its steps/s on a short run, then fit max_steps (and the schedule) to it.
    calib_steps = 40
    calibration = trainer(calib_steps, out.parent / "hf-calibration")
    started = time.perf_counter()
    calibration.train()
    rate = calib_steps / (time.perf_counter() - started)
    steps = max(10, int(rate * budget))
    run = trainer(steps, out)
    result = run.train()
    run.save_model(str(out))
    return {
        "steps": run.state.global_step,
        "planned_steps": steps,
        "train_seconds": result.metrics["train_runtime"],
        "calibrated_steps_per_second": rate,
    }


def run_hf(budget_minutes: float, work: Path, tokenizer_dir: Path, log, core: int | None = None) -> dict:
    out = work / f"transformers-{budget_minutes}"
    spec = {"tokenizer_dir": str(tokenizer_dir), "output_dir": str(out), "budget_minutes": budget_minutes}
    prefix, env = pinned(core)
    started = time.perf_counter()
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", __spec__.name, "--hf_worker", json.dumps(spec)],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    timing = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"model_dir": str(out), **timing, "process_seconds": time.perf_counter() - started}


# --- report --------------------------------------------------------------------------------------------------


def summarize(runs: list[dict]) -> list[dict]:
    table = []
    for budget in sorted({r["budget_minutes"] for r in runs}):
        for system in ("minibert", "transformers"):
            these = [r for r in runs if r["budget_minutes"] == budget and r["system"] == system and "error" not in r]
            if not these:
                continue
            row = {"budget_minutes": budget, "system": system, "runs": len(these)}
            for key in ("eval_mlm_accuracy", "eval_nsp_accuracy", "steps"):
                values = [r[key] for r in these]
                row[key] = statistics.median(values)
                row[f"{key}_range"] = [min(values), max(values)]
            table.append(row)
    return table


def readme_table(results: dict) -> str:
    """The README's time-to-quality table from a results file of this script (its `table` of medians)."""
    header = ["budget (min)", "system", "runs", "steps", "held-out MLM acc. (range)", "NSP acc. (range)"]
    names = {
        "minibert": "Mini-BERT (`minibert pretrain`)",
        "transformers": "transformers BertForPreTraining + Trainer",
    }
    rows = []
    for r in results["table"]:
        mlm, nsp = r["eval_mlm_accuracy_range"], r["eval_nsp_accuracy_range"]
        rows.append(
            [
                f"{r['budget_minutes']:g}",
                names.get(r["system"], r["system"]),
                str(r["runs"]),
                f"{r['steps']:.0f}",
                f"{r['eval_mlm_accuracy']:.3f} ({mlm[0]:.3f}-{mlm[1]:.3f})",
                f"{r['eval_nsp_accuracy']:.3f} ({nsp[0]:.3f}-{nsp[1]:.3f})",
            ]
        )
    return markdown_table(header, rows, "rlrrrr")


def plot(runs: list[dict], table: list[dict], path: Path, mode: str = "") -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    styles = {
        "minibert": ("Mini-BERT (minibert pretrain)", "tab:blue"),
        "transformers": ("transformers BertForPreTraining + Trainer", "tab:orange"),
    }
    for ax, key, title in zip(
        axes,
        ("eval_mlm_accuracy", "eval_nsp_accuracy"),
        ("held-out MLM accuracy (15% masking)", "held-out NSP accuracy"),
    ):
        for system, (label, color) in styles.items():
            points = [r for r in runs if r["system"] == system and "error" not in r]
            if not points:
                continue
            ax.scatter([r["budget_minutes"] for r in points], [r[key] for r in points], color=color, alpha=0.4, s=18)
            medians = [r for r in table if r["system"] == system]
            ax.plot([r["budget_minutes"] for r in medians], [r[key] for r in medians], "o-", color=color, label=label)
        ax.set(
            xlabel=f"training wall-clock budget (minutes; {mode or f'{os.cpu_count()} CPU cores'})",
            ylabel="accuracy",
            title=title,
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@dataclass
class QualityArguments:
    budgets: list[float] = field(
        default_factory=lambda: [5.0, 10.0, 15.0], metadata={"help": "wall-clock minutes of training"}
    )
    repeats: int = field(default=1, metadata={"help": "rounds over all budgets (interleaved)"})
    systems: list[str] = field(
        default_factory=lambda: ["minibert", "transformers"], metadata={"choices": ["minibert", "transformers"]}
    )
    output: str = field(default=str(default_output("pretrain_quality")), metadata={"help": "the results JSON"})
    sequential: bool = field(
        default=False,
        metadata={"help": "one run at a time on every core (default: the two systems side by side, a core each)"},
    )
    hf_worker: str | None = field(default=None, metadata={"help": argparse.SUPPRESS})


def main(argv: list[str] | None = None) -> int:
    built = parser(QualityArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    if args.hf_worker:
        print(json.dumps(hf_worker(json.loads(args.hf_worker))))
        return 0
    if any(b <= 0 for b in args.budgets) or args.repeats < 1:
        built.error("budgets must be positive and repeats at least 1")
    side_by_side = not args.sequential and len(args.systems) == 2
    if side_by_side and (os.cpu_count() or 1) < 2:
        built.error("side-by-side runs need 2 cores; pass --sequential")

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    flags = cli_flags()
    runs: list[dict] = []
    record = {
        "recipe": RECIPE,
        "model_sizes": MODEL_SIZES,
        "minibert_flags": flags,
        "mode": "side by side, one core and one thread each" if side_by_side else "sequential, every core",
        "runs": runs,
    }
    log_dir = output.parent / "pretrain_quality_logs"  # a folder: results/*/ is git-ignored, the JSON is not
    log_dir.mkdir(exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="pretrain-quality-") as tmp,
        (log_dir / "pretrain_quality.log").open("w") as log,
    ):
        work = Path(tmp)
        tokenizer_dir = work / "tokenizer"
        make_tokenizer(tokenizer_dir)

        def train(system: str, budget: float, core: int | None) -> dict:
            try:
                if system == "minibert":
                    return run_minibert(budget, work, tokenizer_dir, flags, log, core)
                return run_hf(budget, work, tokenizer_dir, log, core)
            except subprocess.CalledProcessError as err:
                return {"error": f"exit {err.returncode}; see {log.name}"}

        k = 0
        for repeat in range(args.repeats):
            for budget in args.budgets:
                systems = args.systems if k % 2 == 0 else args.systems[::-1]  # alternate who goes first / which core
                k += 1
                started = datetime.datetime.now().isoformat(timespec="seconds")
                if side_by_side:
                    with ThreadPoolExecutor(max_workers=2) as pool:
                        trained = list(pool.map(train, systems, [budget] * 2, [0, 1]))
                else:
                    trained = [train(system, budget, None) for system in systems]
                # Scored after both have finished, so that scoring never runs beside the other's training.
                for core, (system, result) in enumerate(zip(systems, trained)):
                    if "error" not in result:
                        result.update(score(Path(result.pop("model_dir")), system, tokenizer_dir))
                        shutil.rmtree(work / f"{system}-{budget}", ignore_errors=True)
                    runs.append(
                        {
                            "system": system,
                            "budget_minutes": budget,
                            "repeat": repeat,
                            "started": started,
                            "core": core if side_by_side else None,
                            "load_average": os.getloadavg()[0],
                            **result,
                        }
                    )
                    print(
                        f"{system} {budget:g} min (repeat {repeat + 1}): "
                        + (
                            result.get("error")
                            or f"MLM {result['eval_mlm_accuracy']:.3f}, NSP {result['eval_nsp_accuracy']:.3f}, "
                            f"{result['steps']} steps in {result['train_seconds']:.0f} s"
                        ),
                        flush=True,
                    )
                record["table"] = summarize(runs)
                write_results(
                    output, record, command_line(__spec__.name, argv)
                )  # after every budget: an interrupted benchmark keeps what it measured
    plot(runs, record["table"], output.with_suffix(".png"), record["mode"])
    print(readme_table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
