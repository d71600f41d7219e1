"""BERT folders in, Mini-BERT folders out (and back), with identical outputs."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from fixtures.environment import REPO
from fixtures.models import TINY, padded_batch, ragged_batch
from modeling.test_modeling_minibert import HEADS, assert_outputs_match, head_inputs
from safetensors.torch import load_file, save_file
from transformers import AutoModel, BertConfig

import modeling_minibert
from modeling_minibert import AUTO_CLASSES, MiniBertConfig
from modeling_minibert.cli import main as cli_main
from modeling_minibert.modeling_minibert import AUTO_MAP
from modeling_minibert.sharing.bert_format import convert_bert_to_minibert, convert_minibert_to_bert


def saved_bert(folder, head: str, **config_kwargs):
    config = BertConfig(**{**TINY, **config_kwargs})
    model = getattr(transformers, f"Bert{head}")(config).eval()
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"]) + "\n")
    return model


@pytest.mark.parametrize("head", HEADS)
def test_every_bert_head_converts_with_identical_outputs(head, tmp_path):
    extra = dict(hidden_act="gelu_new", num_labels=3) if head.endswith("Classification") else {}
    bert = saved_bert(tmp_path / "bert", head, **extra)
    convert_bert_to_minibert(tmp_path / "bert", tmp_path / "mini")
    config = json.loads((tmp_path / "mini" / "config.json").read_text())
    assert config["model_type"] == "minibert" and config["architectures"] == [f"MiniBert{head}"]
    assert (tmp_path / "mini" / "vocab.txt").read_text() == (tmp_path / "bert" / "vocab.txt").read_text()
    auto_class = next(a for a, m in AUTO_CLASSES.items() if m.__name__ == f"MiniBert{head}")
    mini = auto_class.from_pretrained(tmp_path / "mini").eval()
    inputs = head_inputs(head, TINY["vocab_size"], num_labels=3)
    mask = inputs["attention_mask"].flatten(0, -2)
    with torch.no_grad():
        assert_outputs_match(
            bert(**inputs, output_hidden_states=True), mini(**inputs, output_hidden_states=True), mask
        )

    # ... and back: transformers' BERT loads the result without remote code, weights unchanged.
    convert_minibert_to_bert(tmp_path / "mini", tmp_path / "back")
    back = getattr(transformers, f"Bert{head}").from_pretrained(tmp_path / "back")
    for key, value in bert.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_cli_converts_both_ways_and_refuses_to_overwrite(tmp_path, capsys):
    saved_bert(tmp_path / "bert", "ForPreTraining", hidden_act="relu", hidden_size=48, num_attention_heads=3)
    assert (
        cli_main(
            ["convert-bert", "--model_name_or_path", str(tmp_path / "bert"), "--output_dir", str(tmp_path / "mini")]
        )
        == 0
    )
    assert AutoModel.from_pretrained(tmp_path / "mini").config.hidden_act == "relu"
    assert (
        cli_main(
            [
                "convert-bert",
                "--to-bert",
                "--model_name_or_path",
                str(tmp_path / "mini"),
                "--output_dir",
                str(tmp_path / "back"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == "bert"
    # Each direction says what it wrote and what it checked of it.
    assert capsys.readouterr().out == (
        f"wrote {tmp_path / 'mini'}\nchecked: every weight of {tmp_path / 'bert'} has its place in "
        "MiniBertForPreTraining, with the shape its config.json gives (none missing, none left over)\n"
        f"wrote {tmp_path / 'back'}\nchecked: the BERT-format folder loads without remote code in transformers' "
        "BertForPreTraining (every weight in place) and AutoTokenizer\n"
    )
    before = (tmp_path / "mini" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert (
        cli_main(
            ["convert-bert", "--model_name_or_path", str(tmp_path / "bert"), "--output_dir", str(tmp_path / "mini")]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        f"minibert convert-bert: error: output_dir {tmp_path / 'mini'} is not empty; pass --overwrite_output_dir to "
        "replace it, or choose another folder\n"
    )
    assert (tmp_path / "mini" / "model.safetensors").read_bytes() == before
    assert (
        cli_main(
            [
                "convert-bert",
                "--model_name_or_path",
                str(tmp_path / "bert"),
                "--output_dir",
                str(tmp_path / "mini"),
                "--overwrite_output_dir",
            ]
        )
        == 0
    )
    assert (
        cli_main(
            [
                "convert-bert",
                "--model_name_or_path",
                str(tmp_path / "bert"),
                "--output_dir",
                str(tmp_path / "mini"),
                "--overwrite-output-dir",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "bert", "mini"]  # no staging or previous copy


def test_missing_weights_are_reported_by_name_and_nothing_is_written(tmp_path):
    saved_bert(tmp_path / "bert", "ForSequenceClassification")
    weights = load_file(tmp_path / "bert" / "model.safetensors")
    del weights["classifier.weight"], weights["bert.pooler.dense.bias"]
    save_file(weights, tmp_path / "bert" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks weights the target needs: bert.pooler.dense.bias, classifier.weight"):
        convert_bert_to_minibert(tmp_path / "bert", tmp_path / "mini")
    assert not (tmp_path / "mini").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bert"]  # no staging folder left behind


def test_unsupported_sources_are_refused_clearly(tmp_path):
    transformers.BertLMHeadModel(BertConfig(**TINY, is_decoder=True)).save_pretrained(tmp_path / "decoder")
    with pytest.raises(ValueError, match=r"architecture 'BertLMHeadModel' has no counterpart"):
        convert_bert_to_minibert(tmp_path / "decoder", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"config.json does not exist"):
        convert_bert_to_minibert(tmp_path / "empty", tmp_path / "out")

    bert = saved_bert(tmp_path / "pickled", "Model")
    (tmp_path / "pickled" / "model.safetensors").unlink()
    torch.save(bert.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model.bin is a pickle file"):
        convert_bert_to_minibert(tmp_path / "pickled", tmp_path / "out")
    convert_bert_to_minibert(tmp_path / "pickled", tmp_path / "out", allow_pickle=True)
    ids, mask, _ = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask).pooler_output
        got = AutoModel.from_pretrained(tmp_path / "out")(ids, attention_mask=mask).pooler_output
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    "config_kwargs, message",
    [
        (
            dict(final_layer_norm=True),
            r"final_layer_norm=True has no BERT equivalent \(BERT needs final_layer_norm=False\)",
        ),
        (
            dict(layer_norm_position="pre"),
            r"layer_norm_position='pre' has no BERT equivalent \(BERT needs layer_norm_position='post'\)",
        ),
        (dict(mlm_head_transform=False), r"mlm_head_transform=False has no BERT equivalent"),
    ],
)
def test_minibert_only_features_cannot_become_bert(tmp_path, capsys, config_kwargs, message):
    from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM

    MiniBertForMaskedLM(MiniBertConfig(**TINY, **config_kwargs)).save_pretrained(tmp_path / "mini")
    with pytest.raises(ValueError, match=message):
        convert_minibert_to_bert(tmp_path / "mini", tmp_path / "bert")
    capsys.readouterr()
    assert (
        cli_main(
            [
                "convert-bert",
                "--to-bert",
                "--model_name_or_path",
                str(tmp_path / "mini"),
                "--output_dir",
                str(tmp_path / "bert"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("minibert convert-bert: error: ") and err.count("\n") == 1
    assert re.search(message, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mini"]


def test_untied_mlm_decoder_converts_to_bert(tmp_path):
    """BERT holds an untied decoder too (tie_word_embeddings=False), so it is not refused."""
    from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM

    mini = MiniBertForMaskedLM(MiniBertConfig(**TINY, tie_word_embeddings=False)).eval()
    mini.save_pretrained(tmp_path / "mini")
    convert_minibert_to_bert(tmp_path / "mini", tmp_path / "bert")
    bert = transformers.BertForMaskedLM.from_pretrained(tmp_path / "bert").eval()
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types).logits
        got = mini(ids, attention_mask=mask, token_type_ids=types).logits
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()])


def test_broken_sources_are_one_line(tmp_path, capsys):
    saved_bert(tmp_path / "bert", "Model")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    (tmp_path / "bert" / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    # Checked against the safetensors header, before the target model is built (see test_bad_inputs.py).
    with pytest.raises(
        ValueError,
        match=r"config.json says intermediate_size=128 but the weights in model.safetensors "
        r"have intermediate_size=64",
    ):
        convert_bert_to_minibert(tmp_path / "bert", tmp_path / "out")
    (tmp_path / "bert" / "config.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON: .*line 1 column 2"):
        convert_bert_to_minibert(tmp_path / "bert", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match=r"model folder .*nowhere does not exist"):
        convert_bert_to_minibert(tmp_path / "nowhere", tmp_path / "out")
    capsys.readouterr()
    assert (
        cli_main(
            ["convert-bert", "--model_name_or_path", str(tmp_path / "nowhere"), "--output_dir", str(tmp_path / "out")]
        )
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"minibert convert-bert: error: model folder {tmp_path / 'nowhere'} does not exist\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert"]


def test_output_files_have_ordinary_permissions(tmp_path):
    """model.safetensors is 0644 like every other file (transformers' save_pretrained writes it 0600)."""
    saved_bert(tmp_path / "bert", "ForMaskedLM")
    before = os.umask(0o022)  # the usual umask, for this test only
    try:
        convert_bert_to_minibert(tmp_path / "bert", tmp_path / "mini")
    finally:
        os.umask(before)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "mini").iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes


