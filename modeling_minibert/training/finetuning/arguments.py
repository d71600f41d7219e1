"""The options of a fine-tuning run, what it returns, and the `minibert finetune` command built from them.

As in transformers' run_glue.py / run_ner.py / run_qa.py, dataclasses hold every option (`FinetuneArguments`:
ModelArguments + DataTrainingArguments) and `HfArgumentParser` turns them and `TrainingArguments` into the command
line: every `TrainingArguments` field is a flag under its own name (`--num_train_epochs`, `--report_to`, `--bf16`,
...), and `--foo_bar` and `--foo-bar` both work. The Python function `finetune(**options)` takes the same names as
keyword options (so does every job built on it); `training_arguments` fills in our defaults (`TRAINING_DEFAULTS`)
where the caller gave none, for the API and the command line alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import HfArgumentParser, TrainingArguments
from transformers.utils import logging

from modeling_minibert.training.finetuning.tasks import TASKS
from modeling_minibert.utils.commands import ArgumentParser, CommandLine, HelpFormatter, check_list_option

logger = logging.get_logger(__name__)

# Our defaults for `TrainingArguments` (any of its fields can be passed to override them). The learning rate is
# higher than bert-base's usual 2e-5..5e-5 because small encoders fine-tune best with larger steps. Stated in
# docs/finetuning.md#the-defaults; tests/training/finetuning/test_finetuning_arguments.py pins them.
TRAINING_DEFAULTS: dict[str, Any] = {
    "num_train_epochs": 3.0,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 1e-4,
    "weight_decay": 0.01,
    "warmup_steps": 0.1,  # a fraction: 10% of the training steps
    "eval_strategy": "epoch",  # with validation data; without it nothing is evaluated
    "load_best_model_at_end": True,  # likewise
    "logging_steps": 10,
    "report_to": "none",
    # Trainer keeps the best and the newest checkpoint (for load_best_model_at_end and --resume_from_checkpoint).
    "save_total_limit": 1,
    "seed": 42,
}

# A default schedule trains at least this many steps (`min_train_steps`), so that a small data set trains long
# enough; epochs given are kept as given. Measured:
# lab/README.md#the-steps-of-a-small-data-set-the-rule-written-before-the-runs
MIN_TRAIN_STEPS = 1000
# ...but no more than this many epochs in all (a 16-example set would otherwise run 500 epochs of 2 steps).
MAX_FLOOR_EPOCHS = 50


# ...and stops once this many evaluations (one per epoch) in a row have not bettered its best validation score
# (Trainer's EarlyStoppingCallback; 0: never), for the same scores at less cost. Measured:
# lab/README.md#stopping-when-validation-stops-improving-the-rule-written-before-the-runs
EARLY_STOPPING_PATIENCE = 3


# The options `default_schedule` resolves for each run (the teacher's too, on its own epochs).
SCHEDULE_OPTIONS = ("min_train_steps", "early_stopping_patience")


def default_schedule(args: FinetuningOptions, epochs_given: bool, evaluates: bool) -> dict[str, int]:
    """A run's `min_train_steps` and `early_stopping_patience` from its options `args`: as given, else the default
    schedule's, which epochs given on the command line turn off."""
    return {
        "min_train_steps": step_floor(args.min_train_steps, epochs_given),
        "early_stopping_patience": stopping_patience(args.early_stopping_patience, epochs_given, evaluates),
    }


def step_floor(min_train_steps: int | None, epochs_given: bool) -> int:
    """The floor on a run's optimizer steps: `min_train_steps` as given, else MIN_TRAIN_STEPS for a default
    schedule and none for epochs the caller chose."""
    return schedule_default("min_train_steps", min_train_steps, MIN_TRAIN_STEPS, epochs_given)


