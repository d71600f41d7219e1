"""Distillation on tiny fixtures: the student moves toward the teacher, teacher labels are cached and reused, and
bad inputs fail before any training; and the learning-rate search that fine-tuning and distillation share.

Teacher and student are tiny Mini-BERTs with tokenizers of their own (different vocabularies), trained here on
templated sentences whose label is one word's sentiment, so that a teacher fine-tuned for a few seconds is
confident and right, and the student has something definite to learn from it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, pipeline

from modeling_minibert import (
    MiniBertConfig,
    MiniBertForMaskedLM,
    MiniBertForPreTraining,
    MiniBertForSequenceClassification,
)
from modeling_minibert.cli import main
from modeling_minibert.training.distillation import flow as distillation
from modeling_minibert.training.distillation import teacher as distillation_teacher
from modeling_minibert.training.distillation import trainer as distillation_trainer
from modeling_minibert.training.distillation.arguments import DistillationArguments
from modeling_minibert.training.distillation.flow import distill
from modeling_minibert.training.distillation.teacher import predict_logits
from modeling_minibert.training.distillation.trainer import DistillationCollator, distillation_loss, student_features
from modeling_minibert.training.distillation.transfer import augment
from modeling_minibert.training.finetuning import TRAINING_DEFAULTS, finetune
from modeling_minibert.training.finetuning.arguments import FinetuningOptions
from modeling_minibert.training.finetuning.task import Examples
from modeling_minibert.training.finetuning.tasks import load_task
from modeling_minibert.utils.finite import NonFiniteError
from modeling_minibert.utils.outputs import CURVES_FILE, TEACHER_DIR, TEACHER_INFO_FILE
from modeling_minibert.utils.outputs import TEACHER_LOGITS_FILE as CACHE_FILE
from tokenization import train_tokenizer

GOOD, BAD = ["good", "great", "superb", "lovely", "fine"], ["bad", "awful", "dull", "poor", "weak"]
NOUNS = ["movie", "film", "plot", "cast", "ending", "score", "script"]
PEOPLE = ["Ana", "Ben", "Carla", "Hugo", "Zoe"]
QUIET = {"disable_tqdm": True, "logging_steps": 5, "learning_rate": 3e-3, "per_device_train_batch_size": 32, "seed": 0}


pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.slow(seconds=108),
]  # real jobs end to end: not in the quick tier (-m "not slow")


def sentiment(n: int, seed: int) -> Dataset:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        positive = rng.random() < 0.5
        word = rng.choice(GOOD if positive else BAD)
        texts.append(f"the {rng.choice(NOUNS)} was {word} and the {rng.choice(NOUNS)} too")
        labels.append("pos" if positive else "neg")
    return Dataset.from_dict({"text": texts, "label": labels})


def tagging(n: int, seed: int) -> Dataset:
    rng = random.Random(seed)
    tokens, tags = [], []
    for _ in range(n):
        person = rng.choice(PEOPLE)
        words = ["yesterday", person, "saw", "the", rng.choice(NOUNS)]
        tokens.append(words)
        tags.append(["O", "B-PER", "O", "O", "O"])
    return Dataset.from_dict({"tokens": tokens, "tags": tags})


def all_texts() -> list[str]:
    return list(sentiment(300, 9)["text"]) + [" ".join(t) for t in tagging(100, 9)["tokens"]]


def pretrained_folder(folder: Path, vocab_size: int, hidden: int, lowercase: bool = True) -> Path:
    """A folder as `minibert pretrain` leaves it: MiniBertForPreTraining with random weights + its tokenizer."""
    tokenizer = train_tokenizer(
        train_data=all_texts(), vocab_size=vocab_size, disable_tqdm=True, model_max_length=32, lowercase=lowercase
    )
    config = MiniBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=32,
    )
    with torch.random.fork_rng():  # the same weights whichever tests ran first
        torch.manual_seed(0)
        MiniBertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def teacher_base(tmp_path_factory) -> Path:
    return pretrained_folder(tmp_path_factory.mktemp("teacher-base"), vocab_size=300, hidden=48)


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    return pretrained_folder(tmp_path_factory.mktemp("student"), vocab_size=150, hidden=32)


@pytest.fixture(scope="module")
def transfer_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("transfer") / "unlabelled.txt"
    path.write_text("\n".join(sentiment(40, 5)["text"]) + "\n\n", encoding="utf-8")
    return path


def run(teacher, student, output, *, train=None, validation=None, test=None, **options):
    defaults = dict(task="sequence-classification", num_train_epochs=4, augment_copies=1, **QUIET)
    if "learning_rates" in options:
        del defaults["learning_rate"]
    return distill(
        teacher_model_name_or_path=str(teacher),
        model_name_or_path=str(student),
        output_dir=str(output),
        train_data=train if train is not None else sentiment(160, 0),
        validation_data=validation if validation is not None else sentiment(60, 1),
        test_data=test,
        show_progress=False,
        **{**defaults, **options},
    )


@pytest.fixture(scope="module")
def teacher(teacher_base, tmp_path_factory) -> Path:
    """A confident sentiment classifier: fine-tuned without validation data, so its last epoch is kept."""
    output = tmp_path_factory.mktemp("teacher") / "model"
    finetune(
        task="sequence-classification",
        model_name_or_path=teacher_base,
        train_data=sentiment(160, 0),
        output_dir=output,
        num_train_epochs=8,
        **QUIET,
    )
    return output


@pytest.fixture(scope="module")
def distilled(teacher, student, transfer_file, tmp_path_factory):
    output = tmp_path_factory.mktemp("run") / "distilled"
    return run(teacher, student, output, test=sentiment(60, 2), transfer_file=[str(transfer_file)], num_train_epochs=8)


def kl_to(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> float:
    return float(distillation_loss(student_logits, teacher_logits, temperature=1.0))


def test_distillation_moves_student_toward_teacher(distilled, student, teacher):
    assert distilled.teacher == str(teacher)
    held_out = sentiment(60, 1)["text"]
    teacher = AutoModelForSequenceClassification.from_pretrained(distilled.teacher)
    teacher_logits = torch.stack(
        predict_logits(
            teacher,
            AutoTokenizer.from_pretrained(distilled.teacher),
            held_out,
            "sequence-classification",
            32,
            show_progress=False,
        )
    )
    tokenizer = AutoTokenizer.from_pretrained(student)
    torch.manual_seed(0)
    undistilled = AutoModelForSequenceClassification.from_pretrained(student, num_labels=2)
    before = kl_to(
        teacher_logits,
        torch.stack(
            predict_logits(undistilled, tokenizer, held_out, "sequence-classification", 32, show_progress=False)
        ),
    )
    model = AutoModelForSequenceClassification.from_pretrained(distilled.output_dir)
    after = kl_to(
        teacher_logits,
        torch.stack(predict_logits(model, tokenizer, held_out, "sequence-classification", 32, show_progress=False)),
    )
    # The teacher learnt the task, and distillation (alpha=0: no hard labels) brought the student's distribution
    # closer to the teacher's on examples it never saw.
    assert distilled.metrics["teacher_accuracy"] > 0.9, distilled.metrics
    assert after < 0.5 * before, (before, after, distilled.metrics)
    assert distilled.metrics["kl_to_teacher"] == pytest.approx(after, rel=1e-3, abs=1e-4)
    assert distilled.metrics["teacher_agreement"] > 0.9
    assert distilled.metrics["accuracy"] > 0.9


def test_output_folder_is_a_fine_tuning_run(distilled):
    folder = distilled.output_dir
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "all_results.json",
        "train_results.json",
        "eval_results.json",
        "test_results.json",
        "trainer_state.json",
        CURVES_FILE,
        "README.md",
        CACHE_FILE,
    } <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert not [f for f in files if f.startswith("checkpoint-")]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]
    assert (folder / "model.safetensors").stat().st_mode & 0o777 == (folder / "config.json").stat().st_mode & 0o777
    results = json.loads((folder / "all_results.json").read_text())
    assert results["eval_accuracy"] == pytest.approx(distilled.metrics["accuracy"])
    assert {"test_accuracy", "test_macro_f1", "test_teacher_accuracy", "train_loss"} <= set(results)
    # 160 training examples, one augmented copy of each, 40 unlabelled lines (blank lines skipped)
    assert distilled.transfer_size == results["train_samples"] == 160 + 160 + 40
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["MiniBertForSequenceClassification"]
    assert set(config["label2id"]) == {"neg", "pos"}
    classifier = pipeline("text-classification", model=str(folder))
    assert classifier("the plot was superb and the cast too")[0]["label"] == "pos"
    assert classifier("the plot was awful and the cast too")[0]["label"] == "neg"


def forbidden(*args, **kwargs):
    raise AssertionError("the teacher was run (or fine-tuned) again")


def test_cached_teacher_logits_are_reused(distilled, teacher, student, transfer_file, monkeypatch):
    cached = load_file(str(distilled.output_dir / CACHE_FILE))
    monkeypatch.setattr(distillation_teacher, "label_with_teacher", forbidden)
    result = run(
        teacher,
        student,
        distilled.output_dir,
        test=sentiment(60, 2),
        transfer_file=[str(transfer_file)],
        overwrite_output_dir=True,
        num_train_epochs=1,
    )
    assert result.reused_teacher_logits
    again = load_file(str(result.output_dir / CACHE_FILE))
    assert again.keys() == cached.keys() and all(torch.equal(again[k], cached[k]) for k in cached)

    # Another transfer set is another labelling: the teacher runs.
    calls = []
    monkeypatch.setattr(
        distillation_teacher, "label_with_teacher", lambda *a, **k: calls.append(1) or real_label(*a, **k)
    )
    result = run(teacher, student, distilled.output_dir, augment_copies=0, overwrite_output_dir=True, max_steps=1)
    assert calls == [1] and not result.reused_teacher_logits
    assert result.transfer_size == 160


real_label = distillation_teacher.label_with_teacher


def test_token_classification_with_a_fine_tuned_teacher(teacher_base, student, tmp_path, monkeypatch):
    options = dict(
        task="token-classification",
        train=tagging(80, 0),
        validation=tagging(30, 1),
        finetune_teacher=True,
        teacher_num_train_epochs=6,
        teacher_learning_rate=3e-3,
    )
    # Kept: the epoch that agrees most with the teacher (the default, the distillation loss, may keep an epoch
    # whose distributions are closest but whose argmax is not yet; tiny data).
    result = run(
        teacher_base,
        student,
        tmp_path / "tagger",
        num_train_epochs=4,
        metric_for_best_model="teacher_agreement",
        **options,
    )
    assert result.labels == ["O", "B-PER"]  # fine-tuning's order: "O" first, as the tag sets' usual id 0
    assert result.metrics["teacher_accuracy"] > 0.95
    assert result.metrics["teacher_agreement"] > 0.9 and result.metrics["accuracy"] > 0.9
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["architectures"] == ["MiniBertForTokenClassification"]
    # The fine-tuned teacher is kept in the output folder, and a rerun reuses it and its labels.
    teacher = json.loads((result.output_dir / TEACHER_DIR / "config.json").read_text())
    assert teacher["label2id"] == {"O": 0, "B-PER": 1}
    weights = result.output_dir / TEACHER_DIR / "model.safetensors"
    trained = (weights.stat().st_mtime_ns, weights.read_bytes())
    monkeypatch.setattr(distillation_teacher, "label_with_teacher", forbidden)
    again = run(teacher_base, student, tmp_path / "tagger", overwrite_output_dir=True, max_steps=1, **options)
    assert again.reused_teacher_logits and again.teacher == str(tmp_path / "tagger" / TEACHER_DIR)
    assert (weights.stat().st_mtime_ns, weights.read_bytes()) == trained  # not fine-tuned again


def test_word_targets_go_to_each_tokenizers_first_subtoken(student):
    tokenizer = AutoTokenizer.from_pretrained(student)
    words = ["plotcast", "saw", "moviefilm"]  # unseen words: several sub-tokens each
    word_ids = tokenizer(words, is_split_into_words=True).word_ids()
    assert word_ids.count(0) > 1 and word_ids.count(2) > 1
    teacher_words = torch.tensor([[5.0, 0.0], [0.0, 5.0], [3.0, 1.0]])
    data = student_features(
        tokenizer,
        Examples([words], [["B-PER", "O", "B-PER"]]),
        [teacher_words],
        "token-classification",
        32,
        {"B-PER": 0, "O": 1},
    )
    row = data[0]
    firsts = [word_ids.index(w) for w in range(3)]
    assert [i for i, m in enumerate(row["teacher_mask"]) if m] == firsts
    assert [row["teacher_logits"][i] for i in firsts] == teacher_words.tolist()
    assert [row["labels"][i] for i in firsts] == [0, 1, 0]
    assert sum(label != -100 for label in row["labels"]) == 3
    batch = DistillationCollator(tokenizer, "token-classification")(
        [
            data[0],
            student_features(
                tokenizer,
                Examples([["saw"]], [None]),
                [torch.zeros(1, 2)],
                "token-classification",
                32,
                {"B-PER": 0, "O": 1},
            )[0],
        ]
    )
    assert batch["teacher_logits"].shape == (2, len(word_ids), 2)
    assert batch["teacher_mask"][1].tolist() == [0, 1] + [0] * (len(word_ids) - 2)
    assert batch["labels"][1].tolist() == [-100] * len(word_ids)  # unlabelled transfer example


def test_distillation_loss():
    torch.manual_seed(0)
    student, teacher = torch.randn(4, 3), torch.randn(4, 3) * 3
    labels = torch.tensor([0, 2, -100, 1])
    kl = torch.nn.functional.kl_div(
        torch.log_softmax(student / 2, -1), torch.softmax(teacher / 2, -1), reduction="batchmean"
    )
    assert distillation_loss(student, teacher, 2.0) == pytest.approx(4 * float(kl), rel=1e-5)
    assert float(distillation_loss(teacher, teacher, 2.0)) == pytest.approx(0.0, abs=1e-6)
    ce = torch.nn.functional.cross_entropy(student, labels, ignore_index=-100)
    assert distillation_loss(student, teacher, 2.0, alpha=1.0, labels=labels) == pytest.approx(float(ce), rel=1e-5)
    mixed = distillation_loss(student, teacher, 2.0, alpha=0.25, labels=labels)
    assert mixed == pytest.approx(0.75 * 4 * float(kl) + 0.25 * float(ce), rel=1e-5)


def test_distillation_loss_mse_matches_the_logits_without_a_temperature():
    torch.manual_seed(0)
    student, teacher = torch.randn(4, 3), torch.randn(4, 3) * 3
    labels = torch.tensor([0, 2, -100, 1])
    mse = float(((student - teacher) ** 2).mean())
    assert distillation_loss(student, teacher, 2.0, soft_loss="mse") == pytest.approx(mse, rel=1e-5)
    assert distillation_loss(student, teacher, 7.0, soft_loss="mse") == pytest.approx(mse, rel=1e-5)
    # Logits that differ by a constant give the same softmax (KL 0) but not the same logits.
    assert float(distillation_loss(teacher + 1, teacher, 2.0)) == pytest.approx(0.0, abs=1e-5)
    assert distillation_loss(teacher + 1, teacher, 2.0, soft_loss="mse") == pytest.approx(1.0, rel=1e-5)
    ce = torch.nn.functional.cross_entropy(student, labels, ignore_index=-100)
    mixed = distillation_loss(student, teacher, 2.0, alpha=0.25, labels=labels, soft_loss="mse")
    assert mixed == pytest.approx(0.75 * mse + 0.25 * float(ce), rel=1e-5)
    # Per token: only the masked positions count, each the mean over its classes.
    tokens, mask = torch.randn(2, 3, 4), torch.tensor([[1, 0, 1], [0, 0, 1]])
    target = torch.randn(2, 3, 4)
    kept = ((tokens - target) ** 2).mean(-1)[mask == 1].mean()
    assert distillation_loss(tokens, target, 2.0, mask=mask, soft_loss="mse") == pytest.approx(float(kept), rel=1e-5)
    with pytest.raises(ValueError, match=r"distillation_loss='huber' is not one of \['kl', 'mse'\]"):
        distillation_loss(student, teacher, 2.0, soft_loss="huber")


def test_augmentation_is_seeded_and_keeps_words():
    words = "the plot was superb and the cast too".split()
    first = [augment(words, random.Random(3), 0.2, 0.3) for _ in range(1)]
    assert first == [augment(words, random.Random(3), 0.2, 0.3)]
    for seed in range(20):
        order = augment(words, random.Random(seed), 0.5, 0.5)
        assert 1 <= len(order) <= len(words) and len(set(order)) == len(order)
    assert augment(words, random.Random(0), 0.0, 0.0) == list(range(len(words)))


def test_a_huge_transfer_line_is_cut_to_what_the_models_read_before_tokenizing(student, tmp_path):
    """One 2 MB line (the issue's 28 MB took 128 s and 4.1 GB to tokenize) is cut at 32 characters a token read, at
    once; the tokens the models read of it are the same, as a text or as words (token classification)."""
    import time

    from modeling_minibert.training.distillation.transfer import CHARS_PER_TOKEN, load_transfer_file
    from modeling_minibert.training.finetuning.tasks import load_task

    line = "the movie was good and the plot was fine too " * 45_000
    path = tmp_path / "unlabelled.txt"
    path.write_text(f"{line}\nshort one\n", encoding="utf-8")
    start = time.perf_counter()
    texts = load_transfer_file(path, load_task("sequence-classification"), "text", tokens=32)
    words = load_transfer_file(path, load_task("token-classification"), "tokens", tokens=32)
    assert time.perf_counter() - start < 5
    assert texts == [line.strip()[: 32 * CHARS_PER_TOKEN], "short one"]
    assert words == [line.split()[:32], ["short", "one"]]
    tokenizer = AutoTokenizer.from_pretrained(student)
    head = line[:100_000]  # enough to hold 32 tokens many times over, quick to tokenize whole
    read = lambda text: tokenizer(text, truncation=True, max_length=32)["input_ids"]  # noqa: E731
    assert read(texts[0]) == read(head)


def test_mlm_augmentation_replaces_one_piece_words_by_the_models_top_pieces(student):
    from modeling_minibert.training.distillation.augmentation import mlm_augment, replaceable_ids

    tokenizer = AutoTokenizer.from_pretrained(student)
    model = MiniBertForMaskedLM.from_pretrained(student).eval()
    # "moviefilm": several pieces; "zzqx": unknown ([UNK]), kept like them
    examples = [t.split() for t in sentiment(12, 4)["text"]] + [["moviefilm", "zzqx", "movie"]]
    assert len(tokenizer.tokenize("moviefilm")) > 1 and tokenizer.tokenize("zzqx") == ["[UNK]"]
    copies = mlm_augment(examples, model, tokenizer, 2, 1.0, 1, seed=0, max_length=32, show_progress=False)
    assert len(copies) == 2 * len(examples)
    assert copies[: len(examples)] == copies[len(examples) :]  # top_k=1 leaves no choice: both copies agree
    allowed = replaceable_ids(tokenizer)
    for original, copy in zip(examples, copies):
        assert len(copy) == len(original)
        for before, after in zip(original, copy):
            if tokenizer.tokenize(before) != [before]:
                assert after == before  # words of several pieces, and unknown words, are kept
            else:
                assert allowed[tokenizer.convert_tokens_to_ids(after)], after  # a whole-word, non-special piece
    # With every one-piece word masked at once, top_k=1 gives the model's own argmax at each masked position.
    words = examples[0]
    batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    ids = batch["input_ids"].clone()
    ids[0, 1:-1] = tokenizer.mask_token_id
    with torch.no_grad():
        scores = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits[0, 1:-1]
    scores[:, ~allowed] = float("-inf")
    assert copies[0] == tokenizer.convert_ids_to_tokens(scores.argmax(-1).tolist())


def test_mlm_augmentation_is_seeded_and_respects_the_probability(student):
    from modeling_minibert.training.distillation.augmentation import mlm_augment

    tokenizer = AutoTokenizer.from_pretrained(student)
    model = MiniBertForMaskedLM.from_pretrained(student).eval()
    examples = [t.split() for t in sentiment(40, 6)["text"]]

    def make(seed, p):
        return mlm_augment(examples, model, tokenizer, 1, p, 5, seed=seed, max_length=32, show_progress=False)

    assert make(3, 0.4) == make(3, 0.4)
    assert make(3, 0.4) != make(4, 0.4)
    changed = sum(a != b for x, y in zip(examples, make(3, 0.4)) for a, b in zip(x, y)) / sum(map(len, examples))
    assert 0.1 < changed < 0.5  # about 0.4, less the draws that predict the word itself
    assert make(3, 1e-9) == examples
    with pytest.raises(ValueError, match=r"augment_top_k=100000 exceeds the \d+ whole-word pieces of the vocabulary"):
        mlm_augment(examples, model, tokenizer, 1, 0.4, 100_000, seed=0, max_length=32, show_progress=False)


def test_neighbour_augmentation_replaces_words_of_several_pieces_by_the_nearest_pieces(student):
    """With `neighbours`, a word of several pieces becomes one of the whole-word pieces nearest (cosine) the mean of
    its pieces' input embeddings, never one of its own pieces; one-piece words get what they got without it."""
    from modeling_minibert.training.distillation.augmentation import mlm_augment, nearest_pieces, replaceable_ids

    tokenizer = AutoTokenizer.from_pretrained(student)
    model = MiniBertForMaskedLM.from_pretrained(student).eval()
    examples = [t.split() for t in sentiment(12, 4)["text"]] + [["moviefilm", "zzqx", "movie", "filmplot"]]
    several = {w for x in examples for w in x if len(tokenizer.tokenize(w)) > 1}
    assert {"moviefilm", "filmplot"} <= several
    plain = mlm_augment(examples, model, tokenizer, 1, 1.0, 1, seed=0, max_length=32, show_progress=False)
    copies = mlm_augment(
        examples, model, tokenizer, 1, 1.0, 1, seed=0, max_length=32, show_progress=False, neighbours=True
    )
    embeddings = model.get_input_embeddings().weight.detach()
    allowed = replaceable_ids(tokenizer, words_only=True)
    assert all(len(t) > 1 and t.isalpha() for t in tokenizer.convert_ids_to_tokens(allowed.nonzero()[:, 0].tolist()))
    for original, without, copy in zip(examples, plain, copies):
        for before, kept, after in zip(original, without, copy):
            pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(before))
            if len(pieces) == 1:
                assert after == kept  # the MLM head's choice, as without neighbours
                continue
            assert kept == before and after != before
            # top_k=1: the nearest allowed piece by hand, the word's own pieces left out
            mean = embeddings[pieces].mean(0)
            cosine = torch.nn.functional.cosine_similarity(embeddings, mean[None], dim=-1)
            cosine[~allowed] = float("-inf")
            cosine[pieces] = float("-inf")
            assert after == tokenizer.convert_ids_to_tokens(int(cosine.argmax()))
    top = nearest_pieces(
        embeddings, [torch.tensor(tokenizer.convert_tokens_to_ids(tokenizer.tokenize("moviefilm")))], allowed, 5
    )
    assert top.shape == (1, 5) and allowed[top].all()
    with pytest.raises(
        ValueError, match=r"augment_top_k=\d+ exceeds the \d+ whole-word pieces of two letters or more"
    ):
        mlm_augment(
            examples,
            model,
            tokenizer,
            1,
            0.4,
            int(allowed.sum()) + 1,
            seed=0,
            max_length=32,
            show_progress=False,
            neighbours=True,
        )
    # a word the truncation cut (some of its pieces in a full row) is kept; whole, it is replaced
    pieces = len(tokenizer.tokenize("filmplot"))
    assert pieces >= 3
    row = [["movie"] * 5 + ["filmplot"]]

    def make(length):
        return mlm_augment(
            row, model, tokenizer, 1, 1.0, 1, seed=0, max_length=length, show_progress=False, neighbours=True
        )[0][-1]

    assert make(1 + 5 + pieces - 1 + 1) == "filmplot" and make(32) != "filmplot"