def test_a_hub_cache_snapshot_converts_and_links_elsewhere_do_not(tmp_path):
    """A Hub cache snapshot's files are links into its blobs/ (its own layout); any other link leading out of the
    source folder is refused, naming it, before anything is written."""
    saved_bert(tmp_path / "bert", "ForMaskedLM")
    repo = tmp_path / "cache" / "models--me--bert"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for path in (tmp_path / "bert").iterdir():
        (repo / "blobs" / path.name).write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", path.name))
    convert_bert_to_minibert(snapshot, tmp_path / "mini")
    assert not (tmp_path / "mini" / "vocab.txt").is_symlink()
    assert (tmp_path / "mini" / "vocab.txt").read_text() == (tmp_path / "bert" / "vocab.txt").read_text()

    (tmp_path / "secret").write_text("not a vocabulary")
    (tmp_path / "bert" / "vocab.txt").unlink()
    (tmp_path / "bert" / "vocab.txt").symlink_to(tmp_path / "secret")
    with pytest.raises(
        ValueError,
        match=f"^{re.escape(str(tmp_path / 'bert' / 'vocab.txt'))} is a link to .*secret, "
        "outside the folder: refusing to copy",
    ):
        convert_bert_to_minibert(tmp_path / "bert", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- any BERT made fast: a BERT folder or model loads into the unpadded Mini-BERT, no conversion on disk ----------


@pytest.mark.parametrize("head", HEADS)
def test_minibert_from_pretrained_loads_a_bert_folder_unpadded_with_berts_outputs(head, tmp_path, capfd):
    extra = dict(num_labels=3) if head.endswith("Classification") else {}
    bert = saved_bert(tmp_path, head, hidden_act="gelu_new", **extra)
    mini = getattr(modeling_minibert, f"MiniBert{head}").from_pretrained(tmp_path).eval()
    assert (
        type(mini.config) is MiniBertConfig
        and mini.config.unpad_inputs
        and mini.config.num_labels == (3 if extra else 2)
    )
    assert "LOAD REPORT" not in capfd.readouterr().err  # every weight found its place, none left over
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
    inputs = head_inputs(head, TINY["vocab_size"], num_labels=3)
    with torch.no_grad():
        assert_outputs_match(
            bert(**inputs, output_hidden_states=True),
            mini(**inputs, output_hidden_states=True),
            inputs["attention_mask"].flatten(0, -2),
        )


def test_a_bert_model_in_memory_becomes_minibert_in_one_line(capfd):
    torch.manual_seed(0)
    bert = transformers.BertForMaskedLM(
        BertConfig(**{**TINY, "max_position_embeddings": 40}, attn_implementation="sdpa")
    )
    bert.eval()
    mini = modeling_minibert.MiniBertForMaskedLM.from_pretrained(
        None, config=MiniBertConfig.from_bert(bert.config), state_dict=bert.state_dict()
    ).eval()
    assert "LOAD REPORT" not in capfd.readouterr().err
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types).logits
        got = mini(ids, attention_mask=mask, token_type_ids=types).logits
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-4)


