"""The fine-tuning tasks by name: the one table every job reads (finetune, distill).

Each task is a module of this package exporting one `Task` as `TASK` (`finetuning/task.py`: its reader, features,
collator, metrics, figures and Auto class), imported by `load_task` when a job runs: the modules need the [train]
extra, this table does not. A new task is its module plus one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

TASKS: dict[str, str] = {  # task name -> the module under this package that defines it
    "sequence-classification": "sequence_classification",
    "token-classification": "token_classification",
    "question-answering": "question_answering",
}


def load_task(name: str) -> Any:
    """The task's `Task` (its module imported); ValueError naming the task and the choices."""
    if name not in TASKS:
        hint = " (embedding is distillation's: minibert distill --task embedding)" if name == "embedding" else ""
        raise ValueError(f"unknown task {name!r}; choose one of {list(TASKS)}{hint}")
    return importlib.import_module(f"{__name__}.{TASKS[name]}").TASK


__all__ = ["TASKS", "load_task"]
