"""Task distillation: a fine-tuned teacher's predictions teach a pretrained Mini-BERT; `minibert distill`.

Turc et al. (2019, "Well-Read Students Learn Better") pretrain the compact model, then train it on a large teacher's
soft predictions over a transfer set. Distillation is fine-tuning with another target, so it is built on the
fine-tuning job: the task's `Task` (reader, features, collator, metrics), its data checks, arguments, output
folder, results files, card and plots. This module holds only what fine-tuning does not, the teacher's part in
`distillation_teacher.py` and the training's in `distillation_trainer.py`:

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
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase, Trainer
from transformers.trainer_utils import PredictionOutput

from modeling_minibert.training.distillation.augmentation import check_mlm_head
from modeling_minibert.utils.files import write_json
from modeling_minibert.training.finetuning import flow
from modeling_minibert.training.finetuning.arguments import (
    DataArguments,
    ModelArguments,
    Job,
    check_learning_rates,
    check_training_options,
    require,
    split_options,
)
from modeling_minibert.training.finetuning.data import DataSource, check_labels, load_data, sorted_labels, text_lines
from modeling_minibert.training.finetuning.flow import Examples, FinetuneResult, Task
from modeling_minibert.training.finetuning.tasks import TASKS, load_task
from modeling_minibert.training.distillation.trainer import (
    DISTILLATION_LOSSES,
    TEACHER_COLUMNS,
    DistillationCollator,
    DistillationTrainer,
    RelationTransfer,
    check_distillation_loss,
    distillation_loss,
    distillation_metrics,
    student_features,
)
from modeling_minibert.utils.precision import (
    TEACHER_PRECISION_HELP,
    TEACHER_PRECISIONS,
    check_teacher_precision,
)
from modeling_minibert.training.distillation.teacher import (
    fine_tuned_teacher,
    max_length_for,
    teacher_config,
    teacher_labels,
    teacher_targets,
)
from modeling_minibert.utils.outputs import (
    DISTILLATION_ARGS_FILE,
    TEACHER_DIR,
    TEACHER_LOGITS_FILE,
    TEACHER_LOGITS_INFO_FILE,
)



AUGMENTATIONS = ("words", "mlm")
# Distillation's own TrainingArguments defaults, over fine-tuning's: a transfer set of soft targets takes a larger
# step (validation chose 2e-4 over 1e-4 and 5e-5), and with 48k unlabelled review sentences on Rotten Tomatoes two
# epochs scored level with three on validation over three seeds (0.814 against 0.816, within a rule set before the
# runs), for two thirds of the cost (README, Distillation).
DISTILL_TRAINING_DEFAULTS = {"num_train_epochs": 2.0, "learning_rate": 2e-4}


@dataclass
class DistillationArguments(ModelArguments, DataArguments):
    """Fine-tuning's model and data options (`--model_name_or_path` is the student) plus the teacher and the
    transfer set; `TrainingArguments` fields say how to train, with fine-tuning's defaults."""

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "(required) a fine-tuned classifier folder or Hub id (any model AutoModelFor<Task> loads), "
                  "with its tokenizer; with --finetune_teacher any encoder (a BERT, a Mini-BERT)"},
    )
    finetune_teacher: bool = field(
        default=False, metadata={"help": "fine-tune the teacher on the training data first (into OUTPUT_DIR/teacher)"}
    )
    teacher_num_train_epochs: float = field(default=1.0, metadata={"help": "epochs of teacher fine-tuning"})
    teacher_learning_rate: float = field(default=1e-4, metadata={"help": "learning rate of teacher fine-tuning"})
    # auto: on an AVX-512 BF16 CPU all-MiniLM-L6-v2 fine-tuned on Rotten Tomatoes in 3.2 CPU-minutes against 4.8
    # (validation 0.832 against 0.829) and labelled 1.8x as fast (logits within 0.014 of float32's); the
    # paired students moved -0.5 / -1.1 / +0.4 on validation, run-to-run noise (README, "The teacher, faster").
    teacher_mixed_precision: str = field(default="auto", metadata={
        "help": "how the teacher is fine-tuned (--finetune_teacher), labels and, with --relation_weight, reads each "
                "batch: " + TEACHER_PRECISION_HELP,
        "choices": list(TEACHER_PRECISIONS)})
    transfer_file: list[str] = field(
        default_factory=list,
        metadata={"help": "unlabelled texts the teacher labels for the student: .txt (one example per line) or "
                  "CSV/JSON with the text column", "nargs": "+"},
    )
    augment_copies: int = field(default=1, metadata={"help": "augmented copies of each training example"})
    augmentation: str = field(default="words", metadata={
        "help": "how the copies are made: words (drop and swap words), mlm (TinyBERT's: replace words by the "
                "student's masked-LM predictions; --model_name_or_path must be a pretraining folder)",
        "choices": list(AUGMENTATIONS)})
    augment_probability: float = field(default=0.4, metadata={
        "help": "augmentation=mlm: chance to replace each one-piece word, and with augment_neighbours each word "
                "of several pieces (TinyBERT's p)"})
    augment_top_k: int = field(default=15, metadata={
        "help": "augmentation=mlm: a replacement is drawn from the K most likely pieces (TinyBERT's K)"})
    augment_neighbours: bool = field(default=False, metadata={
        "help": "augmentation=mlm: also replace words of several pieces, by one of the K whole-word pieces nearest "
                "their mean embedding in the student's (TinyBERT's GloVe neighbours)"})
    word_dropout: float = field(default=0.1, metadata={"help": "augmentation: chance to drop each word"})
    word_swap: float = field(default=0.1, metadata={"help": "augmentation: chance to swap each word with the next"})
    distillation_loss: str = field(default="kl", metadata={
        "help": "how the student's logits are matched to the teacher's: kl (KL divergence of the softmaxes at "
                "--temperature, times its square) or mse (mean squared difference of the logits; no temperature)",
        "choices": list(DISTILLATION_LOSSES)})
    temperature: float = field(default=2.0, metadata={"help": "softmax temperature of teacher and student (> 0); "
                                                      "distillation_loss=kl only"})
    alpha: float = field(default=0.0, metadata={"help": "weight of the hard-label loss, in [0, 1]; the teacher's "
                                                "term gets 1 - alpha"})
    # 0 by default: on Rotten Tomatoes (three seeds) the student without dropout came closer to the teacher on
    # validation (loss 0.066-0.070 against 0.078-0.081) and scored better there (0.793 against 0.787 on the mean;
    # README), as the soft targets already regularise it.
    student_dropout: float | None = field(default=0.0, metadata={"help": (
        "the student's dropout while it is distilled (hidden, attention and classifier; BERT's is 0.1; in Python, "
        "None keeps the student's own). The saved student's config keeps its own, for whoever trains it next")})
    # Off by default: on Rotten Tomatoes (one seed) it brought the student closer to the teacher (validation loss
    # 0.106 against 0.115) but not its accuracy (test 0.785 against 0.784), for 3.5x the CPU time (README).
    relation_weight: float = field(default=0.0, metadata={"help": (
        "weight of the teacher's last-layer attention relations (MiniLMv2's query, key and value relations) taught "
        "to the student's last layer beside its predictions (0: predictions only); needs a student that cuts text "
        "exactly as the teacher does (a general-distilled student with the teacher's whole vocabulary), and runs "
        "the teacher on every training batch")})
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
# The transfer set


