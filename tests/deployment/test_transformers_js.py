"""export-onnx --format transformers.js: the folder the real transformers.js (npm `@huggingface/transformers`) loads.

In Node it gives PyTorch's labels on 200 Rotten Tomatoes sentences; the example page (examples/browser/) classifies a
sentence in headless Chromium. `bash .ci/setup dev` installs node, npm, chromium and the npm package (into
.ci/node/); a test skips, naming what is missing, only where they are not installed.
"""

import importlib.util
import json
import shutil
import subprocess
import threading
import urllib.parse

import pytest
import torch
from fixtures.browser import Chromium, chromium_binary
from fixtures.environment import REPO
from fixtures.models import TINY

from examples.rotten_tomatoes import load_rotten_tomatoes
from modeling_minibert import MiniBertConfig, MiniBertForSequenceClassification
from modeling_minibert.cli import main as cli_main
from tokenization import train_tokenizer

pytestmark = pytest.mark.slow(seconds=20)  # real jobs end to end: not in the quick tier (-m "not slow")

NODE_MODULES = REPO / ".ci" / "node" / "node_modules"
TRANSFORMERS_JS = NODE_MODULES / "@huggingface" / "transformers" / "dist" / "transformers.node.mjs"
EXAMPLE = REPO / "examples" / "browser"
SETUP = "bash .ci/setup dev installs it"


def needs(found: bool, what: str) -> None:
    if not found:
        pytest.skip(f"{what} is not installed ({SETUP})")


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return list(load_rotten_tomatoes()["test"]["text"][:200])


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, sentences) -> tuple:
    """A tiny Mini-BERT classifier with a WordPiece vocabulary of Rotten Tomatoes snippets: (folder, model, tokenizer).

    Its weights are random, initialised wider than usual (at 0.02 every sentence gets nearly the same logits),
    and the classifier's bias splits the 200 sentences between the two labels at the widest gap near the middle,
    at least 1e-3 from the boundary: what is tested is that transformers.js reproduces PyTorch, tokenizer
    included, sentence by sentence, so the labels must vary and must not hang on rounding.
    """
    folder = tmp_path_factory.mktemp("classifier")
    tokenizer = train_tokenizer(
        train_data=list(load_rotten_tomatoes()["train"]["text"][:2000]),
        vocab_size=600,
        disable_tqdm=True,
        model_max_length=128,
    )
    config = MiniBertConfig(
        **{**TINY, "vocab_size": len(tokenizer), "max_position_embeddings": 128},
        initializer_range=0.1,
        id2label={0: "fresh", 1: "rotten"},
        label2id={"fresh": 0, "rotten": 1},
    )
    torch.manual_seed(0)
    model = MiniBertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(30)
        difference = logits_of(model, tokenizer, sentences).diff(dim=-1).squeeze(-1).sort().values
        quarter = len(difference) // 4
        gaps = difference[quarter + 1 : -quarter] - difference[quarter : -quarter - 1]
        split = quarter + int(gaps.argmax())
        model.classifier.bias[1] -= float(difference[split] + difference[split + 1]) / 2
        margins = logits_of(model, tokenizer, sentences).diff(dim=-1).abs()
    assert float(margins.min()) > 1e-3
    # None is truncated: transformers.js truncates after adding [SEP], so it drops the [SEP] that Python keeps
    # (README, "In the browser"); these sentences test everything else.
    assert max(len(ids) for ids in tokenizer(sentences)["input_ids"]) < 128
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model, tokenizer


def logits_of(model, tokenizer, sentences: list[str]) -> torch.Tensor:
    batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def exported(classifier, tmp_path_factory):
    output = tmp_path_factory.mktemp("exported") / "rotten-tomatoes"
    assert (
        cli_main(
            [
                "export-onnx",
                "--model_name_or_path",
                str(classifier[0]),
                "--output_dir",
                str(output),
                "--format",
                "transformers.js",
            ]
        )
        == 0
    )
    return output


def test_the_folder_is_bert_with_both_graphs_and_the_tokenizer(exported, classifier):
    files = sorted(str(p.relative_to(exported)) for p in exported.rglob("*") if p.is_file())
    assert files == [
        "config.json",
        "onnx/model.onnx",
        "onnx/model_quantized.onnx",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]  # no code files (transformers.js reads none), no second copy of the weights
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "fresh", "1": "rotten"} and "auto_map" not in config
    # The int8 graph is the smaller one: its encoder weights are stored as int8.
    assert (exported / "onnx/model_quantized.onnx").stat().st_size < (exported / "onnx/model.onnx").stat().st_size / 2


