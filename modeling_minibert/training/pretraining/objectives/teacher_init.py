"""How a general-distillation student starts from its teacher (`--teacher_init`, `--teacher_init_basis`).

The student's word embeddings are the teacher's rows of the kept pieces projected on
as many directions of the teacher's width as the student has, and the position and segment embeddings on the same
directions, so that their sums stay in the same space. By default (`teacher_init=auto`) its encoder layers start
from the teacher's too, by weight selection (Xu et al. 2023): student layer i from evenly spaced teacher layers (3
of 6: the 2nd, 4th and 6th), each weight's side in the residual stream projected on the same directions and its
inner width (queries, keys, values; feed-forward units) an evenly spaced selection of the teacher's. A student of
the teacher's shape then starts as its copy. `auto` keeps to the embeddings, saying so, where the layers cannot be
taken (a student wider or deeper than the teacher, a teacher without BERT's names). The directions
(`teacher_init_basis`) are, with the layers, the principal directions of the teacher's hidden states on the first
training documents (the residual stream the layers read and write), and without them those of its embedding rows.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForMaskedLM
from modeling_minibert.training.distillation.relations import padded

TEACHER_INITS = ("auto", "layers", "embeddings")
TEACHER_INIT_BASES = ("auto", "hidden_states", "embeddings")
BASIS_NAMES = {"hidden_states": "hidden states", "embeddings": "word embeddings"}


def resolved_basis(basis: str, init: str) -> str:
    """`teacher_init_basis` for a student starting from `init` ("layers" or "embeddings"): auto is the hidden
    states' directions when the layers are taken, the embeddings' otherwise."""
    if basis != "auto":
        return basis
    return "hidden_states" if init == "layers" else "embeddings"


def pca_projection(rows: torch.Tensor, width: int) -> torch.Tensor:
    """(n, H_t) teacher embedding rows -> (H_t, k) their first k = min(width, H_t) principal directions; as wide as
    the teacher, the teacher's own coordinates (a student of its shape then starts as its copy)."""
    if width == rows.shape[1]:
        return torch.eye(width)
    centred = rows.float() - rows.float().mean(0)
    _, _, directions = torch.linalg.svd(centred, full_matrices=False)  # (H_t, H_t), rows by falling variance
    return directions[: min(width, rows.shape[1])].T


# The teacher's hidden states on the first this many training documents (each cut at max_seq_length) give the
# residual basis: 16,384 tokens at BBC News' and 64 tokens' length. Against a basis from 64 documents the first 192
# directions span the same space to 0.95 (mean squared cosine of the principal angles), from 128 to 0.98.
BASIS_DOCUMENTS = 256


@torch.no_grad()
def hidden_state_directions(
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    teacher_ids: torch.Tensor,
    documents: list[str],
    width: int,
    batch_size: int = 32,
) -> torch.Tensor:
    """(H_t, k): the first k = min(width, H_t) principal directions of the teacher's hidden states (its embeddings'
    output and every layer's) at the real tokens of `documents`, cut by the student's `tokenizer` (ids mapped by
    `teacher_ids`); as wide as the teacher, its own coordinates. The covariance is summed batch by batch in float64,
    so memory does not grow with the text; each direction's largest coordinate is positive."""
    size = teacher.config.hidden_size
    if width == size:
        return torch.eye(width)
    sums, products, count = torch.zeros(size, dtype=torch.float64), torch.zeros(size, size, dtype=torch.float64), 0
    teacher_ids = teacher_ids.to(teacher.device)
    for start in range(0, len(documents), batch_size):
        batch = tokenizer(
            documents[start : start + batch_size], truncation=True, padding=True, return_tensors="pt"
        ).to(teacher.device)
        states = teacher(
            input_ids=teacher_ids[batch["input_ids"]],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch.get("token_type_ids"),
            output_hidden_states=True,
            **padded(teacher),
        ).hidden_states  # (L + 1) x (B, T, H_t)
        real = batch["attention_mask"].bool()
        rows = torch.cat([state[real] for state in states]).double()  # (n, H_t)
        sums += rows.sum(0).cpu()
        products += (rows.T @ rows).cpu()
        count += len(rows)
    mean = sums / count
    _, vectors = torch.linalg.eigh(products / count - torch.outer(mean, mean))  # by rising variance
    directions = vectors.flip(-1)[:, : min(width, size)]
    largest = directions.gather(0, directions.abs().argmax(0, keepdim=True))  # (1, k)
    return (directions * largest.sign()).float()


# A BERT-named encoder layer's weights by how their two sides meet the residual stream (the hidden width, projected
# on the basis) and the layer's inner widths (queries/keys/values or the feed-forward units, of which the student
# takes an evenly spaced selection, Xu et al. 2023): (name, output side, input side).
LAYER_WEIGHTS = (
    ("attention.self.query", "attention", "residual"),
    ("attention.self.key", "attention", "residual"),
    ("attention.self.value", "attention", "residual"),
    ("attention.output.dense", "residual", "attention"),
    ("intermediate.dense", "feed_forward", "residual"),
    ("output.dense", "residual", "feed_forward"),
)
LAYER_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")


def evenly_spaced(n: int, k: int) -> torch.Tensor:
    """k indices of range(n), evenly spaced from the first to the last (all of them when k == n)."""
    return torch.linspace(0, n - 1, k).round().long()


def taught_layers(student_layers: int, teacher_layers: int) -> list[int]:
    """The teacher layer (0-based) each student layer starts from: evenly spaced, ending at the teacher's last
    (3 of 6: the 2nd, 4th and 6th, as DistilBERT took every other layer)."""
    return [round((i + 1) * teacher_layers / student_layers) - 1 for i in range(student_layers)]