def load_transfer_file(path: str | os.PathLike, task: Task, text_column: str) -> list[Any]:
    """Unlabelled inputs: a .txt file holds one example per line (words split on whitespace for token
    classification); CSV/JSON files give their text column."""
    if Path(path).suffix.lower() != ".txt":
        if not Path(path).is_file():
            raise FileNotFoundError(f"transfer file {path} does not exist")
        return task.load_examples(load_data(path), text_column, None).inputs
    lines = text_lines(path, "transfer file")
    return [line.split() for line in lines] if task.conll else lines


def augment(words: Sequence[str], rng: random.Random, word_dropout: float, word_swap: float) -> list[int]:
    """Indices of `words` in a perturbed order: each word dropped with chance `word_dropout` (one always stays),
    then each neighbour pair swapped with chance `word_swap`. Indices, so that tags can follow their words."""
    kept = [i for i in range(len(words)) if rng.random() >= word_dropout] or [rng.randrange(len(words))]
    for i in range(len(kept) - 1):
        if rng.random() < word_swap:
            kept[i], kept[i + 1] = kept[i + 1], kept[i]
    return kept


def transfer_set(train: Examples, words_given: bool, extra_inputs: Sequence[Any], args: DistillationArguments, seed: int,
                 student: tuple[PreTrainedTokenizerBase, int], show_progress: bool = False) -> Examples:
    """The training examples (with their labels), `augment_copies` augmented copies of each (labelled only by the
    teacher: dropping "not" may flip a sentiment), and the unlabelled extra inputs. `student`: its tokenizer and
    tokens per input, which augmentation='mlm' reads with."""
    inputs, labels = list(train.inputs), list(train.labels)
    if args.augmentation == "mlm":
        copies = mlm_copies(train.inputs, words_given, args, seed, student, show_progress)
        return Examples(inputs + copies + list(extra_inputs), labels + [None] * (len(copies) + len(extra_inputs)))
    rng = random.Random(seed)
    for _ in range(args.augment_copies):
        for example in train.inputs:
            words = example if words_given else example.split()
            if not words:
                continue
            new = [words[i] for i in augment(words, rng, args.word_dropout, args.word_swap)]
            inputs.append(new if words_given else " ".join(new))
            labels.append(None)
    return Examples(inputs + list(extra_inputs), labels + [None] * len(extra_inputs))