def test_a_bert_decoder_folder_is_refused_naming_the_field(tmp_path):
    transformers.BertLMHeadModel(BertConfig(**TINY, is_decoder=True)).save_pretrained(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"^config.json in .*: is_decoder=True describes a BERT decoder; Mini-BERT is an "
        r"encoder only \(it needs is_decoder=False\)$",
    ):
        modeling_minibert.MiniBertForMaskedLM.from_pretrained(tmp_path)


# --- publish as BERT: a job folder in BERT format loads anywhere BERT does, without this package ---------------

WORDS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *"the cat sat on a mat dog ran in park who wrote it was by jane".split(),
]
TEXTS = ["the cat sat on the mat", "a dog ran", "who wrote it"]
LABELS = {
    "ForSequenceClassification": ["negative", "positive", "neutral"],
    "ForTokenClassification": ["O", "B-X", "I-X"],
}
# head -> (pipeline task, its input) for the heads transformers has a pipeline for (5.x removed question-answering:
# Mini-BERT folders carry their own, as remote code, which a BERT-format folder has none of).
PIPELINES = {
    "Model": ("feature-extraction", "the cat sat"),
    "ForMaskedLM": ("fill-mask", "the cat sat on the [MASK]"),
    "ForSequenceClassification": ("text-classification", TEXTS),
    "ForTokenClassification": ("token-classification", "the cat sat on a mat"),
}
PROMPT = "Do you wish to run the custom code"