def layer_init_refusal(student: MiniBertConfig, teacher: PreTrainedModel) -> str | None:
    """Why the student's layers cannot start from the teacher's (None when they can): a teacher without BERT's
    parameter names, or a student wider or deeper (weight selection keeps a subset of each)."""
    names = [name.removeprefix(f"{teacher.base_model_prefix}.") for name in teacher.state_dict()]
    if "encoder.layer.0.attention.self.query.weight" not in names:
        return f"a {teacher.config.model_type!r} teacher has other parameter names than BERT's"
    larger = [
        f"{name}={getattr(student, name)} > {getattr(teacher.config, name)}"
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers")
        if getattr(student, name) > getattr(teacher.config, name)
    ]
    if larger:
        return f"the student is larger than the teacher: {', '.join(larger)}"
    return None


def resolved_teacher_init(init: str, student: MiniBertConfig, teacher: PreTrainedModel) -> tuple[str, str]:
    """`teacher_init` -> ("layers" or "embeddings", one line for the job's log). auto: layers where they can be
    taken; layers asked of a teacher they cannot be taken from: ValueError, one line."""
    refusal = layer_init_refusal(student, teacher) if init in ("auto", "layers") else None
    if init == "layers" and refusal:
        raise ValueError(
            f"teacher_init=layers selects the student's weights from the teacher's, but {refusal}; "
            "use teacher_init=embeddings"
        )
    if init == "embeddings" or refusal:
        why = f"; {refusal}" if refusal else ""
        return "embeddings", f"the student starts from the teacher's embeddings (teacher_init={init}{why})"
    taught = ", ".join(str(t + 1) for t in taught_layers(student.num_hidden_layers, teacher.config.num_hidden_layers))
    return "layers", f"the student starts from the teacher's embeddings and layers {taught} (teacher_init={init})"


@torch.no_grad()
def init_from_teacher(
    student: MiniBertForMaskedLM,
    teacher: PreTrainedModel,
    teacher_ids: torch.Tensor,
    layers: bool = False,
    basis: torch.Tensor | None = None,
) -> torch.Tensor:
    """The student's word embeddings: the teacher's rows of its pieces on the (H_t, k) directions `basis` (the
    first k columns, when the student is wider), by default their own principal directions (`pca_projection`);
    position and segment embeddings projected on the same directions. `layers`: also every encoder layer and the
    embeddings' LayerNorm, from evenly spaced teacher layers (`taught_layers`), their residual sides on the same
    directions and their inner widths by evenly spaced selection. Returns the directions."""
    mapped = teacher.get_input_embeddings().weight[teacher_ids]  # (V_s, H_t)
    if basis is None:
        basis = pca_projection(mapped, student.config.hidden_size)  # (H_t, k)
    k = basis.shape[1]
    embeddings = student.get_input_embeddings()
    embeddings.weight[:, :k] = mapped.float() @ basis
    theirs = getattr(teacher, "embeddings", None)
    for name in ("position_embeddings", "token_type_embeddings"):
        source, target = getattr(theirs, name, None), getattr(student.bert.embeddings, name)
        if isinstance(source, nn.Embedding):
            rows = min(source.num_embeddings, target.num_embeddings)
            target.weight[:rows, :k] = source.weight[:rows].float() @ basis
    if layers:
        init_layers_from_teacher(student, teacher, basis)
    return basis


@torch.no_grad()
def init_layers_from_teacher(student: MiniBertForMaskedLM, teacher: PreTrainedModel, basis: torch.Tensor) -> None:
    """`init_from_teacher`'s `layers`, for a teacher with BERT's parameter names (BERT, ELECTRA's discriminator, ...)."""
    resolved_teacher_init("layers", student.config, teacher)  # ValueError when they cannot be taken
    prefix = f"{teacher.base_model_prefix}."
    state = {name.removeprefix(prefix): weight for name, weight in teacher.state_dict().items()}

    def source(name: str) -> torch.Tensor:  # in float32, one weight at a time (not the word embeddings too)
        return state[name].float()

    config, theirs = student.config, teacher.config
    keep = {
        "attention": evenly_spaced(theirs.hidden_size, config.hidden_size),
        "feed_forward": evenly_spaced(theirs.intermediate_size, config.intermediate_size),
    }

    def weight(w: torch.Tensor, out: str, into: str) -> torch.Tensor:  # a residual side is projected on the basis
        w = basis.T @ w if out == "residual" else w[keep[out]]
        return w @ basis if into == "residual" else w[:, keep[into]]

    def bias(b: torch.Tensor, out: str) -> torch.Tensor:
        return basis.T @ b if out == "residual" else b[keep[out]]

    def layer_norm(target: nn.LayerNorm, prefix: str) -> None:
        # Not rotation-equivariant: each of the student's coordinates takes the mean of the teacher's scales along
        # its direction (exact when the basis is the teacher's own coordinates).
        target.weight.copy_(basis.pow(2).T @ source(f"{prefix}.weight"))
        target.bias.copy_(basis.T @ source(f"{prefix}.bias"))

    mine = student.state_dict()
    layer_norm(student.bert.embeddings.LayerNorm, "embeddings.LayerNorm")
    for i, t in enumerate(taught_layers(config.num_hidden_layers, theirs.num_hidden_layers)):
        ours, their = f"bert.encoder.layer.{i}", f"encoder.layer.{t}"
        for name, out, into in LAYER_WEIGHTS:
            mine[f"{ours}.{name}.weight"].copy_(weight(source(f"{their}.{name}.weight"), out, into))
            mine[f"{ours}.{name}.bias"].copy_(bias(source(f"{their}.{name}.bias"), out))
        for name in LAYER_NORMS:
            layer_norm(student.bert.encoder.layer[i].get_submodule(name), f"{their}.{name}")
