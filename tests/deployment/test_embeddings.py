"""Sentence embeddings: a Mini-BERT or BERT-format folder with the sentence-transformers files loads in
`SentenceTransformer` and encodes like the package's own mean pooling; `minibert distill --task embedding` trains a
student toward a sentence-transformers teacher and leaves a folder that loads the same way.

Models are tiny (TINY sizes) with a WordPiece vocabulary trained here on a few templated sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures.environment import run_python
from fixtures.models import TINY
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from modeling_minibert import MiniBertConfig, MiniBertModel
from modeling_minibert.cli import main
from modeling_minibert.deployment.sentence_embeddings import encode
from modeling_minibert.sharing.bert_format import convert_minibert_to_bert
from modeling_minibert.sharing.sentence_transformers_format import (
    mean_pooling,
    module_types,
    write_sentence_transformers_files,
)
from modeling_minibert.utils.outputs import SENTENCE_TRANSFORMERS_MODULES_FILE
from tokenization import train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

NOUNS = ["market", "match", "film", "election", "phone", "album", "bank", "team", "minister", "game"]
VERBS = ["rose", "fell", "won", "lost", "opened", "closed", "grew", "shrank"]
# Lengths from one word to past the model's 24 positions (truncation), so batches are ragged.
SENTENCES = [" ".join([NOUNS[i % 10], VERBS[i % 8]] * (1 + i % 13)) for i in range(40)] + ["bank", "the"]


def tiny_tokenizer():
    return train_tokenizer(
        train_data=SENTENCES * 3, vocab_size=100, disable_tqdm=True, model_max_length=TINY["max_position_embeddings"]
    )


@pytest.fixture(scope="module")
def minibert_folder(tmp_path_factory) -> Path:
    """A Mini-BERT base model with its tokenizer, saved as `save_pretrained` leaves it."""
    folder = tmp_path_factory.mktemp("minibert")
    tokenizer = tiny_tokenizer()
    MiniBertModel(MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_mean_pooling_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.equal(mean_pooling(hidden, mask), torch.tensor([[2.0, 3.0], [7.0, 8.0]]))
    assert torch.equal(mean_pooling(hidden, torch.zeros(2, 3)), torch.zeros(2, 2))  # no real token: zeros, no NaN


def test_encode_matches_one_text_at_a_time(minibert_folder):
    """Length-sorted padded batches (Mini-BERT's unpadded path) give each text the embedding it gets alone."""
    model, tokenizer = MiniBertModel.from_pretrained(minibert_folder), tiny_tokenizer()
    batched = encode(model, tokenizer, SENTENCES, batch_size=16, normalize=True)
    alone = torch.cat([encode(model, tokenizer, [text], normalize=True) for text in SENTENCES])
    assert batched.shape == (len(SENTENCES), TINY["hidden_size"])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(batched.norm(dim=-1), torch.ones(len(SENTENCES)))


def test_no_texts_give_no_embeddings_as_sentence_transformers_does(minibert_folder):
    """An empty list was an IndexError from the tokenizer: it is (0, D), D the projection's width when there is one
    (`SentenceTransformer.encode([])` returns an empty result too, without its width)."""
    model, tokenizer = MiniBertModel.from_pretrained(minibert_folder), tiny_tokenizer()
    assert encode(model, tokenizer, []).shape == (0, TINY["hidden_size"])
    projected = encode(model, tokenizer, [], projection=torch.nn.Linear(TINY["hidden_size"], 8), normalize=True)
    assert projected.shape == (0, 8) and projected.dtype == torch.float32


def test_one_string_is_one_text_as_sentence_transformers_takes_it(minibert_folder):
    """A string was taken as a sequence of texts: its characters, each embedded."""
    model, tokenizer = MiniBertModel.from_pretrained(minibert_folder), tiny_tokenizer()
    one = encode(model, tokenizer, "the company said profits rose")
    assert one.shape == (TINY["hidden_size"],)
    assert torch.equal(one, encode(model, tokenizer, ["the company said profits rose"])[0])


@pytest.mark.parametrize("normalize", [True, False])
def test_sentence_transformers_loads_a_minibert_folder(minibert_folder, tmp_path, normalize):
    folder = tmp_path / "model"
    folder.mkdir()
    for path in minibert_folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    kinds = write_sentence_transformers_files(folder, normalize=normalize)
    assert kinds == ["Transformer", "Pooling", *(["Normalize"] if normalize else [])] == module_types(folder)
    # This process imported modeling_minibert (the Auto classes know `minibert`): no trust_remote_code needed.
    st = SentenceTransformer(str(folder), device="cpu")
    assert st.max_seq_length == TINY["max_position_embeddings"]
    expected = encode(MiniBertModel.from_pretrained(folder), tiny_tokenizer(), SENTENCES, normalize=normalize)
    got = torch.from_numpy(st.encode(SENTENCES, batch_size=7))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_sentence_transformers_loads_a_bert_format_folder(minibert_folder, tmp_path):
    """The BERT-format copy (transformers' BertModel, no code files) encodes as the Mini-BERT does."""
    bert = convert_minibert_to_bert(minibert_folder, tmp_path / "bert")
    write_sentence_transformers_files(bert)
    assert json.loads((bert / "config.json").read_text())["model_type"] == "bert"
    st = SentenceTransformer(str(bert), device="cpu")
    assert type(st[0].auto_model).__name__ == "BertModel"
    expected = encode(MiniBertModel.from_pretrained(minibert_folder), tiny_tokenizer(), SENTENCES, normalize=True)
    torch.testing.assert_close(torch.from_numpy(st.encode(SENTENCES)), expected, atol=1e-5, rtol=0)


@pytest.mark.slow(seconds=11)  # fresh processes without the package: not in the quick tier
def test_without_the_package_a_minibert_folder_needs_trust_remote_code(minibert_folder, tmp_path):
    """In a process that cannot import modeling_minibert, SentenceTransformer refuses the `minibert` folder
    unless trust_remote_code=True, then runs the code saved beside the weights and gives the same embeddings."""
    write_sentence_transformers_files(minibert_folder)
    expected = encode(MiniBertModel.from_pretrained(minibert_folder), tiny_tokenizer(), SENTENCES[:5], normalize=True)
    out = run_python(
        f"""
import json
from sentence_transformers import SentenceTransformer
try:
    SentenceTransformer({str(minibert_folder)!r}, device="cpu")
    print("loaded without trust_remote_code")
except ValueError as err:
    print("refused:", "trust_remote_code" in str(err))
st = SentenceTransformer({str(minibert_folder)!r}, device="cpu", trust_remote_code=True)
print(json.dumps(st.encode({SENTENCES[:5]!r}).tolist()))
""",
        tmp_path,
    )
    first, second = out.strip().splitlines()[-2:]
    assert first == "refused: True"
    torch.testing.assert_close(torch.tensor(json.loads(second)), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"max_seq_length": 25}, ValueError, "max_seq_length=25 must be between 1 and the model's 24 positions"),
        ({"max_seq_length": 0}, ValueError, "max_seq_length=0 must be between 1"),
        ({"dense_dir": "2_Dense"}, FileNotFoundError, "holds no Dense module"),
    ],
)
def test_bad_sentence_transformers_options_are_refused(minibert_folder, tmp_path, options, error, message):
    with pytest.raises(error, match=message):
        write_sentence_transformers_files(minibert_folder, **options)


