"""Pretraining a Mini-BERT on raw text, from scratch or from a saved model; `minibert pretrain`.

    arguments.py    PretrainingArguments (the API) and the `minibert pretrain` flags built from it
    data.py         raw text -> documents -> NSP pairs -> masked batches
    objectives.py   what is trained: `Objective` (model, batch, losses, metrics, curves); MLM + NSP, MLM alone
    loop.py         `pretrain`: checks, then the flat training loop, checkpoints and the saved model
    run_folder.py   the output folder: run identity, checkpoints, metrics history, curves, fault recovery
    session.py      what a run sets in its process and gives back: threads (by how busy the cores are), signals
    time_budget.py  `--max_time`: minutes turned into steps for the schedule
"""

from modeling_minibert.training.pretraining.arguments import PretrainingArguments, add_cli
from modeling_minibert.training.pretraining.loop import pretrain
from modeling_minibert.training.pretraining.objectives import OBJECTIVES, Objective
from modeling_minibert.training.pretraining.session import TrainingInterrupted

__all__ = ["OBJECTIVES", "Objective", "PretrainingArguments", "TrainingInterrupted", "add_cli", "pretrain"]
