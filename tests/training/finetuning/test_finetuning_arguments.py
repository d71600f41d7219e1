"""`minibert finetune`'s options: transformers' flag names (both spellings), our defaults (the documented numbers,
the same for the command line and the Python API); the 0.1 names are gone."""

from __future__ import annotations

import json

import pytest
from datasets import DatasetDict
from fixtures.finetuning_checkpoint import (  # noqa: F401 (checkpoint: a fixture)
    NER_TRAIN,
    NER_VALIDATION,
    assert_clean_output,
    checkpoint,
    pair_data,
)
from transformers import Trainer

from modeling_minibert.cli import main
from modeling_minibert.training.finetuning import finetune, training_arguments
from modeling_minibert.training.finetuning.arguments import epochs_for, parse_args

# The README's fine-tuning defaults, written out: what both the command line and the Python API must use.
DOCUMENTED = {
    "learning_rate": 1e-4,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "num_train_epochs": 3.0,
    "weight_decay": 0.01,
    "warmup_steps": 0.1,
    "eval_strategy": "epoch",
    "save_strategy": "epoch",
    "load_best_model_at_end": True,
    "logging_steps": 10,
    "save_total_limit": 1,
    "seed": 42,
    "report_to": [],  # "none"
}


pytestmark = pytest.mark.usefixtures("one_thread")


def words(flags: dict[str, str | None], dashes: bool) -> list[str]:
    argv = []
    for flag, value in flags.items():
        argv.append(flag.replace("_", "-") if dashes else flag)
        if value is not None:
            argv.append(value)
    return argv


@pytest.mark.parametrize("dashes", [False, True], ids=["--foo_bar", "--foo-bar"])
def test_the_example_scripts_flags_reach_their_arguments(dashes, tmp_path):
    flags = {
        "--task": "token-classification",
        "--model_name_or_path": "some/model",
        "--tokenizer_name": "some/tokenizer",
        "--train_file": "train.conll",
        "--validation_file": "dev.conll",
        "--test_file": "test.conll",
        "--text_column_name": "words",
        "--text_pair_column_name": "second",
        "--label_column_name": "ner",
        "--max_seq_length": "48",
        "--label_all_tokens": None,
        "--overwrite_output_dir": None,
        "--keep_checkpoints": None,
        "--output_dir": str(tmp_path / "out"),
        "--num_train_epochs": "7",
        "--per_device_train_batch_size": "8",
        "--per_device_eval_batch_size": "5",
        "--learning_rate": "2e-5",
        "--eval_strategy": "steps",
        "--eval_steps": "3",
        "--report_to": "tensorboard",
        "--resume_from_checkpoint": "ckpt",
        "--push_to_hub": None,
        "--hub_model_id": "me/model",
        "--hub_token": "hf_x",
        "--bf16": None,
        "--seed": "7",
        "--warmup_steps": "0.2",
        "--gradient_accumulation_steps": "2",
        "--train_sampling_strategy": "group_by_length",
        "--max_steps": "9",
    }
    data_args, training = parse_args(words(flags, dashes))
    assert (data_args.model_name_or_path, data_args.tokenizer_name) == ("some/model", "some/tokenizer")
    assert (data_args.task, data_args.train_file, data_args.validation_file, data_args.test_file) == (
        "token-classification",
        "train.conll",
        "dev.conll",
        "test.conll",
    )
    assert (data_args.text_column_name, data_args.text_pair_column_name, data_args.label_column_name) == (
        "words",
        "second",
        "ner",
    )
    assert data_args.max_seq_length == 48 and data_args.label_all_tokens and data_args.overwrite_output_dir
    assert data_args.keep_checkpoints
    assert parse_args(words({"--dataset_name": "folder"}, dashes))[0].dataset_name == "folder"
    output_dir = training.pop("output_dir")
    args = training_arguments(output_dir, has_validation=True, metric="f1", **training)
    assert args.output_dir == str(tmp_path / "out")
    assert (args.num_train_epochs, args.per_device_train_batch_size, args.per_device_eval_batch_size) == (7, 8, 5)
    assert (args.learning_rate, args.eval_strategy, args.eval_steps, args.save_steps) == (2e-5, "steps", 3, 3)
    assert args.report_to == ["tensorboard"] and args.resume_from_checkpoint == "ckpt"
    assert (args.push_to_hub, args.hub_model_id, args.hub_token, args.bf16) == (True, "me/model", "hf_x", True)
    assert (args.seed, args.warmup_steps, args.gradient_accumulation_steps, args.max_steps) == (7, 0.2, 2, 9)
    assert args.train_sampling_strategy == "group_by_length"