BERT_FORMAT_SCRIPT = r"""
import json, sys
import torch
from transformers import AutoTokenizer, pipeline
import transformers
folders, inputs, pipelines = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {}
for head, (auto_class, folder) in folders.items():
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = getattr(transformers, auto_class).from_pretrained(folder).eval()
    with torch.no_grad():
        result = model(**{k: torch.tensor(v) for k, v in inputs[head].items()})
    out[head] = {
        "tokenizer": type(tokenizer).__name__, "ids": tokenizer(TEXTS_LITERAL)["input_ids"], "class": type(model).__name__,
        "outputs": {k: v.tolist() for k, v in result.items() if torch.is_tensor(v)},
    }
    if head in pipelines:
        task, text = pipelines[head]
        out[head]["pipeline"] = pipeline(task, model=folder)(text)
print("\nRESULT", json.dumps(out, default=float))  # numpy scores (token-classification) as floats
""".replace("TEXTS_LITERAL", repr(TEXTS))


def tensors_of(value):
    """The numbers in a pipeline's answer (scores, features), in order, for a tolerance comparison."""
    if isinstance(value, dict):
        return [n for key in sorted(value) for n in tensors_of(value[key])]
    if isinstance(value, (list, tuple)):
        return [n for item in value for n in tensors_of(item)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def labels_of(value):
    """The words in a pipeline's answer (labels, tokens, answers): equal, not close."""
    if isinstance(value, dict):
        return [w for key in sorted(value) for w in labels_of(value[key])]
    if isinstance(value, (list, tuple)):
        return [w for item in value for w in labels_of(item)]
    return [value] if isinstance(value, str) else []


def mini_job_folder(root: Path, head: str, tokenizer) -> Path:
    """A Mini-BERT job output folder: the model, tokenizer, results, a plot, a card, a checkpoint and training state."""
    from modeling_minibert.sharing.model_card import write_model_card
    from modeling_minibert.utils.outputs import write_results

    labels = LABELS.get(head)
    extra = (
        dict(id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)}) if labels else {}
    )
    torch.manual_seed(0)
    folder = root / head
    config = MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)}, **extra)
    getattr(modeling_minibert, f"MiniBert{head}")(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_results(folder, {"train": {"train_loss": 1.5}, "eval": {"eval_loss": 1.25, "eval_accuracy": 0.5}})
    (folder / "training_curves.png").write_bytes(b"\x89PNG not really")
    write_model_card(folder, task=PIPELINES.get(head, (None,))[0], dataset_name="tiny texts")
    (folder / "checkpoint-1").mkdir()
    (folder / "checkpoint-1" / "optimizer.pt").write_bytes(b"state")
    (folder / "training_args.bin").write_bytes(b"pickle")
    return folder


def head_batch(head: str, tokenizer) -> dict:
    batch = tokenizer(TEXTS, ["it was by jane"] * 3, padding=True, return_tensors="pt")
    if head == "ForMultipleChoice":  # (1 example, 3 choices, T)
        return {k: v.unsqueeze(0) for k, v in batch.items()}
    return dict(batch)


@pytest.fixture(scope="module")
def bert_format_folders(tmp_path_factory):
    """Every head's Mini-BERT job folder and its BERT-format copy (one through the command line)."""
    from tokenization import make_tokenizer

    root = tmp_path_factory.mktemp("publish")
    tokenizer = make_tokenizer({w: i for i, w in enumerate(WORDS)}, model_max_length=TINY["max_position_embeddings"])
    folders = {}
    for head in HEADS:
        mini = mini_job_folder(root / "mini", head, tokenizer)
        bert = root / "bert" / head
        if head == "ForMaskedLM":
            assert (
                cli_main(["convert-bert", "--to_bert", "--model_name_or_path", str(mini), "--output_dir", str(bert)])
                == 0
            )
        else:
            convert_minibert_to_bert(mini, bert)
        folders[head] = (mini, bert)
    return folders, tokenizer


def test_a_job_folder_in_bert_format_is_complete_and_has_no_code(bert_format_folders):
    folders, _ = bert_format_folders
    for head, (mini, bert) in folders.items():
        names = sorted(p.relative_to(bert).as_posix() for p in bert.rglob("*") if p.is_file())
        assert names == [
            "README.md",
            "all_results.json",
            "config.json",
            "eval_results.json",
            "model.safetensors",
            "special_tokens_map.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "train_results.json",
            "training_curves.png",
            "vocab.txt",
        ], names  # no code, checkpoint, training state
        config = json.loads((bert / "config.json").read_text())
        assert (
            config["model_type"] == "bert" and config["architectures"] == [f"Bert{head}"] and "auto_map" not in config
        )
        if head in LABELS:
            assert [config["id2label"][str(i)] for i in range(3)] == LABELS[head]
        for name in ("all_results.json", "training_curves.png", "tokenizer.json"):
            assert (bert / name).read_bytes() == (mini / name).read_bytes()
        card = (bert / "README.md").read_text()
        assert "transformers' BERT format (`model_type: bert`" in card and "trust_remote_code=True" not in card
        assert f"MiniBert{head}.from_pretrained" in card and "| Accuracy | validation | 0.5 |" in card
        # The training data kept, named in the text (a description is no Hub dataset id for the metadata).
        assert "custom_code" not in card and "## Training data\n\ntiny texts\n" in card and "datasets:" not in card


@pytest.mark.slow(seconds=9)  # fresh processes: not in the quick tier
def test_bert_format_folders_load_without_the_package_or_remote_code_with_minibert_outputs(bert_format_folders):
    """One clean interpreter, which cannot import this package, loads every head with AutoTokenizer, AutoModel* and
    pipeline(...), with no prompt; every output equals Mini-BERT's (run here, on the Mini-BERT folders) within 1e-5."""
    from fixtures.environment import BLOCK_PACKAGE, clean_env

    folders, tokenizer = bert_format_folders
    auto_of = {target.rsplit(".", 1)[1].removeprefix("MiniBert"): auto for auto, target in AUTO_MAP.items()}
    inputs = {head: {k: v.tolist() for k, v in head_batch(head, tokenizer).items()} for head in HEADS}
    args = [
        json.dumps({head: (auto_of[head], str(bert)) for head, (_, bert) in folders.items()}),
        json.dumps(inputs),
        json.dumps(PIPELINES),
    ]
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + BERT_FORMAT_SCRIPT, *args],
        env=clean_env(),
        cwd=REPO.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert PROMPT not in result.stdout + result.stderr
    assert "deliberately not importable" not in result.stderr
    out = json.loads(result.stdout.split("\nRESULT ")[-1])
    for head, (mini_folder, _) in folders.items():
        got = out[head]
        assert got["class"] == f"Bert{head}" and got["tokenizer"] == "BertTokenizer", got
        assert got["ids"] == tokenizer(TEXTS)["input_ids"]
        mini = getattr(modeling_minibert, f"MiniBert{head}").from_pretrained(mini_folder).eval()
        batch = head_batch(head, tokenizer)
        with torch.no_grad():
            expected = mini(**batch)
        keep = batch["attention_mask"].bool()
        assert set(got["outputs"]) == {k for k, v in expected.items() if torch.is_tensor(v)}, head
        for key, values in got["outputs"].items():
            e, g = expected[key], torch.tensor(values)
            if e.dim() >= keep.dim() and e.shape[: keep.dim()] == keep.shape:  # token-level: real tokens only
                e, g = e[keep], g[keep]
            torch.testing.assert_close(g, e, atol=1e-5, rtol=0, msg=f"{head} {key}")
        if head in PIPELINES:
            task, text = PIPELINES[head]
            pipe = transformers.pipeline(task, model=str(mini_folder))
            answer = json.loads(json.dumps(pipe(text), default=float))  # as the other process printed it
            assert labels_of(got["pipeline"]) == labels_of(answer), head
            torch.testing.assert_close(
                torch.tensor(tensors_of(got["pipeline"])),
                torch.tensor(tensors_of(answer)),
                atol=1e-5,
                rtol=0,
                msg=head,
            )


