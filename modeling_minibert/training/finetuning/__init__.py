"""Fine-tune a Mini-BERT checkpoint with transformers' `Trainer`; `minibert finetune`.

    arguments.py    FinetuneArguments (ModelArguments + DataTrainingArguments), our TrainingArguments defaults,
                    and the command built from them; `FinetuningOptions`, the options every job built on
                    fine-tuning shares (distill, and distill's fine-tuning of its teacher, get each)
    data.py         reading and checking CSV/JSON/CoNLL/SQuAD/`datasets` data
    windows.py      texts longer than a model reads, as overlapping windows (`doc_stride`), pooled back per text
    loading.py      the starting model's config and fast tokenizer, and the model with its new head
    task.py         what a task is (`Task`) and what it hands the flow (`Setup`)
    tasks/          the tasks, one module each, and the table of them (`TASKS`):
                      sequence_classification  single texts or pairs -> one label; accuracy and macro-F1
                      token_classification     words -> one tag each; seqeval entity P/R/F1 for BIO tags, else accuracy
                      question_answering       question + context -> answer span; SQuAD exact match and F1 (0-100)
    flow.py         `finetune`: the Trainer run and the output folder (checkpoint-N/, all_results.json, card, ...)
    metrics.py      the scores;  plots.py: the figures

`finetune(task=..., model_name_or_path=..., train_file=..., output_dir=..., ...)` is the one entry point: its
keyword options are the command line's flags (`minibert finetune --help`). Importing this package is light; the
job's names are imported on first use (they need the [train] extra).
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "flow": ("finetune",),
        "arguments": ("FinetuneResult", "FinetuneArguments", "TRAINING_DEFAULTS", "training_arguments"),
        "tasks": ("TASKS", "load_task"),
        "task": ("Task",),
    },
)
