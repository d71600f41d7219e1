"""One way to run a benchmark: every results file in the one format, every script a module that parses its
options with HfArgumentParser and writes under runs/ unless told otherwise, and a job's benchmark with the job's
own defaults. No benchmark runs here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fixtures.benchmark_scripts import script_problems
from fixtures.environment import REPO

from benchmarks.report import RESULTS, RUN_FIELDS, RUNS, check_results, command_line, write_results

SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if p.name != "__init__.py")
# The shared modules; every other file in benchmarks/ is a script with a `main` and options of its own.
SHARED = {"arguments", "cpu_time", "report", "suite_data", "tables"}


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_results_file_has_the_run_block(path):
    check_results(json.loads(path.read_text()))


def test_the_run_block_records_the_command_that_reproduces_the_run(tmp_path):
    command = command_line("benchmarks.bench_model", ["--title", "two words"])
    assert command == "python -m benchmarks.bench_model --title 'two words'"
    written = json.loads(write_results(tmp_path / "r.json", {"rows": [1]}, command).read_text())
    assert list(written) == ["run", "rows"] and list(written["run"]) == list(RUN_FIELDS)
    assert written["run"]["command"] == command and written["rows"] == [1]
    kept = json.loads(write_results(tmp_path / "r.json", written).read_text())  # a row added to an earlier run's file
    assert kept["run"] == written["run"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # written atomically, nothing left beside it


def test_a_results_file_without_the_run_block_is_refused():
    with pytest.raises(ValueError, match="no `run` block"):
        check_results({"rows": []})
    with pytest.raises(ValueError, match="lacks cpu, python"):
        check_results(
            {
                "run": {
                    "command": "python -m benchmarks.x",
                    "date": None,
                    "cpu_count": 2,
                    "machine": None,
                    "versions": {},
                }
            }
        )


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_parses_its_options_and_writes_under_runs_by_default(path):
    assert script_problems(path, shared=path.stem in SHARED) == []
    assert RUNS.relative_to(REPO).parts[0] == "runs"  # git-ignored


def test_the_script_check_sees_options_parsed_by_hand_and_a_committed_default(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        "import argparse\nfrom dataclasses import field\nfrom benchmarks.report import RESULTS\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--x')\n"
        "output: str = field(default=str(RESULTS / 'bad.json'))\n"
    )
    assert script_problems(script, shared=False) == [
        "bad.py parses by hand",
        "bad.py does not parse with benchmarks.arguments",
        "bad.py: field(default=str(RESULTS / 'bad.json')) writes a committed results file by default",
    ]


# ---------------------------------------------------------------------------------------------------------------
# A job's benchmark takes the job's own dataclasses


def test_the_distillation_benchmark_has_distills_own_defaults():
    from benchmarks.distill_rotten_tomatoes import parse_options, student_training
    from modeling_minibert.training.distillation import DistillationArguments
    from modeling_minibert.training.distillation.flow import DISTILL_TRAINING_DEFAULTS

    plan, values = parse_options(["--model_name_or_path", "student", "--teacher_model_name_or_path", "teacher"])
    set_here = {"task", "model_name_or_path", "teacher_model_name_or_path", "overwrite_output_dir"}
    own = {k: v for k, v in dataclasses.asdict(DistillationArguments()).items() if k not in set_here}
    assert {k: plan.distillation[k] for k in own} == own
    assert {k: values[k] for k in DISTILL_TRAINING_DEFAULTS} == DISTILL_TRAINING_DEFAULTS
    assert plan.training == {}  # nothing over distill's training defaults: distill applies its own
    # The fine-tuned student trains as the distilled one does.
    assert student_training(plan) == {
        **DISTILL_TRAINING_DEFAULTS,
        "max_seq_length": DistillationArguments.max_seq_length,
        "learning_rates": None,
    }


def test_the_distillation_benchmark_passes_distills_options_through():
    from benchmarks.distill_rotten_tomatoes import parse_options, student_training

    plan, _ = parse_options(
        [
            "--model_name_or_path",
            "student",
            "--teacher_model_name_or_path",
            "teacher",
            "--num_train_epochs",
            "3",
            "--learning_rates",
            "1e-4",
            "3e-4",
            "--temperature",
            "4",
            "--augmentation",
            "mlm",
            "--seed",
            "43",
            "--output_dir",
            "runs/x",
        ]
    )
    assert plan.distillation["temperature"] == 4.0 and plan.distillation["augmentation"] == "mlm"
    assert plan.training == {"num_train_epochs": 3.0, "seed": 43} and str(plan.work) == "runs/x"
    assert student_training(plan)["learning_rates"] == [1e-4, 3e-4] and "learning_rate" not in student_training(plan)


@pytest.mark.parametrize(
    "flag", [["--train_file", "train.csv"], ["--task", "token-classification"], ["--finetune_teacher"]]
)
def test_what_the_distillation_benchmark_decides_is_refused_in_one_line(flag, capsys):
    from benchmarks.distill_rotten_tomatoes import parse_options

    with pytest.raises(SystemExit) as exit_:
        parse_options(["--model_name_or_path", "student", "--teacher_model_name_or_path", "teacher", *flag])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(f"error: {flag[0]} is set by this benchmark itself; leave it out")
    )


def test_the_headlines_benchmark_needs_a_model_before_any_work(tmp_path, capsys):
    from benchmarks import bbc_titles

    with pytest.raises(SystemExit) as exit_:
        bbc_titles.main(["--data_dir", str(tmp_path / "data")])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("error: --model_name_or_path is required (a pretrained Mini-BERT folder, model and tokenizer)")
    )
    assert not (tmp_path / "data").exists()


def test_the_finetuning_benchmark_needs_a_model_and_has_finetunes_defaults(capsys):
    from benchmarks.finetune_rotten_tomatoes import parse_options

    with pytest.raises(SystemExit):
        parse_options([])
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("error: --model_name_or_path is required (a pretrained Mini-BERT folder, model and tokenizer)")
    )
    args, options, values = parse_options(["--model_name_or_path", "m", "--output", "runs/x/ft.json"])
    assert options["output_dir"] == "runs/x/ft-model" and options["task"] == "sequence-classification"
    assert "num_train_epochs" not in options and values["num_train_epochs"] == 3.0  # finetune's own default applies


# ---------------------------------------------------------------------------------------------------------------
# bench_deploy: any sequence classifier, checked before any export


def tiny_folder(path: Path, head: str, **config) -> Path:
    import modeling_minibert
    from modeling_minibert import MiniBertConfig

    sizes = dict(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    getattr(modeling_minibert, head)(MiniBertConfig(**sizes, **config)).save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", ["masked-lm", "no-config"])
def test_bench_deploy_refuses_a_folder_that_is_not_a_classifier_in_one_line(kind, tmp_path, capsys):
    from benchmarks.bench_deploy import main

    folder = tiny_folder(tmp_path / "mlm", "MiniBertForMaskedLM") if kind == "masked-lm" else tmp_path / "empty"
    with pytest.raises(SystemExit) as exit_:
        main(["--model_name_or_path", str(folder), "--output", str(tmp_path / "out" / "deploy.json")])
    says = {
        "masked-lm": "is a minibert MiniBertForMaskedLM, not a Mini-BERT sequence classifier",
        "no-config": "no config.json there",
    }[kind]
    assert exit_.value.code == 2 and says in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "out").exists()  # nothing exported, nothing written


def test_bench_deploy_refuses_test_data_the_classifier_has_no_labels_for(tmp_path, capsys):
    from benchmarks.bench_deploy import main

    folder = tiny_folder(
        tmp_path / "cls",
        "MiniBertForSequenceClassification",
        id2label={0: "NEG", 1: "POS"},
        label2id={"NEG": 0, "POS": 1},
    )
    data = tmp_path / "test.csv"
    data.write_text("text,label\ngood,POS\nawful,rotten\n")
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "--model_name_or_path",
                str(folder),
                "--test_file",
                str(data),
                "--output",
                str(tmp_path / "out" / "d.json"),
            ]
        )
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            "labels ['NEG', 'POS'] lack the test data's ['rotten']: give --test_file with data labelled as the model is"
        )
    )
    assert not (tmp_path / "out").exists()


def test_bench_deploy_refuses_a_work_dir_of_another_models_exports(tmp_path, capsys):
    from benchmarks.bench_deploy import main

    folder = tiny_folder(
        tmp_path / "cls",
        "MiniBertForSequenceClassification",
        id2label={0: "NEG", 1: "POS"},
        label2id={"NEG": 0, "POS": 1},
    )
    data = tmp_path / "test.csv"
    data.write_text("text,label\ngood,POS\nawful,NEG\n")
    work = tmp_path / "artifacts"
    work.mkdir()
    (work / "source.json").write_text(json.dumps({"model": "/elsewhere/classifier", "weights_mtime": 0.0}))
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "--model_name_or_path",
                str(folder),
                "--test_file",
                str(data),
                "--work_dir",
                str(work),
                "--output",
                str(tmp_path / "out" / "d.json"),
            ]
        )
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            f"--work_dir {work} holds the exports of another model (/elsewhere/classifier); give another --work_dir or remove it"
        )
    )
    assert sorted(p.name for p in work.iterdir()) == ["source.json"]
