"""`fill_mask` / `minibert fill-mask`: transformers' fill-mask pipeline on a saved Mini-BERT folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining, cli
from modeling_minibert.fill_mask import fill_mask
from tokenization import train_tokenizer

TEXTS = [
    "The company said profits rose sharply in the third quarter.",
    "Shares in the firm fell after the chief executive resigned.",
    "The government said the economy grew faster than expected.",
] * 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An untrained tiny Mini-BERT and its tokenizer, saved the way `pretrain` saves them."""
    path = tmp_path_factory.mktemp("model")
    tokenizer = train_tokenizer(TEXTS, vocab_size=120, show_progress=False)
    torch.manual_seed(0)
    config = MiniBertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64)
    MiniBertForPreTraining(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def expected_top(folder: Path, text: str, k: int) -> tuple[list[int], list[float]]:
    """Top-k token ids and probabilities at the single [MASK], computed by hand from the model's MLM logits."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = MiniBertForPreTraining.from_pretrained(folder).eval()
    inputs = tokenizer(text, return_tensors="pt")
    at = int((inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    with torch.no_grad():
        probs = model(**inputs).prediction_logits[0, at].softmax(-1)
    top = probs.topk(k)
    return top.indices.tolist(), top.values.tolist()


def test_fill_mask_gives_the_models_top_predictions(folder):
    text = "the company said [MASK] rose."
    predictions = fill_mask(folder, text, top_k=4)
    tokens, scores = expected_top(folder, text, 4)
    assert [p["token"] for p in predictions] == tokens
    assert [p["score"] for p in predictions] == pytest.approx(scores, rel=1e-4)
    assert all(p["sequence"].startswith("the company said") for p in predictions)


def test_several_masks_give_one_list_each(folder):
    predictions = fill_mask(folder, "the [MASK] said [MASK] rose.", top_k=2)
    assert len(predictions) == 2 and all(len(p) == 2 for p in predictions)


def test_cli_prints_predictions(folder, capsys):
    assert cli.main(["fill-mask", str(folder), "the company said [MASK] rose.", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    tokens, scores = expected_top(folder, "the company said [MASK] rose.", 3)
    assert len(lines) == 3
    for line, score in zip(lines, scores):
        assert float(line.split()[0]) == pytest.approx(score, abs=1e-4)


def test_bad_input(folder, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"the text must contain \[MASK\], got 'no mask here'"):
        fill_mask(folder, "no mask here")
    with pytest.raises(FileNotFoundError, match=r"no saved model in .*nowhere \(config.json not found\)"):
        fill_mask(tmp_path / "nowhere", "a [MASK].")
    with pytest.raises(ValueError, match=r"top_k=0 must be at least 1"):
        fill_mask(folder, "a [MASK].", top_k=0)
    assert cli.main(["fill-mask", str(folder), "no mask here"]) == 2
    assert "minibert fill-mask: error: the text must contain [MASK]" in capsys.readouterr().err
