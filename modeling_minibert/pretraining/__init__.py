"""Pretraining a Mini-BERT: MLM + NSP on raw text, from scratch or from a saved model; `minibert pretrain`.

    arguments.py   PretrainingArguments (the API) and the `minibert pretrain` flags built from it
    data.py        raw text -> documents -> NSP pairs -> masked batches
    run_folder.py  the output folder: checkpoints, results, metrics history, lock, fault recovery
    loop.py        `pretrain`: the flat training loop
"""

from modeling_minibert.pretraining.arguments import PretrainingArguments, add_cli
from modeling_minibert.pretraining.loop import pretrain

__all__ = ["PretrainingArguments", "add_cli", "pretrain"]
