"""Time to quality: `minibert pretrain` against transformers' `BertForPreTraining` + `Trainer`, same budget.

    python benchmarks/pretrain_quality.py                               # 5, 10 and 15 minutes, once each (about 1 h)
    python benchmarks/pretrain_quality.py --budgets 5 10 15 --repeats 2 # interleaved repeats: machine noise shows
    python benchmarks/pretrain_quality.py --budgets 0.5 1               # a smoke run

Both sides get the same things: the BBC News corpus, one WordPiece tokenizer (trained once on the training
documents), the same held-out documents, the same 64-token NSP pairs (`build_nsp_dataset`), the same masking
(`DataCollatorForPreTraining`, transformers' MLM masking at 15%), the same sizes (hidden 192, 3 layers, 4 heads,
FFN 768, no dropout while pretraining), the same recipe (RECIPE below) and the same wall-clock budget for
training, with the learning-rate schedule fitted to that budget. Each budget is its own run, as a user who says
"train for 10 minutes" gets it.
- Mini-BERT: `minibert pretrain` as a subprocess, with `--max_time` (minutes) when the CLI has it.
- transformers: `BertForPreTraining(config, attn_implementation="sdpa")` trained by `Trainer` (fused AdamW, the
  same linear schedule), in a subprocess too. `Trainer` has no time budget: its `max_steps` is set from a short
  calibration run's steps/s, and a callback stops it if the budget runs out first.
Both saved models are then scored by this script on the same held-out batches and masks: MLM accuracy over the
masked tokens, NSP accuracy over the pairs. Runs are sequential (each gets the whole machine) and interleaved, the
order alternating between budgets and repeats.

Writes benchmarks/results/pretrain_quality.json and pretrain_quality.png (accuracy against wall-clock minutes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from modeling_minibert.files import write_json, write_text  # noqa: E402  (this checkout's package)
SEED = 42
HELD_OUT_FRACTION = 0.05
MAX_LENGTH = 64
VOCAB_SIZE = 8192
EVAL_BATCH_SIZE = 64
# The recipe both sides train with (the `minibert pretrain` defaults; keep in step with them).
RECIPE = dict(
    batch_size=32, learning_rate=1e-3, warmup_fraction=0.04, weight_decay=0.01, max_grad_norm=1.0,
    mlm_probability=0.15, dupe_factor=5, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-6,
)
MODEL_SIZES = dict(hidden_size=192, num_hidden_layers=3, num_attention_heads=4, intermediate_size=768,
                   max_position_embeddings=MAX_LENGTH)

# `minibert pretrain` flags (HELPERS.md, contract 7), in ONE place. Each entry: what the benchmark sets -> the flag,
# or None when the CLI has no such flag (the value then stays the CLI's default). The second column is today's
# CLI (before the flags were renamed), used when `pretrain --help` does not list `--max_seq_length`.
PRETRAIN_FLAGS = {
    #  meaning              contract 7                       CLI before the rename
    "output_dir":          ("--output_dir",                  "--output_dir"),
    "overwrite":           ("--overwrite_output_dir",        "--overwrite"),
    "tokenizer":           ("--tokenizer_name",              "--tokenizer"),
    "max_length":          ("--max_seq_length",              "--max_length"),
    "mlm_probability":     ("--mlm_probability",             "--mlm_probability"),
    "dupe_factor":         ("--dupe_factor",                 "--dupe_factor"),
    "batch_size":          ("--per_device_train_batch_size", "--batch_size"),
    "learning_rate":       ("--learning_rate",               "--learning_rate"),
    "weight_decay":        ("--weight_decay",                "--weight_decay"),
    "warmup_steps":        ("--warmup_steps",                "--warmup_steps"),
    "max_steps":           ("--max_steps",                   "--max_steps"),
    "max_time":            ("--max_time",                    None),
    "eval_steps":          ("--eval_steps",                  "--eval_steps"),
    "save_steps":          ("--save_steps",                  "--save_steps"),
    "logging_steps":       ("--logging_steps",               "--logging_steps"),
    "seed":                ("--seed",                        "--seed"),
    "held_out_fraction":   ("--validation_split_percentage", "--held_out_fraction"),
    "quiet":               ("--disable_tqdm",                "--no_show_progress"),
}
NEVER = 10**7  # eval_steps / save_steps: no evaluation or checkpoint inside the budget, only at the end


# --- shared data ---------------------------------------------------------------------------------------------

def documents() -> tuple[list[str], list[str]]:
    from modeling_minibert.pretraining_data import load_documents, split_documents

    return split_documents(load_documents(None), HELD_OUT_FRACTION, SEED)


def make_tokenizer(folder: Path) -> None:
    from tokenization import train_tokenizer

    train_docs, _ = documents()
    train_tokenizer(train_docs, vocab_size=VOCAB_SIZE, output_dir=folder, show_progress=False,
                    model_max_length=MAX_LENGTH)


def datasets_for(tokenizer_dir: Path):
    """(training pairs, held-out pairs) exactly as `minibert pretrain` builds them."""
    from modeling_minibert.pretraining_data import build_nsp_dataset
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

    from modeling_minibert.pretraining_data import DataCollatorForPreTraining

    if kind == "minibert":
        from modeling_minibert.modeling_minibert import MiniBertForPreTraining as Model
    else:
        from transformers import BertForPreTraining as Model
    model = Model.from_pretrained(model_dir).eval()
    tokenizer, _, eval_set = datasets_for(tokenizer_dir)
    collator = DataCollatorForPreTraining(tokenizer, 0.15, whole_word_mask=False, seed=SEED + 1)
    mlm_correct = mlm_count = nsp_correct = n = 0
    with torch.no_grad():
        for batch in DataLoader(eval_set, batch_size=EVAL_BATCH_SIZE, collate_fn=collator):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        token_type_ids=batch["token_type_ids"])
            selected = batch["labels"] != -100
            mlm_correct += (out.prediction_logits[selected].argmax(-1) == batch["labels"][selected]).sum().item()
            mlm_count += selected.sum().item()
            nsp_correct += (out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum().item()
            n += len(batch["next_sentence_label"])
    return {"eval_mlm_accuracy": mlm_correct / mlm_count, "eval_nsp_accuracy": nsp_correct / n,
            "held_out_pairs": n, "held_out_masked_tokens": mlm_count}


# --- Mini-BERT: the CLI --------------------------------------------------------------------------------------

def pretrain_command() -> list[str]:
    return [sys.executable, "-m", "modeling_minibert.cli", "pretrain"]


def cli_flags() -> dict[str, str | None]:
    """Flag names of the CLI in this checkout: contract 7's, or the ones from before the rename; None for a flag
    that this CLI does not have (its default is then used)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    help_text = subprocess.run([*pretrain_command(), "--help"], env=env, capture_output=True, text=True).stdout
    column = 0 if "--max_seq_length" in help_text else 1
    flags = {meaning: names[column] for meaning, names in PRETRAIN_FLAGS.items()}
    listed = set(re.findall(r"--[\w-]+", help_text))
    return {meaning: flag if flag in listed else None for meaning, flag in flags.items()}