def mlm_copies(inputs: Sequence[Any], words_given: bool, args: DistillationArguments, seed: int,
               student: tuple[PreTrainedTokenizerBase, int], show_progress: bool) -> list[Any]:
    """TinyBERT's augmented copies (`augmentation.mlm_augment`) by the student's own masked-LM head, in the form
    the inputs came in (word lists or texts)."""
    from transformers import AutoModelForMaskedLM

    from modeling_minibert.training.distillation.augmentation import mlm_augment

    words = [list(x) if words_given else x.split() for x in inputs]
    words = [w for w in words if w]
    tokenizer, length = student
    model = AutoModelForMaskedLM.from_pretrained(args.model_name_or_path)
    copies = mlm_augment(words, model, tokenizer, args.augment_copies, args.augment_probability, args.augment_top_k,
                         seed, length, show_progress=show_progress, neighbours=args.augment_neighbours)
    return copies if words_given else [" ".join(c) for c in copies]


# ---------------------------------------------------------------------------------------------------------------
# The teacher's attention relations


def token_alignment(args: DistillationArguments, task: Task, tokenizer: PreTrainedTokenizerBase, inputs: list[Any],
                    length: int) -> tuple[list[int], int]:
    """The teacher's id of each student id and the relation heads (the teacher's attention heads); ValueError,
    saying why, unless those heads divide both widths and the student cuts every input into the teacher's very
    tokens (mapped id for id, at the student's `length`)."""
    from tokenization.subset import to_teacher_ids

    teacher = str(args.teacher_model_name_or_path)
    config, student = teacher_config(teacher), AutoConfig.from_pretrained(args.model_name_or_path)
    heads = config.num_attention_heads
    if config.hidden_size % heads or student.hidden_size % heads:
        raise ValueError(f"the teacher's {heads} attention heads do not divide the student's hidden size "
                         f"({student.hidden_size})")
    if length > getattr(config, "max_position_embeddings", length):
        raise ValueError(f"the student reads {length} tokens, the teacher at most {config.max_position_embeddings}")
    teacher_tokenizer = flow.load_tokenizer(teacher, None)
    mapping = to_teacher_ids(tokenizer, teacher_tokenizer)
    encode = load_task(task.name).encode
    ours, theirs = (encode(t, list(inputs), length)["input_ids"] for t in (tokenizer, teacher_tokenizer))
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if [mapping[x] for x in a] != b]
    if differ:
        raise ValueError(f"the student cuts {len(differ):,} of {len(inputs):,} training inputs into other tokens than "
                         f"the teacher (the first: {str(inputs[differ[0]])[:60]!r})")
    return mapping, heads


def relation_plan(args: DistillationArguments, task: Task, tokenizer: PreTrainedTokenizerBase, inputs: list[Any],
                  length: int) -> tuple[list[int], int] | None:
    """With relation_weight > 0, how the teacher's attention relations are taught (`token_alignment`); ValueError
    naming the weight and why when they cannot be."""
    if not args.relation_weight:
        return None
    try:
        return token_alignment(args, task, tokenizer, inputs, length)
    except ValueError as err:
        raise ValueError(f"relation_weight={args.relation_weight}: {err}") from None


