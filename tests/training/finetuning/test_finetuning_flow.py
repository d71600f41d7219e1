"""The shared fine-tuning flow: Trainer's output folder and result files, checkpoints removed or kept, an
interrupted run resumed to the same weights, a folder that is never half-written, a read-only folder refused
early, the final folder pushed to a (local) Hub, and saved folders that load without the package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from fixtures.environment import run_python
from fixtures.finetuning_checkpoint import (  # noqa: F401 (checkpoint: a fixture)
    NER_TRAIN,
    QA_TRAIN,
    QUIET,
    assert_clean_output,
    checkpoint,
    saved_files,
)
from safetensors.torch import load_file, save_file
from transformers import Trainer, pipeline

from modeling_minibert import MiniBertConfig
from modeling_minibert.cli import main
from modeling_minibert.question_answering_pipeline import QuestionAnsweringPipeline
from modeling_minibert.training.finetuning import (
    finetune,
)
from modeling_minibert.training.finetuning.flow import resume_checkpoint
from modeling_minibert.training.finetuning.loading import check_max_length
from modeling_minibert.utils.finite import NonFiniteError

pytestmark = pytest.mark.usefixtures("one_thread")


GOOD_BAD = Dataset.from_dict(
    {"text": ["good film", "bad film", "a good one", "so bad"] * 4, "label": ["pos", "neg"] * 8}
)


def test_output_folder_holds_trainers_result_files(checkpoint, tmp_path):
    result = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "out",
        validation_data=GOOD_BAD,
        test_data=GOOD_BAD,
        num_train_epochs=2,
        **QUIET,
    )
    output = result.output_dir
    assert_clean_output(output)
    assert {"eval_results.json", "test_results.json"} <= saved_files(output)
    all_results = json.loads((output / "all_results.json").read_text())
    # One flat dict, keys prefixed by split, as Trainer.save_metrics writes it; each split's file a part of it.
    for split in ("train", "eval", "test"):
        part = json.loads((output / f"{split}_results.json").read_text())
        assert part and all(key.startswith(f"{split}_") or key in ("epoch", "total_flos") for key in part), part
        assert part.items() <= all_results.items()
    assert {"train_loss", "train_samples", "eval_accuracy", "eval_macro_f1", "eval_loss", "test_accuracy"} <= set(
        all_results
    )
    assert all_results["eval_accuracy"] == result.metrics["accuracy"] and all_results["test_samples"] == 16
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and [e["epoch"] for e in state["log_history"] if "eval_loss" in e] == [1, 2]
    card = (output / "README.md").read_text()
    assert card.startswith("---") and ".partial-" not in card  # written under the folder's final name


@contextmanager
def interrupted_at_step(step: int, monkeypatch):
    """Trainer's training step `step` raises KeyboardInterrupt, as a killed run stops; restored on exit."""
    training_step, calls = Trainer.training_step, []

    def dies(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == step:
            raise KeyboardInterrupt
        return training_step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "training_step", dies)
    try:
        yield
    finally:
        monkeypatch.setattr(Trainer, "training_step", training_step)


def test_an_interrupted_run_resumes_to_the_same_weights_and_checkpoints_are_kept_on_request(
    checkpoint, tmp_path, monkeypatch
):
    options = dict(per_device_train_batch_size=4, max_steps=4, save_strategy="steps", save_steps=2, **QUIET)
    whole = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "whole",
        keep_checkpoints=True,
        save_total_limit=None,
        **options,
    )
    # Checkpoints are kept on request (and, as assert_clean_output checks below, removed by default).
    assert sorted(p.name for p in whole.output_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert "model.safetensors" in saved_files(whole.output_dir / "checkpoint-2")

    with pytest.raises(KeyboardInterrupt), interrupted_at_step(3, monkeypatch):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            **options,
        )
    # The checkpoint survives the failure, and nothing else is there: no final model, no staging folder.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoint-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "whole"]
    with pytest.raises(FileExistsError, match="pass --resume_from_checkpoint to continue the run saved there"):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            **options,
        )

    resumed = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "out",
        resume_from_checkpoint=True,
        **options,
    )
    state = json.loads((resumed.output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    expected, got = (
        load_file(whole.output_dir / "model.safetensors"),
        load_file(resumed.output_dir / "model.safetensors"),
    )
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6)
    assert_clean_output(resumed.output_dir)


@pytest.fixture(scope="module")
def saved_checkpoints(checkpoint, tmp_path_factory):
    """checkpoint-2 and checkpoint-4 of a finished run, as Trainer saved them."""
    output = tmp_path_factory.mktemp("kept") / "run"
    finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=output,
        keep_checkpoints=True,
        save_total_limit=None,
        per_device_train_batch_size=4,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        **QUIET,
    )
    return output


