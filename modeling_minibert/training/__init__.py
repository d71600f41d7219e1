"""Training: the three jobs that make a model, each a sub-package.

    pretraining/    `pretrain`: raw text -> a Mini-BERT; its objectives (MLM + NSP, MLM, ELECTRA, general
                    distillation from a teacher) in `pretraining/objectives/`, one module each
    finetuning/     `finetune`: a checkpoint -> a task model with transformers' `Trainer`; its tasks in
                    `finetuning/tasks/`, one module each
    distillation/   `distill`: a fine-tuned teacher's predictions (or a sentence-transformers teacher's
                    embeddings) -> a small student, built on fine-tuning

The jobs' functions are imported on first use (they need the [train] extra):

    from modeling_minibert.training import pretrain, finetune, distill
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "pretraining": ("pretrain", "PretrainingArguments"),
        "finetuning": ("finetune", "FinetuneArguments"),
        "distillation": ("distill", "DistillationArguments"),
    },
)
