"""The suite benchmark (benchmarks/suite.py, benchmarks/suite_data.py): its splits keep neighbours together and
never overlap, its baselines score what they should, its summary judges the goals as written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from datasets import Dataset, DatasetDict
from fixtures.environment import REPO

from benchmarks import suite
from benchmarks.suite_data import (
    POS_SIZES,
    SuiteTask,
    bbc_topics,
    crf_tagger,
    english_sentences,
    most_frequent_tag,
    pos_tagging,
    split_by_runs,
    uncertainty,
)
from examples.rotten_tomatoes import REVIEWS_SDIST

pytestmark = pytest.mark.slow(seconds=47)  # real jobs end to end: not in the quick tier (-m "not slow")

needs_sdist = pytest.mark.skipif(
    not REVIEWS_SDIST.is_file(), reason=f"{REVIEWS_SDIST} missing (bash .ci/setup dev downloads it)"
)


def test_runs_go_whole_to_one_split_in_the_order_of_the_sizes():
    items = list(range(100))
    parts = split_by_runs(items, 10, {"test": 20, "validation": 0.15, "train": 30}, seed=1)
    assert [len(parts[n]) for n in ("test", "validation", "train", "rest")] == [20, 20, 30, 30]
    assert sorted(sum(parts.values(), [])) == items
    for part in parts.values():
        assert {i // 10 for i in part} == {i // 10 for i in part if i % 10 == 0}  # whole runs only
    assert split_by_runs(items, 10, {"test": 20}, seed=1) == split_by_runs(items, 10, {"test": 20}, seed=1)


@needs_sdist
def test_the_tagging_task_has_its_sizes_no_shared_sentence_and_the_rest_untagged():
    task = pos_tagging()
    assert {name: len(split) for name, split in task.splits.items()} == POS_SIZES
    sentences = {name: {" ".join(words) for words in split["tokens"]} for name, split in task.splits.items()}
    assert not sentences["train"] & sentences["test"] and not sentences["train"] & sentences["validation"]
    assert len(task.transfer) > 10_000 and not set(task.transfer) & sentences["test"]
    every_tag = {tag for split in task.splits.values() for tags in split["tags"] for tag in tags}
    assert every_tag <= set(task.labels) and {"NN", "VBZ", "DT", "."} <= every_tag
    assert all(
        len(w) == len(t) and 3 <= len(w) <= 40
        for w, t in zip(task.splits["train"]["tokens"], task.splits["train"]["tags"])
    )


@needs_sdist
def test_the_uncertainty_task_is_the_whole_balanced_file_in_runs_of_fifty():
    splits = uncertainty().splits
    assert sum(len(s) for s in splits.values()) == 2957  # 3,000 less exact duplicates
    labels = [label for split in splits.values() for label in split["label"]]
    assert (labels.count("certain"), labels.count("uncertain")) == (1462, 1495)
    assert len(splits["test"]) == 450 and len(splits["validation"]) == 457  # whole runs of 50 past 15%
    assert not set(splits["train"]["text"]) & set(splits["test"]["text"])


@needs_sdist
def test_the_general_transfer_set_is_untagged_english_without_the_uncertainty_sentences():
    task = uncertainty()
    labelled = {text for split in task.splits.values() for text in split["text"]}
    transfer = english_sentences(labelled)  # what --general_transfer gives distill for this task
    assert task.transfer == []  # the rule kept the training texts alone (lab/README.md)
    assert len(transfer) > 15_000 and len(set(transfer)) == len(transfer)
    assert not set(transfer) & labelled and set(english_sentences()) & labelled == set()
    assert all(len(s.split()) >= 4 for s in transfer)
    assert not [s for s in transfer if "/NN" in s or "/DT " in s]  # tags stripped
    assert (
        "Pierre Vinken , 61 years old , will join the board as a nonexecutive director Nov. 29 ." in transfer
    )  # WSJ, cut at "."
    assert any(
        s.startswith("In mathematics and computer science, dynamic programming is a method") for s in transfer
    )  # Wikipedia


def test_the_topic_task_is_stratified_and_deduplicated():
    splits = bbc_topics().splits
    texts = [t for split in splits.values() for t in split["text"]]
    assert len(texts) == len(set(texts)) > 2000
    for split in splits.values():
        assert set(split["label"]) == {"business", "entertainment", "politics", "sports", "tech"}


def tagged(rows: list[str]) -> Dataset:
    pairs = [[tuple(token.split("/")) for token in row.split()] for row in rows]
    return Dataset.from_dict(
        {"tokens": [[w for w, _ in s] for s in pairs], "tags": [[t for _, t in s] for s in pairs]}
    )


def test_the_most_frequent_tag_baseline_falls_back_to_the_commonest_tag():
    splits = DatasetDict(
        train=tagged(["the/DT dog/NN runs/VBZ", "the/DT run/NN ends/VBZ", "dogs/NNS run/VBP", "big/JJ dog/NN"]),
        validation=tagged(["the/DT dog/NN"]),
        test=tagged(["the/DT run/NN cat/NN", "cats/NNS run/VBP"]),  # run: NN once, VBP once -> NN (seen first)
    )
    scores = most_frequent_tag(splits)
    assert scores["validation"]["accuracy"] == 1.0
    assert scores["test"]["accuracy"] == pytest.approx(3 / 5)  # cat -> NN (unseen: the commonest tag); cats, run wrong


def test_the_crf_tagger_learns_context_the_word_alone_does_not_give():
    # "run" is a noun after "the" and a verb after a plural noun: the CRF's neighbour features get it right.
    train = ["the/DT run/NN ends/VBZ", "dogs/NNS run/VBP", "the/DT run/NN stops/VBZ", "cats/NNS run/VBP"] * 10
    splits = DatasetDict(
        train=tagged(train), validation=tagged(train[:4]), test=tagged(["birds/NNS run/VBP", "the/DT run/NN ends/VBZ"])
    )
    result = crf_tagger(splits)
    assert result["test"]["accuracy"] == 1.0 > most_frequent_tag(splits)["test"]["accuracy"]


def task(metric: str, **scores: float) -> dict:
    systems = {name: {"test": {metric: value}, "cpu_minutes": 1.0} for name, value in scores.items()}
    return {"metric": metric, "systems": systems}


def test_the_summary_judges_every_goal_as_written():
    tasks = {
        "a": task(
            "accuracy", **{"TF-IDF + LR": 0.70, suite.TEACHER: 0.80, suite.FINETUNED: 0.75, suite.DISTILLED: 0.78}
        ),
        "b": task(
            "accuracy",
            **{
                "CRF": 0.90,
                "most frequent tag": 0.80,
                suite.TEACHER: 0.95,
                suite.FINETUNED: 0.89,
                suite.DISTILLED: 0.91,
            },
        ),
        "r": task("mrr", **{"TF-IDF cosine": 0.5, "teacher": 0.90, suite.DISTILLED: 0.86}),
    }
    for name in tasks:
        teacher = suite.TEACHER if suite.TEACHER in tasks[name]["systems"] else "teacher"
        tasks[name]["systems"][teacher]["throughput"] = {"median": 10.0}
        tasks[name]["systems"][suite.DISTILLED]["throughput"] = {"median": 60.0 if name != "r" else 40.0}
    result = suite.summary(tasks)
    assert result["scores"][suite.BASELINE] == {"a": 0.70, "b": 0.90, "r": 0.5}  # the best baseline of each task
    assert result["averages"][suite.DISTILLED] == pytest.approx((0.78 + 0.91 + 0.86) / 3)
    assert result["averages"][suite.FINETUNED] is None  # no fine-tuned row on retrieval
    assert result["goals"] == {
        "distilled_within_3_points": False,  # b: 4 points behind (r: 0.86 >= 0.95 x 0.90 holds)
        "distilled_above_baseline": True,
        "finetuned_above_baseline": False,  # b: 0.89 < CRF's 0.90; retrieval has no fine-tuned row
        "throughput_5x": False,  # r: 4x
        "average_97_percent": (0.78 + 0.91 + 0.86) >= 0.97 * (0.80 + 0.95 + 0.90),
        "budget_3_cpu_hours": None,  # judged on the whole suite only
    }
    whole = {name: task("accuracy", **{suite.TEACHER: 0.8}) for name in suite.TASKS}
    assert suite.summary(whole)["goals"]["budget_3_cpu_hours"] is True  # 1 CPU-minute each
    table = suite.readme_table({"tasks": tasks, **result})
    assert "| Mini-BERT distilled | 0.780 | 0.910 | 0.860 | **0.850** |" in table
    assert "| distilled's speed-up over the teacher | 6.0× | 6.0× | 4.0× |  |" in table
    assert "measured on" not in table  # one machine
    tasks["a"]["measured"] = {"cpu": "AMD EPYC (family 25 model 1; avx2)"}
    tasks["b"]["measured"] = {"cpu": "Intel(R) Xeon(R) Processor (family 6 model 143; avx2, avx512f, amx_bf16)"}
    table = suite.readme_table({"tasks": tasks, **result})
    assert "| measured on | AMD EPYC 25/1: AVX2 only | Intel Xeon 6/143: AMX |  |  |" in table


def test_a_run_with_some_systems_leaves_the_goals_it_cannot_judge_open():
    result = suite.summary({"a": task("accuracy", **{"TF-IDF + LR": 0.7, suite.FINETUNED: 0.8})})
    assert result["goals"]["finetuned_above_baseline"] is True
    assert result["goals"]["distilled_within_3_points"] is None and result["goals"]["throughput_5x"] is None


def test_a_rerun_of_some_systems_keeps_the_tasks_others():
    splits = DatasetDict(
        {
            name: Dataset.from_dict(
                {
                    "text": ["good film", "bad film", "good plot", "bad plot"] * 3,
                    "label": ["pos", "neg", "pos", "neg"] * 3,
                }
            )
            for name in ("train", "validation", "test")
        }
    )
    kept = {
        suite.DISTILLED: {"test": {"accuracy": 0.5}, "cpu_minutes": 1.0},
        "TF-IDF + LR": {"test": {"accuracy": 0.1}},
    }
    args = suite.SuiteArguments(student=".", systems=["baselines"])
    systems = suite.labelled_task(SuiteTask("toy", "sequence-classification", splits), args, "teacher", REPO, kept)
    assert systems[suite.DISTILLED] == kept[suite.DISTILLED]  # kept as it was
    assert systems["TF-IDF + LR"]["test"]["accuracy"] == 1.0  # run again: the words decide
    assert kept["TF-IDF + LR"]["test"]["accuracy"] == 0.1  # the saved rows are not changed in place


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--student", ".", "--validation_only"], "--validation_only: the baselines and bbc_retrieval score test"),
        (["--student", "nowhere"], "--student nowhere: no config.json there"),
        (["--student", ".", "--tasks", "glue"], "invalid choice: 'glue'"),
        (["--student", ".", "--patience", "3"], "unrecognized arguments: --patience 3"),
    ],
)
def test_bad_options_are_one_line_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        suite.main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and message in err.splitlines()[-1]


def test_a_bad_option_in_a_real_process_is_one_line_without_a_traceback():
    """As the rows above, in a process of its own (where a traceback would show)."""
    run = subprocess.run([sys.executable, "-m", "benchmarks.suite"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "--student is required" in run.stderr and "Traceback" not in run.stderr