def cut_in_half(path):
    os.truncate(path, path.stat().st_size // 2)


def set_global_step(path):
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "global_step": 2}))


@pytest.mark.parametrize(
    "damage, file, problem",
    [
        (cut_in_half, "model.safetensors", "model.safetensors has"),
        (cut_in_half, "optimizer.pt", "optimizer.pt unreadable"),
        (os.remove, "scheduler.pt", "no scheduler.pt"),
        (cut_in_half, "trainer_state.json", "trainer_state.json unreadable"),
        (set_global_step, "trainer_state.json", "trainer_state.json has global_step 2, not 4"),
    ],
    ids=["weights-cut", "optimizer-cut", "scheduler-missing", "state-torn", "state-of-another-step"],
)
def test_resume_skips_an_unfinished_newest_checkpoint_for_the_one_before(
    saved_checkpoints, tmp_path, damage, file, problem
):
    output = tmp_path / "run"
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.copytree(saved_checkpoints / name, output / name)
    assert resume_checkpoint(output, True) == str(output / "checkpoint-4")  # whole: the newest is taken
    damage(output / "checkpoint-4" / file)
    with pytest.warns(UserWarning) as warned:
        assert resume_checkpoint(output, True) == str(output / "checkpoint-2")
    [warning] = [str(w.message) for w in warned]
    assert (
        f"skipping the unfinished checkpoint {output / 'checkpoint-4'} ({problem}" in warning and "\n" not in warning
    )
    # Named explicitly, an unfinished checkpoint is refused, not silently replaced by another.
    with pytest.raises(ValueError, match=rf"resume_from_checkpoint: .*checkpoint-4 is unfinished \({problem}"):
        resume_checkpoint(output, str(output / "checkpoint-4"))


def test_resume_without_a_checkpoint_is_a_clear_error(checkpoint, tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"resume_from_checkpoint: no checkpoint-N folder in .*out to resume from"
    ):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            resume_from_checkpoint=True,
            **QUIET,
        )
    assert not (tmp_path / "out").exists()


def test_output_folder_is_never_half_written(checkpoint, tmp_path):
    data = Dataset.from_dict({"text": ["good", "bad"], "label": ["pos", "neg"]})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(
        FileExistsError, match=r"output_dir .*out is not empty; pass .*--overwrite_output_dir to replace it"
    ):
        finetune(
            task="sequence-classification", model_name_or_path=checkpoint, train_data=data, output_dir=tmp_path / "out"
        )
    # A failure inside the run (here a bad Trainer option) leaves the old folder as it was, and no staging folder.
    with pytest.raises(ValueError, match=r"unknown training option\(s\) \['not_an_option'\]"):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=data,
            output_dir=tmp_path / "out",
            overwrite_output_dir=True,
            not_an_option=1,
        )
    assert saved_files(tmp_path / "out") == {"keep.txt"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        output_dir=tmp_path / "out",
        overwrite_output_dir=True,
        max_steps=1,
        **QUIET,
    )
    assert "keep.txt" not in saved_files(tmp_path / "out") and "model.safetensors" in saved_files(tmp_path / "out")


