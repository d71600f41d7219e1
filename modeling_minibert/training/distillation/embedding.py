"""Embedding distillation: a Mini-BERT learns to reproduce a sentence-transformers teacher's embeddings on
unlabelled text; `minibert distill --task embedding`.

Reimers & Gurevych (2020, "Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation"):
the student's mean-pooled embedding of a sentence is trained with MSE toward the teacher's embedding of the same
sentence. Here the student is a small Mini-BERT, so its width may differ from the teacher's: a learned linear
projection (sentence-transformers' `Dense`, identity activation) maps it into the teacher's space, and the student
normalises when the teacher's modules do (`Normalize`), so the loss compares what each model would return.

    teacher      `SentenceTransformer(T).encode` on the training (and validation / test) texts, cut to the student's
                 length, computed once
    student      `AutoModel` of --model_name_or_path (a pretrained Mini-BERT), or, without it, a new Mini-BERT
                 made from the teacher (`student_from_teacher`: its vocabulary, its embeddings on their principal
                 directions); then mean pooling, [Dense], [Normalize]
    train        transformers' `Trainer` on (tokens, teacher embedding) pairs, `EMBEDDING_TRAINING_DEFAULTS`
    save         the student + tokenizer + 2_Dense + the sentence-transformers files: `SentenceTransformer(O)`
                 loads the output folder; results (eval_loss, eval_cosine to the teacher) as in every job

It shares distillation's options and command (`DistillationArguments`), its output-folder lock and staging
(fine-tuning's `run_folder`, `files.staged_folder`) and the results layout; it has no labels, logits or label maps, so it
is a flow of its own rather than a `Task` with a reader. Options about labels and augmentation are refused.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from torch import nn
from transformers import AutoConfig, AutoModel, DataCollatorWithPadding, PreTrainedModel, Trainer, set_seed

from modeling_minibert import MiniBertConfig, MiniBertModel
from modeling_minibert.sharing.model_card import write_model_card
from modeling_minibert.sharing.sentence_transformers_format import (
    mean_pooling,
    module_folders,
    module_types,
    write_sentence_transformers_files,
)
from modeling_minibert.training.distillation.arguments import EMBEDDING_TASK as TASK
from modeling_minibert.training.distillation.arguments import DistillationArguments, DistillResult
from modeling_minibert.training.distillation.teacher import NON_FINITE_TEACHER, max_length_for
from modeling_minibert.training.distillation.transfer import cut_input
from modeling_minibert.training.finetuning.arguments import (
    TRAINING_DEFAULTS,
    check_training_options,
    split_options,
    training_arguments,
)
from modeling_minibert.training.finetuning.data import text_lines
from modeling_minibert.training.finetuning.finite import check_results
from modeling_minibert.training.finetuning.flow import (
    in_memory,
    run_callbacks,
    run_folder,
    score_test,
    strip_prefix,
    train_and_score,
)
from modeling_minibert.training.finetuning.loading import load_fast_tokenizer, load_model, seed_of
from modeling_minibert.training.finetuning.plots import plot_training_curves
from modeling_minibert.training.finetuning.resume import run_options
from modeling_minibert.training.finetuning.task import Prepared
from modeling_minibert.utils.files import staged_folder, write_json
from modeling_minibert.utils.finite import NonFiniteError, check_finite_weights, non_finite_rows
from modeling_minibert.utils.outputs import (
    CURVES_FILE,
    DISTILLATION_ARGS_FILE,
    SENTENCE_TRANSFORMERS_MODULES_FILE,
    TRAINER_STATE_FILE,
    write_results,
)
from modeling_minibert.utils.teachers import check_teacher_tokenizer, check_teacher_weights, teacher_load_options

DENSE_DIR = "2_Dense"  # the projection's sentence-transformers module folder (after 1_Pooling)
# The measured embedding student's recipe, longer and at a higher rate than classification distillation's, as its
# layers start from random (docs/embeddings.md#what-to-expect). TrainingArguments given by the caller win.
EMBEDDING_TRAINING_DEFAULTS = {"num_train_epochs": 6.0, "learning_rate": 5e-4, "warmup_steps": 20}
# The student `student_from_teacher` makes: the Mini-BERT sizes, its heads 64 wide as the teacher's.
STUDENT_SIZES = {"hidden_size": 192, "num_hidden_layers": 3, "max_position_embeddings": 64}
# Distillation options that speak of labels, logits or augmented copies: they cannot apply to embeddings.
UNUSED_OPTIONS = (
    "finetune_teacher",
    "transfer_file",
    "augment_copies",
    "word_dropout",
    "word_swap",
    "distillation_loss",
    "temperature",
    "alpha",
    "student_dropout",
    "label_column_name",
)
# The default schedule's options of the jobs built on fine-tuning: this job's schedule is its epochs.
SCHEDULE_OPTIONS = ("min_train_steps", "early_stopping_patience")


class EmbeddingStudent(nn.Module):
    """The student as Trainer trains it: encoder -> mean pooling -> projection -> [L2 normalisation], with the
    MSE to the teacher's embedding (`labels`) as its loss."""

    def __init__(self, encoder: PreTrainedModel, teacher_width: int, normalize: bool):
        super().__init__()
        self.encoder = encoder
        width = encoder.config.hidden_size
        # Identity-initialised when the widths agree would need no layer at all: only a width change gets one.
        self.projection = nn.Linear(width, teacher_width) if width != teacher_width else None
        self.normalize = normalize

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        pooled = mean_pooling(hidden.float(), attention_mask)  # (B, H)
        if self.projection is not None:
            pooled = self.projection(pooled)  # (B, D): the teacher's width
        return nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None
    ) -> dict:
        embeddings = self.embed(input_ids, attention_mask)
        output = {"embeddings": embeddings}
        if labels is not None:
            output["loss"] = nn.functional.mse_loss(embeddings, labels.to(embeddings.dtype))
        return output