def minibert_args(flags: dict, values: dict) -> list[str]:
    args = []
    for meaning, value in values.items():
        flag = flags[meaning]
        if flag is None:
            continue
        if meaning == "held_out_fraction" and flag == "--validation_split_percentage":
            value = round(value * 100)
        if value is True:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args


def run_minibert(budget_minutes: float, work: Path, tokenizer_dir: Path, flags: dict, log) -> dict:
    out = work / f"minibert-{budget_minutes}"
    values = dict(
        output_dir=out, overwrite=True, tokenizer=tokenizer_dir, max_length=MAX_LENGTH,
        mlm_probability=RECIPE["mlm_probability"], dupe_factor=RECIPE["dupe_factor"], batch_size=RECIPE["batch_size"],
        learning_rate=RECIPE["learning_rate"], weight_decay=RECIPE["weight_decay"], eval_steps=NEVER,
        logging_steps=10, seed=SEED, held_out_fraction=HELD_OUT_FRACTION, quiet=True,
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    calibration = None
    if flags["max_time"] is not None:
        # The CLI fits its schedule to the budget; the warmup stays the recipe's fraction of the expected steps.
        # The CLI fits its schedule (and its default warmup) to the budget.
        values.update(max_time=budget_minutes, save_steps=NEVER)
    else:
        calibration = calibrate_minibert(work, flags, values, env, log)
        steps = max(10, int(calibration * budget_minutes * 60))
        values.update(max_steps=steps, save_steps=steps - steps % 10,
                      warmup_steps=round(RECIPE["warmup_fraction"] * steps))
    started = time.perf_counter()
    subprocess.run([*pretrain_command(), *minibert_args(flags, values)], env=env, check=True, stdout=log, stderr=log)
    wall = time.perf_counter() - started
    summary = read_summary(out)
    return {
        "steps": summary.get("steps") or summary.get("train_steps"),
        "train_seconds": summary.get("seconds_this_session") or summary.get("train_runtime"),
        "process_seconds": wall,
        "calibrated_steps_per_second": calibration,
        "own_eval": {k: v for k, v in summary.items() if k.startswith("eval_")},
        **score(out, "minibert", tokenizer_dir),
    }


def calibrate_minibert(work: Path, flags: dict, values: dict, env: dict, log) -> float:
    out = work / "minibert-calibration"
    calib = {**values, "output_dir": out, "max_steps": 40, "save_steps": 40, "warmup_steps": 4}
    subprocess.run([*pretrain_command(), *minibert_args(flags, calib)], env=env, check=True, stdout=log, stderr=log)
    return read_summary(out)["steps_per_second"]


def read_summary(folder: Path) -> dict:
    for name in ("all_results.json", "pretraining_results.json"):
        if (folder / name).is_file():
            return json.loads((folder / name).read_text())
    raise FileNotFoundError(f"no results file in {folder}")


# --- transformers: BertForPreTraining + Trainer ----------------------------------------------------------------

def hf_worker(spec: dict) -> dict:
    """Train transformers' BERT with Trainer for the budget (in this subprocess), save it, return the timing."""
    import torch
    from transformers import BertConfig, BertForPreTraining, Trainer, TrainerCallback, TrainingArguments

    from modeling_minibert.pretraining_data import DataCollatorForPreTraining

    tokenizer_dir, out, budget = Path(spec["tokenizer_dir"]), Path(spec["output_dir"]), spec["budget_minutes"] * 60
    tokenizer, train_set, _ = datasets_for(tokenizer_dir)
    collator = DataCollatorForPreTraining(tokenizer, RECIPE["mlm_probability"], seed=SEED)

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
        config = BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, attn_implementation="sdpa", **MODEL_SIZES)
        model = BertForPreTraining(config)
        assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
        args = TrainingArguments(
            output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=RECIPE["batch_size"],
            learning_rate=RECIPE["learning_rate"], weight_decay=RECIPE["weight_decay"],
            warmup_steps=max(1, round(RECIPE["warmup_fraction"] * max_steps)), lr_scheduler_type="linear",
            max_grad_norm=RECIPE["max_grad_norm"], adam_beta1=RECIPE["adam_beta1"], adam_beta2=RECIPE["adam_beta2"],
            adam_epsilon=RECIPE["adam_epsilon"], optim="adamw_torch_fused", logging_steps=50, save_strategy="no",
            eval_strategy="no", report_to=[], seed=SEED, data_seed=SEED, dataloader_drop_last=True,
            remove_unused_columns=False,  # the collator needs example_id and special_tokens_mask
            disable_tqdm=True, use_cpu=True,
        )
        return Trainer(model=model, args=args, train_dataset=train_set, data_collator=collator,
                       callbacks=[NewMasksEachEpoch(), StopAtBudget()])

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
    return {"steps": run.state.global_step, "planned_steps": steps, "train_seconds": result.metrics["train_runtime"],
            "calibrated_steps_per_second": rate}


