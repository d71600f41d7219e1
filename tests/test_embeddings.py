"""Sentence embeddings: a Mini-BERT or BERT-format folder with the sentence-transformers files loads in
`SentenceTransformer` and encodes like the package's own mean pooling; `minibert distill --task embedding` trains a
student toward a sentence-transformers teacher and leaves a folder that loads the same way.

Models are tiny (TINY sizes) with a WordPiece vocabulary trained here on a few templated sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sentence_transformers import SentenceTransformer

from fixtures.environment import run_python
from fixtures.models import TINY
from modeling_minibert import MiniBertConfig, MiniBertModel
from modeling_minibert.convert_bert import convert_minibert_to_bert
from modeling_minibert.outputs import SENTENCE_TRANSFORMERS_MODULES_FILE
from modeling_minibert.sentence_embeddings import encode, mean_pooling, module_types, write_sentence_transformers_files
from tokenization import train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

NOUNS = ["market", "match", "film", "election", "phone", "album", "bank", "team", "minister", "game"]
VERBS = ["rose", "fell", "won", "lost", "opened", "closed", "grew", "shrank"]
# Lengths from one word to past the model's 24 positions (truncation), so batches are ragged.
SENTENCES = [" ".join([NOUNS[i % 10], VERBS[i % 8]] * (1 + i % 13)) for i in range(40)] + ["bank", "the"]


def tiny_tokenizer():
    return train_tokenizer(SENTENCES * 3, vocab_size=100, show_progress=False, model_max_length=TINY["max_position_embeddings"])


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
