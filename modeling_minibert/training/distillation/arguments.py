"""What a distillation run is told and what it returns: `DistillationArguments` (fine-tuning's options plus the
teacher, the transfer set and the loss), their checks, `DistillResult`, and `minibert distill`, built from them.

A new option of `distill` is a field here (with its check in `check_options`) and the line that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from modeling_minibert.training.distillation.augmentation import check_mlm_head
from modeling_minibert.training.finetuning.arguments import (
    DataArguments,
    FinetuneResult,
    ModelArguments,
    TrainerCommandLine,
    require,
    score_lines,
)
from modeling_minibert.training.finetuning.tasks import TASKS, load_task
from modeling_minibert.utils.commands import check_list_option
from modeling_minibert.utils.precision import check_teacher_precision, teacher_precision_field
from modeling_minibert.utils.teachers import ALLOW_PICKLE_HELP

if TYPE_CHECKING:
    from modeling_minibert.training.finetuning.task import Task

DISTILLATION_LOSSES = ("kl", "mse")  # the soft term of `distillation_loss`
# Besides fine-tuning's tasks: a sentence-transformers teacher's embeddings, which has no labels and no logits and
# so a flow of its own (embedding.py).
EMBEDDING_TASK = "embedding"
AUGMENTATIONS = ("words", "mlm")
# Distillation's own TrainingArguments defaults over fine-tuning's: soft targets take a larger step, and two epochs
# do as well as three. Measured: lab/README.md#two-epochs-of-task-distillation
DISTILL_TRAINING_DEFAULTS = {"num_train_epochs": 2.0, "learning_rate": 2e-4}
TEACHER_EPOCHS = 1.0  # `distill --finetune_teacher`'s default epochs, raised to reach min_train_steps


@dataclass
class DistillationArguments(ModelArguments, DataArguments):
    """Fine-tuning's model and data options (`--model_name_or_path` is the student) plus the teacher and the
    transfer set; `TrainingArguments` fields say how to train, with fine-tuning's defaults."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "the student: a pretrained Mini-BERT folder or Hub id (required; with --task embedding, unset: a "
            "new Mini-BERT made from the teacher, its vocabulary and its embeddings' principal directions)"
        },
    )
    task: str | None = field(
        default=None,
        metadata={
            "help": f"the task (required); {EMBEDDING_TASK}: a sentence-transformers teacher's embeddings of unlabelled "
            "text",
            "choices": [*TASKS, EMBEDDING_TASK],
        },
    )

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "(required) a fine-tuned classifier folder or Hub id (any model AutoModelFor<Task> loads), "
            "with its tokenizer; with --finetune_teacher any encoder (a BERT, a Mini-BERT)"
        },
    )
    finetune_teacher: bool = field(
        default=False, metadata={"help": "fine-tune the teacher on the training data first (into OUTPUT_DIR/teacher)"}
    )
    allow_pickle: bool = field(default=False, metadata={"help": ALLOW_PICKLE_HELP})
    teacher_num_train_epochs: float | None = field(
        default=None,
        metadata={
            "help": f"epochs of teacher fine-tuning (default: {TEACHER_EPOCHS:g}, more on a small data set: at least "
            "--min_train_steps steps)"
        },
    )
    teacher_learning_rate: float = field(default=1e-4, metadata={"help": "learning rate of teacher fine-tuning"})
    # auto: bf16 where it is faster, for a teacher as good and the same students. Measured:
    # lab/README.md#the-teacher-faster
    teacher_mixed_precision: str = teacher_precision_field(
        "how the teacher is fine-tuned (--finetune_teacher), labels and, with --relation_weight, reads each batch"
    )
    transfer_file: list[str] = field(
        default_factory=list,
        metadata={
            "help": "unlabelled texts the teacher labels for the student: .txt (one example per line) or "
            "CSV/JSON with the text column",
            "nargs": "+",
        },
    )
    augment_copies: int = field(default=1, metadata={"help": "augmented copies of each training example"})
    augmentation: str = field(
        default="words",
        metadata={
            "help": "how the copies are made: words (drop and swap words), mlm (TinyBERT's: replace words by the "
            "student's masked-LM predictions; --model_name_or_path must be a pretraining folder)",
            "choices": list(AUGMENTATIONS),
        },
    )
    augment_probability: float = field(
        default=0.4,
        metadata={
            "help": "augmentation=mlm: chance to replace each one-piece word, and with augment_neighbours each word "
            "of several pieces (TinyBERT's p)"
        },
    )
    augment_top_k: int = field(
        default=15,
        metadata={"help": "augmentation=mlm: a replacement is drawn from the K most likely pieces (TinyBERT's K)"},
    )
    augment_neighbours: bool = field(
        default=False,
        metadata={
            "help": "augmentation=mlm: also replace words of several pieces, by one of the K whole-word pieces nearest "
            "their mean embedding in the student's (TinyBERT's GloVe neighbours)"
        },
    )
    word_dropout: float = field(default=0.1, metadata={"help": "augmentation: chance to drop each word"})
    word_swap: float = field(default=0.1, metadata={"help": "augmentation: chance to swap each word with the next"})
    distillation_loss: str = field(
        default="kl",
        metadata={
            "help": "how the student's logits are matched to the teacher's: kl (KL divergence of the softmaxes at "
            "--temperature, times its square) or mse (mean squared difference of the logits; no temperature)",
            "choices": list(DISTILLATION_LOSSES),
        },
    )
    temperature: float = field(
        default=2.0, metadata={"help": "softmax temperature of teacher and student (> 0); distillation_loss=kl only"}
    )
    alpha: float = field(
        default=0.0, metadata={"help": "weight of the hard-label loss, in [0, 1]; the teacher's term gets 1 - alpha"}
    )
    # 0 by default: the soft targets already regularise the student. Measured:
    # lab/README.md#unlabelled-movie-reviews-in-the-transfer-set
    student_dropout: float | None = field(
        default=0.0,
        metadata={
            "help": (
                "the student's dropout while it is distilled (hidden, attention and classifier; BERT's is 0.1; in Python, "
                "None keeps the student's own). The saved student's config keeps its own, for whoever trains it next"
            )
        },
    )
    # Off by default: it brought the student closer to the teacher, not more accurate, for 3.5x the CPU time.
    # Measured: lab/README.md#the-recipe-with-the-jobs-defaults
    relation_weight: float = field(
        default=0.0,
        metadata={
            "help": (
                "weight of the teacher's last-layer attention relations (MiniLMv2's query, key and value relations) taught "
                "to the student's last layer beside its predictions (0: predictions only); needs a student that cuts text "
                "exactly as the teacher does (a general-distilled student with the teacher's whole vocabulary), and runs "
                "the teacher on every training batch"
            )
        },
    )
    # Distillation's own default: teacher and student read the same tokens, and 128 covers a review snippet.
    max_seq_length: int | None = field(default=128, metadata={"help": "tokens per input, for teacher and student"})


