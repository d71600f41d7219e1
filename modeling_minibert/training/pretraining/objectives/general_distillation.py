"""General (task-agnostic) distillation from a teacher encoder, MiniLMv2-style; `minibert pretrain
--teacher_model_name_or_path T` (the objective `general_distillation`).

The student (a Mini-BERT with an MLM head) reads raw text cut by a subset of the teacher's WordPiece vocabulary
(tokenization/subset.py), so both models see the same tokens: the student's ids are mapped into the teacher's.
It learns, on every batch:

    relations   MiniLMv2's multi-head self-attention relations (Wang et al. 2021) at the teacher's chosen layer
                and the student's last (modeling_minibert/training/distillation/relations.py): query-query, key-key and value-value.
    hidden      MSE between the teacher's last hidden states and the student's through a learned projection
                (student width -> teacher width), at the real tokens, plus the same between their mean-pooled
                sentence embeddings (what sentence-transformers' all-MiniLM-L6-v2 returns).
    mlm         the student's own masked-LM loss, so the saved model still fills masks.

Both models' queries, keys and values are read through transformers' attention interface (a recording attention
function, modeling_minibert/training/distillation/relations.py), so the teacher needs no hooks. The teacher is frozen, in eval
mode, run without grad on the same (mapped, masked) tokens, and is not part of the trained module's state: the
checkpoints hold the student and the projection only, and a resumed run is exact. Its forward is most of a step's
work, so where bfloat16 is faster on this machine it runs under bf16 autocast (`teacher_mixed_precision`);
the student trains as the run says (`mixed_precision`).

The student starts from the teacher (its embeddings and, by default, its layers: teacher_init.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForMaskedLM
from modeling_minibert.training.distillation.relations import padded, recording, relation_loss, set_recording_attention
from modeling_minibert.training.pretraining.objectives.base import Curve, Objective, SparseMLMOutput
from modeling_minibert.training.pretraining.objectives.teacher_init import (
    BASIS_DOCUMENTS,
    BASIS_NAMES,
    TEACHER_INIT_BASES,
    TEACHER_INITS,
    hidden_state_directions,
    init_from_teacher,
    resolved_basis,
    resolved_teacher_init,
)
from modeling_minibert.utils.logging import quiet_transformers
from modeling_minibert.utils.precision import (
    TEACHER_PRECISION_HELP,
    TEACHER_PRECISIONS,
    check_teacher_precision,
    default_device,
    precision_line,
    teacher_autocast,
)
from modeling_minibert.utils.teachers import (
    ALLOW_PICKLE_HELP,
    check_teacher_tokenizer,
    check_teacher_weights,
    teacher_load_options,
)

# --- the losses (the attention relations' is modeling_minibert/training/distillation/relations.py) -------------------------------------


def hidden_loss(teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSE at the real tokens of (B, T, H_t) hidden states plus MSE of their mean-pooled sentence embeddings."""
    weights = mask.unsqueeze(-1).float()  # (B, T, 1)
    tokens = (((student - teacher) ** 2) * weights).sum() / (weights.sum() * teacher.shape[-1])
    return tokens + nn.functional.mse_loss(mean_pooled(student, weights), mean_pooled(teacher, weights))