def test_replacements_are_never_special_unused_or_continuation_pieces(tmp_path):
    from transformers import BertTokenizerFast

    from modeling_minibert.training.distillation.augmentation import replaceable_ids

    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "a", "é", "ab", "7"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    chosen = lambda allowed: [vocab[i] for i in allowed.nonzero()[:, 0].tolist()]  # noqa: E731
    assert chosen(replaceable_ids(tokenizer)) == ["the", "a", "é", "ab", "7"]
    assert chosen(replaceable_ids(tokenizer, words_only=True)) == ["the", "ab"]


def test_mlm_augmentation_with_a_bert_masked_lm_gives_the_same_copies(student, tmp_path):
    """The head is read as `model.cls` at the masked positions only: transformers' BertForMaskedLM with the same
    weights (a student published in BERT format) makes the same copies as Mini-BERT."""
    from transformers import BertForMaskedLM

    from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
    from modeling_minibert.training.distillation.augmentation import mlm_augment

    convert_minibert_to_bert(student, tmp_path / "bert")
    tokenizer = AutoTokenizer.from_pretrained(student)
    examples = [t.split() for t in sentiment(16, 7)["text"]]
    copies = [
        mlm_augment(examples, model.eval(), tokenizer, 2, 0.5, 3, seed=1, max_length=32, show_progress=False)
        for model in (MiniBertForMaskedLM.from_pretrained(student), BertForMaskedLM.from_pretrained(tmp_path / "bert"))
    ]
    assert copies[0] == copies[1] and copies[0][:16] != examples


