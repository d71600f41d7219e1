"""What distillation trains with, beside fine-tuning's parts: the loss, the `Trainer` that uses it, the teacher's
attention relations taught beside its predictions, the student's features with the teacher's targets, their collator
and the scores against the teacher (as transformers' example scripts keep `trainer_qa.py` beside `run_qa.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import AutoConfig, AutoModel, EvalPrediction, PreTrainedModel, PreTrainedTokenizerBase, Trainer

from modeling_minibert.training.distillation.arguments import DistillationArguments, check_distillation_loss
from modeling_minibert.training.distillation.relations import padded, recording, relation_loss, set_recording_attention
from modeling_minibert.training.distillation.teacher import NON_FINITE_TEACHER, teacher_config
from modeling_minibert.training.finetuning.loading import load_fast_tokenizer
from modeling_minibert.training.finetuning.task import Examples, Task
from modeling_minibert.training.finetuning.tasks import load_task
from modeling_minibert.training.finetuning.tasks.token_classification import first_subtokens
from modeling_minibert.training.finetuning.windows import per_text, pool_logits, text_count
from modeling_minibert.utils.finite import check_finite_weights
from modeling_minibert.utils.logging import quiet_transformers
from modeling_minibert.utils.precision import teacher_autocast
from modeling_minibert.utils.teachers import teacher_load_options
from tokenization.subset import to_teacher_ids

TEACHER_COLUMNS = ["teacher_logits", "teacher_mask"]  # what the batches carry beside the student's inputs


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    alpha: float = 0.0,
    labels: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    soft_loss: str = "kl",
) -> torch.Tensor:
    """(1 - alpha) * soft term + alpha * cross-entropy(student, labels).

    The soft term is T^2 * KL(teacher_T || student_T) with `soft_loss="kl"` (Hinton et al. 2015: T^2 keeps its
    gradients on the hard term's scale whatever the temperature), or with `soft_loss="mse"` the mean squared
    difference of the raw logits, which keeps how sure the teacher is and has no temperature (Kim et al. 2021,
    "Comparing Kullback-Leibler Divergence and Mean Squared Error Loss in Knowledge Distillation"). Logits (B, C) or
    (B, T, C); `mask` (B, T) marks the positions that have a teacher target; labels -100 are ignored. The soft term
    is averaged over the examples (or masked positions).
    """
    check_distillation_loss(soft_loss)
    num_labels = student_logits.shape[-1]
    if soft_loss == "mse":
        soft = (student_logits.float() - teacher_logits.float()).pow(2).mean(-1)  # (B,) or (B, T)
    else:
        student = F.log_softmax(student_logits.float() / temperature, dim=-1)
        teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
        soft = temperature**2 * F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)
    if mask is not None:
        keep = mask == 1
        soft = soft[keep].sum() / keep.sum().clamp(min=1)
    else:
        soft = soft.mean()
    loss = (1.0 - alpha) * soft
    if alpha > 0 and labels is not None and bool((labels != -100).any()):
        loss = loss + alpha * F.cross_entropy(
            student_logits.float().reshape(-1, num_labels), labels.reshape(-1), ignore_index=-100
        )
    return loss


@dataclass
class RelationTransfer:
    """The fine-tuned teacher's self-attention relations at its last layer, taught to the student's last layer beside
    its predictions: TinyBERT's intermediate-layer transfer in task distillation (Jiao et al. 2020), with MiniLMv2's
    relations, which need neither the widths nor the head counts to match, only the tokens. The teacher reads each
    training batch, the student's ids mapped to its own; evaluation scores the predictions only."""

    teacher: PreTrainedModel  # the teacher's encoder: frozen, in eval mode, recording its attention
    teacher_ids: torch.Tensor  # (V_s,) student id -> teacher id
    heads: int  # relation heads: divide both widths
    weight: float
    mixed_precision: str = "no"  # the teacher's forward: `precision.teacher_autocast`

    def outputs_and_loss(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor]:
        """The student's outputs on `inputs`, and `weight` x the relation loss to the teacher on the same tokens."""
        student = getattr(model, "module", model)  # unwrapped from DistributedDataParallel
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        with recording(student.config.num_hidden_layers - 1) as learnt:
            outputs = model(**inputs, **padded(student))
        if self.teacher.device != ids.device:
            self.teacher.to(ids.device)
            self.teacher_ids = self.teacher_ids.to(ids.device)
        bf16 = teacher_autocast(self.mixed_precision, ids.device)
        with (
            torch.no_grad(),
            torch.autocast(ids.device.type, torch.bfloat16, enabled=bf16),
            recording(self.teacher.config.num_hidden_layers - 1) as taught,
        ):
            self.teacher(
                input_ids=self.teacher_ids[ids],
                attention_mask=mask,
                token_type_ids=inputs.get("token_type_ids"),
                **padded(self.teacher),
            )
        return outputs, self.weight * relation_loss(taught.qkv, learnt.qkv, mask, self.heads)


class DistillationTrainer(Trainer):
    """`Trainer` whose loss is `distillation_loss` against the batch's `teacher_logits` column, plus, with
    `relations`, the teacher's attention relations while training."""

    def __init__(
        self,
        *args: Any,
        temperature: float = 2.0,
        alpha: float = 0.0,
        distillation_loss: str = "kl",
        relations: RelationTransfer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.temperature = temperature
        self.alpha = alpha
        self.distillation_loss = distillation_loss
        self.relations = relations

    def train(self, *args: Any, **kwargs: Any):
        if self.relations is None:
            return super().train(*args, **kwargs)
        # The student records its attention while it trains; it is saved and returned with its own backend.
        backend = self.model.config._attn_implementation
        set_recording_attention(self.model, "the student")
        try:
            return super().train(*args, **kwargs)
        finally:
            self.model.set_attn_implementation(backend)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        model_inputs = {k: v for k, v in inputs.items() if k not in (*TEACHER_COLUMNS, "labels")}
        if self.relations is not None and model.training:
            outputs, relations = self.relations.outputs_and_loss(model, model_inputs)
        else:
            outputs, relations = model(**model_inputs), 0.0
        loss = distillation_loss(
            outputs.logits,
            inputs["teacher_logits"],
            self.temperature,
            self.alpha,
            inputs.get("labels"),
            inputs.get("teacher_mask"),
            self.distillation_loss,
        )
        loss = loss + relations
        return (loss, outputs) if return_outputs else loss


class DistillationCollator:
    """The task's collator for the model inputs and labels; the teacher's logits (and, for token classification,
    their mask) padded to the batch's length by hand, since those collators pad only token columns."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, task: str) -> None:
        self.base = load_task(task).collator(tokenizer)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        features = [dict(f) for f in features]
        teacher = [torch.as_tensor(f.pop("teacher_logits"), dtype=torch.float32) for f in features]
        masks = [torch.as_tensor(f.pop("teacher_mask")) for f in features if "teacher_mask" in f]
        batch = self.base(features)
        if not masks:
            batch["teacher_logits"] = torch.stack(teacher)
            return batch
        length = batch["input_ids"].shape[1]
        batch["teacher_logits"] = torch.stack([F.pad(t, (0, 0, 0, length - t.shape[0])) for t in teacher])
        batch["teacher_mask"] = torch.stack([F.pad(m, (0, length - m.shape[0])) for m in masks])
        return batch


def student_features(
    tokenizer: PreTrainedTokenizerBase,
    examples: Examples,
    teacher_logits: list[torch.Tensor],
    task: str,
    max_length: int,
    label2id: dict[str, int],
) -> Dataset:
    """The student's tokens with the hard labels (-100 where there are none) and the teacher's targets: (C,) per
    text, or per token (T, C) with a mask marking each word's first sub-token."""
    encoding = load_task(task).encode(tokenizer, examples.inputs, max_length)
    if not load_task(task).conll:
        labels = [label2id[y] if y is not None else -100 for y in examples.labels]
        return Dataset.from_dict(
            {**encoding, "labels": labels, "teacher_logits": [t.tolist() for t in teacher_logits]}
        )
    labels, targets, masks = [], [], []
    for i, tags in enumerate(examples.labels):
        length = len(encoding["input_ids"][i])
        row_labels, row_targets, row_mask = [-100] * length, torch.zeros(length, len(label2id)), [0] * length
        for position, word in first_subtokens(encoding.word_ids(i)):
            row_labels[position] = label2id[tags[word]] if tags is not None else -100
            row_mask[position] = 1
            row_targets[position] = teacher_logits[i][word]
        labels.append(row_labels)
        targets.append(row_targets.tolist())
        masks.append(row_mask)
    return Dataset.from_dict({**encoding, "labels": labels, "teacher_logits": targets, "teacher_mask": masks})


def distillation_metrics(task: Task, names: list[str], owners: list[int] | None = None):
    """The task's own scores of the student and of the teacher (`teacher_*`), against the hard labels, plus the
    student's agreement with the teacher's argmax and the mean KL(teacher || student) at temperature 1. Texts
    read in windows (`owners`: each row's text) are scored by the mean of their windows' logits, both models'."""
    score = task.metrics(names)

    def compute(p: EvalPrediction) -> dict[str, float]:
        labels, teacher, *mask = p.label_ids
        student = np.asarray(p.predictions)
        if owners:
            teacher = pool_logits(teacher, owners, text_count(owners))
            student, labels = per_text(student, labels, owners)
        keep = labels != -100 if not mask else (mask[0] == 1) & (labels != -100)
        log_s = torch.log_softmax(torch.as_tensor(student[keep], dtype=torch.float32), -1)
        log_t = torch.log_softmax(torch.as_tensor(teacher[keep], dtype=torch.float32), -1)
        return {
            **score(EvalPrediction(student.argmax(-1), labels)),
            **{f"teacher_{k}": v for k, v in score(EvalPrediction(teacher.argmax(-1), labels)).items()},
            "teacher_agreement": float((student.argmax(-1)[keep] == teacher.argmax(-1)[keep]).mean()),
            "kl_to_teacher": float(F.kl_div(log_s, log_t, log_target=True, reduction="none").sum(-1).mean()),
        }

    return compute


# ---------------------------------------------------------------------------------------------------------------
# The teacher's attention relations: whether and how they can be taught


def token_alignment(
    args: DistillationArguments, task: Task, tokenizer: PreTrainedTokenizerBase, inputs: list[Any], length: int
) -> tuple[list[int], int]:
    """The teacher's id of each student id and the relation heads (the teacher's attention heads); ValueError,
    saying why, unless those heads divide both widths and the student cuts every input into the teacher's very
    tokens (mapped id for id, at the student's `length`)."""
    teacher = str(args.teacher_model_name_or_path)
    config, student = teacher_config(teacher), AutoConfig.from_pretrained(args.model_name_or_path)
    heads = config.num_attention_heads
    if config.hidden_size % heads or student.hidden_size % heads:
        raise ValueError(
            f"the teacher's {heads} attention heads do not divide the student's hidden size ({student.hidden_size})"
        )
    if length > getattr(config, "max_position_embeddings", length):
        raise ValueError(f"the student reads {length} tokens, the teacher at most {config.max_position_embeddings}")
    teacher_tokenizer = load_fast_tokenizer(teacher, None)
    mapping = to_teacher_ids(tokenizer, teacher_tokenizer)
    encode = load_task(task.name).encode
    ours, theirs = (encode(t, list(inputs), length)["input_ids"] for t in (tokenizer, teacher_tokenizer))
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if [mapping[x] for x in a] != b]
    if differ:
        raise ValueError(
            f"the student cuts {len(differ):,} of {len(inputs):,} training inputs into other tokens than "
            f"the teacher (the first: {str(inputs[differ[0]])[:60]!r})"
        )
    return mapping, heads


def relation_plan(
    args: DistillationArguments, task: Task, tokenizer: PreTrainedTokenizerBase, inputs: list[Any], length: int
) -> tuple[list[int], int] | None:
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
    with quiet_transformers():  # the classifier's weights are left out on purpose
        model = AutoModel.from_pretrained(teacher, **teacher_load_options(args.allow_pickle))
    # Checked here too: with cached logits the teacher was not loaded to label.
    check_finite_weights(model, f"relation_weight={args.relation_weight}: the teacher {teacher}", NON_FINITE_TEACHER)
    try:
        set_recording_attention(model, f"teacher_model_name_or_path={args.teacher_model_name_or_path}")
    except ValueError as err:
        raise ValueError(f"relation_weight={args.relation_weight}: {err}") from None
    mapping, heads = plan
    return RelationTransfer(
        model.eval().requires_grad_(False),
        torch.tensor(mapping),
        heads,
        args.relation_weight,
        args.teacher_mixed_precision,
    )


__all__ = [
    "DistillationCollator",
    "DistillationTrainer",
    "RelationTransfer",
    "TEACHER_COLUMNS",
    "distillation_loss",
    "distillation_metrics",
    "relation_plan",
    "relation_transfer",
    "student_features",
]