OPTIMUM_PYTHON = REPO / ".ci" / "optimum" / "bin" / "python"
OPTIMUM_EXPORT = """
import sys
from optimum.exporters.onnx import main_export
main_export(sys.argv[1], output=sys.argv[2], task="text-classification")
"""


@pytest.mark.skipif(
    not OPTIMUM_PYTHON.exists(),
    reason="optimum-onnx's venv .ci/optimum is missing (bash .ci/setup dev "
    "makes it; optimum-onnx 0.1.0 needs transformers < 4.58)",
)
@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_optimum_exports_a_bert_format_folder_with_minibert_outputs(bert_format_folders, tmp_path):
    """optimum's own ONNX exporter (optimum-onnx in its venv, with transformers 4.57 and no access to this package)
    takes the BERT-format classifier folder, and onnxruntime runs the graph it writes with Mini-BERT's logits."""
    import onnxruntime
    from fixtures.environment import clean_env

    folders, tokenizer = bert_format_folders
    mini, bert = folders["ForSequenceClassification"]
    result = subprocess.run(
        [str(OPTIMUM_PYTHON), "-c", OPTIMUM_EXPORT, str(bert), str(tmp_path / "onnx")],
        env=clean_env(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    batch = head_batch("ForSequenceClassification", tokenizer)
    (logits,) = session.run(["logits"], {i.name: batch[i.name].numpy() for i in session.get_inputs()})
    with torch.no_grad():
        expected = modeling_minibert.MiniBertForSequenceClassification.from_pretrained(mini).eval()(**batch).logits
    torch.testing.assert_close(torch.from_numpy(logits), expected, atol=1e-4, rtol=0)


# --- every export is complete: what `convert-bert --to_bert` or `push --format bert` writes is loaded back by the
# consumer it is for (transformers' BERT classes without this package's code; SentenceTransformer for an embedding
# folder), and a file the folder's own metadata names must be there ----------------------------------------------

EMBEDDING_TEXTS = ["the cat sat on the mat", "a dog ran in the park", "who wrote it", "it was by jane"]


def embedding_folder(root: Path, tokenizer) -> Path:
    """What `distill --task embedding` leaves: the encoder, its tokenizer, a Dense projection (32 -> 48) in 2_Dense,
    the sentence-transformers files, results."""
    from sentence_transformers.models import Dense

    from modeling_minibert.sharing.sentence_transformers_format import write_sentence_transformers_files
    from modeling_minibert.utils.outputs import write_results

    folder = root / "embedder"
    torch.manual_seed(0)
    modeling_minibert.MiniBertModel(MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "2_Dense").mkdir()
    Dense(TINY["hidden_size"], 48, activation_function=torch.nn.Identity()).save(str(folder / "2_Dense"))
    write_sentence_transformers_files(folder, normalize=True, dense_dir="2_Dense")
    write_results(folder, {"eval": {"eval_cosine": 0.5}})
    return folder


def electra_folder(root: Path, tokenizer) -> Path:
    """What `pretrain --objective electra` leaves: the discriminator (a bare encoder without a pooler) and its
    tokenizer, saved as the pretraining loop saves it."""
    from modeling_minibert.training.pretraining.model import save_model
    from modeling_minibert.training.pretraining.objectives.electra import ReplacedTokenDetection

    objective, config = ReplacedTokenDetection(), MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)})
    torch.manual_seed(0)
    discriminator = objective.saved_model(objective.build_model(config, None))
    save_model(root / "electra", discriminator, config, discriminator.state_dict())
    tokenizer.save_pretrained(root / "electra")
    return root / "electra"