@pytest.fixture
def read_only(tmp_path):
    """A folder nobody may write to: chmod, or for root (whom permissions do not stop) the immutable attribute."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK) and os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        if not immutable:
            pytest.skip("cannot make a read-only folder here (root, and no chattr)")
    yield folder
    if immutable:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


@pytest.mark.parametrize("inside", [False, True], ids=["the-folder-itself", "a-new-folder-inside"])
def test_read_only_output_is_one_line_before_any_work(checkpoint, read_only, inside, capsys):
    output = read_only / "model" if inside else read_only
    code = main(
        [
            "finetune",
            "--task",
            "token-classification",
            "--model_name_or_path",
            str(checkpoint),
            "--train_file",
            str(NER_TRAIN),
            "--output_dir",
            str(output),
            "--max_steps",
            "1",
            "--disable_tqdm",
            "true",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"minibert finetune: error: output_dir {output} cannot be written: ")
    assert "Traceback" not in err and "loss" not in err  # refused before training
    assert list(read_only.iterdir()) == [] and sorted(p.name for p in read_only.parent.iterdir()) == ["read-only"]


def test_push_to_hub_uploads_the_final_folder_only(checkpoint, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    from tools.local_hub import LocalHub

    user, token = "ft-tester", "hf_FinetuneSecret" + uuid.uuid4().hex
    with LocalHub(tmp_path / "hub", token=token, user=user) as hub:
        # huggingface_hub reads these when imported; the endpoint is read again by each HfApi.
        monkeypatch.setattr(hub_constants, "ENDPOINT", hub.endpoint)
        monkeypatch.setattr(hub_constants, "HF_HUB_DISABLE_XET", True)
        result = finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            validation_data=GOOD_BAD,
            max_steps=2,
            eval_strategy="steps",
            eval_steps=1,
            push_to_hub=True,
            hub_model_id=f"{user}/sentiment",
            hub_token=token,
            **QUIET,
        )
        files = hub.repo_files(f"{user}/sentiment")
    local = saved_files(result.output_dir)
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "README.md",
        "all_results.json",
        "trainer_state.json",
    } <= set(files)
    assert set(files) <= local | {".gitattributes"}
    assert files["model.safetensors"] == (result.output_dir / "model.safetensors").read_bytes()
    assert not [name for name in files if name.startswith("checkpoint-") or name.endswith((".bin", ".pt", ".pth"))]
    assert not [name for name in local if token in (result.output_dir / name).read_bytes().decode("latin-1")]


def test_push_to_hub_needs_a_repo_id(checkpoint, tmp_path):
    with pytest.raises(ValueError, match=r"push_to_hub needs hub_model_id"):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            push_to_hub=True,
            max_steps=1,
            **QUIET,
        )
    assert not (tmp_path / "out").exists()


def test_max_length_is_bounded_by_the_position_table():
    config = MiniBertConfig(max_position_embeddings=64)
    tokenizer = SimpleNamespace(model_max_length=10**30)  # transformers' "no limit"
    assert check_max_length(None, tokenizer, config) == 64
    assert check_max_length(48, tokenizer, config) == 48
    with pytest.raises(
        ValueError, match=r"max_seq_length=100 must be above 2 and at most the model's max_position_embeddings=64"
    ):
        check_max_length(100, tokenizer, config)


def test_unknown_task_and_a_folder_without_tokenizer(tmp_path):
    with pytest.raises(ValueError, match=r"unknown task 'summarization'; choose one of \['sequence-classification'"):
        finetune(task="summarization", model_name_or_path="x", train_file="y", output_dir=tmp_path / "o")
    data = Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]})
    with pytest.raises(FileNotFoundError, match=r"no config.json in this folder"):
        finetune(
            task="sequence-classification", model_name_or_path=tmp_path, train_data=data, output_dir=tmp_path / "o"
        )
    MiniBertConfig().save_pretrained(tmp_path / "no_tokenizer")
    with pytest.raises(FileNotFoundError, match=r"no tokenizer in this folder"):
        finetune(
            task="sequence-classification",
            model_name_or_path=tmp_path / "no_tokenizer",
            train_data=data,
            output_dir=tmp_path / "o",
        )


@pytest.mark.slow(seconds=12)  # fresh processes without the package: not in the quick tier
def test_finetuned_folders_work_without_the_package(checkpoint, tmp_path):
    """A fresh interpreter that cannot import this project loads all three kinds of folder with plain transformers
    and gets the answers this process gets (the weights need not be good for that: one step each)."""
    one_step = dict(max_steps=1, **QUIET)
    classifier = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "clf",
        **one_step,
    ).output_dir
    tagger = finetune(
        task="token-classification",
        model_name_or_path=checkpoint,
        train_file=NER_TRAIN,
        output_dir=tmp_path / "ner",
        **one_step,
    ).output_dir
    reader = finetune(
        task="question-answering",
        model_name_or_path=checkpoint,
        train_file=QA_TRAIN,
        output_dir=tmp_path / "qa",
        max_seq_length=32,
        doc_stride=8,
        **one_step,
    ).output_dir
    text, sentence = "A warm, funny and moving film.", "Yesterday Ana visited New York with Ben ."
    question, context = "Where does Ana live ?", "Ben works for Acme . Ana lives in Paris ."
    expected = {
        "text": pipeline("text-classification", model=str(classifier))(text)[0]["label"],
        "tags": [e["entity"] for e in pipeline("token-classification", model=str(tagger))(sentence)],
        "answer": pipeline("question-answering", model=str(reader), pipeline_class=QuestionAnsweringPipeline)(
            question=question, context=context
        )["answer"],
    }
    code = f"""