# ---------------------------------------------------------------------------------------------------------------
# Checks and data


def check_embedding_options(args: DistillationArguments, has_train_data: bool) -> list[str]:
    """The teacher's sentence-transformers module names; ValueError/FileNotFoundError for an option that cannot
    work, naming it."""
    if args.teacher_model_name_or_path is None:
        raise ValueError("teacher_model_name_or_path is required (--teacher_model_name_or_path)")
    if args.train_file is None and not has_train_data:
        raise ValueError("train_file is required (--train_file), or train_data in Python")
    defaults = DistillationArguments()
    for name in UNUSED_OPTIONS:
        if getattr(args, name) != getattr(defaults, name):
            raise ValueError(
                f"{name}={getattr(args, name)!r} does not apply to task='embedding' (no labels, no logits)"
            )
    for name in SCHEDULE_OPTIONS:
        if getattr(args, name) is not None:
            raise ValueError(
                f"{name}={getattr(args, name)!r} does not apply to task='embedding' (it trains --num_train_epochs)"
            )
    for role in ("train", "validation", "test"):
        path = getattr(args, f"{role}_file")
        if path is not None and Path(path).suffix.lower() != ".txt":
            raise ValueError(f"{role}_file={path!r}: task='embedding' reads unlabelled text, one text a line (.txt)")
    if args.max_seq_length is not None and args.max_seq_length < 3:
        raise ValueError(f"max_seq_length={args.max_seq_length} must be at least 3")
    teacher = Path(args.teacher_model_name_or_path)
    if not teacher.is_dir():
        raise FileNotFoundError(f"teacher {teacher} is not a folder (a sentence-transformers model folder)")
    kinds = module_types(teacher)
    if kinds[:2] != ["Transformer", "Pooling"]:
        raise ValueError(f"teacher {teacher} has modules {kinds}; expected a Transformer followed by Pooling")
    check_teacher_modules(teacher, args.allow_pickle)
    return kinds


