"""`fill_mask` / `minibert fill-mask`: transformers' fill-mask pipeline on a saved Mini-BERT folder."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining, cli
from modeling_minibert.deployment.mask_filling import fill_mask
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
    tokenizer = train_tokenizer(train_data=TEXTS, vocab_size=120, disable_tqdm=True)
    torch.manual_seed(0)
    config = MiniBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
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
    assert (
        cli.main(
            [
                "fill-mask",
                "--model_name_or_path",
                str(folder),
                "--text",
                "the company said [MASK] rose.",
                "--top-k",
                "3",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    tokens, scores = expected_top(folder, "the company said [MASK] rose.", 3)
    assert len(lines) == 3
    for line, score in zip(lines, scores):
        assert float(line.split()[0]) == pytest.approx(score, abs=1e-4)


def test_bad_input(folder, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"the text must contain \[MASK\], got 'no mask here'"):
        fill_mask(folder, "no mask here")
    with pytest.raises(FileNotFoundError, match=r"no saved model in .* \(config.json not found\)"):
        fill_mask(tmp_path, "a [MASK].")
    with pytest.raises(ValueError, match=r"top_k=0 must be at least 1"):
        fill_mask(folder, "a [MASK].", top_k=0)
    assert cli.main(["fill-mask", "--model_name_or_path", str(folder), "--text", "no mask here"]) == 2
    assert "minibert fill-mask: error: the text must contain [MASK]" in capsys.readouterr().err


def copy_folder(folder: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(folder, tmp_path / "copy"))


def test_top_k_beyond_the_vocabulary_is_refused_naming_the_limit(folder, capsys):
    vocab_size = MiniBertConfig.from_pretrained(folder).vocab_size
    assert len(fill_mask(folder, "a [MASK].", top_k=vocab_size)) == vocab_size  # exactly the limit: fine
    with pytest.raises(ValueError, match=rf"top_k={vocab_size + 1} exceeds the vocabulary size \({vocab_size}\)"):
        fill_mask(folder, "a [MASK].", top_k=vocab_size + 1)
    assert (
        cli.main(["fill-mask", "--model_name_or_path", str(folder), "--text", "a [MASK].", "--top_k", "100000"]) == 2
    )
    err = capsys.readouterr().err
    assert err == f"minibert fill-mask: error: top_k=100000 exceeds the vocabulary size ({vocab_size})\n"


def test_a_vocabulary_without_the_mask_token_is_refused(folder, tmp_path):
    """Without [MASK] in vocab.txt, a BERT tokenizer appends it as a new id: predictions would be made at a
    token the model never saw."""
    broken = copy_folder(folder, tmp_path)
    (broken / "tokenizer.json").unlink()  # the slow path: vocab.txt is the vocabulary
    lines = (broken / "vocab.txt").read_text().splitlines()
    (broken / "vocab.txt").write_text("\n".join(line for line in lines if line != "[MASK]") + "\n")
    with pytest.raises(
        ValueError, match=rf"the vocabulary in .* lacks \[MASK\] \(the tokenizer added it as id {len(lines) - 1}"
    ):
        fill_mask(broken, "a [MASK].")


def test_weights_without_an_mlm_head_are_refused(folder, tmp_path, capsys):
    """A fine-tuned classifier has no MLM head: transformers would build a random one and only warn."""
    from transformers import AutoTokenizer

    from modeling_minibert import MiniBertForSequenceClassification

    classifier = tmp_path / "classifier"
    MiniBertForSequenceClassification(MiniBertConfig.from_pretrained(folder)).save_pretrained(classifier)
    AutoTokenizer.from_pretrained(folder).save_pretrained(classifier)
    with pytest.raises(
        ValueError,
        match=r"holds no masked-LM head \(MiniBertForSequenceClassification weights lack "
        r"cls.predictions.bias",
    ):
        fill_mask(classifier, "a [MASK].")
    capsys.readouterr()  # what saving the classifier printed
    assert cli.main(["fill-mask", "--model_name_or_path", str(classifier), "--text", "a [MASK]."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minibert fill-mask: error:") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda f: (f / "config.json").write_text("{oops"), r"config.json is not valid JSON: .*line 1 column 2"),
        (lambda f: (f / "model.safetensors").unlink(), r"holds no model weights \(no model.safetensors\)"),
        (
            lambda f: (f / "config.json").write_text(
                (f / "config.json").read_text().replace('"hidden_size": 32', '"hidden_size": "abc"')
            ),
            r"MiniBertConfig.hidden_size must be an integer, got 'abc'",
        ),
        (
            lambda f: (f / "config.json").write_text(
                (f / "config.json").read_text().replace('"vocab_size": ', '"vocab_size": 1000')
            ),
            r"config.json says vocab_size=1000\d+ but the weights in model.safetensors have vocab_size=\d+",
        ),
    ],
)
def test_broken_folders_give_one_line_from_the_cli(folder, tmp_path, capsys, breakage, message):
    broken = copy_folder(folder, tmp_path)
    breakage(broken)
    assert cli.main(["fill-mask", "--model_name_or_path", str(broken), "--text", "a [MASK]."]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(message, err), err


def test_a_folder_that_does_not_exist_is_named(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"model folder .*nowhere does not exist"):
        fill_mask(tmp_path / "nowhere", "a [MASK].")
    assert cli.main(["fill-mask", "--model_name_or_path", str(tmp_path / "nowhere"), "--text", "a [MASK]."]) == 2
    assert (
        capsys.readouterr().err == f"minibert fill-mask: error: model folder {tmp_path / 'nowhere'} does not exist\n"
    )


def test_many_texts_give_one_result_each_as_pipelines_do(folder, capsys):
    texts = ["the company said [MASK] rose.", "the [MASK] said [MASK] rose.", "shares in the [MASK] fell."]
    results = fill_mask(folder, texts, top_k=3)
    assert len(results) == 3
    assert results[0] == fill_mask(folder, texts[0], top_k=3)  # the same predictions as one text alone
    assert len(results[1]) == 2 and all(len(per_mask) == 3 for per_mask in results[1])  # two masks
    assert [p["token"] for p in results[2]] == expected_top(folder, texts[2], 3)[0]
    assert fill_mask(folder, texts[:1], top_k=3) == [results[0]]  # a list of one text stays a list
    assert cli.main(["fill-mask", "--model_name_or_path", str(folder), "--text", *texts, "--top_k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == texts[0] and lines[4] == texts[1] and lines[5] == "[MASK] #1:" and lines[13] == texts[2]
    assert len(lines) == 1 + 3 + 1 + 2 * (1 + 3) + 1 + 3
    assert [float(line.split()[0]) for line in lines[14:]] == pytest.approx(
        expected_top(folder, texts[2], 3)[1], abs=1e-4
    )
    with pytest.raises(ValueError, match=r"the text must contain \[MASK\], got 'no mask'"):
        fill_mask(folder, [texts[0], "no mask"])
    with pytest.raises(ValueError, match=r"no text given"):
        fill_mask(folder, [])


def test_a_tokenizer_of_another_size_is_refused_naming_the_folder(folder, tmp_path):
    """Fill-mask would decode the model's ids with another vocabulary (fewer tokens), or feed it ids past its
    embeddings (more)."""
    from transformers import AutoTokenizer

    vocab_size = MiniBertConfig.from_pretrained(folder).vocab_size
    larger = copy_folder(folder, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(larger)
    tokenizer.add_tokens(["zebra", "quokka"])
    tokenizer.save_pretrained(larger)
    with pytest.raises(
        ValueError,
        match=rf"the tokenizer in {re.escape(str(larger))} has {vocab_size + 2} tokens but "
        rf"the model's vocab_size={vocab_size}",
    ):
        fill_mask(larger, "a [MASK].")
    smaller = Path(shutil.copytree(folder, tmp_path / "smaller"))
    (smaller / "tokenizer.json").unlink()  # vocab.txt is then the vocabulary: drop its last word
    (smaller / "vocab.txt").write_text("\n".join((smaller / "vocab.txt").read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(ValueError, match=rf"has {vocab_size - 1} tokens but the model's vocab_size={vocab_size}"):
        fill_mask(smaller, "a [MASK].")


def test_a_token_on_the_mask_id_is_refused(folder, tmp_path):
    """Another token mapped onto [MASK]'s id would be predicted at, and decoded as, the mask."""
    broken = copy_folder(folder, tmp_path)
    tokenizer = json.loads((broken / "tokenizer.json").read_text())
    mask_id = tokenizer["model"]["vocab"]["[MASK]"]
    tokenizer["model"]["vocab"]["said"] = mask_id
    (broken / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(
        ValueError,
        match=rf"the tokenizer in {re.escape(str(broken))} maps 'said' onto the id of "
        rf"\[MASK\] \({mask_id}\); each id must be one token",
    ):
        fill_mask(broken, "the company [MASK] profits rose.")


def test_a_tokenizer_from_another_folder_is_checked_naming_both_folders(folder, tmp_path):
    """The jobs that load a model and a tokenizer from two folders (`--tokenizer_name`) get both named."""
    from transformers import AutoTokenizer

    from modeling_minibert.checks_minibert import check_tokenizer_fits

    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = MiniBertConfig.from_pretrained(folder)
    check_tokenizer_fits(tokenizer, config, folder, tmp_path / "tok")  # the same vocabulary: fine
    tokenizer.add_tokens(["zebra"])
    with pytest.raises(
        ValueError,
        match=rf"^the tokenizer in {re.escape(str(tmp_path / 'tok'))} has {len(tokenizer)} "
        rf"tokens but the model in {re.escape(str(folder))} has vocab_size={config.vocab_size}",
    ):
        check_tokenizer_fits(tokenizer, config, folder, tmp_path / "tok")