def test_a_bert_teacher_labels_through_mini_berts_unpadded_path_with_the_same_logits(teacher, tmp_path):
    """A teacher in transformers' BERT format is run as the Mini-BERT head of the same architecture: its logits on
    texts of mixed lengths (padded batches) are transformers' BertForSequenceClassification's; another model type
    is loaded as its Auto class loads it."""
    from transformers import BertForSequenceClassification, DistilBertConfig, DistilBertForSequenceClassification

    from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
    from modeling_minibert.training.finetuning.tasks import load_task

    task = load_task("sequence-classification")
    convert_minibert_to_bert(teacher, tmp_path / "bert")
    assert json.loads((tmp_path / "bert" / "config.json").read_text())["model_type"] == "bert"
    assert (
        type(distillation_teacher.load_teacher_classifier(str(tmp_path / "bert"), task))
        is MiniBertForSequenceClassification
    )
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "bert")
    texts = [t + " and" * (i % 7) for i, t in enumerate(sentiment(40, 11)["text"])]
    names = ["neg", "pos"]
    labels = distillation_teacher.label_with_teacher(
        str(tmp_path / "bert"), tokenizer, task, {"train": texts}, 32, 16, names, False
    )
    bert = BertForSequenceClassification.from_pretrained(tmp_path / "bert")
    expected = torch.stack(predict_logits(bert, tokenizer, texts, task.name, 32, 16, False))[
        :, [bert.config.label2id[n] for n in names]
    ]
    torch.testing.assert_close(torch.stack(labels["train"]), expected, atol=1e-5, rtol=0)
    # Labels hold no autograd graph: one kept per example would keep its whole batch's activations alive (tens of
    # GB over a transfer set of 68,000 texts).
    assert not any(row.requires_grad for row in labels["train"])

    DistilBertForSequenceClassification(
        DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32)
    ).save_pretrained(tmp_path / "distilbert")
    assert (
        type(distillation_teacher.load_teacher_classifier(str(tmp_path / "distilbert"), task))
        is DistilBertForSequenceClassification
    )