def run_in_node(folder, sentences: list[str], dtype: str) -> dict:
    needs(shutil.which("node") is not None, "node")
    needs(TRANSFORMERS_JS.is_file(), f"@huggingface/transformers (npm) in {NODE_MODULES}")
    done = subprocess.run(
        ["node", str(EXAMPLE / "classify.mjs"), str(folder), dtype],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "TRANSFORMERS_JS": str(TRANSFORMERS_JS)},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_transformers_js_in_node_gives_pytorchs_labels_on_200_sentences(exported, classifier, sentences):
    _, model, tokenizer = classifier
    expected = logits_of(model, tokenizer, sentences)
    labels = [model.config.id2label[i] for i in expected.argmax(-1).tolist()]
    assert set(labels) == {"fresh", "rotten"}
    fp32 = run_in_node(exported, sentences, "fp32")
    assert fp32["labels"] == labels
    torch.testing.assert_close(torch.tensor(fp32["logits"]), expected, atol=1e-3, rtol=1e-3)
    # onnx/model_quantized.onnx: int8, whose rounding flips labels near the boundary of a random model (checked
    # against PyTorch with a tolerance by the export itself), so compared with onnxruntime's run of the same graph.
    q8 = run_in_node(exported, sentences, "q8")
    expected = onnxruntime_logits(exported / "onnx/model_quantized.onnx", tokenizer, sentences)
    assert q8["labels"] == [model.config.id2label[i] for i in expected.argmax(-1).tolist()]
    torch.testing.assert_close(torch.tensor(q8["logits"]), expected, atol=1e-3, rtol=1e-3)


def onnxruntime_logits(graph, tokenizer, sentences: list[str]) -> torch.Tensor:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="np")
    return torch.from_numpy(session.run(["logits"], dict(batch))[0])


def serve_example(model_folder):
    """examples/browser/serve.py's server on a free loopback port, serving in a thread."""
    spec = importlib.util.spec_from_file_location("serve_example_page", EXAMPLE / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    server = serve.make_server(model_folder, NODE_MODULES)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_example_page_classifies_a_sentence_in_headless_chromium(exported, classifier, sentences):
    needs(chromium_binary() is not None, "chromium")
    needs(TRANSFORMERS_JS.is_file(), f"@huggingface/transformers (npm) in {NODE_MODULES}")
    _, model, tokenizer = classifier
    # The sentence PyTorch is surest about; the page runs the int8 graph, whose probabilities onnxruntime gives.
    logits = logits_of(model, tokenizer, sentences)
    sentence = sentences[int(logits.diff(dim=-1).abs().argmax())]
    probabilities = onnxruntime_logits(exported / "onnx/model_quantized.onnx", tokenizer, [sentence]).softmax(-1)[0]
    assert int(probabilities.argmax()) == int(logits_of(model, tokenizer, [sentence]).argmax())
    server = serve_example(exported)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/?text={urllib.parse.quote(sentence)}"
        with Chromium(url) as browser:
            state = browser.wait_for(
                "document.getElementById('result').dataset.state !== 'loading' && "
                "document.getElementById('result').dataset.state",
                timeout=120,
            )
            shown = browser.evaluate(
                "({...document.getElementById('result').dataset, text: document.getElementById('result').textContent})"
            )
    finally:
        server.shutdown()
        server.server_close()
    assert state == "done", shown["text"]
    label = model.config.id2label[int(probabilities.argmax())]
    assert shown["label"] == label and shown["text"].startswith(f"{label} (")
    assert abs(float(shown["score"]) - float(probabilities.max())) < 1e-3


def test_a_variant_bert_cannot_express_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "pre-ln"
    MiniBertForSequenceClassification(MiniBertConfig(**TINY, layer_norm_position="pre")).save_pretrained(folder)
    from modeling_minibert.deployment.onnx_export import export_onnx

    with pytest.raises(ValueError, match=r"pre-ln/config.json: layer_norm_position='pre' has no BERT equivalent"):
        export_onnx(folder, tmp_path / "out", format="transformers.js")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pre-ln"]  # nothing half-written