def check_teacher_modules(teacher: Path, allow_pickle: bool) -> None:
    """Every module folder the teacher's modules.json lists holds its config (sentence-transformers would fail
    with a TypeError without it) and weights that are not only pickles (unless `allow_pickle`), and the tokenizer
    has no id past the embeddings: FileNotFoundError / ValueError, one line."""
    modules = module_folders(teacher)
    for kind, path in modules:
        if kind in ("Pooling", "Dense") and not (teacher / path / "config.json").is_file():
            raise FileNotFoundError(
                f"{teacher / path} holds no config.json: teacher {teacher} lists its {kind} module "
                f"there ({SENTENCE_TRANSFORMERS_MODULES_FILE})"
            )
    check_teacher_weights(teacher, allow_pickle, ("", *(path for _, path in modules if path)))
    vocab_size = getattr(AutoConfig.from_pretrained(teacher), "vocab_size", None)
    if vocab_size is not None:
        check_teacher_tokenizer(teacher, len(load_fast_tokenizer(teacher, None)), vocab_size)


def texts_of(source: str | os.PathLike | Dataset | Sequence[str], role: str, column: str) -> list[str]:
    """A split's texts: a .txt file's non-blank lines, or a Dataset's text column, or a list of strings."""
    if isinstance(source, (str, os.PathLike)):
        return text_lines(source, f"{role} file")
    if isinstance(source, Dataset):
        if column not in source.column_names:
            raise ValueError(f"{role} data has no {column!r} column (columns: {source.column_names})")
        source = source[column]
    texts = [str(text).strip() for text in source if str(text).strip()]
    if not texts:
        raise ValueError(f"{role} data holds no text")
    return texts


def teacher_embeddings(
    teacher: Any, texts: dict[str, list[str]], batch_size: int, show_progress: bool, name: str = ""
) -> dict[str, torch.Tensor]:
    """The teacher's embeddings of each split's texts, (N, D) float32, as `SentenceTransformer.encode` returns
    them (its own pooling and normalisation). NonFiniteError, naming the teacher `name`, if its weights or an
    embedding are not finite."""
    name = f"embedding the texts with the teacher: the teacher {name}".rstrip()
    check_finite_weights(teacher, name, NON_FINITE_TEACHER)
    embeddings = {
        role: teacher.encode(rows, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=show_progress)
        .float()
        .cpu()
        for role, rows in texts.items()
    }
    for role, rows in embeddings.items():
        bad, total, first = non_finite_rows(rows)
        if bad:
            raise NonFiniteError(
                f"{name} gives non-finite embeddings for {bad} of {total} {role} text(s) (the first: "
                f"{texts[role][first][:60]!r}): {NON_FINITE_TEACHER}"
            )
    return embeddings