def test_a_pickled_teacher_is_read_only_when_asked(teacher, tmp_path):
    """pytorch_model.bin alone is refused in one line before any work (the bad-inputs table runs the job); with
    allow_pickle it labels as the same teacher in safetensors does, and the cache's key covers the pickle."""
    from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
    from modeling_minibert.training.finetuning.tasks import load_task

    bert = convert_minibert_to_bert(teacher, tmp_path / "bert")
    pickled = tmp_path / "pickled"
    shutil.copytree(bert, pickled)
    torch.save(load_file(str(pickled / "model.safetensors")), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    with pytest.raises(
        ValueError, match=rf"^teacher_model_name_or_path={pickled} holds only pickle weights \(pytorch_model.bin\)"
    ):
        distillation_teacher.check_teacher_files(str(pickled), allow_pickle=False)
    distillation_teacher.check_teacher_files(str(pickled), allow_pickle=True)
    task, tokenizer, texts = (
        load_task("sequence-classification"),
        AutoTokenizer.from_pretrained(bert),
        sentiment(8, 3)["text"],
    )

    def labels(folder: Path, **options) -> torch.Tensor:
        rows = distillation_teacher.label_with_teacher(
            str(folder), tokenizer, task, {"t": texts}, 32, 16, ["neg", "pos"], False, **options
        )["t"]
        return torch.stack(rows)

    torch.testing.assert_close(labels(pickled, allow_pickle=True), labels(bert), atol=0, rtol=0)
    assert "pytorch_model.bin" in [p.name for p in distillation_teacher.model_files(pickled)]


def test_a_bert_teacher_is_fine_tuned_in_mini_bert_and_saved_in_bert_format(
    teacher_base, student, tmp_path, monkeypatch
):
    """`finetune_teacher` with a teacher in transformers' BERT format trains it as the Mini-BERT head of the same
    architecture and leaves OUTPUT/teacher in BERT format: transformers' own class loads it, it scores what the
    run recorded, the card names the teacher given, and no scratch folder is left behind."""
    from transformers import BertForSequenceClassification

    from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
    from modeling_minibert.training.finetuning import flow

    bert_base = convert_minibert_to_bert(teacher_base, tmp_path / "bert-base")
    trained = []
    real_load = flow.load_model
    monkeypatch.setattr(flow, "load_model", lambda *a, **k: trained.append(model := real_load(*a, **k)) or model)
    validation = sentiment(60, 1)
    result = run(
        bert_base,
        student,
        tmp_path / "out",
        validation=validation,
        finetune_teacher=True,
        teacher_num_train_epochs=8,
        teacher_learning_rate=3e-3,
        max_steps=1,
    )
    assert type(trained[0]) is MiniBertForSequenceClassification  # the teacher, before the student
    folder = tmp_path / "out" / TEACHER_DIR
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForSequenceClassification"]
    assert not list(folder.glob("*.py")) and "auto_map" not in config
    model = BertForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    logits = torch.stack(
        predict_logits(model, tokenizer, validation["text"], "sequence-classification", 32, 16, False)
    )
    accuracy = sum(model.config.id2label[int(i)] == y for i, y in zip(logits.argmax(-1), validation["label"])) / len(
        validation
    )
    recorded = json.loads((folder / "eval_results.json").read_text())["eval_accuracy"]
    assert accuracy == pytest.approx(recorded) and recorded > 0.8  # the weights saved are the ones trained
    assert f"fine-tuned from the local model `{bert_base}`" in (folder / "README.md").read_text()
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []
    assert result.teacher == str(folder)


@pytest.mark.parametrize("mode, bf16", [("bf16", True), ("no", False)])
def test_the_teacher_is_fine_tuned_in_bf16_autocast_when_asked_and_kept_per_precision(
    teacher_base, student, tmp_path, monkeypatch, mode, bf16
):
    calls = []
    real = distillation_teacher.finetune_in_minibert
    monkeypatch.setattr(distillation_teacher, "finetune_in_minibert", lambda *a, **k: calls.append(k) or real(*a, **k))
    for precision in (mode, mode, "no" if bf16 else "bf16"):  # the second reuses the first's teacher
        run(
            teacher_base,
            student,
            tmp_path / "out",
            finetune_teacher=True,
            teacher_num_train_epochs=1,
            max_steps=1,
            overwrite_output_dir=True,
            teacher_mixed_precision=precision,
        )
    assert [k.get("bf16", False) for k in calls] == [bf16, not bf16]


# A value other than its default for each option of the fine-tuning family (`FinetuningOptions`), as the teacher's
# run takes it back: a new option needs its value here, and then this test shows it reaching the teacher.
FAMILY_VALUES = {"max_seq_length": 24, "doc_stride": 4, "min_train_steps": 7, "early_stopping_patience": 2}


def teacher_fine_tuning(teacher_base: Path, output: Path, monkeypatch, **options) -> tuple[dict, str]:
    """The options `distill --finetune_teacher` hands the teacher's fine-tuning (stood in for: nothing trains),
    and the key it keeps that teacher under."""
    calls = []

    def fake_finetune(source, target, **given):
        calls.append(given)
        Path(target).mkdir(parents=True)

    monkeypatch.setattr(distillation_teacher, "finetune_in_minibert", fake_finetune)
    task = load_task("sequence-classification")
    examples = {
        role: Examples(list(data["text"]), list(data["label"]))
        for role, data in (("train", sentiment(20, 0)), ("validation", sentiment(10, 1)))
    }
    args = DistillationArguments(
        task=task.name,
        teacher_model_name_or_path=str(teacher_base),
        model_name_or_path="student",
        finetune_teacher=True,
        teacher_num_train_epochs=1,
        teacher_mixed_precision="no",
        **options,
    )
    folder = distillation_teacher.fine_tuned_teacher(args, task, {"seed": 0}, examples, ["neg", "pos"], output)
    return calls[0], json.loads((folder / TEACHER_INFO_FILE).read_text())["fingerprint"]


def test_the_teachers_fine_tuning_gets_every_option_of_the_family_and_is_kept_under_them(
    teacher_base, tmp_path, monkeypatch
):
    """By construction: every field of `FinetuningOptions` reaches the teacher's `finetune` as the run has it,
    and a teacher fine-tuned with another value is another teacher (not reused)."""
    assert set(FAMILY_VALUES) == {f.name for f in dataclasses.fields(FinetuningOptions)}, (
        "give the new option a value here"
    )
    given, default_key = teacher_fine_tuning(teacher_base, tmp_path / "defaults", monkeypatch)
    # distill's 128 tokens within the teacher's 32 positions; epochs given, so no default schedule
    assert {name: given[name] for name in FAMILY_VALUES} == {
        "max_seq_length": 32,
        "doc_stride": None,
        "min_train_steps": 0,
        "early_stopping_patience": 0,
    }
    for name, value in FAMILY_VALUES.items():
        given, key = teacher_fine_tuning(teacher_base, tmp_path / name, monkeypatch, **{name: value})
        assert given[name] == value, name
        assert key != default_key, name


@pytest.mark.parametrize("options", [{}, {"doc_stride": 4}])
def test_a_teacher_kept_before_the_options_were_shared_keeps_its_key(teacher_base, tmp_path, monkeypatch, options):
    """The key as 0.2.0 computed it, by its formula: a teacher fine-tuned then is reused, not trained again."""
    _, key = teacher_fine_tuning(teacher_base, tmp_path / "out", monkeypatch, **options)
    examples = {
        role: dataclasses.asdict(Examples(list(data["text"]), list(data["label"])))
        for role, data in (("train", sentiment(20, 0)), ("validation", sentiment(10, 1)))
    }
    schedule = {"min_train_steps": 0, "early_stopping_patience": 0}  # epochs given: the default schedule is off
    before = distillation_teacher.fingerprint(
        "sequence-classification",
        ["neg", "pos"],
        1,
        schedule,
        1e-4,
        128,
        0,
        *([f"doc_stride={options['doc_stride']}"] if options else []),
        examples,
        *distillation_teacher.model_files(teacher_base),
    )
    assert key == before


def test_the_teacher_labels_in_bf16_autocast_when_asked_and_the_cache_knows_it(
    teacher, student, tmp_path, monkeypatch
):
    from modeling_minibert.utils import precision

    labelled = []
    monkeypatch.setattr(
        distillation_teacher, "label_with_teacher", lambda *a, **k: labelled.append(a[-1]) or real_label(*a, **k)
    )

    def labels(mode: str) -> tuple[torch.Tensor, bool]:
        result = run(
            teacher,
            student,
            tmp_path / "out",
            augment_copies=0,
            max_steps=1,
            overwrite_output_dir=True,
            teacher_mixed_precision=mode,
        )
        return load_file(str(result.output_dir / CACHE_FILE))["transfer.logits"], result.reused_teacher_logits

    float32, _ = labels("no")
    bf16, reused = labels("bf16")
    assert labelled == [False, True] and not reused
    assert bf16.dtype == torch.float32 and not torch.equal(bf16, float32)
    torch.testing.assert_close(bf16, float32, atol=0.1, rtol=0.05)  # bf16 keeps 8 bits of mantissa
    assert torch.equal(bf16.argmax(-1), float32.argmax(-1))
    # auto is bf16 only where the CPU multiplies it natively; without, float32 (the bf16 cache is not reused).
    monkeypatch.setattr(precision, "bf16_pays", lambda device: False)
    again, reused = labels("auto")
    assert not reused and labelled == [False, True, False] and torch.equal(again, float32)
    monkeypatch.setattr(precision, "bf16_pays", lambda device: True)
    again, reused = labels("auto")
    assert not reused and labelled == [False, True, False, True] and torch.equal(again, bf16)


def search_run(student, output, learning_rates=None, **options):
    """Fine-tuning on the sentiment data: at `learning_rates` (a search), or at options' learning_rate."""
    quiet = {k: v for k, v in QUIET.items() if k != "learning_rate"}
    return finetune(
        task="sequence-classification",
        model_name_or_path=student,
        train_data=sentiment(160, 0),
        validation_data=sentiment(60, 1),
        test_data=sentiment(60, 2),
        output_dir=output,
        num_train_epochs=8,
        **({"learning_rates": learning_rates} if learning_rates else {}),
        **{**quiet, **options},
    )


def test_learning_rates_keep_the_run_best_on_validation_as_a_run_at_that_rate_would_be(student, tmp_path):
    """Each candidate starts from the same weights and trains as a plain run at its rate would (same seed): the
    folder holds exactly what `learning_rate=3e-3` alone gives, whatever the candidates' order; the search's
    scores are each run's validation score, and no run-I folder is left behind."""
    rates = [1e-6, 3e-3]  # 1e-6 learns nothing in 8 epochs; 3e-3 separates the two words' sentiments
    searched = search_run(student, tmp_path / "search", rates, keep_checkpoints=True)
    search_run(student, tmp_path / "reversed", rates[::-1])
    plain = search_run(student, tmp_path / "plain", learning_rate=3e-3)
    search = json.loads((tmp_path / "search" / "learning_rate_search.json").read_text())
    assert (
        search["chosen_learning_rate"] == 3e-3 and search["metric"] == "eval_accuracy" and search["greater_is_better"]
    )
    scores = {run["learning_rate"]: run["eval_accuracy"] for run in search["runs"]}
    assert scores[1e-6] < 0.7 and scores[3e-3] == searched.metrics["accuracy"] == plain.metrics["accuracy"] >= 0.9
    assert (searched.test_metrics["accuracy"], searched.test_metrics["loss"]) == (
        plain.test_metrics["accuracy"],
        plain.test_metrics["loss"],
    )
    weights = [
        load_file(folder / "model.safetensors")
        for folder in (tmp_path / "search", tmp_path / "reversed", tmp_path / "plain")
    ]
    for name, tensor in weights[2].items():
        torch.testing.assert_close(weights[0][name], tensor, rtol=0, atol=0)
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=0)
    results = json.loads((tmp_path / "search" / "all_results.json").read_text())
    assert results["train_learning_rate"] == 3e-3 and searched.train_metrics["learning_rate"] == 3e-3
    assert not [p.name for p in (tmp_path / "search").iterdir() if p.name.startswith("run-")]
    kept = sorted((tmp_path / "search").glob("checkpoint-*"))  # keep_checkpoints: the chosen run's
    logged = [
        e["learning_rate"]
        for e in json.loads((kept[-1] / "trainer_state.json").read_text())["log_history"]
        if "learning_rate" in e
    ]
    assert kept and 1e-3 < max(logged) <= 3e-3
    assert (tmp_path / "search" / "learning_rate_search.png").stat().st_size > 0