def test_module_types_of_a_folder_without_modules_json(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"has no {SENTENCE_TRANSFORMERS_MODULES_FILE}"):
        module_types(tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# minibert distill --task embedding


@pytest.fixture(scope="module")
def teacher_folder(tmp_path_factory) -> Path:
    """A tiny sentence-transformers teacher (48 wide, normalising), built from a config with its own tokenizer."""
    folder = tmp_path_factory.mktemp("teacher")
    tokenizer = train_tokenizer(train_data=SENTENCES * 3, vocab_size=90, disable_tqdm=True, model_max_length=32)
    config = MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer), "hidden_size": 48, "max_position_embeddings": 32})
    MiniBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_sentence_transformers_files(folder, normalize=True)
    return folder


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("texts")
    files = {"train": folder / "unlabelled.txt", "validation": folder / "held_out.txt"}
    files["train"].write_text("\n".join(SENTENCES[::2] * 4) + "\n\n", encoding="utf-8")
    files["validation"].write_text("\n".join(SENTENCES[1::2]), encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def distilled(minibert_folder, teacher_folder, unlabelled, tmp_path_factory) -> tuple[Path, str]:
    """One run of the command, as a user types it (32-wide student, 48-wide teacher: a projection is learned)."""
    output = tmp_path_factory.mktemp("run") / "embedder"
    code = main(
        [
            "distill",
            "--task",
            "embedding",
            "--teacher_model_name_or_path",
            str(teacher_folder),
            "--model_name_or_path",
            str(minibert_folder),
            "--train_file",
            str(unlabelled["train"]),
            "--validation_file",
            str(unlabelled["validation"]),
            "--output_dir",
            str(output),
            "--num_train_epochs",
            "6",
            "--learning_rate",
            "3e-3",
            "--per_device_train_batch_size",
            "16",
            "--logging_steps",
            "2",
            "--disable_tqdm",
            "true",
            "--report_to",
            "none",
        ]
    )
    assert code == 0
    return output


def teacher_vectors(teacher_folder: Path, texts: list[str], max_seq_length: int | None = None) -> torch.Tensor:
    """The teacher's embeddings, of the texts cut at `max_seq_length` tokens (as distillation cuts them for it: at
    the student's length)."""
    teacher = SentenceTransformer(str(teacher_folder), device="cpu")
    teacher.max_seq_length = max_seq_length or teacher.max_seq_length
    return torch.from_numpy(teacher.encode(texts))


def test_distilled_student_moves_toward_the_teacher(distilled, minibert_folder, teacher_folder, unlabelled):
    state = json.loads((distilled / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) >= 5 and losses[-1] < 0.5 * losses[0], losses
    held_out = unlabelled["validation"].read_text().splitlines()
    teacher = teacher_vectors(teacher_folder, held_out, max_seq_length=TINY["max_position_embeddings"])
    student = torch.from_numpy(SentenceTransformer(str(distilled), device="cpu").encode(held_out))
    results = json.loads((distilled / "all_results.json").read_text())
    cosine = torch.nn.functional.cosine_similarity(student, teacher).mean().item()
    assert cosine == pytest.approx(results["eval_cosine"], abs=1e-4)
    assert {"eval_loss", "train_loss"} <= set(results)
    # Before distillation (a random projection into the teacher's space) the student was far from the teacher.
    untrained = torch.nn.Linear(TINY["hidden_size"], 48)
    before = encode(
        MiniBertModel.from_pretrained(minibert_folder),
        tiny_tokenizer(),
        held_out,
        projection=untrained,
        normalize=True,
    )
    assert cosine > torch.nn.functional.cosine_similarity(before, teacher).mean().item() + 0.2


def test_distilled_folder_is_a_sentence_transformers_model(distilled):
    """Transformer -> Pooling -> Dense (to the teacher's 48) -> Normalize; the package's own pooling gives the
    same vectors."""
    assert module_types(distilled) == ["Transformer", "Pooling", "Dense", "Normalize"]
    st = SentenceTransformer(str(distilled), device="cpu")
    got = torch.from_numpy(st.encode(SENTENCES))
    assert got.shape == (len(SENTENCES), 48)
    dense = st[2].linear
    expected = encode(
        MiniBertModel.from_pretrained(distilled), tiny_tokenizer(), SENTENCES, projection=dense, normalize=True
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert not list(distilled.glob("checkpoint-*")) and (distilled / "README.md").is_file()


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"temperature": 3.0}, ValueError, "temperature=3.0 does not apply to task='embedding'"),
        (
            {"early_stopping_patience": 3},
            ValueError,
            r"early_stopping_patience=3 does not apply to task='embedding' \(it trains --num_train_epochs\)",
        ),
        ({"train_file": "texts.csv"}, ValueError, "train_file='texts.csv': task='embedding' reads unlabelled text"),
        ({"teacher_model_name_or_path": "nowhere"}, FileNotFoundError, "teacher nowhere is not a folder"),
        ({"teacher_model_name_or_path": None}, ValueError, "teacher_model_name_or_path is required"),
    ],
)
def test_bad_embedding_options_fail_before_any_work(
    minibert_folder, teacher_folder, unlabelled, tmp_path, options, error, message
):
    from modeling_minibert.training.distillation.flow import distill

    base = dict(
        task="embedding",
        teacher_model_name_or_path=str(teacher_folder),
        model_name_or_path=str(minibert_folder),
        train_file=str(unlabelled["train"]),
        output_dir=str(tmp_path / "out"),
    )
    with pytest.raises(error, match=message):
        distill(**{**base, **options}, show_progress=False)
    assert not (tmp_path / "out").exists()