def stopping_patience(patience: int | None, epochs_given: bool, evaluates: bool) -> int:
    """How many evaluations without a better validation score stop a run: `early_stopping_patience` as given
    (which needs evaluations), else EARLY_STOPPING_PATIENCE for a default schedule that evaluates, and never for
    epochs the caller chose."""
    if patience and not evaluates:
        raise ValueError(
            f"early_stopping_patience={patience} needs validation data (--validation_file) and evaluations "
            "(an --eval_strategy other than no)"
        )
    return schedule_default(
        "early_stopping_patience", patience, EARLY_STOPPING_PATIENCE if evaluates else 0, epochs_given
    )


def schedule_default(name: str, given: int | None, default: int, epochs_given: bool) -> int:
    """An option of the default schedule: as given (0 or more), else `default`, or 0 when the caller chose the epochs."""
    if given is not None:
        if given < 0:
            raise ValueError(f"{name}={given} must be 0 or more")
        return given
    return 0 if epochs_given else default


# The tasks that read an input longer than max_seq_length in windows (`doc_stride`).
WINDOWED_TASKS = ("sequence-classification", "question-answering")

# Defaults that depend on the run (is there validation data? which task?): None on the command line means "not
# given", and `training_arguments` decides.
CONTEXTUAL = (
    "eval_strategy",
    "load_best_model_at_end",
    "save_strategy",
    "eval_steps",
    "save_steps",
    "metric_for_best_model",
)


@dataclass
class ModelArguments:
    """Which model to start from."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "checkpoint folder or Hub id, of any Mini-BERT head (required)"}
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "tokenizer folder or Hub id, if not the model's"}
    )


@dataclass
class TaskDataArguments:
    """The task, the data a run trains and scores on and its columns, and the learning rates it searches: the
    run's own (the teacher's fine-tuning in `distill --finetune_teacher` has its data in memory and a learning rate
    of its own)."""

    task: str | None = field(default=None, metadata={"help": "the task (required)", "choices": list(TASKS)})
    train_file: str | None = field(
        default=None,
        metadata={"help": "CSV/TSV/JSON/JSONL; CoNLL for token classification; SQuAD JSON for question answering"},
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "scores each evaluation; picks the best model"}
    )
    learning_rates: list[float] | None = field(
        default=None,
        metadata={
            "help": "instead of --learning_rate: train once at each value (e.g. 1e-4 3e-4 1e-3) and keep the run with "
            "the best validation score (needs validation data)",
            "nargs": "+",
        },
    )
    test_file: str | None = field(default=None, metadata={"help": "scored once, with the final model"})
    text_column_name: str | None = field(
        default=None,
        metadata={
            "help": "text (sequence classification, default 'text') or words (token classification, default 'tokens')"
        },
    )
    label_column_name: str | None = field(
        default=None, metadata={"help": "label (default 'label'), or tags (token classification, default 'tags')"}
    )


@dataclass
class FinetuningOptions:
    """How a task is read and trained, whatever its data: the options every job of the fine-tuning family shares.
    `finetune` and `distill` read them, and `distill --finetune_teacher` fine-tunes its teacher with every one as
    the student's run has it (`distillation.teacher.teacher_options`) and keeps that teacher under a key holding
    each: a new option here is its field and the line that uses it."""

    max_seq_length: int | None = field(
        default=None, metadata={"help": "tokens per input (default: the model's maximum)"}
    )
    doc_stride: int | None = field(
        default=None,
        metadata={
            "help": "question answering: overlap of context windows (default: a quarter of --max_seq_length); sequence "
            "classification: read each text in windows of --max_seq_length tokens overlapping by this many, train "
            "on every window with its text's label and score a text by the mean of their logits (default: read "
            "the first window only)"
        },
    )
    min_train_steps: int | None = field(
        default=None,
        metadata={
            "help": f"train at least this many optimizer steps, adding whole epochs on a small data set (default: "
            f"{MIN_TRAIN_STEPS}, or 0 when --num_train_epochs is given; --max_steps overrides it)"
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "with validation data, stop once this many evaluations in a row have not bettered the best score "
            f"(default: {EARLY_STOPPING_PATIENCE}, or 0 when --num_train_epochs is given; 0: never stop early)"
        },
    )


@dataclass
class OutputArguments:
    """What a run may do to the output folder it finds: replace it, or continue it with other options."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace a non-empty --output_dir"})
    resume_with_changed_options: bool = field(
        default=False,
        metadata={
            "help": "with --resume_from_checkpoint: continue even where options that change the run (data, schedule, "
            "lengths, windows) differ from those the checkpoint was trained with (the model then mixes both)"
        },
    )


