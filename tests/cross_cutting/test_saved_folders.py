"""Folders saved by earlier versions load with today's code and compute what they computed then
(tests/fixtures/saved/: see its README). What moved in the package must not move what is on users' disks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fixtures.environment import REPO
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

import modeling_minibert  # noqa: F401 - registers the Auto classes
from modeling_minibert.deployment import fill_mask, load_quantized

SAVED = REPO / "tests" / "fixtures" / "saved" / "0.1"
EXPECTED = json.loads((SAVED / "expected_outputs.json").read_text())


@pytest.fixture
def saved(tmp_path) -> Path:
    """A copy of the saved folders: loading must not need to write into them, and tests must not change them."""
    return Path(shutil.copytree(SAVED, tmp_path / "0.1"))


def batch(folder: Path) -> dict:
    return AutoTokenizer.from_pretrained(folder)(EXPECTED["texts"], padding=True, return_tensors="pt")


@pytest.mark.parametrize(
    "folder, key",
    [("pretrained", "pretrained_mlm_logits_sum"), ("pretrained/checkpoint-4", "checkpoint-4_mlm_logits_sum")],
)
def test_a_pretraining_run_and_its_checkpoint_load_as_masked_lms(saved, folder, key):
    model = AutoModelForMaskedLM.from_pretrained(saved / folder).eval()
    with torch.no_grad():
        sums = model(**batch(saved / "pretrained")).logits.sum(-1)
    torch.testing.assert_close(sums, torch.tensor(EXPECTED[key]), atol=1e-4, rtol=1e-5)
    assert fill_mask(saved / "pretrained", "the [MASK] said", top_k=2)[0]["token_str"]


def test_a_fine_tuned_classifier_loads_and_predicts_as_it_did(saved):
    model = AutoModelForSequenceClassification.from_pretrained(saved / "classifier").eval()
    with torch.no_grad():
        logits = model(**batch(saved / "classifier")).logits
    torch.testing.assert_close(logits, torch.tensor(EXPECTED["classifier_logits"]), atol=1e-5, rtol=1e-4)
    assert model.config.id2label == {0: "negative", 1: "positive"}


def test_an_int8_folder_loads_and_predicts_as_it_did(saved):
    model = load_quantized(saved / "classifier-int8").eval()
    with torch.no_grad():
        logits = model(**batch(saved / "classifier")).logits
    torch.testing.assert_close(logits, torch.tensor(EXPECTED["classifier-int8_logits"]), atol=1e-5, rtol=1e-4)


def test_a_sentence_transformers_folder_encodes_as_it_did(saved):
    from sentence_transformers import SentenceTransformer

    embeddings = SentenceTransformer(str(saved / "embedder"), device="cpu").encode(EXPECTED["texts"])
    torch.testing.assert_close(
        torch.tensor(embeddings), torch.tensor(EXPECTED["embedder_embeddings"]), atol=1e-5, rtol=1e-4
    )