def relation_transfer(args: DistillationArguments, teacher: str, plan: tuple[list[int], int]) -> RelationTransfer:
    """The teacher's encoder (its classifier is not needed), frozen and recording its attention, with the plan."""
    from transformers import AutoModel

    from modeling_minibert.training.pretraining.session import quiet_transformers
    from modeling_minibert.training.distillation.relations import set_recording_attention

    with quiet_transformers():  # the classifier's weights are left out on purpose
        model = AutoModel.from_pretrained(teacher)
    try:
        set_recording_attention(model, f"teacher_model_name_or_path={args.teacher_model_name_or_path}")
    except ValueError as err:
        raise ValueError(f"relation_weight={args.relation_weight}: {err}") from None
    mapping, heads = plan
    return RelationTransfer(model.eval().requires_grad_(False), torch.tensor(mapping), heads, args.relation_weight,
                            args.teacher_mixed_precision)


# ---------------------------------------------------------------------------------------------------------------
# Checks: everything that can be wrong is found before any training


def check_options(args: DistillationArguments, has_train_data: bool) -> Task:
    """The task to distil; ValueError/FileNotFoundError for an option that cannot work, naming it."""
    require(args, "task", "teacher_model_name_or_path", "model_name_or_path")
    if args.train_file is None and not has_train_data:
        raise ValueError("train_file is required (--train_file), or train_data in Python")
    task = load_task(args.task)
    if task.read is None:
        raise ValueError(f"task={args.task!r} cannot be distilled; choose one of {[t for t in TASKS if load_task(t).read]}")
    check_distillation_loss(args.distillation_loss)
    check_teacher_precision(args.teacher_mixed_precision)
    if not (args.temperature > 0 and np.isfinite(args.temperature)):
        raise ValueError(f"temperature={args.temperature} must be a positive number")
    if args.distillation_loss == "mse" and args.temperature != DistillationArguments.temperature:
        raise ValueError(f"temperature={args.temperature} does not apply to distillation_loss='mse', which matches the "
                         "logits themselves; use distillation_loss='kl' for a temperature")
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
    for path in args.transfer_file:
        if not Path(path).is_file():
            raise FileNotFoundError(f"transfer file {path} does not exist")
    return task


def read_examples(args: DistillationArguments, task: Task, sources: dict[str, DataSource]) -> tuple[dict[str, Examples], list[str]]:
    """Each split read and checked by the task's reader (a blank label is refused naming its row), and the
    training data's labels, sorted."""
    label_column = args.label_column_name or task.columns[1]
    splits = {role: load_data(source, split=role, conll=task.conll) for role, source in sources.items()}
    examples = {role: task.load_examples(data, args.text_column_name, label_column) for role, data in splits.items()}
    data_labels = sorted_labels(examples["train"].labels)
    flow.check_label_count(data_labels, splits["train"].name)
    for role, data in splits.items():
        check_labels(data, label_column, examples[role].labels, data_labels)
    return examples, data_labels