@dataclass
class DataArguments(OutputArguments, FinetuningOptions, TaskDataArguments):  # in --help: data, options, output
    """What to train on and how: the options every job built on fine-tuning reads (distillation too)."""

    def __post_init__(self) -> None:
        # Checked where the options are built, before any work; its bound needs the tokenizer (`check_doc_stride`).
        if self.doc_stride is not None and self.task is not None and self.task not in WINDOWED_TASKS:
            raise ValueError(
                f"doc_stride={self.doc_stride} applies to {' and '.join(WINDOWED_TASKS)}, not task={self.task!r}"
            )


def options_of(cls: type, instance: Any, changed: bool = False) -> dict[str, Any]:
    """The values `instance` holds for the fields of the dataclass `cls` (one of its bases); with `changed`, only
    those that differ from the field's default."""
    values = {f.name: getattr(instance, f.name) for f in dataclasses.fields(cls)}
    if not changed:
        return values
    defaults = {
        f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(cls)
    }
    return {name: value for name, value in values.items() if value != defaults[name]}


@dataclass
class DataTrainingArguments(DataArguments):
    """`DataArguments` plus what only `finetune` reads: `datasets` sources, pairs, label order, QA, checkpoints."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "instead of --train_file: a datasets folder (save_to_disk or data files) or name"},
    )
    train_split: str = field(default="train", metadata={"help": "with --dataset_name"})
    validation_split: str = field(default="validation", metadata={"help": "with --dataset_name; used if it exists"})
    test_split: str | None = field(default=None, metadata={"help": "with --dataset_name"})
    text_pair_column_name: str | None = field(
        default=None, metadata={"help": "second text of a pair (sequence classification)"}
    )
    labels: str | None = field(
        default=None, metadata={"help": "comma-separated label names in id order (default: sorted training labels)"}
    )
    label_all_tokens: bool = field(default=False, metadata={"help": "token classification: train every sub-token"})
    question_column_name: str = field(default="question", metadata={"help": "question answering"})
    context_column_name: str = field(default="context", metadata={"help": "question answering"})
    answer_column_name: str = field(default="answers", metadata={"help": "question answering"})
    n_best_size: int = field(default=20, metadata={"help": "question answering: candidate answers kept per question"})
    max_answer_length: int = field(default=30, metadata={"help": "question answering: longest answer, in tokens"})
    keep_checkpoints: bool = field(
        default=False,
        metadata={"help": "keep Trainer's checkpoint-N folders in --output_dir (default: removed once the run ends)"},
    )


@dataclass
class FinetuneArguments(DataTrainingArguments, ModelArguments):  # model options first in --help
    """Every option of `finetune` besides the `TrainingArguments` fields: its command line's flags, and the
    keyword options of `modeling_minibert.training.finetuning.finetune`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Checked where the options are built (as run_qa.py's DataTrainingArguments does): before any work.
        if self.doc_stride is not None and self.text_pair_column_name:
            raise ValueError(
                f"doc_stride={self.doc_stride} cuts single texts into windows; it cannot read text pairs "
                f"(text_pair_column_name={self.text_pair_column_name!r})"
            )
        for name in ("n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced. Scores are named without Trainer's `eval_` / `test_` / `train_` prefix."""

    output_dir: Path
    metrics: dict[str, float]  # validation scores of the saved model; empty without validation data
    test_metrics: dict[str, float] | None = None
    labels: list[str] | None = None  # class / tag names in id order (None for question answering)
    train_metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class FinetuneTrainingArguments(TrainingArguments):
    """`TrainingArguments` as the command line reads them: every field under its own flag, and
    `--resume_from_checkpoint` alone resumes from the newest checkpoint-N in --output_dir, as pretrain's does."""

    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "a checkpoint folder; alone: the newest complete checkpoint-N in --output_dir",
            "nargs": "?",
            "const": True,
        },
    )


