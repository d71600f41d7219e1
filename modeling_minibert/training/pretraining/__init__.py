"""Pretraining a Mini-BERT on raw text, from scratch or from a saved model; `minibert pretrain`.

    arguments.py    PretrainingArguments (the API) and the `minibert pretrain` flags built from it
    data.py         raw text -> documents -> NSP pairs -> masked batches
    objectives/     what is trained, one module per objective (mlm_nsp, mlm, electra, general_distillation), and
                    the table of them (`OBJECTIVES`)
    model.py        the model a run trains: its source checked, its config, its tokenizer
    loop.py         `pretrain`: checks, then the flat training loop
    state.py        what a run holds and keeps: its checkpoints (saved, and loaded back on resume), the saved model
    run_folder.py   the output folder: run identity, checkpoints, metrics history, curves, fault recovery
    session.py      what a run sets in its process and gives back: threads (by how busy the cores are), signals
    time_budget.py  `--max_time`: minutes turned into steps for the schedule

The job's names are imported on first use (the loop needs the [train] extra).
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "loop": ("pretrain",),
        "arguments": ("PretrainingArguments",),
        "objectives": ("OBJECTIVES", "Objective"),
        "session": ("TrainingInterrupted",),
    },
)