def test_distillation_chooses_its_learning_rate_on_the_validation_loss(teacher, student, tmp_path):
    """Distillation's measure of the best (the one that picks its epoch) is the validation loss, lower better."""
    result = run(teacher, student, tmp_path / "out", learning_rates=[1e-6, 3e-3])
    search = json.loads((tmp_path / "out" / "learning_rate_search.json").read_text())
    assert search["metric"] == "eval_loss" and not search["greater_is_better"]
    losses = {run["learning_rate"]: run["eval_loss"] for run in search["runs"]}
    assert search["chosen_learning_rate"] == min(losses, key=losses.get) == 3e-3
    assert result.metrics["loss"] == losses[3e-3]


def test_learning_rates_from_the_command_line(student, tmp_path, capsys):
    for split, seed in (("train", 0), ("validation", 1)):
        sentiment(60 if split == "validation" else 160, seed).to_csv(tmp_path / f"{split}.csv", index=False)
    assert (
        main(
            [
                "finetune",
                "--task",
                "sequence-classification",
                "--model_name_or_path",
                str(student),
                "--train_file",
                str(tmp_path / "train.csv"),
                "--validation_file",
                str(tmp_path / "validation.csv"),
                "--output_dir",
                str(tmp_path / "out"),
                "--learning_rates",
                "1e-6",
                "3e-3",
                "--num_train_epochs",
                "2",
                "--disable_tqdm",
                "true",
                "--report_to",
                "none",
            ]
        )
        == 0
    )
    search = json.loads((tmp_path / "out" / "learning_rate_search.json").read_text())
    assert [run["learning_rate"] for run in search["runs"]] == [1e-6, 3e-3]
    assert f"learning rate chosen on validation: {search['chosen_learning_rate']:g}\n" in capsys.readouterr().out


def test_distillation_with_mlm_augmentation(teacher, student, tmp_path):
    result = run(teacher, student, tmp_path / "out", augmentation="mlm", augment_copies=2, num_train_epochs=1)
    assert result.transfer_size == 3 * 160
    assert result.metrics["teacher_agreement"] >= 0


# ---------------------------------------------------------------------------------------------------------------
# Bad inputs: one clear error each, before any training


@pytest.fixture(scope="module")
def other_labels_teacher(tmp_path_factory, teacher_base) -> Path:
    folder = tmp_path_factory.mktemp("other-labels")
    config = MiniBertConfig.from_pretrained(teacher_base)
    config.update({"id2label": {0: "happy", 1: "sad"}, "label2id": {"happy": 0, "sad": 1}})
    MiniBertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(teacher_base).save_pretrained(folder)
    return folder