# What `student_dropout` sets: BERT's config names (classifier_dropout None means the hidden dropout).
DROPOUT_SETTINGS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")


@dataclass
class DistillResult(FinetuneResult):
    """A fine-tuning run's result, plus where the targets came from."""

    teacher: str = ""  # the teacher that labelled the transfer set (the fine-tuned one with finetune_teacher)
    transfer_size: int = 0
    reused_teacher_logits: bool = False
    relation_weight: float = 0.0  # the teacher's attention relations' weight in the loss (0: not taught)


# ---------------------------------------------------------------------------------------------------------------
# Checks: everything that can be wrong is found before any training


def check_options(args: DistillationArguments, has_train_data: bool) -> Task:
    """The task to distil; ValueError/FileNotFoundError for an option that cannot work, naming it."""
    require(args, "task", "teacher_model_name_or_path", "model_name_or_path")
    if args.train_file is None and not has_train_data:
        raise ValueError("train_file is required (--train_file), or train_data in Python")
    task = load_task(args.task)
    if task.read is None:
        raise ValueError(
            f"task={args.task!r} cannot be distilled; choose one of {[t for t in TASKS if load_task(t).read]}"
        )
    check_distillation_loss(args.distillation_loss)
    check_teacher_precision(args.teacher_mixed_precision)
    if not (args.temperature > 0 and np.isfinite(args.temperature)):
        raise ValueError(f"temperature={args.temperature} must be a positive number")
    if args.distillation_loss == "mse" and args.temperature != DistillationArguments.temperature:
        raise ValueError(
            f"temperature={args.temperature} does not apply to distillation_loss='mse', which matches the "
            "logits themselves; use distillation_loss='kl' for a temperature"
        )
    if not (args.relation_weight >= 0 and np.isfinite(args.relation_weight)):
        raise ValueError(f"relation_weight={args.relation_weight} must be a number >= 0")
    if not 0 <= args.alpha <= 1:
        raise ValueError(f"alpha={args.alpha} must be between 0 and 1 (the weight of the hard-label loss)")
    if args.student_dropout is not None and not 0 <= args.student_dropout < 1:
        raise ValueError(f"student_dropout={args.student_dropout} must be in [0, 1)")
    if args.augment_copies < 0:
        raise ValueError(f"augment_copies={args.augment_copies} must be at least 0")
    for name in ("word_dropout", "word_swap"):
        if not 0 <= getattr(args, name) < 1:
            raise ValueError(f"{name}={getattr(args, name)} must be in [0, 1)")
    if args.augmentation not in AUGMENTATIONS:
        raise ValueError(f"augmentation={args.augmentation!r} is not one of {list(AUGMENTATIONS)}")
    if args.augment_neighbours and args.augmentation != "mlm":
        raise ValueError(f"augment_neighbours needs augmentation='mlm', not {args.augmentation!r}")
    if args.augmentation == "mlm":
        if not 0 < args.augment_probability <= 1:
            raise ValueError(f"augment_probability={args.augment_probability} must be in (0, 1]")
        if args.augment_top_k < 1:
            raise ValueError(f"augment_top_k={args.augment_top_k} must be at least 1")
        check_mlm_head(args.model_name_or_path, "model_name_or_path")
    if args.max_seq_length is not None and args.max_seq_length < 3:
        raise ValueError(f"max_seq_length={args.max_seq_length} must be at least 3")
    check_list_option("transfer_file", args.transfer_file)
    for path in args.transfer_file:
        if not Path(path).is_file():
            raise FileNotFoundError(f"transfer file {path} does not exist")
    return task