import json
from transformers import pipeline
text = pipeline("text-classification", model={str(classifier)!r}, trust_remote_code=True)({text!r})
tagger = pipeline("token-classification", model={str(tagger)!r}, trust_remote_code=True)
qa = pipeline("question-answering", model={str(reader)!r}, trust_remote_code=True)
print(json.dumps({{
    "text": text[0]["label"],
    "tags": [e["entity"] for e in tagger({sentence!r})],
    "answer": qa(question={question!r}, context={context!r})["answer"],
}}))
"""
    assert json.loads(run_python(code, cwd=tmp_path).strip().splitlines()[-1]) == expected


@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_the_task_table_needs_no_train_extra(tmp_path):
    """The command line reads the task names on a plain install (`finetune --help`): the table imports without
    datasets, scikit-learn, seqeval or matplotlib; each task's own parts, its Auto class and pipeline tag come from
    its module's TASK."""
    from modeling_minibert.training.finetuning.tasks import TASKS, load_task

    code = (
        "import sys\n"
        "from modeling_minibert.training.finetuning.tasks import TASKS\n"
        "print(list(TASKS))\n"
        "print(sorted(m for m in ('datasets', 'sklearn', 'seqeval', 'matplotlib') if m in sys.modules))\n"
    )
    shown = run_python(code, tmp_path, without_package=False, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    assert "['sequence-classification', 'token-classification', 'question-answering']" in shown
    assert shown.endswith("\n[]\n"), shown  # none of the [train] extra's packages was imported
    tags = {name: (load_task(name).auto_class.__name__, load_task(name).pipeline_tag) for name in TASKS}
    assert tags == {
        "sequence-classification": ("AutoModelForSequenceClassification", "text-classification"),
        "token-classification": ("AutoModelForTokenClassification", "token-classification"),
        "question-answering": ("AutoModelForQuestionAnswering", "question-answering"),
    }
    assert all(load_task(name).name == name for name in TASKS)
    with pytest.raises(ValueError, match=r"unknown task 'summarization'; choose one of \['sequence-classification'"):
        load_task("summarization")


@pytest.mark.parametrize("source", ["runs/nosuch", "./nosuch", "~/nosuch-folder-of-minibert"])
def test_a_local_folder_that_is_not_there_is_refused_at_once_not_looked_up_on_the_hub(
    source, tmp_path, monkeypatch, capsys
):
    """A mistyped folder is not a Hub id: one line naming it, before any Hub request (transformers would retry the
    Hub for a minute, then blame the network)."""
    import huggingface_hub

    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    monkeypatch.setattr(huggingface_hub.file_download, "hf_hub_download", no_hub)
    (tmp_path / "train.csv").write_text("text,label\na good one,x\na bad one,y\n")
    assert (
        main(
            [
                "finetune",
                "--task",
                "sequence-classification",
                "--model_name_or_path",
                source,
                "--train_file",
                "train.csv",
                "--output_dir",
                "out",
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err.splitlines()[-1] == f"minibert finetune: error: model folder {source} does not exist"
    )


# --- non-finite runs (the class is in tests/cross_cutting/test_faults.py, TestNoNonFiniteSuccess) -----------------------------

DIVERGING = dict(
    learning_rate=1e12,
    max_steps=6,
    per_device_train_batch_size=4,
    logging_steps=1,
    save_strategy="no",
    disable_tqdm=True,
)


@pytest.mark.parametrize(
    "nan_filter, message",
    [
        (None, r"the training loss is (nan|inf) at step \d+"),
        # Asked for, Trainer's filter hides the NaN losses from the logs; the final model is still refused.
        (True, r"the final model's weights are not finite at step 6 \(\d+ of \d+ tensors, the first: [\w.]+\)"),
    ],
    ids=["default", "nan-filter-asked-for"],
)
def test_a_diverging_run_says_its_loss_is_nan_and_saves_nothing(checkpoint, tmp_path, nan_filter, message):
    """Trainer's NaN filter (on by default) logged the average of the finite steps instead (an all-NaN run reported
    train_loss 0.0) and the run saved its NaN model with exit 0."""
    options = {} if nan_filter is None else {"logging_nan_inf_filter": nan_filter}
    with pytest.raises(
        NonFiniteError,
        match=rf"^{message}: the learning rate 1e\+12 is likely too high \(lower "
        r"--learning_rate\); nothing was saved as the model, and no checkpoint "
        r"before this step$",
    ):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            **DIVERGING,
            **options,
        )
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


def test_a_model_with_non_finite_weights_is_refused_before_training(checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    weights = load_file(broken / "model.safetensors")
    name = sorted(weights)[0]
    weights[name].view(-1)[0] = float("inf")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        NonFiniteError,
        match=r"^the model to train has non-finite weights before step 1 \(1 of \d+ "
        r"tensors, the first: [\w.]+\): the model it starts from is broken",
    ):
        finetune(
            task="sequence-classification",
            model_name_or_path=broken,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "out",
            max_steps=2,
            **QUIET,
        )
    assert not (tmp_path / "out").exists()


def test_a_folder_of_pickle_weights_only_is_refused_not_unpickled(tmp_path):
    """transformers unpickles pytorch_model.bin where no safetensors file is beside it (a BERT checkpoint, or a Hub
    repository of one): fine-tuning loads safetensors only."""
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig, BertForMaskedLM

    from modeling_minibert.training.finetuning.loading import load_model

    bert = BertForMaskedLM(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    bert.config.save_pretrained(tmp_path)
    torch.save(bert.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(
        FileNotFoundError,
        match=rf"^cannot load a model from '{tmp_path}': .*no file named "
        r"model\.safetensors",
    ):
        load_model(AutoModelForSequenceClassification, tmp_path, seed=0)


def test_a_small_data_set_trains_at_least_min_train_steps(checkpoint, tmp_path):
    # 16 examples in batches of 8: 2 steps an epoch, so 3 epochs make 6 steps, fewer than 9.
    options = {**QUIET, "per_device_train_batch_size": 8, "num_train_epochs": 3}
    floor = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "floor",
        min_train_steps=9,
        **options,
    )
    assert floor.train_metrics["epoch"] == 5  # whole epochs: the fewest that reach 9 steps
    as_given = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "as-given",
        min_train_steps=0,
        **options,
    )
    assert as_given.train_metrics["epoch"] == 3
    capped = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "capped",
        min_train_steps=9,
        max_steps=4,
        **options,
    )
    assert capped.train_metrics["epoch"] == 2  # --max_steps overrides the floor


def test_the_floor_raises_the_default_schedule_and_keeps_epochs_given(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr("modeling_minibert.training.finetuning.arguments.MIN_TRAIN_STEPS", 9)
    options = {**QUIET, "per_device_train_batch_size": 8}  # 2 steps an epoch
    default = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "default",
        **options,
    )
    assert default.train_metrics["epoch"] == 5  # 3 default epochs raised to reach 9 steps
    given = finetune(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        output_dir=tmp_path / "given",
        num_train_epochs=2,
        **options,
    )
    assert given.train_metrics["epoch"] == 2
    with pytest.raises(ValueError, match=r"min_train_steps=-1 must be 0 or more"):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "bad",
            min_train_steps=-1,
            **options,
        )