def test_resume_from_checkpoint_alone_means_the_newest():
    assert parse_args(["--resume_from_checkpoint"])[1]["resume_from_checkpoint"] is True


# The 0.1 names, dropped before any release: each is refused in one line, exit 2 (argparse names it).
OLD_NAMES = [
    "--model",
    "--tokenizer",
    "--overwrite",
    "--dataset",
    "--text-column",
    "--text-pair-column",
    "--label-column",
    "--question-column",
    "--context-column",
    "--answers-column",
    "--max-length",
    "--n-best",
    "--epochs",
    "--batch-size",
    "--eval-batch-size",
    "--warmup",
    "--no-load-best-model-at-end",
    "--group-by-length",
    "--quiet",
]


@pytest.mark.parametrize("old", OLD_NAMES)
def test_the_dropped_0_1_names_are_refused(old, capsys):
    assert main(["finetune", old, "1", "--task", "sequence-classification"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"minibert finetune: error: unrecognized arguments: {old} 1"), err


class Captured(Exception):
    """Raised instead of training, once the TrainingArguments Trainer got are recorded."""


@pytest.fixture
def captured_args(monkeypatch):
    captured = []

    def record(self, *args, **kwargs):
        captured.append(self.args)
        raise Captured

    monkeypatch.setattr(Trainer, "train", record)
    return captured


def test_command_line_and_api_defaults_are_the_documented_numbers(checkpoint, tmp_path, captured_args, capsys):
    data = DatasetDict(train=pair_data(8, seed=0), validation=pair_data(8, seed=1))
    data.save_to_disk(tmp_path / "pairs")
    with pytest.raises(Captured):
        main(
            [
                "finetune",
                "--task",
                "sequence-classification",
                "--model_name_or_path",
                str(checkpoint),
                "--dataset_name",
                str(tmp_path / "pairs"),
                "--text_column_name",
                "fact",
                "--label_column_name",
                "kind",
                "--output_dir",
                str(tmp_path / "cli"),
                "--min_train_steps",
                "0",
            ]
        )
    with pytest.raises(Captured):  # the step floor off: 8 examples would train 50 epochs (its own tests below)
        finetune(
            task="sequence-classification",
            model_name_or_path=checkpoint,
            train_data=data["train"],
            output_dir=tmp_path / "api",
            validation_data=data["validation"],
            text_column_name="fact",
            label_column_name="kind",
            min_train_steps=0,
        )
    for args in captured_args:
        assert {name: getattr(args, name) for name in DOCUMENTED} == DOCUMENTED
        assert args.metric_for_best_model == "accuracy" and args.greater_is_better
    assert not (tmp_path / "cli").exists() and not (tmp_path / "api").exists()


@pytest.fixture
def captured_trainers(monkeypatch):
    """What each run would train: Trainer's arguments, the new head's labels, the tokenized splits."""
    captured = []

    def record(self, *args, **kwargs):
        captured.append(self)
        raise Captured

    monkeypatch.setattr(Trainer, "train", record)
    return captured


def test_the_python_function_takes_the_command_lines_flags(checkpoint, tmp_path, captured_trainers):
    """`finetune(**options)` is what `minibert finetune` calls: each flag, given to the function as a keyword option
    of the same name (a `datasets` folder, pair columns, labels as the command writes them, a length, Trainer
    fields), makes the same run."""
    DatasetDict(train=pair_data(8, seed=0), validation=pair_data(6, seed=1)).save_to_disk(tmp_path / "pairs")
    flags = {
        "task": "sequence-classification",
        "model_name_or_path": str(checkpoint),
        "dataset_name": str(tmp_path / "pairs"),
        "text_column_name": "question",
        "text_pair_column_name": "fact",
        "label_column_name": "kind",
        "labels": "place,company",
        "max_seq_length": 12,
        "per_device_train_batch_size": 4,
        "seed": 3,
    }
    with pytest.raises(Captured):
        main(
            [
                "finetune",
                *[w for k, v in flags.items() for w in (f"--{k}", str(v))],
                "--output_dir",
                str(tmp_path / "cli"),
            ]
        )
    with pytest.raises(Captured):
        finetune(**flags, output_dir=tmp_path / "api")
    cli, api = captured_trainers
    assert {**cli.args.to_dict(), "output_dir": None, "logging_dir": None} == {
        **api.args.to_dict(),
        "output_dir": None,
        "logging_dir": None,
    }
    for trainer in (cli, api):
        assert (trainer.args.per_device_train_batch_size, trainer.args.seed) == (4, 3)
        assert trainer.model.config.id2label == {0: "place", 1: "company"}
        assert (len(trainer.train_dataset), len(trainer.eval_dataset)) == (8, 6)  # the dataset's validation split
        assert max(len(ids) for ids in trainer.train_dataset["input_ids"]) == 12  # pairs cut to max_seq_length
    assert (
        cli.train_dataset["input_ids"] == api.train_dataset["input_ids"]
        and cli.train_dataset["labels"] == api.train_dataset["labels"]
    )


def test_training_arguments_follow_the_data(tmp_path):
    args = training_arguments(tmp_path, has_validation=True, metric="f1", eval_strategy="steps", eval_steps=7)
    assert (args.save_strategy, args.save_steps, args.metric_for_best_model) == ("steps", 7, "f1")
    assert args.load_best_model_at_end and args.greater_is_better
    # Without validation data nothing is evaluated; a checkpoint per epoch still lets the run resume.
    args = training_arguments(tmp_path, has_validation=False, metric="f1")
    assert (args.eval_strategy, args.save_strategy, args.load_best_model_at_end) == ("no", "epoch", False)
    with pytest.raises(ValueError, match="load_best_model_at_end needs validation data"):
        training_arguments(tmp_path, has_validation=False, metric="f1", load_best_model_at_end=True)
    with pytest.raises(ValueError, match="eval_strategy='steps' needs validation data"):
        training_arguments(tmp_path, has_validation=False, metric="f1", eval_strategy="steps")


def test_cli_token_classification(checkpoint, tmp_path, capsys):
    output = tmp_path / "cli-ner"
    code = main(
        [
            "finetune",
            "--task",
            "token-classification",
            "--model_name_or_path",
            str(checkpoint),
            "--train_file",
            str(NER_TRAIN),
            "--validation_file",
            str(NER_VALIDATION),
            "--output_dir",
            str(output),
            "--max_steps",
            "4",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "2",
            "--disable_tqdm",
            "true",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert f"saved to {output}" in captured.out and "validation: " in captured.out and "f1=" in captured.out
    assert "deprecated" not in captured.err
    config = json.loads((output / "config.json").read_text())
    assert set(config["label2id"]) == {"O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG"}
    assert_clean_output(output)


def test_cli_output_in_a_log_is_the_runs_own(checkpoint, tmp_path, capfd):
    """With its bars on and its errors going to a file, not a terminal: no load report (the new head is what a
    fine-tuning run makes), no nested bar's cursor codes, no transformers bar inside Trainer's, no word that early
    stopping is disabled when the test data is scored after it stopped the run; the scores last. Without any
    held-out data, it says that nothing was scored."""
    capfd.readouterr()
    code = main(
        [
            "finetune",
            "--task",
            "token-classification",
            "--model_name_or_path",
            str(checkpoint),
            "--train_file",
            str(NER_TRAIN),
            "--validation_file",
            str(NER_VALIDATION),
            "--test_file",
            str(NER_VALIDATION),
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "4",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "2",
            "--early_stopping_patience",
            "5",
        ]
    )
    assert code == 0
    out, err = capfd.readouterr()
    for chatter in ("LOAD REPORT", "\x1b[A", "Writing model shards", "Loading weights", "early stopping", "mtime"):
        assert chatter not in err, chatter
    assert "eval_loss" in err + out  # the evaluations are still said, each in its logged line
    assert out.splitlines()[-1].startswith("test: ") and out.splitlines()[-2].startswith("validation: ")
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
            str(tmp_path / "unscored"),
            "--max_steps",
            "1",
            "--disable_tqdm",
            "true",
        ]
    )
    assert code == 0
    assert capfd.readouterr().out.splitlines()[-1] == (
        "no validation or test data: nothing was scored (give --validation_file or --test_file)"
    )


def test_cli_with_a_datasets_folder(checkpoint, tmp_path, capsys):
    splits = DatasetDict(train=pair_data(32, seed=3), validation=pair_data(16, seed=4))
    splits.save_to_disk(tmp_path / "pairs")
    code = main(
        [
            "finetune",
            "--task",
            "sequence-classification",
            "--model_name_or_path",
            str(checkpoint),
            "--dataset_name",
            str(tmp_path / "pairs"),
            "--text_column_name",
            "question",
            "--text_pair_column_name",
            "fact",
            "--label_column_name",
            "kind",
            "--labels",
            "place,company",
            "--output_dir",
            str(tmp_path / "out"),
            "--max_steps",
            "1",
            "--disable_tqdm",
            "true",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "validation: " in out and "accuracy=" in out  # the dataset's validation split was used
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "place", "1": "company"}
    assert not (tmp_path / "out" / "test_results.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--task", "token-classification", "--train_file", "x.conll", "--output_dir", "o"],
            "model_name_or_path is required (--model_name_or_path)",
        ),
        (
            ["--task", "token-classification", "--model_name_or_path", "m", "--output_dir", "o"],
            "give exactly one of --train_file and --dataset_name",
        ),
        (["--model_name_or_path", "m", "--train_file", "x", "--output_dir", "o"], "task is required (--task)"),
    ],
)
def test_cli_missing_options(argv, message, capsys):
    assert main(["finetune", *argv]) == 2
    assert f"minibert finetune: error: {message}" in capsys.readouterr().err


