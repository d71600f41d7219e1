"""Task distillation: a fine-tuned teacher's predictions teach a pretrained Mini-BERT; `minibert distill`.

Turc et al. (2019, "Well-Read Students Learn Better") pretrain the compact model, then train it on a large teacher's
soft predictions over a transfer set. Distillation is fine-tuning with another target, so it is built on the
fine-tuning job: the task's `Task` (reader, features, collator, metrics), its data checks, arguments, output
folder, results files, card and plots. This module is the flow; what fine-tuning does not have sits beside it in
this package (the teacher in `teacher.py`, the transfer set in `transfer.py`, the loss and Trainer in `trainer.py`):

    teacher      with `finetune_teacher`, fine-tune the teacher first (the fine-tuning job, into OUTPUT/teacher)
    transfer     the training data + unlabelled texts (`transfer_file`) + seeded augmented copies
    label        the teacher's logits on the transfer set and on the validation / test data, computed once and
                 cached in the output folder (`teacher_logits.safetensors` + `.json`), reused by a rerun
    distil       `DistillationTrainer`: KL divergence to the teacher at a temperature (times T^2), or the mean
                 squared difference of the logits (`distillation_loss`), plus `alpha` times the cross-entropy
                 on the hard labels where the example has one, plus, with `relation_weight`
                 and a student that cuts text exactly as the teacher does, the teacher's last-layer attention
                 relations (`RelationTransfer`: then the teacher also reads every training batch)

Teacher and student tokenizers may differ: each text is tokenized by both, and for token classification the
teacher's prediction for a word (read at its first sub-token) becomes the target of the student's first
sub-token of that word. The teacher's logits are computed once, a column of the data; only the attention relations
need the teacher while the student trains.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer
from transformers.trainer_utils import PredictionOutput

import modeling_minibert.training.distillation.embedding as embedding
from modeling_minibert.training.distillation.arguments import (
    DISTILL_TRAINING_DEFAULTS,
    DROPOUT_SETTINGS,
    DistillationArguments,
    DistillResult,
    check_options,
)
from modeling_minibert.training.distillation.teacher import (
    check_teacher_files,
    fine_tuned_teacher,
    max_length_for,
    teacher_labels,
    teacher_length,
    teacher_targets,
)
from modeling_minibert.training.distillation.trainer import (
    TEACHER_COLUMNS,
    DistillationCollator,
    DistillationTrainer,
    distillation_metrics,
    relation_plan,
    relation_transfer,
    student_features,
)
from modeling_minibert.training.distillation.transfer import load_transfer_file, transfer_set
from modeling_minibert.training.finetuning.arguments import (
    TRAINING_DEFAULTS,
    check_learning_rates,
    check_training_options,
    default_schedule,
    evaluates,
    split_options,
)
from modeling_minibert.training.finetuning.data import DataSource, check_split_labels, load_data, sorted_labels
from modeling_minibert.training.finetuning.flow import in_memory, run_folder, train_and_save
from modeling_minibert.training.finetuning.loading import load_config, load_fast_tokenizer, load_model, seed_of
from modeling_minibert.training.finetuning.resume import run_options
from modeling_minibert.training.finetuning.task import Examples, Prepared, Task, check_label_count, window_examples
from modeling_minibert.utils.files import write_json
from modeling_minibert.utils.outputs import (
    DISTILLATION_ARGS_FILE,
    TEACHER_DIR,
    TEACHER_LOGITS_FILE,
    TEACHER_LOGITS_INFO_FILE,
)


def read_examples(
    args: DistillationArguments, task: Task, sources: dict[str, DataSource]
) -> tuple[dict[str, Examples], list[str], Callable[[list[str]], None]]:
    """Each split read and checked by the task's reader (a blank label is refused naming its row), the training
    data's labels, sorted, and the check of every split's labels against the label names once they are known
    (the teacher's, `teacher_labels`: a teacher may know labels a small training set lacks)."""
    label_column = args.label_column_name or task.columns[1]
    splits = {role: load_data(source, split=role, conll=task.conll) for role, source in sources.items()}
    examples = {role: task.load_examples(data, args.text_column_name, label_column) for role, data in splits.items()}
    data_labels = sorted_labels(examples["train"].labels)
    check_label_count(data_labels, splits["train"].name)

    def check_labels(names: list[str]) -> None:
        for role, data in splits.items():
            check_split_labels(data, label_column, examples[role].labels, names)

    return examples, data_labels, check_labels


# ---------------------------------------------------------------------------------------------------------------
# The job


def student_training_data(
    task: Task,
    student: tuple[PreTrainedTokenizerBase, int],
    transfer,
    student_examples: dict,
    logits: dict,
    label2id: dict[str, int],
    owners: dict,
) -> Prepared:
    """What the student trains and is scored on: each split's inputs (the transfer set for training) with the
    teacher's `logits` as targets, in the student's tokens (`student`: its tokenizer and length); the validation
    loss picks the best model, the task's metrics score it against the labels (pooled over a text's windows)."""
    tokenizer, length, names = *student, list(label2id)
    features = {
        role: student_features(
            tokenizer,
            transfer if role == "transfer" else student_examples[role],
            logits[role],
            task.name,
            length,
            label2id,
        )
        for role in logits
    }
    return Prepared(
        train=features["transfer"],
        validation=features.get("validation"),
        test=features.get("test"),
        collator=DistillationCollator(tokenizer, task.name),
        metric="loss",
        metrics_for=lambda role: distillation_metrics(task, names, owners.get(role)),
        owners=owners,
    )


def read_inputs(args, task, sources: dict) -> tuple:
    """What the student reads, checked before the teacher loads: the examples, the student's tokenizer and length,
    the unlabelled transfer texts, and the label names (the teacher's, checked against the data's)."""
    examples, data_labels, check_labels = read_examples(args, task, sources)
    tokenizer = load_fast_tokenizer(args.model_name_or_path, args.tokenizer_name)  # fails early on a wrong folder
    student_length = max_length_for(args.model_name_or_path, tokenizer, args.max_seq_length)
    unlabelled = unlabelled_inputs(args, task, student_length)
    names = teacher_labels(args, task, data_labels)
    check_labels(names)
    return examples, (tokenizer, student_length), unlabelled, names


def distill(
    *,
    train_data: Dataset | None = None,
    validation_data: Dataset | None = None,
    test_data: Dataset | None = None,
    show_progress: bool = True,
    **options: Any,
) -> DistillResult:
    """Distil a teacher into a student; see the module docstring for the flow.

    Keyword options are the command line's flags: `DistillationArguments` fields (`task`,
    `teacher_model_name_or_path`, `model_name_or_path`, `train_file`, ...) and `TrainingArguments` fields
    (`output_dir`, `num_train_epochs`, ...; fine-tuning's defaults). In-memory `Dataset`s may replace the files.

        distill(task="sequence-classification", teacher_model_name_or_path="runs/bert-sst2",
                model_name_or_path="minibert-pretrained", train_file="train.csv", validation_file="dev.csv",
                output_dir="runs/distilled", num_train_epochs=3)

    Raises (before any training): ValueError for bad options or data, a teacher that is not a classifier for the
    task or whose labels differ from the data's; FileNotFoundError for missing files; FileExistsError for a
    non-empty output_dir without overwrite_output_dir, or one another run is writing to.
    """
    given = {"train": train_data, "validation": validation_data, "test": test_data}
    sources = {role: given[role] if given[role] is not None else options.get(f"{role}_file") for role in given}
    sources = {role: source for role, source in sources.items() if source is not None}
    if options.get("task") == embedding.TASK:  # no labels, no logits: a flow of its own
        return embedding.distill_embeddings(sources, train_data is not None, show_progress, **options)
    args, task, training, schedule, options = checked_options(options, sources, train_data is not None, show_progress)
    with run_folder(training.pop("output_dir"), args, training, "distill", options) as output:
        examples, (tokenizer, student_length), unlabelled, names = read_inputs(args, task, sources)
        student_examples, owners = student_inputs(args, (tokenizer, student_length), examples, unlabelled)
        transfer = transfer_set(
            student_examples["train"],
            task.conll,
            student_examples["transfer"].inputs,
            args,
            seed_of(training),
            (tokenizer, student_length),
            show_progress,
        )
        plan = relation_plan(args, task, tokenizer, transfer.inputs, student_length)
        teacher, logits, reused = teacher_side(
            args, task, training, examples, names, student_examples, transfer, output, show_progress
        )
        label2id = {name: i for i, name in enumerate(names)}
        prepared = student_training_data(
            task, (tokenizer, student_length), transfer, student_examples, logits, label2id, owners
        )
        relations = relation_transfer(args, teacher, plan) if plan is not None else None
        student = load_student(
            args, task, seed_of(training), num_labels=len(names), id2label=dict(enumerate(names)), label2id=label2id
        )
        result = train_and_save(
            task.name,
            args.model_name_or_path,
            student,
            tokenizer,
            prepared,
            output,
            names,
            sources["train"],
            training,
            extra_outputs=keep_distillation_files(args, output),
            trainer_class=DistillationTrainer,
            learning_rates=args.learning_rates,
            temperature=args.temperature,
            alpha=args.alpha,
            **schedule,
            distillation_loss=args.distillation_loss,
            relations=relations,
            run_record=options,
        )
    return DistillResult(
        **vars(result),
        teacher=teacher,
        transfer_size=len(transfer.inputs),
        reused_teacher_logits=reused,
        relation_weight=relations.weight if relations is not None else 0.0,
    )


def checked_options(
    options: dict[str, Any], sources: dict[str, DataSource], train_in_memory: bool, show_progress: bool
) -> tuple[DistillationArguments, Task, dict[str, Any], dict[str, Any], dict]:
    """The job's options, checked before any work: its arguments, its task, the student's training options with
    distillation's defaults, the default schedule and the run's record (what a resume compares)."""
    args, training = split_options(DistillationArguments, options)
    # On what the caller gave: a search's runs override the default learning rate, as fine-tuning's do.
    check_learning_rates(args.learning_rates, training, "validation" in sources)
    schedule = default_schedule(args, "num_train_epochs" in training, evaluates(training, "validation" in sources))
    # The best model is the one closest to the teacher (the validation loss). Checkpoints keep the optimizer's
    # state, as fine-tuning's do: a run stopped by a signal or a kill resumes from them.
    training = {**DISTILL_TRAINING_DEFAULTS, **training}
    check_training_options(training, "validation" in sources)
    task = check_options(args, train_in_memory)
    check_teacher_files(str(args.teacher_model_name_or_path), args.allow_pickle)
    training.setdefault("disable_tqdm", not show_progress)
    # Trainer hands these columns to compute_metrics beside the labels (the mask: word targets only).
    training["label_names"] = ["labels", *TEACHER_COLUMNS[: 2 if task.conll else 1]]
    return args, task, training, schedule, run_options(args, training, TRAINING_DEFAULTS, in_memory(sources))


def teacher_side(
    args: DistillationArguments,
    task: Task,
    training: dict[str, Any],
    examples: dict[str, Examples],
    names: list[str],
    student_examples: dict,
    transfer,
    output: Path,
    show_progress: bool,
) -> tuple[str, dict, bool]:
    """The teacher (fine-tuned first with `finetune_teacher`) and its logits on what the student reads: the transfer
    set, the validation and test data; whether they were reused from the output folder's cache."""
    teacher = str(args.teacher_model_name_or_path)
    if args.finetune_teacher:
        teacher = str(fine_tuned_teacher(args, task, training, examples, names, output))
    inputs = {
        "transfer": transfer.inputs,
        **{r: student_examples[r].inputs for r in ("validation", "test") if r in examples},
    }
    batch_size = training.get("per_device_eval_batch_size", TRAINING_DEFAULTS["per_device_eval_batch_size"])
    logits, reused = teacher_targets(args, task, teacher, inputs, names, output, batch_size, show_progress)
    return teacher, logits, reused


def unlabelled_inputs(args: DistillationArguments, task: Task, student_length: int) -> list[Any]:
    """The `transfer_file`s' texts, each cut to what either model reads of it (all of it, in windows)."""
    reads = max(student_length, teacher_length(args)) if args.doc_stride is None else None
    text_column = args.text_column_name or task.columns[0]
    return [x for path in args.transfer_file for x in load_transfer_file(path, task, text_column, reads)]


def student_inputs(
    args: DistillationArguments,
    student: tuple[PreTrainedTokenizerBase, int],
    examples: dict[str, Examples],
    unlabelled: list[Any],
) -> tuple[dict[str, Examples], dict[str, list[int]]]:
    """What the student reads of each split and of the `unlabelled` texts (as `transfer`): the examples as given,
    or with `doc_stride` the windows its tokenizer and length (`student`) cut each text into, each with its text's
    label; and each held-out window's text (the teacher labels the very windows)."""
    tokenizer, length = student
    given = {**examples, "transfer": Examples(unlabelled, [None] * len(unlabelled))}
    if args.doc_stride is None:
        return given, {}
    windows = {role: window_examples(tokenizer, split, length, args.doc_stride) for role, split in given.items()}
    return {role: split for role, (split, _) in windows.items()}, {
        r: owners for r, (_, owners) in windows.items() if r in ("validation", "test")
    }


def load_student(args: DistillationArguments, task: Task, seed: int, **config_overrides: Any) -> PreTrainedModel:
    """The student, its dropout layers built with `student_dropout`. Its config then gets its own dropout back: the
    layers keep the rate they were built with, and the saved config is what the next trainer of the student reads."""
    own = load_config(args.model_name_or_path)
    dropout = (
        {}
        if args.student_dropout is None
        else {name: args.student_dropout for name in DROPOUT_SETTINGS if hasattr(own, name)}
    )
    student = load_model(task.auto_class, args.model_name_or_path, seed, **config_overrides, **dropout)
    student.config.update({name: getattr(own, name) for name in dropout})
    return student


def keep_distillation_files(args: DistillationArguments, output: Path):
    """What distillation adds to the saved folder: its arguments, and (moved from OUTPUT, which the staging
    folder replaces) the teacher's cached logits and the fine-tuned teacher, for a cheap rerun."""

    def keep(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        write_json(staging / DISTILLATION_ARGS_FILE, dataclasses.asdict(args))
        for name in (TEACHER_LOGITS_FILE, TEACHER_LOGITS_INFO_FILE, TEACHER_DIR):
            if (output / name).exists():
                os.replace(output / name, staging / name)

    return keep


__all__ = ["DistillResult", "DistillationArguments", "distill"]