def evaluated_epochs(result):
    state = json.loads((result.output_dir / "trainer_state.json").read_text())
    return [e["epoch"] for e in state["log_history"] if "eval_loss" in e]


# learning_rate 0: every evaluation scores the same, so none betters the first.
STILL = {**QUIET, "learning_rate": 0.0, "per_device_train_batch_size": 16}  # 1 step an epoch


def test_a_run_stops_when_validation_stops_improving(checkpoint, tmp_path):
    options = dict(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        validation_data=GOOD_BAD,
        num_train_epochs=6,
        **STILL,
    )
    stopped = finetune(output_dir=tmp_path / "stopped", early_stopping_patience=2, **options)
    assert evaluated_epochs(stopped) == [1, 2, 3]  # the best, then two evaluations no better: stop
    assert json.loads((stopped.output_dir / "trainer_state.json").read_text())["global_step"] == 3
    assert_clean_output(stopped.output_dir)
    whole = finetune(output_dir=tmp_path / "whole", early_stopping_patience=0, **options)
    assert evaluated_epochs(whole) == [1, 2, 3, 4, 5, 6]


def test_early_stopping_is_part_of_the_default_schedule_and_epochs_given_are_kept(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr("modeling_minibert.training.finetuning.arguments.EARLY_STOPPING_PATIENCE", 2)
    monkeypatch.setattr("modeling_minibert.training.finetuning.arguments.MIN_TRAIN_STEPS", 6)
    options = dict(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        validation_data=GOOD_BAD,
        **STILL,
    )
    assert evaluated_epochs(finetune(output_dir=tmp_path / "default", **options)) == [
        1,
        2,
        3,
    ]  # 6 epochs, stopped at 3
    given = finetune(output_dir=tmp_path / "given", **{**options, "num_train_epochs": 4})
    assert evaluated_epochs(given) == [1, 2, 3, 4]
    # Without validation data there is nothing to stop on: the default schedule runs whole.
    alone = finetune(output_dir=tmp_path / "alone", **{k: v for k, v in options.items() if k != "validation_data"})
    assert alone.train_metrics["epoch"] == 6


def test_an_interrupted_run_stops_where_the_whole_run_stops(checkpoint, tmp_path, monkeypatch):
    options = dict(
        task="sequence-classification",
        model_name_or_path=checkpoint,
        train_data=GOOD_BAD,
        validation_data=GOOD_BAD,
        num_train_epochs=6,
        early_stopping_patience=2,
        output_dir=tmp_path / "out",
        **STILL,
    )
    with pytest.raises(KeyboardInterrupt), interrupted_at_step(3, monkeypatch):
        finetune(**options)
    resumed = finetune(resume_from_checkpoint=True, **options)
    # The count of evaluations without a better score comes back from checkpoint-2 (1), so the run stops at 3, as
    # the whole run does (counting from 0 again it would stop at 4).
    assert json.loads((resumed.output_dir / "trainer_state.json").read_text())["global_step"] == 3


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"early_stopping_patience": -1, "validation_data": GOOD_BAD},
            r"^early_stopping_patience=-1 must be 0 or more$",
        ),
        ({"early_stopping_patience": 2}, r"^early_stopping_patience=2 needs validation data \(--validation_file\)"),
        (
            {"early_stopping_patience": 2, "validation_data": GOOD_BAD, "eval_strategy": "no"},
            r"^early_stopping_patience=2 needs validation data \(--validation_file\) and evaluations",
        ),
    ],
    ids=["negative", "no-validation", "no-evaluations"],
)
def test_bad_early_stopping_fails_before_any_work(checkpoint, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=GOOD_BAD,
            output_dir=tmp_path / "bad",
            **options,
            **QUIET,
        )
    assert not (tmp_path / "bad").exists()


