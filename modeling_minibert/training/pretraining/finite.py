"""Pretraining stops when its loss or weights become non-finite (`utils.finite.NonFiniteError`), before anything
non-finite is checkpointed or saved as the model; the loop calls these where it costs least:

    check_teacher    an objective's teacher (general distillation), right after it is loaded: before the run
                     folder is written and before the student is made from it
    check_start      the model to train, once built (a broken checkpoint continued)
    check_record     each logged training record and evaluation (their sums are already read back: no extra sync)
    check_weights    the weights before each checkpoint, so the newest checkpoint is always a good one (and the
                     final model, saved from the last step's weights, too)

Every process of a distributed run reaches the same verdict: the logged numbers are reduced over the processes,
and each process's count of non-finite weights is summed before anyone raises.
"""

from __future__ import annotations

from typing import Any

import torch

import modeling_minibert.training.pretraining.run_folder as run_folder
import modeling_minibert.utils.outputs as outputs
from modeling_minibert.utils.finite import (
    NonFiniteError,
    check_finite_weights,
    describe,
    last_checkpoint_note,
    learning_rate_cause,
    non_finite_names,
    non_finite_values,
    weights_problem,
)


def stopped(run: Any, what: str, step: int, detail: str = "") -> NonFiniteError:
    """The one-line error: what, at which step (`detail`: which values), the likely cause and the checkpoint left
    to continue from."""
    checkpoint = outputs.latest_checkpoint(run.out, run_folder.checkpoint_problem)
    where = f"at step {step}" + (f" ({detail})" if detail else "")
    return NonFiniteError(
        f"{what} {where}: {learning_rate_cause(run.args.learning_rate)}; {last_checkpoint_note(checkpoint)}"
    )


def check_teacher(objective: Any) -> None:
    """The objective's teacher (`objective.teacher.model`, where it has one) has finite weights."""
    teacher = getattr(objective, "teacher", None)
    if getattr(teacher, "model", None) is not None:
        check_finite_weights(
            teacher.model,
            f"the teacher {teacher.name}",
            "a non-finite teacher cannot teach; fix it or use another (nothing was written)",
        )


def check_start(model: torch.nn.Module, source: Any) -> None:
    """The model about to be trained has finite weights (a fresh one always does; a continued one may not)."""
    problem = weights_problem(model)
    if problem is not None:
        raise NonFiniteError(
            f"the model to train has non-finite weights before step 1 ({problem}): the model it "
            f"starts from ({source or 'a new model'}) is broken; nothing was trained"
        )


def check_record(run: Any, record: dict) -> None:
    """Every loss of a metrics record (training: loss, mlm_loss, ...; held-out: eval_loss, ...) is finite."""
    bad = non_finite_values(record, [key for key in record if key.endswith("loss")])
    if bad:
        key, value = next(iter(bad.items()))
        name = {"loss": "the training loss", "eval_loss": "the held-out loss"}.get(key, key)
        raise stopped(run, f"{name} is {value}", record["step"])


def check_weights(run: Any, model: torch.nn.Module, step: int) -> None:
    """Every weight is finite, on every process, before the checkpoint of `step` is written."""
    bad, total = non_finite_names(model.named_parameters())
    accelerator = run.accelerator
    if accelerator.num_processes > 1:  # sharded weights (FSDP): every process must stop, or none
        count = accelerator.reduce(torch.tensor(float(len(bad)), device=accelerator.device), "sum")
        if count.item() and not bad:
            raise stopped(run, "the weights are not finite on another process", step)
    if bad:
        raise stopped(run, "the weights are not finite", step, describe(bad, total))


__all__ = ["check_record", "check_start", "check_teacher", "check_weights"]
