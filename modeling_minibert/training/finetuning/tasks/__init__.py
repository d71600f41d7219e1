"""The fine-tuning tasks by name: the one table every job reads (finetune, distill, the model card, hub.py).

Light on purpose: it imports no `datasets`, `Trainer` or scikit-learn, so that a plain install (hub.py, the
model card) can read a task's Auto class and Hub pipeline tag. The task's working parts (reader, features,
metrics, collator, plots) are its module's `TASK`, a `flow.Task`, imported by `load_task` when a job runs.

A new task is its module (exporting `TASK`) plus one line here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskSpec:
    auto_class: str  # the transformers Auto class that loads the task's models
    pipeline_tag: str  # the Hub pipeline tag of its models (model card, `minibert push`)
    module: str  # the module whose `TASK` holds the rest


TASKS: dict[str, TaskSpec] = {
    "sequence-classification": TaskSpec(
        "AutoModelForSequenceClassification", "text-classification", "modeling_minibert.training.finetuning.tasks.sequence_classification"
    ),
    "token-classification": TaskSpec(
        "AutoModelForTokenClassification", "token-classification", "modeling_minibert.training.finetuning.tasks.token_classification"
    ),
    "question-answering": TaskSpec(
        "AutoModelForQuestionAnswering", "question-answering", "modeling_minibert.training.finetuning.tasks.question_answering"
    ),
    "embedding": TaskSpec("AutoModel", "feature-extraction", "modeling_minibert.training.distillation.embedding"),
}


def task_spec(name: str) -> TaskSpec:
    """`TASKS[name]`, or ValueError naming the task and the choices."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {list(TASKS)}")
    return TASKS[name]


def load_task(name: str) -> Any:
    """The task's `flow.Task` (imports its module, which needs the [train] extra)."""
    return importlib.import_module(task_spec(name).module).TASK


__all__ = ["TASKS", "TaskSpec", "load_task", "task_spec"]