def run_hf(budget_minutes: float, work: Path, tokenizer_dir: Path, log) -> dict:
    out = work / f"transformers-{budget_minutes}"
    spec = {"tokenizer_dir": str(tokenizer_dir), "output_dir": str(out), "budget_minutes": budget_minutes}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--hf_worker", json.dumps(spec)], env=env, check=True,
                          stdout=subprocess.PIPE, stderr=log, text=True)
    timing = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**timing, "process_seconds": time.perf_counter() - started, **score(out, "transformers", tokenizer_dir)}


# --- report --------------------------------------------------------------------------------------------------

def versions() -> dict:
    import accelerate
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "tokenizers": tokenizers.__version__}


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


def markdown(table: list[dict]) -> str:
    lines = ["| budget (min) | system | steps | held-out MLM acc. (range) | NSP acc. (range) |", "|---:|---|---:|---:|---:|"]
    for r in table:
        mlm, nsp = r["eval_mlm_accuracy_range"], r["eval_nsp_accuracy_range"]
        lines.append(
            f"| {r['budget_minutes']:g} | {r['system']} | {r['steps']:.0f} | {r['eval_mlm_accuracy']:.3f} "
            f"({mlm[0]:.3f}-{mlm[1]:.3f}) | {r['eval_nsp_accuracy']:.3f} ({nsp[0]:.3f}-{nsp[1]:.3f}) |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], table: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    styles = {"minibert": ("Mini-BERT (minibert pretrain)", "tab:blue"),
              "transformers": ("transformers BertForPreTraining + Trainer", "tab:orange")}
    for ax, key, title in zip(axes, ("eval_mlm_accuracy", "eval_nsp_accuracy"), ("held-out MLM accuracy (15% masking)", "held-out NSP accuracy")):
        for system, (label, color) in styles.items():
            points = [r for r in runs if r["system"] == system and "error" not in r]
            if not points:
                continue
            ax.scatter([r["budget_minutes"] for r in points], [r[key] for r in points], color=color, alpha=0.4, s=18)
            medians = [r for r in table if r["system"] == system]
            ax.plot([r["budget_minutes"] for r in medians], [r[key] for r in medians], "o-", color=color, label=label)
        ax.set(xlabel=f"training wall-clock budget (minutes, {os.cpu_count()} CPU cores)", ylabel="accuracy", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", nargs="+", type=float, default=[5, 10, 15], help="wall-clock minutes of training")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over all budgets (interleaved)")
    parser.add_argument("--systems", nargs="+", default=["minibert", "transformers"], choices=["minibert", "transformers"])
    parser.add_argument("--output", default=str(RESULTS / "pretrain_quality.json"))
    parser.add_argument("--hf_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hf_worker:
        print(json.dumps(hf_worker(json.loads(args.hf_worker))))
        return 0
    if any(b <= 0 for b in args.budgets) or args.repeats < 1:
        raise SystemExit("pretrain_quality.py: error: budgets must be positive and repeats at least 1")

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    flags = cli_flags()
    runs: list[dict] = []
    record = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "cpu_count": os.cpu_count(),
              "versions": versions(), "recipe": RECIPE, "model_sizes": MODEL_SIZES, "minibert_flags": flags,
              "runs": runs}
    with tempfile.TemporaryDirectory(prefix="pretrain-quality-") as tmp, \
            (output.parent / "pretrain_quality.log").open("w") as log:
        work = Path(tmp)
        tokenizer_dir = work / "tokenizer"
        make_tokenizer(tokenizer_dir)
        k = 0
        for repeat in range(args.repeats):
            for budget in args.budgets:
                systems = args.systems if k % 2 == 0 else args.systems[::-1]  # alternate who goes first
                k += 1
                for system in systems:
                    started = datetime.datetime.now().isoformat(timespec="seconds")
                    try:
                        if system == "minibert":
                            result = run_minibert(budget, work, tokenizer_dir, flags, log)
                        else:
                            result = run_hf(budget, work, tokenizer_dir, log)
                    except subprocess.CalledProcessError as err:
                        result = {"error": f"exit {err.returncode}; see {log.name}"}
                    runs.append({"system": system, "budget_minutes": budget, "repeat": repeat, "started": started,
                                 "load_average": os.getloadavg()[0], **result})
                    print(f"{system} {budget:g} min (repeat {repeat + 1}): "
                          + (result.get("error") or f"MLM {result['eval_mlm_accuracy']:.3f}, NSP {result['eval_nsp_accuracy']:.3f}, "
                                                     f"{result['steps']} steps in {result['train_seconds']:.0f} s"), flush=True)
                    record["date"] = datetime.datetime.now().isoformat(timespec="seconds")
                    record["table"] = summarize(runs)
                    write_json(output, record)
    table = summarize(runs)
    plot(runs, table, output.with_suffix(".png"))
    write_text(output.with_suffix(".md"), markdown(table))
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