# ---------------------------------------------------------------------------------------------------------------
# The job


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
    if options.get("task") in TASKS and (own := load_task(options["task"]).distill) is not None:
        return own(sources, train_data is not None, show_progress, **options)
    args, training = split_options(DistillationArguments, options)
    # On what the caller gave: a search's runs override the default learning rate, as fine-tuning's do.
    check_learning_rates(args.learning_rates, training, "validation" in sources)
    training = {**DISTILL_TRAINING_DEFAULTS, **training}
    # The best model is the one closest to the teacher (the validation loss); checkpoints need no optimizer state
    # (they are dropped at the end).
    training.setdefault("save_only_model", True)
    check_training_options(training, "validation" in sources)
    task = check_options(args, train_data is not None)
    training.setdefault("disable_tqdm", not show_progress)
    # Trainer hands these columns to compute_metrics beside the labels (the mask: word targets only).
    training["label_names"] = ["labels", *TEACHER_COLUMNS[: 2 if task.conll else 1]]
    with flow.run_folder(training.pop("output_dir"), args.overwrite_output_dir, training, "distill") as output:
        examples, data_labels = read_examples(args, task, sources)
        text_column = args.text_column_name or task.columns[0]
        transfer_inputs = [x for path in args.transfer_file for x in load_transfer_file(path, task, text_column)]
        names = teacher_labels(args, task, data_labels)
        tokenizer = flow.load_tokenizer(args.model_name_or_path, args.tokenizer_name)  # fails early on a wrong folder
        student_length = max_length_for(args.model_name_or_path, tokenizer, args.max_seq_length)
        transfer = transfer_set(examples["train"], task.conll, transfer_inputs, args, flow.seed_of(training),
                                (tokenizer, student_length), show_progress)
        plan = relation_plan(args, task, tokenizer, transfer.inputs, student_length)
        teacher = str(args.teacher_model_name_or_path)
        if args.finetune_teacher:
            teacher = str(fine_tuned_teacher(args, task, training, examples, names, output))
        inputs = {"transfer": transfer.inputs, **{r: examples[r].inputs for r in ("validation", "test") if r in examples}}
        batch_size = training.get("per_device_eval_batch_size", flow.TRAINING_DEFAULTS["per_device_eval_batch_size"])
        logits, reused = teacher_targets(args, task, teacher, inputs, names, output, batch_size, show_progress)
        label2id = {name: i for i, name in enumerate(names)}
        features = {
            role: student_features(tokenizer, transfer if role == "transfer" else examples[role], logits[role], task.name, student_length, label2id)
            for role in logits
        }
        prepared = flow.Prepared(
            train=features["transfer"], validation=features.get("validation"), test=features.get("test"),
            collator=DistillationCollator(tokenizer, task.name), metric="loss",
            metrics_for=lambda role: distillation_metrics(task, names),
        )
        relations = relation_transfer(args, teacher, plan) if plan is not None else None
        student = load_student(args, task, flow.seed_of(training), num_labels=len(names),
                               id2label=dict(enumerate(names)), label2id=label2id)
        result = flow.train_and_save(
            task.name, args.model_name_or_path, student, tokenizer, prepared, output, names, sources["train"], training,
            extra_outputs=keep_distillation_files(args, output), trainer_class=DistillationTrainer,
            learning_rates=args.learning_rates, temperature=args.temperature, alpha=args.alpha,
            distillation_loss=args.distillation_loss, relations=relations,
        )
    return DistillResult(**vars(result), teacher=teacher, transfer_size=len(transfer.inputs), reused_teacher_logits=reused,
                         relation_weight=relations.weight if relations is not None else 0.0)


def load_student(args: DistillationArguments, task: Task, seed: int, **config_overrides: Any) -> PreTrainedModel:
    """The student, its dropout layers built with `student_dropout`. Its config then gets its own dropout back: the
    layers keep the rate they were built with, and the saved config is what the next trainer of the student reads."""
    own = flow.load_config(args.model_name_or_path)
    dropout = {} if args.student_dropout is None else {
        name: args.student_dropout for name in DROPOUT_SETTINGS if hasattr(own, name)
    }
    student = flow.load_model(task.auto_class, args.model_name_or_path, seed, **config_overrides, **dropout)
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


# ---------------------------------------------------------------------------------------------------------------
# The command: HfArgumentParser over the same dataclasses as fine-tuning, calling `distill`


def saved_line(result: DistillResult) -> str:
    reused = ", cached teacher logits reused" if result.reused_teacher_logits else ""
    relations = f", its attention relations at weight {result.relation_weight:g}" if result.relation_weight else ""
    return (f"saved the distilled model to {result.output_dir} (teacher: {result.teacher}{relations}, "
            f"{result.transfer_size} transfer examples{reused})")


DISTILL = Job(
    "distill", DistillationArguments, "modeling_minibert.training.distillation.flow.distill",
    help="distil a fine-tuned teacher into a Mini-BERT",
    description=(
        "Train a pretrained Mini-BERT (the student) on a fine-tuned teacher's predictions over the training data, "
        "unlabelled transfer texts and augmented copies; save it like a fine-tuning run."
    ),
    saved=saved_line,
    training_defaults=DISTILL_TRAINING_DEFAULTS,
)
add_cli = DISTILL.add_cli


__all__ = [
    "DistillResult",
    "DistillationArguments",
    "DistillationCollator",
    "DistillationTrainer",
    "augment",
    "distill",
    "distillation_loss",
    "label_with_teacher",
    "load_teacher",
    "predict_logits",
    "student_features",
    "transfer_set",
]
