"""Fine-tune a Mini-BERT checkpoint with transformers' `Trainer`; `minibert finetune`.

Three tasks, each a module with one function over the shared flow (check data -> tokenize -> Trainer -> save):

    sequence_classification   single texts or pairs -> one label; accuracy and macro-F1
    token_classification      words -> one tag each; seqeval entity P/R/F1 for BIO tags, else accuracy
    question_answering        question + context -> answer span; SQuAD exact match and F1 (0-100)

    flow        the Trainer run and the output folder (checkpoint-N/, all_results.json, trainer_state.json, card)
    arguments   ModelArguments, DataTrainingArguments, our TrainingArguments defaults, the command line
    data        reading and checking CSV/JSON/CoNLL/SQuAD/`datasets` data
    metrics     the scores;  plots: the figures

`finetune(task=..., ...)` dispatches on the task name.
"""

from __future__ import annotations

import os
from typing import Any

from modeling_minibert.finetuning.arguments import TASKS, TRAINING_DEFAULTS, add_cli, training_arguments
from modeling_minibert.finetuning.flow import FinetuneResult
from modeling_minibert.finetuning.data import DataSource
from modeling_minibert.finetuning.plots import CONFUSION_FILE, CURVES_FILE
from modeling_minibert.finetuning.question_answering import PREDICTIONS_FILE, finetune_question_answering
from modeling_minibert.finetuning.sequence_classification import finetune_sequence_classification
from modeling_minibert.finetuning.token_classification import (
    align_word_labels,
    continuation_labels,
    finetune_token_classification,
)


def finetune(task: str, model: str | os.PathLike, train_data: DataSource, output_dir: str | os.PathLike, **kwargs: Any) -> FinetuneResult:
    """Fine-tune `model` on one of `TASKS`; the keyword arguments are those of the task's function."""
    functions = {
        "sequence-classification": finetune_sequence_classification,
        "token-classification": finetune_token_classification,
        "question-answering": finetune_question_answering,
    }
    if task not in functions:
        raise ValueError(f"unknown task {task!r}; choose one of {list(TASKS)}")
    return functions[task](model, train_data, output_dir, **kwargs)


__all__ = [
    "CONFUSION_FILE",
    "CURVES_FILE",
    "FinetuneResult",
    "PREDICTIONS_FILE",
    "TASKS",
    "TRAINING_DEFAULTS",
    "add_cli",
    "align_word_labels",
    "continuation_labels",
    "finetune",
    "finetune_question_answering",
    "finetune_sequence_classification",
    "finetune_token_classification",
    "training_arguments",
]