def test_a_teacher_may_know_labels_the_training_data_lacks(teacher_base, student, tmp_path):
    # A rare class missing from a small training set: the teacher's labels are the student's, and a held-out row
    # of that class is scored; a label the teacher does not know is refused, naming it.
    folder = tmp_path / "three-labels"
    names = ["neg", "neutral", "pos"]
    config = MiniBertConfig.from_pretrained(teacher_base)
    config.update({"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}})
    MiniBertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(teacher_base).save_pretrained(folder)
    validation = sentiment(20, 1).to_dict()
    validation["label"][0] = "neutral"
    result = run(folder, student, tmp_path / "out", validation=Dataset.from_dict(validation), num_train_epochs=1)
    assert result.labels == names
    assert AutoConfig.from_pretrained(result.output_dir).id2label == dict(enumerate(names))
    validation["label"][0] = "angry"
    with pytest.raises(
        ValueError,
        match=r"validation data, row 1, field 'label': label 'angry' is not one of the labels \['neg', 'neutral', 'pos'\]",
    ):
        run(folder, student, tmp_path / "out2", validation=Dataset.from_dict(validation), num_train_epochs=1)


@pytest.fixture(scope="module")
def masked_lm_teacher(tmp_path_factory, teacher_base) -> Path:
    folder = tmp_path_factory.mktemp("mlm")
    MiniBertForMaskedLM(MiniBertConfig.from_pretrained(teacher_base)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(teacher_base).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "case, error, message",
    [
        ("other_labels", ValueError, r"predicts labels \['happy', 'sad'\] but the data has \['neg', 'pos'\]"),
        ("masked_lm", ValueError, r"is a MiniBertForMaskedLM model, not a sequence-classification classifier"),
        ("missing_transfer", FileNotFoundError, r"transfer file .*nowhere.txt does not exist"),
        ("zero_temperature", ValueError, r"temperature=0.0 must be a positive number"),
        ("negative_temperature", ValueError, r"temperature=-1.0 must be a positive number"),
        ("alpha", ValueError, r"alpha=1.5 must be between 0 and 1"),
        ("distillation_loss", ValueError, r"distillation_loss='huber' is not one of \['kl', 'mse'\]"),
        ("student_dropout", ValueError, r"student_dropout=1.0 must be in \[0, 1\)"),
        ("temperature_with_mse", ValueError, r"temperature=4.0 does not apply to distillation_loss='mse'"),
        ("augmentation", ValueError, r"augmentation='glove' is not one of \['words', 'mlm'\]"),
        ("augment_probability", ValueError, r"augment_probability=0.0 must be in \(0, 1\]"),
        ("augment_top_k", ValueError, r"augment_top_k=0 must be at least 1"),
        ("neighbours_without_mlm", ValueError, r"augment_neighbours needs augmentation='mlm', not 'words'"),
        (
            "mlm_from_a_classifier",
            ValueError,
            r"model_name_or_path=.* has no masked-LM head \(cls.predictions.bias\): "
            r"augmentation='mlm' needs a pretraining folder",
        ),
    ],
)
def test_bad_inputs_fail_before_training(
    case, error, message, other_labels_teacher, masked_lm_teacher, student, tmp_path, monkeypatch
):
    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(distillation.DistillationTrainer, "train", no_training)
    monkeypatch.setattr(distillation_teacher, "label_with_teacher", no_training)
    options = {
        "other_labels": dict(teacher=other_labels_teacher),
        "masked_lm": dict(teacher=masked_lm_teacher),
        "missing_transfer": dict(transfer_file=[str(tmp_path / "nowhere.txt")]),
        "zero_temperature": dict(temperature=0.0),
        "negative_temperature": dict(temperature=-1.0),
        "alpha": dict(alpha=1.5),
        "distillation_loss": dict(distillation_loss="huber"),
        "student_dropout": dict(student_dropout=1.0),
        "temperature_with_mse": dict(distillation_loss="mse", temperature=4.0),
        "augmentation": dict(augmentation="glove"),
        "augment_probability": dict(augmentation="mlm", augment_probability=0.0),
        "augment_top_k": dict(augmentation="mlm", augment_top_k=0),
        "neighbours_without_mlm": dict(augment_neighbours=True),
        "mlm_from_a_classifier": dict(augmentation="mlm", student=other_labels_teacher),
    }[case]
    teacher = options.pop("teacher", other_labels_teacher)
    if case not in ("other_labels", "masked_lm"):
        options["finetune_teacher"] = True  # a valid teacher: only the option under test is wrong
    student = options.pop("student", student)
    with pytest.raises(error, match=message):
        run(teacher, student, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_evaluation_without_validation_data_is_refused(teacher, student, tmp_path):
    with pytest.raises(ValueError, match=r"eval_strategy='epoch' needs validation data"):
        distill(
            task="sequence-classification",
            teacher_model_name_or_path=str(teacher),
            model_name_or_path=str(student),
            output_dir=str(tmp_path / "out"),
            train_data=sentiment(20, 0),
            eval_strategy="epoch",
        )
    assert not (tmp_path / "out").exists()


def test_cli_reports_bad_input_on_one_line(other_labels_teacher, student, tmp_path, capsys):
    train = tmp_path / "train.csv"
    sentiment(20, 0).to_csv(train, index=False)
    capsys.readouterr()
    code = main(
        [
            "distill",
            "--task",
            "sequence-classification",
            "--teacher_model_name_or_path",
            str(other_labels_teacher),
            "--model_name_or_path",
            str(student),
            "--train_file",
            str(train),
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after datasets' progress bars
    assert code == 2
    assert err.startswith("minibert distill: error: teacher ") and "--finetune_teacher" in err


def test_cli_distils_from_files(distilled, student, tmp_path, capsys):
    train, validation = tmp_path / "train.csv", tmp_path / "validation.jsonl"
    sentiment(64, 0).to_csv(train, index=False)
    sentiment(20, 1).to_json(validation)
    capsys.readouterr()
    code = main(
        [
            "distill",
            "--task",
            "sequence-classification",
            "--teacher_model_name_or_path",
            distilled.teacher,
            "--model_name_or_path",
            str(student),
            "--train_file",
            str(train),
            "--validation_file",
            str(validation),
            "--output_dir",
            str(tmp_path / "out"),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--temperature",
            "3",
            "--alpha",
            "0.5",
            "--augment_copies",
            "0",
            "--disable_tqdm",
            "true",
            "--seed",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "validation: " in out and "accuracy=" in out and "teacher_agreement=" in out
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["train_batch_size"] == 16
    args = json.loads((tmp_path / "out" / "distillation_args.json").read_text())
    assert args["temperature"] == 3.0 and args["alpha"] == 0.5


def test_cli_mse_loss_reaches_the_trainer(distilled, student, tmp_path, monkeypatch):
    """--distillation_loss mse is what the trainer's loss computes with, and it is kept in distillation_args.json."""
    seen = []

    def recording(*args, **kwargs):
        seen.append(args[6] if len(args) > 6 else kwargs.get("soft_loss", "kl"))
        return distillation_loss(*args, **kwargs)

    monkeypatch.setattr(distillation_trainer, "distillation_loss", recording)
    train = tmp_path / "train.csv"
    sentiment(32, 0).to_csv(train, index=False)
    code = main(
        [
            "distill",
            "--task",
            "sequence-classification",
            "--teacher_model_name_or_path",
            distilled.teacher,
            "--model_name_or_path",
            str(student),
            "--train_file",
            str(train),
            "--output_dir",
            str(tmp_path / "out"),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--distillation_loss",
            "mse",
            "--augment_copies",
            "0",
            "--disable_tqdm",
            "true",
            "--eval_strategy",
            "no",
        ]
    )
    assert code == 0
    assert seen and set(seen) == {"mse"}
    assert json.loads((tmp_path / "out" / "distillation_args.json").read_text())["distillation_loss"] == "mse"


@pytest.mark.parametrize("dropout, trained_with", [(None, 0.1), (0.0, 0.0), (0.05, 0.05)])
def test_student_dropout_is_for_the_distillation_only(teacher, student, tmp_path, monkeypatch, dropout, trained_with):
    """The student trains with student_dropout (0 by default; None: its config's 0.1), in every dropout layer; the
    saved student's config keeps its own 0.1, and the reloaded model drops out at 0.1 again."""
    seen = []
    train = distillation.DistillationTrainer.train

    def recording(self, *args, **kwargs):
        seen.extend({m.p for m in self.model.modules() if isinstance(m, torch.nn.Dropout)})
        seen.extend({m.dropout_prob for m in self.model.modules() if hasattr(m, "dropout_prob")})
        return train(self, *args, **kwargs)

    monkeypatch.setattr(distillation.DistillationTrainer, "train", recording)
    options = {} if dropout == 0.0 else {"student_dropout": dropout}  # 0: the default
    result = run(teacher, student, tmp_path / "out", max_steps=2, augment_copies=0, **options)
    assert seen and set(seen) == {trained_with}
    assert MiniBertConfig.from_pretrained(student).hidden_dropout_prob == 0.1
    saved = json.loads((result.output_dir / "config.json").read_text())
    assert (saved["hidden_dropout_prob"], saved["attention_probs_dropout_prob"], saved["classifier_dropout"]) == (
        0.1,
        0.1,
        None,
    )
    reloaded = AutoModelForSequenceClassification.from_pretrained(result.output_dir)
    assert {m.p for m in reloaded.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}


@pytest.mark.parametrize("given", [None, ("3", "1e-4")])
def test_distillation_defaults_2_epochs_at_2e4_unless_told_and_fine_tuning_keeps_its_own(
    distilled, student, tmp_path, monkeypatch, given
):
    """distill's own defaults (2 epochs at 2e-4, the epochs raised by the step floor: 32 examples are one step an
    epoch, so 50, MAX_FLOOR_EPOCHS) reach Trainer from the command line and the Python function alike; an explicit
    --learning_rate 1e-4, fine-tuning's default, is not mistaken for "not given", and epochs given are kept."""
    used = []

    def record(self, *args, **kwargs):
        used.append((self.args.num_train_epochs, self.args.learning_rate))
        raise KeyboardInterrupt  # stops the run where training would start

    monkeypatch.setattr(distillation.DistillationTrainer, "train", record)
    train = tmp_path / "train.csv"
    sentiment(32, 0).to_csv(train, index=False)
    flags = ["--num_train_epochs", given[0], "--learning_rate", given[1]] if given else []
    # The command says it was interrupted, in one line, and exits 130 as a Ctrl-C does.
    assert (
        main(
            [
                "distill",
                "--task",
                "sequence-classification",
                "--teacher_model_name_or_path",
                distilled.teacher,
                "--model_name_or_path",
                str(student),
                "--train_file",
                str(train),
                "--output_dir",
                str(tmp_path / "cli"),
                "--augment_copies",
                "0",
                "--disable_tqdm",
                "true",
                *flags,
            ]
        )
        == 130
    )
    with pytest.raises(KeyboardInterrupt):
        distill(
            task="sequence-classification",
            teacher_model_name_or_path=distilled.teacher,
            model_name_or_path=str(student),
            train_data=sentiment(32, 0),
            output_dir=str(tmp_path / "api"),
            augment_copies=0,
            show_progress=False,
            **({"num_train_epochs": float(given[0]), "learning_rate": float(given[1])} if given else {}),
        )
    expected = (float(given[0]), float(given[1])) if given else (50.0, 2e-4)
    assert used == [expected, expected]
    assert (TRAINING_DEFAULTS["num_train_epochs"], TRAINING_DEFAULTS["learning_rate"]) == (3.0, 1e-4)


def test_cli_learning_rate_search_beside_distills_default_rate(distilled, student, tmp_path, monkeypatch):
    """`--learning_rates` beside distill's own default learning rate (which the command line does not pass on): the
    search starts, at its first rate."""
    used = []

    def record(self, *args, **kwargs):
        used.append(self.args.learning_rate)
        raise KeyboardInterrupt  # stops the search where its first run would train

    monkeypatch.setattr(distillation.DistillationTrainer, "train", record)
    for split, seed in (("train", 0), ("validation", 1)):
        sentiment(32, seed).to_csv(tmp_path / f"{split}.csv", index=False)
    assert (
        main(
            [
                "distill",
                "--task",
                "sequence-classification",
                "--teacher_model_name_or_path",
                distilled.teacher,
                "--model_name_or_path",
                str(student),
                "--train_file",
                str(tmp_path / "train.csv"),
                "--validation_file",
                str(tmp_path / "validation.csv"),
                "--output_dir",
                str(tmp_path / "out"),
                "--augment_copies",
                "0",
                "--disable_tqdm",
                "true",
                "--learning_rates",
                "3e-4",
                "1e-3",
            ]
        )
        == 130
    )
    assert used == [3e-4]


def test_a_torn_teacher_logits_cache_is_recomputed(teacher, student, tmp_path):
    """A cache cut short (a kill or a full disk while it was written, before writes were atomic) is labelled
    again, not a SafetensorError traceback; the new cache is whole and equals the first."""
    folder, options = tmp_path / "run", dict(augment_copies=0, max_steps=1, overwrite_output_dir=True)
    run(teacher, student, folder, **options)
    cache = folder / CACHE_FILE
    first = {k: v.clone() for k, v in load_file(str(cache)).items()}  # load_file maps the file: copy before cutting it
    assert run(teacher, student, folder, **options).reused_teacher_logits  # whole: the same labelling is reused
    os.truncate(cache, cache.stat().st_size // 2)
    assert not run(teacher, student, folder, **options).reused_teacher_logits
    again = load_file(str(cache))
    assert again.keys() == first.keys()
    assert {k: float((again[k].float() - first[k].float()).abs().max()) for k in first} == dict.fromkeys(first, 0.0)


def test_training_leaves_no_hidden_folder_and_keeps_the_cache_for_a_rerun(teacher, student, tmp_path, monkeypatch):
    """While the student trains (where a kill is most likely) nothing is staged beside the output folder, and the
    teacher's logits are already cached in it: a killed run leaves no `.NAME.partial-*` behind, and its rerun
    does not label again."""
    output = tmp_path / "run"
    seen = []

    def interrupted(self, *args, **kwargs):
        seen.append((sorted(p.name for p in tmp_path.iterdir()), (output / CACHE_FILE).is_file()))
        raise KeyboardInterrupt

    monkeypatch.setattr(distillation.DistillationTrainer, "train", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(teacher, student, output, augment_copies=0)
    assert seen == [(["run"], True)]
    monkeypatch.undo()
    monkeypatch.setattr(distillation_teacher, "label_with_teacher", forbidden)
    assert run(
        teacher, student, output, augment_copies=0, max_steps=1, overwrite_output_dir=True
    ).reused_teacher_logits


# ---------------------------------------------------------------------------------------------------------------
# The teacher's attention relations, taught beside its predictions when the student reads the teacher's tokens


def same_tokens_student(folder: Path, tokenizer_source: Path) -> Path:
    """A random Mini-BERT narrower than the teacher, with the teacher's own tokenizer (as a general-distilled
    student with the teacher's whole vocabulary has)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    config = MiniBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    with torch.random.fork_rng():  # the same weights whichever tests ran first
        torch.manual_seed(0)
        MiniBertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cased_student(tmp_path_factory) -> Path:
    """A cased vocabulary ("Ana", "A"): pieces the lowercased teacher does not have."""
    return pretrained_folder(tmp_path_factory.mktemp("cased-student"), vocab_size=150, hidden=32, lowercase=False)


@pytest.fixture(scope="module")
def aligned_student(teacher_base, tmp_path_factory) -> Path:
    return same_tokens_student(tmp_path_factory.mktemp("aligned-student"), teacher_base)


def relations_to_teacher(teacher: Path, model, texts: list[str]) -> float:
    """The relation loss between `teacher`'s last layer and `model`'s on `texts` (both read the teacher's tokens)."""
    from transformers import AutoModel

    from modeling_minibert.training.distillation.relations import set_recording_attention

    encoder = AutoModel.from_pretrained(teacher).eval()
    set_recording_attention(encoder, "teacher")
    set_recording_attention(model, "student")
    transfer = distillation_trainer.RelationTransfer(
        encoder, torch.arange(model.config.vocab_size), heads=2, weight=1.0
    )
    batch = AutoTokenizer.from_pretrained(teacher)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return float(transfer.outputs_and_loss(model.eval(), dict(batch))[1])


def test_relation_loss_is_zero_against_itself_and_trains_only_the_student():
    """A teacher with the student's own encoder weights has the student's relations (loss 0, on a batch with
    padding); another teacher does not, and its loss trains the student's attention, never the teacher."""
    from modeling_minibert import MiniBertModel
    from modeling_minibert.training.distillation.relations import set_recording_attention

    torch.manual_seed(0)
    config = MiniBertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    student = MiniBertForSequenceClassification(config).eval()
    twin = MiniBertModel(config, add_pooling_layer=False)
    twin.load_state_dict(student.bert.state_dict(), strict=False)
    ids = torch.randint(5, 40, (3, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7])
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    expected = student(**inputs).logits  # the unpadded path, before recording
    for model in (student, twin):
        set_recording_attention(model, "model")
    same = distillation_trainer.RelationTransfer(
        twin.eval().requires_grad_(False), torch.arange(40), heads=2, weight=1.0
    )
    outputs, loss = same.outputs_and_loss(student, inputs)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(outputs.logits, expected, atol=1e-5, rtol=1e-5)

    # Sharper attention than the student's 0.02-scale start (nearly uniform relations): a clearly different teacher.
    other = MiniBertModel(MiniBertConfig(**{**config.to_dict(), "initializer_range": 0.5}), add_pooling_layer=False)
    other.eval().requires_grad_(False)
    set_recording_attention(other, "other")
    _, loss = distillation_trainer.RelationTransfer(other, torch.arange(40), heads=2, weight=3.0).outputs_and_loss(
        student, inputs
    )
    assert float(loss.detach()) > 0.1
    loss.backward()
    last = student.bert.encoder.layer[-1].attention
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in last.parameters())
    assert all(p.grad is None for p in other.parameters())


def test_relations_are_taught_when_the_student_reads_the_teachers_tokens(teacher, aligned_student, tmp_path):
    """relation_weight: a student with the teacher's tokenizer learns the teacher's last-layer attention relations
    beside its predictions (closer to them on held-out texts than the same run without them, the default), and
    is saved with its own attention backend."""
    options = dict(test=sentiment(30, 2), num_train_epochs=6)
    taught = run(teacher, aligned_student, tmp_path / "taught", relation_weight=1.0, **options)
    assert taught.relation_weight == 1.0
    untaught = run(teacher, aligned_student, tmp_path / "untaught", **options)
    assert untaught.relation_weight == 0.0
    held_out = list(sentiment(40, 7)["text"])
    loaded = {
        name: AutoModelForSequenceClassification.from_pretrained(r.output_dir)
        for name, r in (("taught", taught), ("untaught", untaught))
    }
    assert loaded["taught"].config._attn_implementation == "sdpa"
    losses = {name: relations_to_teacher(teacher, model, held_out) for name, model in loaded.items()}
    # Over four random teachers: 0.04-0.12 taught against 0.34-0.80 untaught. (Whether the task gains is a question
    # for real data, benchmarks/distill_rotten_tomatoes.py: here, on tiny models, it sometimes slows the task down.)
    assert losses["taught"] < 0.5 * losses["untaught"], losses


@pytest.fixture(scope="module")
def subset_student(teacher_base, tmp_path_factory) -> Path:
    """The teacher's pieces cut down to the characters and a few more: words the teacher keeps whole fall apart."""
    from tokenization.subset import smallest_vocab_size, subset_tokenizer

    teacher_tokenizer = AutoTokenizer.from_pretrained(teacher_base)
    folder = tmp_path_factory.mktemp("subset")
    subset = subset_tokenizer(teacher_tokenizer, all_texts(), smallest_vocab_size(teacher_tokenizer) + 5)
    subset.save_pretrained(folder)
    return same_tokens_student(folder, folder)


@pytest.mark.parametrize(
    "case, message",
    [
        ("negative", r"relation_weight=-1.0 must be a number >= 0"),
        (
            "other_vocabulary",
            r"relation_weight=1.0: the student's tokenizer is not a subset of the teacher's: \d+ pieces",
        ),
        (
            "subset",
            r"relation_weight=1.0: the student cuts \d+ of 320 training inputs into other tokens than the teacher "
            r"\(the first: 'the \w+ was \w+ and the \w+ too'\)",
        ),
    ],
)
def test_relations_that_cannot_be_taught_are_refused_before_training(
    case, message, teacher, cased_student, subset_student, tmp_path, monkeypatch
):
    """Before any labelling or training: a negative weight, a student whose vocabulary is not the teacher's, one
    whose subset of it cuts the data otherwise."""
    monkeypatch.setattr(distillation.DistillationTrainer, "train", forbidden)
    monkeypatch.setattr(distillation_teacher, "label_with_teacher", forbidden)
    monkeypatch.setattr(distillation_teacher, "finetune", forbidden)
    chosen = {
        "negative": (-1.0, cased_student),
        "other_vocabulary": (1.0, cased_student),
        "subset": (1.0, subset_student),
    }[case]
    with pytest.raises(ValueError, match=message):
        run(teacher, chosen[1], tmp_path / "out", relation_weight=chosen[0], finetune_teacher=True)
    assert not (tmp_path / "out").exists()


# --- non-finite teachers and runs (the class is in tests/cross_cutting/test_faults.py, TestNoNonFiniteSuccess) -----------------


def test_a_learning_rate_that_diverges_loses_the_search_and_all_diverging_is_an_error(student, tmp_path):
    """A search meets rates that are too high: such a run stops at its first non-finite loss or weights and loses,
    recorded as diverged (a NaN score used to be compared, and a first NaN run stayed the best)."""
    searched = search_run(student, tmp_path / "search", [1e12, 3e-3], max_steps=3)
    search = json.loads((tmp_path / "search" / "learning_rate_search.json").read_text())
    diverged, chosen = search["runs"]
    assert set(diverged) == {"learning_rate", "diverged"} and diverged["learning_rate"] == 1e12
    assert re.fullmatch(
        r"the (weights are not finite|\w+ loss is (nan|inf)) at step \d+( \(.*\))?", diverged["diverged"]
    )
    assert search["chosen_learning_rate"] == 3e-3 == chosen["learning_rate"]
    assert chosen["eval_accuracy"] == searched.metrics["accuracy"]
    assert not [p.name for p in (tmp_path / "search").iterdir() if p.name.startswith("run-")]
    assert (tmp_path / "search" / "learning_rate_search.png").stat().st_size > 0
    with pytest.raises(
        NonFiniteError,
        match=r"^learning_rates: every run became non-finite \(1e\+12: .* at step \d+.*; "
        r"1e\+13: .* at step \d+.*\): lower the learning rates; nothing was saved",
    ):
        search_run(student, tmp_path / "all", [1e12, 1e13], max_steps=3)
    assert not (tmp_path / "all").exists()


def test_a_teacher_whose_logits_overflow_is_refused_before_training(teacher, student, tmp_path):
    """Finite weights, infinite outputs: the logits are checked before they are cached or taught."""
    overflowing = tmp_path / "overflowing"
    shutil.copytree(teacher, overflowing)
    weights = load_file(overflowing / "model.safetensors")
    weights["classifier.weight"] = torch.full_like(weights["classifier.weight"], 3e38)
    save_file(weights, overflowing / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        NonFiniteError,
        match=rf"^labelling with the teacher: the teacher {overflowing} gives non-finite "
        r"logits for \d+ of 320 transfer input\(s\) \(the first: 'the \w+ was .*'\)"
        r": a non-finite teacher cannot teach",
    ):
        run(overflowing, student, tmp_path / "out", max_steps=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overflowing"]  # no cache of them, no output


def test_a_diverging_teacher_fine_tuning_names_the_teachers_learning_rate(teacher_base, student, tmp_path):
    with pytest.raises(
        NonFiniteError,
        match=r"^fine-tuning the teacher: the (weights are not finite|\w+ loss is "
        r"(nan|inf)) at step \d+.*: the learning rate 1e\+12 is likely too high "
        r"\(lower --teacher_learning_rate\); the teacher was not saved$",
    ):
        run(
            teacher_base,
            student,
            tmp_path / "out",
            finetune_teacher=True,
            teacher_num_train_epochs=1,
            teacher_learning_rate=1e12,
            max_steps=1,
        )
    assert not list((tmp_path / "out").rglob("model.safetensors"))


def test_the_teacher_of_relations_is_checked_as_its_cached_logits_spare_labelling(teacher, tmp_path):
    poisoned = tmp_path / "poisoned"
    shutil.copytree(teacher, poisoned)
    weights = load_file(poisoned / "model.safetensors")
    name = next(k for k in sorted(weights) if k.endswith("query.weight"))
    weights[name][0, 0] = float("nan")
    save_file(weights, poisoned / "model.safetensors", metadata={"format": "pt"})
    args = SimpleNamespace(
        relation_weight=1.0, teacher_mixed_precision="no", teacher_model_name_or_path=str(poisoned), allow_pickle=False
    )
    with pytest.raises(
        NonFiniteError,
        match=rf"^relation_weight=1.0: the teacher {poisoned} has non-finite weights "
        r"\(1 of \d+ tensors, the first: [\w.]+query.weight\): a non-finite "
        r"teacher cannot teach",
    ):
        distillation_trainer.relation_transfer(args, str(poisoned), ([0], 2))


def test_the_teacher_and_the_student_stop_when_validation_stops_improving(teacher_base, student, tmp_path):
    def evaluated_epochs(folder):
        state = json.loads((folder / "trainer_state.json").read_text())
        return [e["epoch"] for e in state["log_history"] if "eval_loss" in e]

    def run_default_schedule(patience, **more):  # no epochs given: the default schedule, 6 steps at least
        # Learning rates of 0: no evaluation betters the first.
        return distill(
            task="sequence-classification",
            teacher_model_name_or_path=str(teacher_base),
            model_name_or_path=str(student),
            output_dir=str(tmp_path / "out"),
            train_data=sentiment(160, 0),
            validation_data=sentiment(60, 1),
            finetune_teacher=True,
            teacher_learning_rate=0.0,
            min_train_steps=6,
            augment_copies=0,
            early_stopping_patience=patience,
            show_progress=False,
            **{**QUIET, "learning_rate": 0.0, "per_device_train_batch_size": 160},
            **more,
        )

    stopped = run_default_schedule(1)
    assert evaluated_epochs(stopped.output_dir / TEACHER_DIR) == [1, 2]  # of 6 epochs
    assert evaluated_epochs(stopped.output_dir) == [1, 2]
    # Another schedule is another teacher: fine-tuned again, not reused.
    whole = run_default_schedule(0, overwrite_output_dir=True)
    assert evaluated_epochs(whole.output_dir / TEACHER_DIR) == [1, 2, 3, 4, 5, 6]
    assert evaluated_epochs(whole.output_dir) == [1, 2, 3, 4, 5, 6]