def check_distillation_loss(name: str) -> None:
    """ValueError naming `name` unless it is one of DISTILLATION_LOSSES."""
    if name not in DISTILLATION_LOSSES:
        raise ValueError(f"distillation_loss={name!r} is not one of {list(DISTILLATION_LOSSES)}")


# ---------------------------------------------------------------------------------------------------------------
# The command: HfArgumentParser over the same dataclasses as fine-tuning, calling `distill`


def saved_line(result: DistillResult, options: dict[str, Any]) -> str:
    """What `minibert distill` prints: where the student went, what taught it, and its scores."""
    reused = ", cached teacher logits reused" if result.reused_teacher_logits else ""
    relations = f", its attention relations at weight {result.relation_weight:g}" if result.relation_weight else ""
    return (
        f"saved the distilled model to {result.output_dir} (teacher: {result.teacher}{relations}, "
        f"{result.transfer_size} transfer examples{reused})\n" + score_lines(result)
    )


COMMAND_LINE = TrainerCommandLine(
    arguments=(DistillationArguments,),
    help="distil a fine-tuned teacher into a Mini-BERT",
    description=(
        "Train a pretrained Mini-BERT (the student) on a fine-tuned teacher's predictions over the training data, "
        "unlabelled transfer texts and augmented copies (or, with --task embedding, on a sentence-transformers "
        "teacher's embeddings); save it like a fine-tuning run."
    ),
    report=saved_line,
    defaults=DISTILL_TRAINING_DEFAULTS,
)