def mean_pooled(hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(B, T, H) hidden states, (B, T, 1) 1 at real tokens -> (B, H) their mean over the real tokens."""
    return (hidden * weights).sum(1) / weights.sum(1)


# --- the teacher -------------------------------------------------------------------------------------------------


@dataclass
class Teacher:
    """A loaded, checked teacher: its frozen model (recording attention), tokenizer, and what is read from it."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    layer: int  # 0-based: the layer whose attention relations are taught
    relation_heads: int
    mixed_precision: str = "no"  # one of TEACHER_PRECISIONS: how its forward runs (`teacher_autocast`)

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size


def is_encoder(config) -> bool:
    """Whether a transformers config describes a bidirectional encoder (BERT's family: it has a masked-LM head
    class; a Mini-BERT, registered with the Auto classes rather than in transformers' own table, too)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    masked_lm = (
        config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES or config.model_type == MiniBertConfig.model_type
    )
    return masked_lm and not getattr(config, "is_decoder", False) and not getattr(config, "is_encoder_decoder", False)


def load_teacher_encoder(
    name: str,
    vocab_size: int | None,
    layer: int | None,
    relation_heads: int | None,
    student_hidden_size: int,
    max_seq_length: int,
    mixed_precision: str = "no",
    allow_pickle: bool = False,
) -> Teacher:
    """Check and load the teacher `name` (a folder or Hub id): ValueError, one line each, for weights that are only
    pickles (unless `allow_pickle`), a model that is not an encoder or whose embeddings are narrower than its hidden
    states, a tokenizer that is not BERT's WordPiece or has more ids than the embeddings have rows, a `vocab_size`
    the subset cannot have, a layer it lacks, relation heads that do not divide both widths, or `max_seq_length`
    beyond its positions."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from tokenization.subset import check_subset_size, wordpiece_settings

    check_teacher_weights(name, allow_pickle)
    with quiet_transformers():
        config = AutoConfig.from_pretrained(name)
    if not is_encoder(config):
        raise ValueError(
            f"teacher_model_name_or_path={name} is a {config.model_type!r} "
            f"{'decoder' if getattr(config, 'is_decoder', False) else 'model'}, not an encoder: general "
            "distillation reads a bidirectional encoder's attention (BERT's family)"
        )
    width = getattr(config, "embedding_size", config.hidden_size)
    if width != config.hidden_size:  # ELECTRA's factorized embeddings: projected to the hidden width by a layer
        raise ValueError(
            f"teacher_model_name_or_path={name} has embedding_size={width} != hidden_size="
            f"{config.hidden_size}: the student starts from the teacher's embeddings in its hidden space, "
            "and these are projected into it by a layer of their own; use a teacher whose embeddings "
            "are as wide as its hidden states"
        )
    layers = config.num_hidden_layers
    chosen = layers - 1 if layer is None else layer - 1
    if not 0 <= chosen < layers:
        raise ValueError(f"teacher_layer={layer} is not a layer of {name} (1 to {layers})")
    heads = relation_heads or config.num_attention_heads
    if config.hidden_size % heads or student_hidden_size % heads:
        raise ValueError(
            f"relation_heads={heads} must divide the teacher's hidden size ({config.hidden_size}) and "
            f"the student's ({student_hidden_size})"
        )
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={max_seq_length} exceeds the teacher's max_position_embeddings="
            f"{config.max_position_embeddings}"
        )
    tokenizer = AutoTokenizer.from_pretrained(name)
    wordpiece_settings(tokenizer, f"teacher_model_name_or_path={name}")
    check_teacher_tokenizer(name, len(tokenizer), config.vocab_size)
    if vocab_size is not None:  # None: the whole vocabulary
        check_subset_size(tokenizer, vocab_size, name)
    with quiet_transformers():
        model = AutoModel.from_pretrained(name, config=config, **teacher_load_options(allow_pickle))
    set_recording_attention(model, f"teacher_model_name_or_path={name}")
    model.eval().requires_grad_(False)
    return Teacher(name, model, tokenizer, chosen, heads, mixed_precision)


# --- the module trained and the objective ------------------------------------------------------------------------


@dataclass
class TeacherArguments:
    """General distillation's own fields of `PretrainingArguments`: `minibert pretrain --teacher_model_name_or_path`."""

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": (
                "general distillation: a BERT-family encoder (folder or Hub id) whose attention relations and hidden states "
                "a new student learns, with MLM, on its WordPiece vocabulary (or a vocab_size subset)"
            )
        },
    )
    teacher_layer: int | None = field(
        default=None,
        metadata={"help": ("the teacher layer whose attention relations are taught (1 = the first); unset: its last")},
    )
    relation_heads: int | None = field(
        default=None,
        metadata={
            "help": (
                "attention-relation heads (must divide both models' hidden sizes); unset: the teacher's attention heads"
            )
        },
    )
    # auto: students started from the teacher's layers score higher. Measured:
    # lab/README.md#the-students-layers-from-the-teacher
    teacher_init: str = field(
        default="auto",
        metadata={
            "help": (
                "what the student starts with from the teacher: embeddings (its word, position and segment embeddings on "
                "their principal directions), layers (those, and every encoder layer from evenly spaced teacher layers by "
                "weight selection) or auto (layers where the teacher has BERT's parameter names and the student is no "
                "larger, else embeddings)"
            ),
            "choices": list(TEACHER_INITS),
        },
    )
    # auto: with the layers, the hidden states' directions make better students than the embeddings'. Measured:
    # lab/README.md#on-the-directions-of-the-teachers-hidden-states
    teacher_init_basis: str = field(
        default="auto",
        metadata={
            "help": (
                "the directions of the teacher's hidden width that the student's narrower one keeps: hidden_states (the "
                f"principal directions of the teacher's hidden states, every layer's, on the first {BASIS_DOCUMENTS} training "
                "documents), embeddings (those of its word-embedding rows) or auto (hidden_states when the layers are taken, "
                "else embeddings)"
            ),
            "choices": list(TEACHER_INIT_BASES),
        },
    )
    # auto: a bf16 teacher where it is faster, for the same student. Measured: lab/README.md#general-distillation
    teacher_mixed_precision: str = field(
        default="auto",
        metadata={
            "help": "how the teacher's forward runs: " + TEACHER_PRECISION_HELP,
            "choices": list(TEACHER_PRECISIONS),
        },
    )
    allow_pickle: bool = field(default=False, metadata={"help": ALLOW_PICKLE_HELP})