@pytest.fixture(scope="module")
def export_sources(tmp_path_factory):
    from tokenization import make_tokenizer

    root = tmp_path_factory.mktemp("export-sources")
    tokenizer = make_tokenizer({w: i for i, w in enumerate(WORDS)}, model_max_length=TINY["max_position_embeddings"])
    sources = {
        "embedder": embedding_folder(root, tokenizer),
        "electra": electra_folder(root, tokenizer),
        "int8": REPO / "tests" / "fixtures" / "saved" / "0.1" / "classifier-int8",
    }
    return sources, tokenizer


@pytest.fixture(scope="module")
def export_hub(tmp_path_factory):
    from tools.local_hub import LocalHub

    with LocalHub(tmp_path_factory.mktemp("export-hub") / "hub", token="hf_exporttest_0123456789", user="me") as hub:
        hub.configure_clients()  # push_to_hub and the command line take their endpoint and token from the environment
        yield hub


def export(how: str, source: Path, out: Path, hub) -> Path:
    """Run the export `how` on `source`; the folder it wrote (for a push, the repository as pushed, written to `out`)."""
    if how == "convert":
        convert_minibert_to_bert(source, out)
        return out
    from modeling_minibert.sharing.push import push_to_hub

    name = f"x{len(hub.app.repos)}"
    push_to_hub(source, name, format=how.removeprefix("push-"))
    for path, content in hub.repo_files(f"me/{name}").items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(content)
    return out