def test_a_teacher_without_sentence_transformers_files_is_refused(minibert_folder, unlabelled, tmp_path):
    from modeling_minibert.training.distillation.flow import distill

    with pytest.raises(FileNotFoundError, match="has no modules.json: not a sentence-transformers folder"):
        distill(
            task="embedding",
            teacher_model_name_or_path=str(tmp_path),
            model_name_or_path=str(minibert_folder),
            train_file=str(unlabelled["train"]),
            output_dir=str(tmp_path / "out"),
            show_progress=False,
        )


def test_finetune_refuses_the_embedding_task(minibert_folder, unlabelled, tmp_path):
    from modeling_minibert.training.finetuning import finetune

    with pytest.raises(ValueError, match=r"unknown task 'embedding'; choose one of \['sequence-classification'"):
        finetune(
            task="embedding",
            model_name_or_path=minibert_folder,
            train_file=str(unlabelled["train"]),
            output_dir=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_without_a_student_one_is_made_from_the_teacher(teacher_folder, unlabelled, tmp_path):
    """`--task embedding` without --model_name_or_path: a Mini-BERT that reads the teacher's tokens, its embeddings
    the teacher's on their principal directions (no wider than the teacher), trained with the embedding recipe's
    defaults (6 epochs at 5e-4) unless told, the teacher reading what the student reads."""
    from modeling_minibert.training.distillation.embedding import EMBEDDING_TRAINING_DEFAULTS, student_from_teacher

    student, tokenizer = student_from_teacher(str(teacher_folder))
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(teacher_folder).get_vocab()
    assert (student.config.hidden_size, student.config.num_hidden_layers) == (48, 3)  # the teacher's 48, not 192
    teacher = MiniBertModel.from_pretrained(teacher_folder)
    words = teacher.get_input_embeddings().weight.detach()
    projected = student.get_input_embeddings().weight.detach()
    # The projection keeps the rows' geometry: distances between word rows survive (all 48 directions kept here).
    torch.testing.assert_close(torch.cdist(projected, projected), torch.cdist(words, words), atol=1e-3, rtol=1e-3)

    output = tmp_path / "embedder"
    assert (
        main(
            [
                "distill",
                "--task",
                "embedding",
                "--teacher_model_name_or_path",
                str(teacher_folder),
                "--train_file",
                str(unlabelled["train"]),
                "--output_dir",
                str(output),
                "--max_steps",
                "2",
                "--logging_steps",
                "1",
                "--disable_tqdm",
                "true",
                "--report_to",
                "none",
            ]
        )
        == 0
    )
    state = json.loads((output / "trainer_state.json").read_text())
    # Rising by 5e-4 / 20 a step: the recipe's rate and warmup reached Trainer.
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    assert rates[-1] - rates[-2] == pytest.approx(5e-4 / 20)
    assert module_types(output)[:2] == ["Transformer", "Pooling"] and "Dense" not in module_types(output)
    assert SentenceTransformer(str(output), device="cpu").encode(SENTENCES[:2]).shape == (2, 48)
    assert EMBEDDING_TRAINING_DEFAULTS == {"num_train_epochs": 6.0, "learning_rate": 5e-4, "warmup_steps": 20}
    assert state["max_steps"] == 2


def nan_copy(folder: Path, into: Path) -> Path:
    """`folder` with one weight of its first attention layer NaN."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, into)
    weights = load_file(into / "model.safetensors")
    name = next(k for k in sorted(weights) if k.endswith("query.weight"))
    weights[name][0, 0] = float("nan")
    save_file(weights, into / "model.safetensors", metadata={"format": "pt"})
    return into


@pytest.mark.parametrize("with_student", [True, False], ids=["embedding-the-texts", "making-the-student"])
def test_a_teacher_with_a_nan_weight_is_refused_before_training(
    minibert_folder, teacher_folder, unlabelled, tmp_path, with_student
):
    """It gave an all-NaN student, saved with exit 0 (the class: tests/cross_cutting/test_faults.py, TestNoNonFiniteSuccess)."""
    from modeling_minibert.training.distillation.flow import distill
    from modeling_minibert.utils.finite import NonFiniteError

    teacher = nan_copy(teacher_folder, tmp_path / "teacher")
    step = "embedding the texts with the teacher" if with_student else "making the student from the teacher"
    student = {"model_name_or_path": str(minibert_folder)} if with_student else {}
    with pytest.raises(
        NonFiniteError,
        match=rf"^{step}: the teacher {teacher} has non-finite weights \(1 of \d+ "
        r"tensors, the first: [\w.]+query.weight\): a non-finite teacher cannot "
        r"teach; fix it or fine-tune it again \(nothing was trained\)$",
    ):
        distill(
            task="embedding",
            teacher_model_name_or_path=str(teacher),
            train_file=str(unlabelled["train"]),
            output_dir=str(tmp_path / "out"),
            show_progress=False,
            **student,
        )
    assert not (tmp_path / "out").exists()


def test_a_diverging_embedding_student_is_not_saved(minibert_folder, teacher_folder, unlabelled, tmp_path):
    from modeling_minibert.training.distillation.flow import distill
    from modeling_minibert.utils.finite import NonFiniteError

    with pytest.raises(
        NonFiniteError,
        match=r"^the (weights are not finite|\w+ loss is (nan|inf)) at step \d+.*: the "
        r"learning rate 1e\+12 is likely too high",
    ):
        distill(
            task="embedding",
            teacher_model_name_or_path=str(teacher_folder),
            model_name_or_path=str(minibert_folder),
            train_file=str(unlabelled["train"]),
            output_dir=str(tmp_path / "out"),
            show_progress=False,
            learning_rate=1e12,
            max_steps=6,
            warmup_steps=0,
            logging_steps=1,
            save_strategy="no",
        )
    assert not (tmp_path / "out").exists()
