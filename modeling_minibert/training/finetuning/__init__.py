"""Fine-tune a Mini-BERT checkpoint with transformers' `Trainer`; `minibert finetune`.

Three tasks, each a module exporting its `Task` (`TASK`) over the shared flow (check data -> tokenize -> Trainer
-> save), named in the one table `tasks.TASKS`:

    sequence_classification   single texts or pairs -> one label; accuracy and macro-F1
    token_classification      words -> one tag each; seqeval entity P/R/F1 for BIO tags, else accuracy
    question_answering        question + context -> answer span; SQuAD exact match and F1 (0-100)

    tasks       the table: task name -> Auto class, pipeline tag, module (light: a plain install reads it)
    flow        `finetune`: the Trainer run and the output folder (checkpoint-N/, all_results.json, card, ...)
    arguments   FinetuneArguments (ModelArguments + DataTrainingArguments), our TrainingArguments defaults, the command
    data        reading and checking CSV/JSON/CoNLL/SQuAD/`datasets` data
    metrics     the scores;  plots: the figures

`finetune(task=..., model_name_or_path=..., train_file=..., output_dir=..., ...)` is the one entry point: its
keyword options are the command line's flags (`minibert finetune --help`). Importing this package is light (the
command line and `tasks` need no [train] extra); the job's names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from modeling_minibert.training.finetuning.arguments import TRAINING_DEFAULTS, add_cli, training_arguments
from modeling_minibert.training.finetuning.tasks import TASKS, load_task
from modeling_minibert.utils.outputs import CONFUSION_FILE, CURVES_FILE

# Name -> the module that defines it: imported on first use (they need the [train] extra).
_LAZY = {
    "FinetuneResult": "flow",
    "finetune": "flow",
    "PREDICTIONS_FILE": "question_answering",
    "align_word_labels": "token_classification",
    "continuation_labels": "token_classification",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "CONFUSION_FILE",
    "CURVES_FILE",
    "TASKS",
    "TRAINING_DEFAULTS",
    "add_cli",
    "load_task",
    "training_arguments",
    *_LAZY,
]