def test_cli_reports_bad_data(checkpoint, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("review,label\ngood,pos\n")
    code = main(
        [
            "finetune",
            "--task",
            "sequence-classification",
            "--model_name_or_path",
            str(checkpoint),
            "--train_file",
            str(tmp_path / "train.csv"),
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert (
        "minibert finetune: error:" in err
        and "train.csv: no column 'text'; the columns are ['review', 'label']" in err
    )


@pytest.mark.parametrize(
    "epochs, size, batch, floor, expected",
    [
        (3.0, 1000, 32, 0, 3.0),  # off
        (3.0, 1000, 32, 300, 10.0),  # 32 steps an epoch: 10 epochs reach 300
        (3.0, 10000, 32, 300, 3.0),  # 939 steps already
        (0.5, 64, 32, 3, 2.0),  # a fraction of an epoch given: whole epochs when raised
        (3.0, 16, 8, 1000, 50.0),  # 500 epochs would reach it: MAX_FLOOR_EPOCHS at most
        (60.0, 16, 8, 1000, 60.0),  # never fewer than given
    ],
)
def test_epochs_are_raised_to_reach_min_train_steps(epochs, size, batch, floor, expected):
    assert epochs_for(epochs, size, batch, floor) == expected


def test_training_arguments_apply_the_floor_to_optimizer_steps_unless_max_steps(tmp_path):
    args = training_arguments(tmp_path, True, "f1", 100, 50, per_device_train_batch_size=10)
    assert args.num_train_epochs == 5.0
    # 20 examples an optimizer step: 5 steps an epoch
    accumulated = training_arguments(
        tmp_path, True, "f1", 100, 50, per_device_train_batch_size=10, gradient_accumulation_steps=2
    )
    assert accumulated.num_train_epochs == 10.0
    capped = training_arguments(tmp_path, True, "f1", 100, 50, per_device_train_batch_size=10, max_steps=7)
    assert (capped.num_train_epochs, capped.max_steps) == (3.0, 7)