def build_parser(
    *dataclass_types: type, parser_class: type = HfArgumentParser, **parser_options: Any
) -> HfArgumentParser:
    """The options of `finetune` (or of a job that extends its dataclasses): the dataclasses given (default:
    FinetuneArguments), then every TrainingArguments field, with our defaults (the run-dependent ones None).
    `parser_class`: HfArgumentParser, or the commands' one-line-error subclass."""
    parser = parser_class((*(dataclass_types or (FinetuneArguments,)), FinetuneTrainingArguments), **parser_options)
    parser.set_defaults(**{**TRAINING_DEFAULTS, **dict.fromkeys(CONTEXTUAL)})
    return parser


def parse_args(argv: list[str]) -> tuple[FinetuneArguments, dict[str, Any]]:
    """Command-line words -> the job's arguments, and the `TrainingArguments` options given, as `minibert finetune`
    reads them."""
    options = COMMAND_LINE.options("minibert finetune", argv)
    known = fields_of(FinetuneArguments, options)
    return FinetuneArguments(**known), {k: v for k, v in options.items() if k not in known}


def split_options(arguments: type, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A job's keyword options (its command line's flags) -> its `arguments` dataclass, and the rest: the
    `TrainingArguments` options, which must name an output_dir (checked later by `check_training_options`)."""
    known = fields_of(arguments, options)
    training = {k: v for k, v in options.items() if k not in known}
    if not training.get("output_dir"):
        raise ValueError("output_dir is required (--output_dir)")
    return arguments(**known), training


def check_training_options(training: dict[str, Any], has_validation: bool) -> None:
    """Refuse, before any work, training options TrainingArguments would refuse later: unknown names, bad
    values, evaluation without validation data."""
    training_arguments(
        training["output_dir"], has_validation, "loss", **{k: v for k, v in training.items() if k != "output_dir"}
    )


def evaluates(training: dict[str, Any], has_validation: bool) -> bool:
    """Whether a run with these TrainingArguments options evaluates: validation data, and evaluations not turned off."""
    return has_validation and training.get("eval_strategy") != "no"


def check_learning_rates(learning_rates: list[float] | None, training: dict[str, Any], has_validation: bool) -> None:
    """Refuse, before any work, a learning-rate search that cannot run: bad values, no validation data to choose
    on, a `learning_rate` beside it, or a resume (a search is not resumed: run it again)."""
    if learning_rates is None:
        return
    check_list_option("learning_rates", learning_rates)
    if not learning_rates:
        raise ValueError("learning_rates is empty: give one or more values")
    for value in learning_rates:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"learning_rates: {value!r} is not a positive number")
    if "learning_rate" in training:
        raise ValueError(
            f"give learning_rate ({training['learning_rate']}) or learning_rates ({learning_rates}), not both"
        )
    if not has_validation:
        raise ValueError("learning_rates needs validation data (--validation_file): the learning rate is chosen on it")
    if training.get("resume_from_checkpoint"):
        raise ValueError("resume_from_checkpoint cannot continue a learning_rates search: run the search again")


def require(args: object, *names: str) -> None:
    """ValueError naming the first of the options `names` (fields of the job's dataclass `args`) that is not set."""
    for name in names:
        if getattr(args, name) is None:
            raise ValueError(f"{name} is required (--{name})")


def training_options(values: dict[str, Any], own_defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `TrainingArguments` fields among parsed `values` that differ from the parser's defaults (with a job's
    `own_defaults` over ours), for a caller that has only the parsed values (the benchmarks); the commands pass on
    the flags given (`given_options`)."""
    defaults = {**_parser_defaults(), **(own_defaults or {})}
    return {k: v for k, v in fields_of(TrainingArguments, values).items() if k not in defaults or v != defaults[k]}


@functools.cache
def _parser_defaults() -> dict[str, Any]:
    """What the parser gives for options left out (our defaults, and TrainingArguments' own as parsed)."""
    return vars(build_parser(add_help=False).parse_args([]))


def fields_of(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of `values` that are init fields of the dataclass `cls`."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return {k: v for k, v in values.items() if k in names}


def epochs_for(epochs: float, train_size: int, batch_size: int, min_train_steps: int) -> float:
    """`epochs`, or more when `epochs` of `train_size` examples in batches of `batch_size` (per optimizer step, all
    processes) make fewer than `min_train_steps` steps: whole epochs, as few as reach it, MAX_FLOOR_EPOCHS at most."""
    steps_per_epoch = max(1, math.ceil(train_size / batch_size))
    if min_train_steps <= 0 or epochs * steps_per_epoch >= min_train_steps:
        return epochs
    return max(epochs, float(min(MAX_FLOOR_EPOCHS, math.ceil(min_train_steps / steps_per_epoch))))


def training_arguments(
    output_dir: str,
    has_validation: bool,
    metric: str,
    train_size: int | None = None,
    min_train_steps: int = 0,
    **options: Any,
) -> TrainingArguments:
    """`TrainingArguments` from our defaults and `options` (its own field names, plus `group_by_length=True`);
    with `train_size` (training examples), at least `min_train_steps` optimizer steps unless `max_steps` is set.

    Checkpoints are saved whenever Trainer evaluates (load_best_model_at_end needs it), else once per epoch.
    Without validation data nothing is evaluated, and the model of the last step is the one saved.
    """
    options = dict(options)
    if options.pop("group_by_length", False):
        options["train_sampling_strategy"] = "group_by_length"
    fields = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"unknown training option(s) {unknown}: use TrainingArguments field names")
    # Trainer's NaN filter (on by default) reports a non-finite step's loss as the average of the others: an all-NaN
    # run logs train_loss 0.0. Off unless asked for, so that `finite.StopOnNonFinite` sees the real loss.
    args = {**TRAINING_DEFAULTS, "metric_for_best_model": metric, "logging_nan_inf_filter": False, **options}
    if not torch.cuda.is_available():
        # Without it TrainingArguments refuses bf16 on a CPU-only machine, where torch's autocast supports it.
        args["use_cpu"] = True
    if not has_validation:
        if options.get("load_best_model_at_end"):
            raise ValueError("load_best_model_at_end needs validation data (--validation_file)")
        if options.get("eval_strategy", "no") != "no":
            raise ValueError(f"eval_strategy={options['eval_strategy']!r} needs validation data (--validation_file)")
        args.update(eval_strategy="no", load_best_model_at_end=False)
    if args["eval_strategy"] == "no" and "load_best_model_at_end" not in options:
        args["load_best_model_at_end"] = False
    # load_best_model_at_end needs a checkpoint at every evaluation; without evaluations, one per epoch still lets
    # an interrupted run resume.
    args.setdefault("save_strategy", "epoch" if args["eval_strategy"] == "no" else args["eval_strategy"])
    if args["eval_strategy"] == "steps":
        args.setdefault("eval_steps", args["logging_steps"])
        args.setdefault("save_steps", args["eval_steps"])
    if train_size and args.get("max_steps", -1) <= 0:
        batch = (
            args["per_device_train_batch_size"]
            * args.get("gradient_accumulation_steps", 1)
            * int(os.environ.get("WORLD_SIZE", 1))
        )
        epochs = epochs_for(args["num_train_epochs"], train_size, batch, min_train_steps)
        if epochs != args["num_train_epochs"]:
            logger.warning(
                "training %g epochs instead of %g: %d examples in batches of %d make fewer than min_train_steps=%d steps",
                epochs,
                args["num_train_epochs"],
                train_size,
                batch,
                min_train_steps,
            )
            args["num_train_epochs"] = epochs
    args["output_dir"] = str(output_dir)
    return TrainingArguments(**args)


# ---------------------------------------------------------------------------------------------------------------
# The command


@dataclass(frozen=True)
class TrainerCommandLine(CommandLine):
    """A job built on fine-tuning's dataclasses, as its sub-command shows it: HfArgumentParser over `arguments` and
    TrainingArguments, every TrainingArguments field a flag under its own name. The job's function gets the
    dataclass fields and the TrainingArguments flags the command line gave, no others: the function applies its
    own defaults, so that the API and the command line agree (`defaults` are what --help shows)."""

    def parser(self, prog: str) -> HfArgumentParser:
        parser = build_parser(
            *self.arguments,
            parser_class=ArgumentParser,
            prog=prog,
            description=self.description,
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        parser.set_defaults(**self.defaults)
        return parser

    def options(self, prog: str, argv: list[str]) -> dict[str, Any]:
        parser = self.parser(prog)
        values = vars(parser.parse_args(argv))
        known = {k: v for cls in self.arguments for k, v in fields_of(cls, values).items()}
        return {**known, **fields_of(TrainingArguments, given_options(parser, argv, values))}


def given_options(parser: argparse.ArgumentParser, argv: list[str], names: Iterable[str]) -> dict[str, Any]:
    """The options among `names` that the words `argv` set, with their values (argparse fills a default only
    where the namespace it parses into lacks the name: one pre-filled with a marker keeps the marker there)."""
    unset = object()
    parsed = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(names, unset)))
    return {k: v for k, v in vars(parsed).items() if v is not unset}


def finetuned_lines(result: Any, options: dict[str, Any]) -> str:
    """What `minibert finetune` prints: where the model went, and its scores."""
    return f"saved to {result.output_dir}\n" + score_lines(result)


COMMAND_LINE = TrainerCommandLine(
    arguments=(FinetuneArguments,),
    help="fine-tune a checkpoint for classification, tagging or question answering",
    description=(
        "Fine-tune a Mini-BERT checkpoint with transformers' Trainer and save the final model, its tokenizer, label "
        "maps, results (all_results.json, trainer_state.json) and model card to --output_dir. Every "
        "TrainingArguments field is an option under its own name; the Python function "
        "modeling_minibert.training.finetune takes the same names as keyword options."
    ),
    report=finetuned_lines,
)


def score_lines(result: Any) -> str:
    """One line per evaluated split of a run's result: its scores, without Trainer's timings; first, the learning
    rate a `learning_rates` search chose."""
    lines = []
    if "learning_rate" in result.train_metrics:
        lines.append(f"learning rate chosen on validation: {result.train_metrics['learning_rate']:g}")
    for name, scores in (("validation", result.metrics), ("test", result.test_metrics)):
        if scores:
            shown = ", ".join(
                f"{k}={v:.4f}"
                for k, v in scores.items()
                if isinstance(v, float) and "runtime" not in k and "per_second" not in k
            )
            lines.append(f"{name}: {shown}")
    if not (result.metrics or result.test_metrics):
        lines.append("no validation or test data: nothing was scored (give --validation_file or --test_file)")
    return "\n".join(lines)


__all__ = [
    "DataArguments",
    "DataTrainingArguments",
    "FinetuneArguments",
    "FinetuneResult",
    "FinetuneTrainingArguments",
    "ModelArguments",
    "TASKS",
    "TRAINING_DEFAULTS",
    "COMMAND_LINE",
    "TrainerCommandLine",
    "build_parser",
    "check_learning_rates",
    "parse_args",
    "training_arguments",
]