def encodes_like_the_package(out: Path, source: Path, tokenizer) -> None:
    """SentenceTransformer loads the BERT-format folder (transformers' BertModel, no code files) with every module,
    and gives the package's own embeddings of the Mini-BERT source: mean pooling, its Dense projection, normalised."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense

    from modeling_minibert.deployment.sentence_embeddings import encode

    assert not list(out.rglob("*.py")) and "auto_map" not in json.loads((out / "config.json").read_text())
    st = SentenceTransformer(str(out), device="cpu")
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Dense", "Normalize"]
    assert type(st[0].auto_model).__module__.startswith("transformers.models.bert.")
    projection = Dense.load(str(source / "2_Dense")).linear
    expected = encode(
        modeling_minibert.MiniBertModel.from_pretrained(source),
        tokenizer,
        EMBEDDING_TEXTS,
        projection=projection,
        normalize=True,
    )
    torch.testing.assert_close(torch.from_numpy(st.encode(EMBEDDING_TEXTS)), expected, atol=1e-5, rtol=0)


def loads_as_bert_model(out: Path, source: Path, tokenizer) -> None:
    """transformers' AutoModel gives its own BertModel (no remote code), whose hidden states are the Mini-BERT's."""
    assert not list(out.rglob("*.py")) and "auto_map" not in json.loads((out / "config.json").read_text())
    bert = AutoModel.from_pretrained(out).eval()
    assert type(bert) is transformers.BertModel
    batch = tokenizer(EMBEDDING_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        got, expected = (
            bert(**batch).last_hidden_state,
            modeling_minibert.MiniBertModel.from_pretrained(source)(**batch).last_hidden_state,
        )
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=0)
    # ... and back into Mini-BERT, without a pooler either (nothing invented).
    back = modeling_minibert.MiniBertModel.from_pretrained(convert_bert_to_minibert(out, out.parent / "back")).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(**batch).last_hidden_state[keep], expected[keep], atol=1e-5, rtol=0)


def remove(*paths: str):
    def breakage(folder: Path) -> None:
        for path in paths:
            (folder / path).unlink() if (folder / path).is_file() else shutil.rmtree(folder / path)

    return breakage


# (id, source, breakage, export, check of the result, or the one-line error it must give instead)
EXPORTS = [
    ("embedder-convert", "embedder", None, "convert", encodes_like_the_package),
    ("embedder-push-bert", "embedder", None, "push-bert", encodes_like_the_package),
    ("electra-convert", "electra", None, "convert", loads_as_bert_model),
    ("electra-push-bert", "electra", None, "push-bert", loads_as_bert_model),
    (
        "dense-folder-missing-convert",
        "embedder",
        remove("2_Dense"),
        "convert",
        r"modules.json names module 2 \(Dense\) at 2_Dense, which does not exist",
    ),
    (
        "dense-folder-missing-push-bert",
        "embedder",
        remove("2_Dense"),
        "push-bert",
        r"modules.json names module 2 \(Dense\) at 2_Dense, which does not exist",
    ),
    (
        "dense-weights-missing-convert",
        "embedder",
        remove("2_Dense/model.safetensors"),
        "convert",
        r"modules.json names module 2 \(Dense\) at 2_Dense, which holds no model.safetensors",
    ),
    (
        "dense-weights-missing-push-minibert",
        "embedder",
        remove("2_Dense/model.safetensors"),
        "push-minibert",
        r"modules.json names module 2 \(Dense\) at 2_Dense, which holds no model.safetensors",
    ),
    (
        "int8-push-minibert",
        "int8",
        None,
        "push-minibert",
        r"is an int8 folder .*transformers cannot load .* push the float model it was quantized from",
    ),
    ("int8-push-bert", "int8", None, "push-bert", r"is an int8 folder"),
    ("int8-convert", "int8", None, "convert", r"is an int8 folder"),
]


@pytest.mark.parametrize("name, source, breakage, how, expected", EXPORTS, ids=[row[0] for row in EXPORTS])
def test_every_export_is_complete(export_sources, export_hub, tmp_path, capsys, name, source, breakage, how, expected):
    sources, tokenizer = export_sources
    folder = tmp_path / "source"
    shutil.copytree(sources[source], folder)
    if breakage is not None:
        breakage(folder)
    (tmp_path / "out").mkdir()
    if callable(expected):
        expected(export(how, folder, tmp_path / "out", export_hub), folder, tokenizer)
        return
    repos = set(export_hub.app.repos)
    with pytest.raises(ValueError, match=expected) as err:
        export(how, folder, tmp_path / "out" / "bert", export_hub)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "bert").exists() and set(export_hub.app.repos) == repos  # nothing written or pushed
    # The command line says the same in one line, exit 2.
    command = (
        ["convert-bert", "--to_bert", "--output_dir", str(tmp_path / "out" / "bert")]
        if how == "convert"
        else ["push", "--hub_model_id", "me/refused", "--format", how.removeprefix("push-")]
    )
    capsys.readouterr()
    assert cli_main([*command, "--model_name_or_path", str(folder)]) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and re.search(expected, message), message


def test_convert_bert_names_in_one_line_what_a_bert_folder_does_not_hold(tmp_path, capsys):
    """The BERT-format folder takes the files of a BERT-format repository (an allow-list); the rest (scripts,
    bytecode, notes) is left out and named in one warning line. The model's code is replaced, not named."""
    from modeling_minibert import MiniBertForMaskedLM

    MiniBertForMaskedLM(MiniBertConfig(**TINY)).save_pretrained(tmp_path / "mini")
    for path in ("run.sh", "__pycache__/modeling_minibert.cpython-311.pyc", "notes/todo.txt", "training_curves.png"):
        (tmp_path / "mini" / path).parent.mkdir(exist_ok=True)
        (tmp_path / "mini" / path).write_bytes(b"x")
    capsys.readouterr()
    assert (
        cli_main(
            [
                "convert-bert",
                "--to_bert",
                "--model_name_or_path",
                str(tmp_path / "mini"),
                "--output_dir",
                str(tmp_path / "bert"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert (
        "minibert convert-bert: warning: left out 3 file(s) that a BERT-format model repository does not hold: "
        "__pycache__/modeling_minibert.cpython-311.pyc, notes/todo.txt, run.sh\n"
    ) in err, err
    assert sorted(
        p.relative_to(tmp_path / "bert").as_posix() for p in (tmp_path / "bert").rglob("*") if p.is_file()
    ) == ["README.md", "config.json", "model.safetensors", "training_curves.png"]
