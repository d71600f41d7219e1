"""The teacher of task distillation: its checks, its fine-tuning (`finetune_teacher`) and its predictions on the
transfer set, cached in the output folder; `distillation.py`'s job calls these.

    check      the teacher loads, is a classifier for the task, and predicts the data's labels
               (`teacher_labels`), or is fine-tuned first (`fine_tuned_teacher`, reused when a previous run left the
               same one)
    fine-tune  a transformers BERT folder trains in Mini-BERT's implementation and is saved back in BERT format
               (`finetune_in_minibert`)
    label      its logits on every split (`teacher_targets`): under bf16 autocast where the hardware multiplies
               bf16 natively (`teacher_mixed_precision`), computed once and cached (`teacher_logits.*`), keyed by
               the inputs, the options and the teacher's files
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from datasets import Dataset
from safetensors import SafetensorError
from safetensors.torch import load, save
from tqdm.auto import tqdm
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase

import modeling_minibert  # registers Mini-BERT with the Auto classes; AUTO_CLASSES
from modeling_minibert.training.distillation.arguments import TEACHER_EPOCHS
from modeling_minibert.training.finetuning.arguments import (
    SCHEDULE_OPTIONS,
    FinetuneResult,
    FinetuningOptions,
    default_schedule,
    options_of,
)
from modeling_minibert.training.finetuning.flow import dataset_name, finetune
from modeling_minibert.training.finetuning.loading import check_local, load_fast_tokenizer, seed_of
from modeling_minibert.training.finetuning.task import Examples, Task
from modeling_minibert.training.finetuning.tasks import load_task
from modeling_minibert.training.finetuning.tasks.token_classification import first_subtokens
from modeling_minibert.utils.files import write_bytes, write_json
from modeling_minibert.utils.finite import NonFiniteError, check_finite_weights, learning_rate_cause, non_finite_rows
from modeling_minibert.utils.logging import checks_unsaid
from modeling_minibert.utils.outputs import (
    TEACHER_DIR,
    TEACHER_INFO_FILE,
    TEACHER_LOGITS_FILE,
    TEACHER_LOGITS_INFO_FILE,
)
from modeling_minibert.utils.precision import default_device, precision_line, teacher_autocast
from modeling_minibert.utils.teachers import (
    check_teacher_tokenizer,
    check_teacher_weights,
    pickle_only_weights,
    teacher_load_options,
)

if TYPE_CHECKING:
    from modeling_minibert.training.distillation.arguments import DistillationArguments


# ---------------------------------------------------------------------------------------------------------------
# Checks

# What a teacher with NaN or infinite weights or outputs is told (`label_with_teacher`, the embedding task's and
# the relations' teacher): it cannot teach, and nothing was trained.
NON_FINITE_TEACHER = "a non-finite teacher cannot teach; fix it or fine-tune it again (nothing was trained)"


def teacher_config(teacher: str):
    check_local(teacher, "teacher folder")
    try:
        return AutoConfig.from_pretrained(teacher)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"cannot load a teacher from {teacher!r}: {str(err).splitlines()[0]}") from err


def check_teacher_files(teacher: str, allow_pickle: bool) -> None:
    """Before any work: the teacher's weights are safetensors unless `allow_pickle`, and its tokenizer has no id past
    its embeddings (ValueError, one line; FileNotFoundError for a local folder that is not there)."""
    check_teacher_weights(teacher, allow_pickle)
    vocab_size = getattr(teacher_config(teacher), "vocab_size", None)
    if vocab_size is not None:
        check_teacher_tokenizer(teacher, len(load_fast_tokenizer(teacher, None)), vocab_size)


def check_teacher(teacher: str, task: Task, data_labels: list[str]) -> list[str]:
    """The label names in the teacher's id order; ValueError if the teacher is not a `task` classifier or the
    data has a label it does not predict. It may know more than a small training set shows (a rare tag), and the
    student then learns them all from its predictions."""
    config = teacher_config(teacher)
    suffix = task.auto_class_name.removeprefix("AutoModel")
    architectures = config.architectures or []
    if not any(a.endswith(suffix) for a in architectures):
        raise ValueError(
            f"teacher {teacher} is a {'/'.join(architectures) or config.model_type} model, not a {task.name} classifier "
            f"(*{suffix}); fine-tune it first or pass --finetune_teacher"
        )
    teacher_labels = [config.id2label[i] for i in range(config.num_labels)]
    if not set(data_labels) <= set(teacher_labels):
        unknown = sorted(set(data_labels) - set(teacher_labels))
        raise ValueError(
            f"teacher {teacher} predicts labels {teacher_labels} but the data has {data_labels} ({unknown} not "
            "among the teacher's); use a teacher fine-tuned on these labels, or pass --finetune_teacher"
        )
    return teacher_labels


def max_length_for(name_or_path: str, tokenizer: PreTrainedTokenizerBase, wanted: int | None) -> int:
    limit = (
        getattr(AutoConfig.from_pretrained(name_or_path), "max_position_embeddings", None)
        or tokenizer.model_max_length
    )
    return int(min(wanted or limit, limit, tokenizer.model_max_length))


def teacher_length(args: DistillationArguments) -> int:
    """The tokens the teacher reads of each input (`max_seq_length`, within its positions and tokenizer)."""
    teacher = args.teacher_model_name_or_path
    return max_length_for(teacher, load_fast_tokenizer(teacher, None), args.max_seq_length)


def teacher_labels(args: DistillationArguments, task: Task, data_labels: list[str]) -> list[str]:
    """The label names in id order: the teacher's (checked against the data's), or the data's for a teacher
    fine-tuned here."""
    if args.finetune_teacher:
        teacher_config(args.teacher_model_name_or_path)
        return data_labels
    return check_teacher(args.teacher_model_name_or_path, task, data_labels)


# ---------------------------------------------------------------------------------------------------------------
# Fine-tuning the teacher


def fine_tuned_teacher(
    args: DistillationArguments,
    task: Task,
    training: dict[str, Any],
    examples: dict[str, Examples],
    names: list[str],
    output: Path,
) -> Path:
    """Fine-tune the teacher with the fine-tuning job into OUTPUT/teacher (in Trainer's bf16 autocast when
    `teacher_mixed_precision` says so), or reuse the one a previous run of the same teacher, data and options left
    there."""
    target = output / TEACHER_DIR
    seed = seed_of(training)
    # Trainer's bf16 autocast where bf16 is faster on this machine (`teacher_mixed_precision`).
    bf16 = teacher_autocast(args.teacher_mixed_precision, default_device())
    tokenizer = load_fast_tokenizer(args.teacher_model_name_or_path, None)
    length = max_length_for(args.teacher_model_name_or_path, tokenizer, args.max_seq_length)
    shared = teacher_options(args, "validation" in examples, length)
    key = teacher_key(args, task, names, examples, shared, seed, bf16)
    try:
        if json.loads((target / TEACHER_INFO_FILE).read_text(encoding="utf-8")).get("fingerprint") == key:
            return target
    except (OSError, ValueError, AttributeError):
        pass
    data = {
        r: Dataset.from_dict(dict(zip(task.columns, (examples[r].inputs, examples[r].labels))))
        for r in ("train", "validation")
        if r in examples
    }
    copied = ("per_device_train_batch_size", "per_device_eval_batch_size", "seed", "disable_tqdm")
    options = dict(
        task=task.name,
        train_data=data["train"],
        validation_data=data.get("validation"),
        labels=names,
        overwrite_output_dir=True,
        report_to="none",
        num_train_epochs=args.teacher_num_train_epochs or TEACHER_EPOCHS,
        learning_rate=args.teacher_learning_rate,
        **shared,
        **({"bf16": True} if bf16 else {}),
        **{k: training[k] for k in copied if k in training},
    )
    try:
        finetune_in_minibert(args.teacher_model_name_or_path, target, allow_pickle=args.allow_pickle, **options)
    except NonFiniteError as err:  # said as the teacher's run: its own flag, and no teacher saved
        problem = getattr(err, "problem", None)
        if problem is None:
            raise NonFiniteError(f"fine-tuning the teacher: {err}") from None
        cause = learning_rate_cause(args.teacher_learning_rate, "--teacher_learning_rate")
        raise NonFiniteError(f"fine-tuning the teacher: {problem}: {cause}; the teacher was not saved") from None
    write_json(target / TEACHER_INFO_FILE, {"fingerprint": key, "source": str(args.teacher_model_name_or_path)})
    return target


def teacher_options(args: DistillationArguments, evaluates: bool, max_length: int) -> dict[str, Any]:
    """The fine-tuning options of the teacher's run: every option of the family (`FinetuningOptions`) as the
    student's run has it, by construction, with the default schedule on the teacher's own epochs
    (`teacher_num_train_epochs`; `evaluates`: it has validation data) and `max_length` tokens, what the teacher
    reads of `max_seq_length`."""
    schedule = default_schedule(args, args.teacher_num_train_epochs is not None, evaluates)
    return {**options_of(FinetuningOptions, args), **schedule, "max_seq_length": max_length}


def teacher_key(
    args: DistillationArguments,
    task: Task,
    names: list[str],
    examples: dict[str, Examples],
    shared: dict[str, Any],
    seed: int,
    bf16: bool,
) -> str:
    """What a fine-tuned teacher is kept under: its task, labels, epochs, learning rate, seed, precision, training
    and validation data and starting files, the schedule as its run takes it (`shared`: `teacher_options`; a new
    default trains a new teacher), the length as given, and each other option of the family where the run sets it
    (so a teacher kept before an option existed keeps its key)."""
    schedule = {name: shared[name] for name in SCHEDULE_OPTIONS}
    changed = options_of(FinetuningOptions, args, changed=True)
    return fingerprint(
        task.name,
        names,
        args.teacher_num_train_epochs,
        schedule,
        args.teacher_learning_rate,
        args.max_seq_length,
        seed,
        *(f"{name}={value}" for name, value in changed.items() if name not in (*SCHEDULE_OPTIONS, "max_seq_length")),
        {r: dataclasses.asdict(e) for r, e in examples.items() if r != "test"},
        *(["bf16"] if bf16 else []),
        *model_files(args.teacher_model_name_or_path),
    )


def finetune_in_minibert(
    model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, allow_pickle: bool = False, **options: Any
) -> FinetuneResult:
    """`finetune(model_name_or_path=..., output_dir=..., **options)`; a BERT folder (`model_type: bert`) trains in
    Mini-BERT's unpadded implementation and is saved back in BERT format, so the folder loads anywhere (its
    pytorch_model.bin read only with `allow_pickle`).

    The same weights and outputs (within 1e-5): on the 22.7M-parameter all-MiniLM-L6-v2 and Rotten Tomatoes
    batches a training step takes half the CPU time of transformers' BERT (one thread). transformers has no way to
    train a checkpoint in another implementation of its architecture; the converters make the round trip. A Hub
    id or another architecture trains as its Auto class loads it."""
    from modeling_minibert.sharing.bert_format import convert_bert_to_minibert, convert_minibert_to_bert
    from modeling_minibert.sharing.model_card import write_model_card

    source, target = Path(model_name_or_path), Path(output_dir)
    if not (source / "config.json").is_file() or teacher_config(str(source)).model_type != "bert":
        return finetune(model_name_or_path=str(source), output_dir=str(target), **options)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The conversions are steps of the teacher's fine-tuning, not checks the distillation reports.
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as scratch, checks_unsaid():
        minibert = convert_bert_to_minibert(source, Path(scratch) / "minibert", allow_pickle=allow_pickle)
        result = finetune(model_name_or_path=str(minibert), output_dir=str(Path(scratch) / "finetuned"), **options)
        convert_minibert_to_bert(
            result.output_dir, target, overwrite_output_dir=options.get("overwrite_output_dir", False)
        )
    # The card as fine-tuning writes it, naming the model the run started from (not the scratch copy).
    write_model_card(
        target,
        task=load_task(options["task"]).pipeline_tag,
        base_model=str(model_name_or_path),
        dataset_name=dataset_name(options.get("train_data", options.get("train_file"))),
    )
    return dataclasses.replace(result, output_dir=target)


# ---------------------------------------------------------------------------------------------------------------
# Its predictions, and their cache


@torch.inference_mode()
def predict_logits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: Sequence[Any],
    task: str,
    max_length: int,
    batch_size: int = 64,
    show_progress: bool = True,
    bf16: bool = False,
) -> list[torch.Tensor]:
    """The model's logits for each input, in input order: (C,) per text, or (num_words, C) per word list (each
    word read at its first sub-token; words cut off by `max_length` get zeros, a uniform distribution); the
    forward under bfloat16 autocast with `bf16`, the logits float32 either way.

    Batches hold inputs of similar length, each padded only to its longest (dynamic padding): short snippets
    then cost what they hold.
    """
    model.eval()
    words_given = load_task(task).conll
    encoding = load_task(task).encode(tokenizer, list(inputs), max_length)
    order = sorted(range(len(inputs)), key=lambda i: len(encoding["input_ids"][i]))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in encoding]
    results: list[torch.Tensor | None] = [None] * len(inputs)
    for start in tqdm(range(0, len(order), batch_size), desc="teacher labels", disable=not show_progress, leave=False):
        rows = order[start : start + batch_size]
        batch = tokenizer.pad({n: [encoding[n][i] for i in rows] for n in names}, return_tensors="pt")
        with torch.autocast(model.device.type, torch.bfloat16, enabled=bf16):
            logits = model(**batch).logits.float()  # (B, C) or (B, T, C)
        for b, i in enumerate(rows):
            if not words_given:
                results[i] = logits[b].clone()
                continue
            results[i] = torch.zeros(len(inputs[i]), model.config.num_labels)
            for position, word in first_subtokens(encoding.word_ids(i)):
                results[i][word] = logits[b, position]
    return results  # type: ignore[return-value]


def load_teacher_classifier(teacher: str, task: Task, allow_pickle: bool = False) -> PreTrainedModel:
    """The teacher, to label with (from safetensors only, unless `allow_pickle`). A transformers BERT checkpoint
    loads into the Mini-BERT head of the same architecture (`MiniBert*.from_pretrained(bert_folder)`): the same
    logits (within 1e-6), without computing the padding. `predict_logits` already batches texts of similar length,
    so little padding is left to skip: on the fine-tuned all-MiniLM-L6-v2 teacher and Rotten Tomatoes snippets it
    labels 1.06-1.10x as fast, one thread. Any other model loads as its Auto class loads it."""
    head = modeling_minibert.AUTO_CLASSES.get(task.auto_class)
    if head is not None and AutoConfig.from_pretrained(teacher).model_type == "bert":
        return head.from_pretrained(teacher, **teacher_load_options(allow_pickle))
    return task.auto_class.from_pretrained(teacher, **teacher_load_options(allow_pickle))


def label_with_teacher(
    teacher: str,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    inputs: dict[str, list[Any]],
    max_length: int,
    batch_size: int,
    label_names: list[str],
    show_progress: bool = True,
    bf16: bool = False,
    allow_pickle: bool = False,
) -> dict[str, list[torch.Tensor]]:
    """The teacher's logits on each split's inputs, columns in the order of `label_names`; its forward under
    bfloat16 autocast with `bf16`."""
    model = load_teacher_classifier(teacher, task, allow_pickle)
    check_finite_weights(model, f"labelling with the teacher: the teacher {teacher}", NON_FINITE_TEACHER)
    order = [model.config.label2id[name] for name in label_names]
    logits = {
        split: [
            logits[..., order]
            for logits in predict_logits(
                model, tokenizer, rows, task.name, max_length, batch_size, show_progress, bf16
            )
        ]
        for split, rows in inputs.items()
    }
    for split, rows in logits.items():  # checked before they are cached or taught
        bad, total, first = non_finite_rows(rows)
        if bad:
            raise NonFiniteError(
                f"labelling with the teacher: the teacher {teacher} gives non-finite logits for {bad} of {total} "
                f"{split} input(s) (the first: {str(inputs[split][first])[:60]!r}): "
                f"{NON_FINITE_TEACHER}"
            )
    return logits


def fingerprint(*parts: Any) -> str:
    """A hash of JSON-able parts (the inputs, the options) and of files (Paths: their bytes)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            digest.update(part.name.encode())
            with open(part, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def model_files(name_or_path: str | os.PathLike) -> list[Any]:
    """What identifies a model: its folder's config, weights and tokenizer files, or a Hub id's name."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        return [str(name_or_path)]
    names = ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json", *pickle_only_weights(folder))
    return sorted((p for p in folder.iterdir() if p.name in names or p.suffix == ".safetensors"), key=lambda p: p.name)


def save_logits_cache(folder: Path, key: str, splits: dict[str, list[torch.Tensor]]) -> None:
    """Per split: the logits stacked ((N, C), or all words' rows (W, C) with per-example word counts). Each file
    is written whole or not at all (a killed run leaves the previous cache or none)."""
    tensors = {}
    for split, rows in splits.items():
        tensors[f"{split}.logits"] = torch.cat([r.reshape(-1, r.shape[-1]) for r in rows]).contiguous()
        tensors[f"{split}.rows"] = torch.tensor([r.shape[0] if r.dim() == 2 else 1 for r in rows])
    write_bytes(folder / TEACHER_LOGITS_FILE, save(tensors))
    write_json(
        folder / TEACHER_LOGITS_INFO_FILE, {"fingerprint": key, "splits": {s: len(r) for s, r in splits.items()}}
    )


def load_logits_cache(
    folder: Path, key: str, words_given: bool, num_labels: int, counts: dict[str, int] | None = None
) -> dict[str, list[torch.Tensor]] | None:
    """The cached logits if `folder` holds them, whole, for exactly this teacher, data and options, else None
    (a torn or foreign cache is recomputed). A cache that claims this key but whose tensors are not what its info
    says (`counts` examples per split, when given; float32 logits of `num_labels` columns, one row per text or per
    word) is refused: ValueError, one line, naming the tensor (a tampered file, not one this job wrote); one that
    holds a NaN or an infinity, NonFiniteError naming the file (the teacher's logits are checked before they are
    cached, so the file was changed since)."""
    try:
        info = json.loads((folder / TEACHER_LOGITS_INFO_FILE).read_text(encoding="utf-8"))
        if info.get("fingerprint") != key:
            return None
        tensors = load((folder / TEACHER_LOGITS_FILE).read_bytes())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError, SafetensorError):
        return None
    path = folder / TEACHER_LOGITS_FILE
    splits = info.get("splits")
    if not isinstance(splits, dict) or (counts is not None and splits != counts):
        raise ValueError(
            f"{folder / TEACHER_LOGITS_INFO_FILE} lists the splits {splits}, expected {counts}; delete it "
            "to label again"
        )
    checked = {
        split: cached_split(path, tensors, split, count, words_given, num_labels) for split, count in splits.items()
    }
    for split, rows in checked.items():
        bad, total, first = non_finite_rows(rows)
        if bad:
            raise NonFiniteError(
                f"the cached teacher logits {path} hold non-finite values ({bad} of {total} {split} row(s), the "
                f"first: row {first}); delete it and {TEACHER_LOGITS_INFO_FILE} beside it to label again with the "
                "teacher (nothing was trained)"
            )
    return checked


def cached_split(
    path: Path, tensors: dict[str, torch.Tensor], split: str, count: int, words_given: bool, num_labels: int
) -> list[torch.Tensor]:
    """One split of the cache at `path`, checked: `split.logits` float32 (W, num_labels) and `split.rows` int64
    (count,) of per-example row counts (1 for a text) summing to W; ValueError naming the tensor otherwise."""
    logits, rows = tensors.get(f"{split}.logits"), tensors.get(f"{split}.rows")
    if logits is None or rows is None:
        raise ValueError(f"{path} holds no {split}.logits or {split}.rows; delete it to label again")
    if logits.dtype != torch.float32 or logits.dim() != 2 or logits.shape[1] != num_labels:
        expected = [int(rows.sum()) if rows.dim() == 1 else "N", num_labels]
        raise ValueError(
            f"{path}: {split}.logits is {str(logits.dtype).removeprefix('torch.')} of shape "
            f"{list(logits.shape)}, expected float32 of shape {expected} ({num_labels} labels); delete it "
            "to label again"
        )
    per_example = rows.tolist() if rows.dtype == torch.int64 and rows.dim() == 1 else None
    if (
        per_example is None
        or len(per_example) != count
        or sum(per_example) != logits.shape[0]
        or any(n < 0 if words_given else n != 1 for n in per_example)
    ):
        shown = per_example[:10] if per_example is not None else f"{rows.dtype} of shape {list(rows.shape)}"
        raise ValueError(
            f"{path}: {split}.rows is {shown}, expected {count} int64 counts ("
            f"{'one per word' if words_given else 'one row per text'}) summing to the {logits.shape[0]} rows "
            f"of {split}.logits; delete it to label again"
        )
    parts = list(torch.split(logits, per_example))
    return parts if words_given else [p[0] for p in parts]


def teacher_targets(
    args: DistillationArguments,
    task: Task,
    teacher: str,
    inputs: dict[str, list[Any]],
    names: list[str],
    output: Path,
    batch_size: int,
    show_progress: bool,
) -> tuple[dict[str, list[torch.Tensor]], bool]:
    """The teacher's logits per split, from the output folder's cache when it holds them for exactly these
    inputs (else computed and cached there at once); and whether the cache was used."""
    tokenizer = load_fast_tokenizer(teacher, None)
    length = max_length_for(teacher, tokenizer, args.max_seq_length)
    device = torch.device("cpu")  # where `load_teacher_classifier` leaves it
    bf16 = teacher_autocast(args.teacher_mixed_precision, device)
    # bf16 enters the key only when on: a float32 cache keeps the key it had before the option existed.
    key = fingerprint(task.name, length, names, inputs, *(["bf16"] if bf16 else []), *model_files(teacher))
    cached = load_logits_cache(
        output, key, task.conll, len(names), {split: len(rows) for split, rows in inputs.items()}
    )
    if cached is not None:
        return cached, True
    if show_progress:
        print(precision_line(args.teacher_mixed_precision, device))
    logits = label_with_teacher(
        teacher,
        tokenizer,
        task,
        inputs,
        length,
        batch_size,
        names,
        show_progress,
        bf16,
        allow_pickle=args.allow_pickle,
    )
    save_logits_cache(output, key, logits)
    return logits, False