@dataclass
class GeneralDistillationOutput(SparseMLMOutput):
    """loss: mlm_loss + relation_loss + hidden_loss. logits (M, V) / masked_positions (M,): the student's sparse MLM."""

    relation_loss: torch.Tensor | None = None
    hidden_loss: torch.Tensor | None = None


class StudentWithTeacher(nn.Module):
    """The student and the projection of its hidden states to the teacher's width. The teacher is held outside the
    module's parameters and state (never trained, never checkpointed)."""

    def __init__(self, student: MiniBertForMaskedLM, teacher: Teacher, teacher_ids: torch.Tensor):
        super().__init__()
        self.student = student
        self.projection = nn.Linear(student.config.hidden_size, teacher.hidden_size)
        self.register_buffer("teacher_ids", teacher_ids, persistent=False)  # (V_s,) student id -> teacher id
        self.teacher = (teacher,)  # a tuple: not a submodule
        set_recording_attention(student, "the student")

    def forward(
        self, input_ids, attention_mask, token_type_ids, labels, sparse_prediction: bool | None = None, **kwargs
    ) -> GeneralDistillationOutput:
        teacher = self.teacher[0]
        if teacher.model.device != input_ids.device:
            teacher.model.to(input_ids.device)
        bf16 = teacher_autocast(teacher.mixed_precision, input_ids.device)
        with (
            torch.no_grad(),
            torch.autocast(input_ids.device.type, torch.bfloat16, enabled=bf16),
            recording(teacher.layer) as taught,
        ):
            target = teacher.model(
                input_ids=self.teacher_ids[input_ids],
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                **padded(teacher.model),
            ).last_hidden_state  # (B, T, H_t)
        layers = self.student.config.num_hidden_layers
        # Padded, not unpadded: the relations compare whole (B, T) rows with the teacher's.
        with recording(layers - 1) as learnt:
            out = self.student(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                labels=labels,
                sparse_prediction=sparse_prediction,
                output_hidden_states=True,
                unpad_inputs=False,
                masked_positions=kwargs.get("masked_positions"),
                batch_plan=kwargs.get("batch_plan"),
            )
        relations = relation_loss(taught.qkv, learnt.qkv, attention_mask, teacher.relation_heads)
        hidden = hidden_loss(target.float(), self.projection(out.hidden_states[-1]).float(), attention_mask)
        return GeneralDistillationOutput(
            loss=out.loss + relations + hidden,
            mlm_loss=out.loss,
            logits=out.logits,
            masked_positions=out.masked_positions,
            relation_loss=relations,
            hidden_loss=hidden,
        )


