"""Task distillation: a fine-tuned teacher's predictions teach a pretrained Mini-BERT; `minibert distill`.

Distillation is fine-tuning with another target, so it is built on the fine-tuning job (its tasks, data checks,
output folder, results, card and plots) and holds only what fine-tuning does not:

    arguments.py     DistillationArguments: fine-tuning's options plus the teacher, the transfer set and the loss
    flow.py          `distill`: teacher -> transfer set -> labels -> student, saved as a fine-tuning run
    teacher.py       the teacher: its checks, its fine-tuning (`finetune_teacher`), its cached predictions
    transfer.py      the transfer set: training data, unlabelled texts and augmented copies
    augmentation.py  TinyBERT's copies: words replaced by the student's masked-LM predictions
    trainer.py       the loss (KL at a temperature, or MSE), the Trainer that uses it, the teacher's columns
    relations.py     a model's self-attention relations (MiniLMv2), taught beside the predictions
    embedding.py     `--task embedding`: a sentence-transformers teacher's embeddings (no labels, no logits)

    from modeling_minibert.training.distillation import distill, DistillationArguments
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "flow": ("distill",),
        "arguments": ("DistillResult", "DistillationArguments", "DISTILL_TRAINING_DEFAULTS"),
    },
)