def features(tokenizer: Any, texts: list[str], targets: torch.Tensor, max_length: int) -> Dataset:
    encoding = tokenizer(texts, truncation=True, max_length=max_length)
    return Dataset.from_dict(
        {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"], "labels": targets.tolist()}
    )


def cosine_metrics(prediction: Any) -> dict[str, float]:
    """Mean cosine similarity between the student's and the teacher's embeddings of the evaluated texts."""
    student, teacher = torch.as_tensor(prediction.predictions), torch.as_tensor(prediction.label_ids)
    return {"cosine": float(nn.functional.cosine_similarity(student, teacher, dim=-1).mean())}


# ---------------------------------------------------------------------------------------------------------------
# The job


def distill_embeddings(
    sources: dict[str, str | os.PathLike | Dataset | Sequence[str]],
    has_train_data: bool,
    show_progress: bool,
    **options: Any,
) -> DistillResult:
    """Train `model_name_or_path` to reproduce the sentence-transformers teacher `teacher_model_name_or_path`'s
    embeddings of unlabelled texts (`train_file`, one a line); see the module docstring. `flow.distill` hands
    over here with the splits' `sources` (files, or the `*_data` given in Python: Datasets with a text column,
    or lists of strings); keyword options are `minibert distill`'s flags. `validation_file` / `test_file` texts
    are scored (eval_loss, eval_cosine).

        distill(task="embedding", teacher_model_name_or_path="all-MiniLM-L6-v2", train_file="unlabelled.txt",
                output_dir="runs/embedder")   # the student made from the teacher; or model_name_or_path=...

    Raises (before any training): ValueError for bad options or a teacher whose sentence-transformers modules
    do not begin with Transformer and Pooling; FileNotFoundError for missing files; FileExistsError as every job does.
    """
    from sentence_transformers import SentenceTransformer

    args, training = split_options(DistillationArguments, options)
    training = {**EMBEDDING_TRAINING_DEFAULTS, **training}
    check_training_options(training, "validation" in sources)
    if args.learning_rates is not None:
        raise ValueError(
            f"learning_rates={args.learning_rates}: task='embedding' trains at one learning rate (--learning_rate)"
        )
    kinds = check_embedding_options(args, has_train_data)
    training.setdefault("disable_tqdm", not show_progress)
    options = run_options(args, training, TRAINING_DEFAULTS, in_memory(sources))
    with run_folder(training.pop("output_dir"), args, training, "distill", options) as output:
        texts = {role: texts_of(source, role, args.text_column_name or "text") for role, source in sources.items()}
        encoder, tokenizer, length = load_student(args, seed_of(training))
        texts = {role: [cut_input(text, length) for text in rows] for role, rows in texts.items()}  # before tokenizing
        teacher = SentenceTransformer(
            str(args.teacher_model_name_or_path), device="cpu", model_kwargs=teacher_load_options(args.allow_pickle)
        )
        teacher.max_seq_length = min(teacher.max_seq_length, length)  # the text the student reads, no more
        batch_size = training.get("per_device_eval_batch_size", TRAINING_DEFAULTS["per_device_eval_batch_size"])
        targets = teacher_embeddings(teacher, texts, batch_size, show_progress, str(args.teacher_model_name_or_path))
        student = EmbeddingStudent(encoder, targets["train"].shape[1], "Normalize" in kinds)
        data = {role: features(tokenizer, texts[role], targets[role], length) for role in texts}
        trainer = embedding_trainer(student, tokenizer, data, output, training, options)
        prepared = Prepared(
            train=data["train"],
            validation=data.get("validation"),
            test=data.get("test"),
            collator=trainer.data_collator,
            metric="loss",
            metrics_for=lambda role: cosine_metrics,
        )
        results = train_and_score(trainer, prepared)[0]
        score_test(trainer, prepared, results)
        check_results(
            student, results, trainer.args, trainer.state.global_step
        )  # nothing non-finite saved as a success
        save_embedder(trainer, student, tokenizer, results, output, length, args)
    write_model_card(
        output,
        task="feature-extraction",
        base_model=str(args.model_name_or_path or args.teacher_model_name_or_path),
        dataset_name=Path(str(sources["train"])).stem if isinstance(sources["train"], (str, os.PathLike)) else None,
    )
    strip = strip_prefix
    return DistillResult(
        output,
        strip(results.get("eval", {}), "eval_"),
        strip(results["test"], "test_") if "test" in results else None,
        None,
        strip(results["train"], "train_"),
        teacher=str(args.teacher_model_name_or_path),
        transfer_size=len(texts["train"]),
    )


def load_student(args: DistillationArguments, seed: int) -> tuple[PreTrainedModel, Any, int]:
    """The encoder to train, its tokenizer and the tokens it reads per text: `model_name_or_path`'s, or a new one
    made from the teacher."""
    if args.model_name_or_path is None:
        set_seed(seed)  # the new layers' random start
        encoder, tokenizer = student_from_teacher(str(args.teacher_model_name_or_path), allow_pickle=args.allow_pickle)
        positions = encoder.config.max_position_embeddings
        return encoder, tokenizer, min(args.max_seq_length or positions, positions)
    tokenizer = load_fast_tokenizer(args.model_name_or_path, args.tokenizer_name)
    encoder = load_model(AutoModel, args.model_name_or_path, seed)
    return encoder, tokenizer, max_length_for(args.model_name_or_path, tokenizer, args.max_seq_length)


def student_from_teacher(
    teacher: str,
    sizes: dict[str, int] = STUDENT_SIZES,
    tokenizer: Any = None,
    teacher_ids: list[int] | None = None,
    allow_pickle: bool = False,
) -> tuple[MiniBertModel, Any]:
    """A new Mini-BERT of `sizes` (no wider or longer than the teacher) that reads with the teacher's tokenizer (or
    `tokenizer`, a subset of its pieces whose teacher ids are `teacher_ids`): its word, position and segment
    embeddings the teacher's, projected onto the word embeddings' top principal directions (one projection for all
    three, so that their sums stay aligned), its layers random. How the measured student starts: the teacher's
    vocabulary is worth more to it than a short pretraining on another vocabulary (lab/README.md)."""
    source = AutoModel.from_pretrained(teacher, **teacher_load_options(allow_pickle))
    # Before its embeddings are projected (a NaN would fail inside torch.pca_lowrank, or start an all-NaN student).
    check_finite_weights(source, f"making the student from the teacher: the teacher {teacher}", NON_FINITE_TEACHER)
    tokenizer = tokenizer if tokenizer is not None else load_fast_tokenizer(teacher, None)
    # No wider and no longer than the teacher.
    hidden = min(sizes["hidden_size"], source.config.hidden_size)
    positions = min(sizes["max_position_embeddings"], source.config.max_position_embeddings)
    words = source.get_input_embeddings().weight.detach()
    if teacher_ids is not None:
        words = words[torch.tensor(teacher_ids)]
    mean = words.mean(0)
    _, _, directions = torch.pca_lowrank(words - mean, q=hidden, center=False)  # (H_teacher, hidden)
    config = MiniBertConfig(
        vocab_size=words.shape[0],
        hidden_size=hidden,
        num_hidden_layers=sizes["num_hidden_layers"],
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        max_position_embeddings=positions,
        pad_token_id=tokenizer.pad_token_id,
    )
    student = MiniBertModel(config)
    with torch.no_grad():
        student.embeddings.word_embeddings.weight.copy_((words - mean) @ directions)
        student.embeddings.position_embeddings.weight.copy_(
            source.embeddings.position_embeddings.weight[:positions] @ directions
        )
        student.embeddings.token_type_embeddings.weight.copy_(
            source.embeddings.token_type_embeddings.weight @ directions
        )
    tokenizer.model_max_length = positions
    return student, tokenizer


def embedding_trainer(
    student: EmbeddingStudent,
    tokenizer: Any,
    data: dict[str, Dataset],
    output: Path,
    training: dict[str, Any],
    run_record: dict[str, Any] | None = None,
) -> Trainer:
    args = training_arguments(str(output), "validation" in data, "loss", **training)
    return Trainer(
        model=student,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data.get("validation"),
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=cosine_metrics if "validation" in data else None,
        callbacks=run_callbacks(0, run_record),  # the run's options recorded, a stop signal and NaN stop it
    )


def save_embedder(
    trainer: Trainer,
    student: EmbeddingStudent,
    tokenizer: Any,
    results: dict[str, dict],
    output: Path,
    length: int,
    args: DistillationArguments,
) -> None:
    """The output folder, staged and then put in place whole: the encoder and tokenizer, the projection as a
    sentence-transformers Dense module, the module list, results, trainer state, curves."""
    from sentence_transformers.models import Dense

    with staged_folder(output) as staging:
        student.encoder.save_pretrained(staging)
        tokenizer.model_max_length = length  # pipelines and SentenceTransformer truncate to it
        tokenizer.save_pretrained(staging)
        dense_dir = None
        if student.projection is not None:
            dense_dir = DENSE_DIR
            layer = student.projection
            (staging / DENSE_DIR).mkdir()
            Dense(
                layer.in_features,
                layer.out_features,
                activation_function=nn.Identity(),
                init_weight=layer.weight.detach(),
                init_bias=layer.bias.detach(),
            ).save(str(staging / DENSE_DIR))
        write_sentence_transformers_files(
            staging, normalize=student.normalize, dense_dir=dense_dir, max_seq_length=length
        )
        write_results(staging, results)
        write_json(staging / DISTILLATION_ARGS_FILE, dataclasses.asdict(args))
        trainer.state.save_to_json(str(staging / TRAINER_STATE_FILE))
        plot_training_curves(
            trainer.state.log_history, "cosine", trainer.state.best_global_step, staging / CURVES_FILE
        )


__all__ = ["TASK", "EmbeddingStudent", "distill_embeddings"]