def test_a_checkpoint_missing_encoder_weights_is_said_in_one_line_and_the_new_head_is_not(
    checkpoint, tmp_path, caplog
):
    """transformers' load report (a page, on every run: the new head is always missing) is ours in one line, and
    only for what matters: weights of the encoder the checkpoint lacks, which start from random values."""
    from transformers import AutoModelForSequenceClassification

    from modeling_minibert.training.finetuning.loading import load_model

    with caplog.at_level("WARNING", logger="modeling_minibert"):
        load_model(AutoModelForSequenceClassification, checkpoint, 0, num_labels=2)
    assert caplog.records == []
    shutil.copytree(checkpoint, tmp_path / "cut")
    weights = load_file(tmp_path / "cut" / "model.safetensors")
    cut = sorted(key for key in weights if ".layer.0.attention." in key)
    save_file(
        {k: v for k, v in weights.items() if k not in cut},
        tmp_path / "cut" / "model.safetensors",
        metadata={"format": "pt"},
    )
    with caplog.at_level("WARNING", logger="modeling_minibert"):
        load_model(AutoModelForSequenceClassification, tmp_path / "cut", 0, num_labels=2)
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith(
        f"{tmp_path / 'cut'} holds no weights for {len(cut)} parameter(s) of "
        "MiniBertForSequenceClassification, which start from random values: bert.encoder.layer.0."
    )
    assert "classifier" not in message and "\n" not in message