class GeneralDistillation(Objective):
    name = "general_distillation"
    description = (
        "a teacher's attention relations and hidden states (MiniLMv2) plus MLM; set by --teacher_model_name_or_path"
    )
    model_class = MiniBertForMaskedLM
    saved_prefix = "student."
    stat_keys = (*Objective.stat_keys, "relation_loss", "hidden_loss")
    # The teacher's whole vocabulary, 15% masking (the teacher reads the masked text too), 1,500 steps and the student
    # under bf16 autocast where it is faster: the better students. Measured: lab/README.md#general-distillation
    recipe = {
        **Objective.recipe,
        "vocab_size": None,
        "mlm_probability": 0.15,
        "max_steps": 1500,
        "mixed_precision": "auto",
    }
    # Its recipe was measured on the NSP pairs, half of them with another document's B: kept so.
    random_next = 0.5
    arguments = TeacherArguments
    curves = (
        *Objective.curves[:2],
        Curve("loss", "relation_loss", "train attention-relation loss"),
        Curve("loss", "hidden_loss", "train hidden-state loss"),
        *Objective.curves[2:3],
        Curve("loss", "eval_relation_loss", "held-out attention-relation loss", eval=True),
        *Objective.curves[3:],
    )

    def __init__(self, teacher: Teacher | None = None, init: str = "embeddings", basis: str = "embeddings"):
        """init: "layers" or "embeddings", as `resolved_teacher_init` made it; basis: "hidden_states" or
        "embeddings" (`resolved_basis`)."""
        if teacher is None:
            raise ValueError("objective=general_distillation needs a teacher: pass teacher_model_name_or_path")
        self.teacher = teacher
        self.init = init
        self.basis = basis
        self.teacher_ids: torch.Tensor | None = None
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self.basis_documents: list[str] = []

    @classmethod
    def check_arguments(cls, args) -> None:
        if args.model_name_or_path or args.tokenizer_name:
            raise ValueError(
                "teacher_model_name_or_path starts a new student on the teacher's vocabulary; it cannot "
                "be combined with model_name_or_path or tokenizer_name"
            )
        if args.relation_heads is not None and args.relation_heads < 1:
            raise ValueError(f"relation_heads={args.relation_heads} must be at least 1")
        check_teacher_precision(args.teacher_mixed_precision)
        if args.teacher_init not in TEACHER_INITS:
            raise ValueError(f"teacher_init={args.teacher_init!r} must be one of {list(TEACHER_INITS)}")
        if args.teacher_init_basis not in TEACHER_INIT_BASES:
            raise ValueError(
                f"teacher_init_basis={args.teacher_init_basis!r} must be one of {list(TEACHER_INIT_BASES)}"
            )

    @classmethod
    def from_arguments(cls, args, config: MiniBertConfig) -> GeneralDistillation:
        if args.teacher_model_name_or_path is None:
            raise ValueError("objective=general_distillation needs a teacher: pass teacher_model_name_or_path")
        teacher = load_teacher_encoder(
            args.teacher_model_name_or_path,
            args.vocab_size,
            args.teacher_layer,
            args.relation_heads,
            config.hidden_size,
            args.max_seq_length,
            args.teacher_mixed_precision,
            args.allow_pickle,
        )
        init, line = resolved_teacher_init(args.teacher_init, config, teacher.model)
        basis = resolved_basis(args.teacher_init_basis, init)
        print(precision_line(teacher.mixed_precision, default_device()))
        print(
            f"{line}, on the principal directions of its {BASIS_NAMES[basis]} (teacher_init_basis="
            f"{args.teacher_init_basis})"
        )
        return cls(teacher, init, basis)

    def make_tokenizer(self, args, documents: list[str]) -> PreTrainedTokenizerBase:
        from tokenization.subset import subset_tokenizer

        teacher = self.teacher.tokenizer
        size = args.vocab_size or len(teacher)
        print(
            f"keeping all {size:,} pieces of the teacher's vocabulary"
            if size == len(teacher)
            else f"keeping the {size:,} pieces of the teacher's vocabulary it uses most on {len(documents):,} documents"
        )
        return subset_tokenizer(teacher, documents, size, args.max_seq_length, self.teacher.name)

    def set_vocabulary(self, tokenizer: PreTrainedTokenizerBase, documents: list[str]) -> None:
        from tokenization.subset import to_teacher_ids

        self.teacher_ids = torch.tensor(to_teacher_ids(tokenizer, self.teacher.tokenizer))
        self.tokenizer, self.basis_documents = tokenizer, documents[:BASIS_DOCUMENTS]

    def build_model(self, config: MiniBertConfig, source: Path | None) -> torch.nn.Module:
        student = MiniBertForMaskedLM(config)
        layers = self.init == "layers"
        basis = None  # the embeddings' own directions
        if self.basis == "hidden_states":
            basis = hidden_state_directions(
                self.teacher.model, self.tokenizer, self.teacher_ids, self.basis_documents, config.hidden_size
            )
        basis = init_from_teacher(student, self.teacher.model, self.teacher_ids, layers=layers, basis=basis)
        model = StudentWithTeacher(student, self.teacher, self.teacher_ids)
        if layers:  # the student's hidden states start as the teacher's on the basis: the projection maps them back
            with torch.no_grad():
                model.projection.weight.copy_(basis)
                model.projection.bias.zero_()
        return model

    def saved_model(self, model: StudentWithTeacher) -> MiniBertForMaskedLM:
        return model.student

    def statistics(self, outputs: GeneralDistillationOutput, batch: dict) -> torch.Tensor:
        n = float(batch["input_ids"].shape[0])
        taught = torch.stack([outputs.relation_loss.detach().float() * n, outputs.hidden_loss.detach().float() * n])
        return torch.cat([super().statistics(outputs, batch), taught])

    def train_metrics(self, sums: dict[str, float]) -> dict:
        return {**super().train_metrics(sums), **self.taught_metrics(sums)}

    def eval_metrics(self, sums: dict[str, float]) -> dict:
        results = {**super().eval_metrics(sums), **self.taught_metrics(sums, prefix="eval_")}
        return {
            **results,
            "eval_loss": results["eval_mlm_loss"] + results["eval_relation_loss"] + results["eval_hidden_loss"],
        }

    @staticmethod
    def taught_metrics(sums: dict[str, float], prefix: str = "") -> dict:
        return {f"{prefix}{key}": sums[key] / sums["examples"] for key in ("relation_loss", "hidden_loss")}
