"""Pretraining's optimizer and learning-rate schedule: AdamW's parameter groups as BERT has them, and transformers'
schedules rebuilt for a total that may change during the run."""

from __future__ import annotations

import torch
from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType

from modeling_minibert.training.pretraining.arguments import PretrainingArguments


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (as BERT)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim < 2 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_schedule(optimizer: torch.optim.Optimizer, args: PretrainingArguments, total_steps: int, step: int):
    """transformers' schedule `lr_scheduler_type` for `total_steps` optimizer steps, standing at `step`.

    Built again whenever the total changes (a resume with a new max_steps, the time budget's fit): a torch
    scheduler is a function of (step, total), and `last_epoch` places a new one at the step. Not
    `get_scheduler`, which passes `last_epoch` to some schedule types and not others; not prepared by
    Accelerate, which would checkpoint a state that is only the step.
    """
    schedule = TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(args.lr_scheduler_type)]
    for group in optimizer.param_groups:
        # Where a scheduler places itself from: FSDP's optimizer checkpoints (`load_state`) leave it out.
        group.setdefault("initial_lr", args.learning_rate)
    kwargs = {"num_warmup_steps": min(args.warmup_steps, total_steps), "last_epoch": step - 1}
    if args.lr_scheduler_type in ("linear", "cosine"):
        kwargs["num_training_steps"] = total_steps
    return schedule(optimizer, **kwargs)


__all__ = ["build_schedule", "param_groups"]
