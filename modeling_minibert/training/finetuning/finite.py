"""Trainer-based jobs (fine-tuning, task and embedding distillation, a teacher's fine-tuning) stop when their loss
or weights become non-finite: `StopOnNonFinite`, a `TrainerCallback`, raises `NonFiniteError` before Trainer saves
a checkpoint or the job saves a model with NaN in it.

Trainer itself lets a NaN run finish: its `logging_nan_inf_filter` (on by default) replaces a non-finite step's
loss by the average of the others, so an all-NaN run reports `train_loss: 0.0`; `training_arguments` turns the
filter off where the caller did not set it, and this callback reads what Trainer logs anyway. Where it looks:

    on_train_begin      the weights the run starts from (a broken starting checkpoint)
    on_log              the losses Trainer logs: the training loss at its logging steps (one device sync per
                        logging step, which Trainer makes anyway; none per step), train_loss at the end, and
                        each evaluation's eval_loss (logged before its checkpoint is saved)
    on_step_end/epoch   the weights, before each checkpoint Trainer is about to save (a NaN between two logging
                        steps is found before it is saved)

`check_results` checks the final model and its scores once more before the job writes its output folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from modeling_minibert.utils.finite import (
    NonFiniteError,
    last_checkpoint_note,
    learning_rate_cause,
    non_finite_values,
    weights_problem,
)
from modeling_minibert.utils.outputs import latest_checkpoint, trainer_checkpoint_problem

# The losses Trainer reports, in its logs and its evaluations, as a message names them (another *_loss: its key).
LOSS_NAMES = {
    "loss": "the training loss",
    "train_loss": "the training loss",
    "eval_loss": "the validation loss",
    "test_loss": "the test loss",
}


def last_good_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint Trainer left in `output_dir` (none is ever saved with non-finite weights)."""
    return latest_checkpoint(Path(output_dir), trainer_checkpoint_problem)


def stopped(what: str, step: int, args: TrainingArguments, detail: str = "") -> NonFiniteError:
    """The one-line error: what is not finite, at which step (`detail`: which values), the likely cause, and what
    is left to resume from."""
    problem = f"{what} at step {step}" + (f" ({detail})" if detail else "")
    error = NonFiniteError(
        f"{problem}: {learning_rate_cause(args.learning_rate)}; "
        f"{last_checkpoint_note(last_good_checkpoint(args.output_dir))}"
    )
    # The first part alone, for a caller that says it in its own words (a learning-rate search, the teacher's run).
    error.problem = problem
    return error


def non_finite_loss(values: dict[str, Any]) -> str | None:
    """'the training loss is nan' for the first non-finite loss among `values` (Trainer's logs or metrics), or None."""
    bad = non_finite_values(values, [key for key in values if key in LOSS_NAMES or key.endswith("_loss")])
    if not bad:
        return None
    key, value = next(iter(bad.items()))
    return f"{LOSS_NAMES.get(key, key)} is {value}"


class StopOnNonFinite(TrainerCallback):
    """Raise `NonFiniteError` as soon as Trainer's loss or weights are NaN or infinite (see the module docstring)."""

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        problem = weights_problem(model) if model is not None else None
        if problem is not None:
            raise NonFiniteError(
                f"the model to train has non-finite weights before step {state.global_step + 1} "
                f"({problem}): the model it starts from is broken; nothing was trained or saved"
            )

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Trainer logs its evaluations too: the validation loss is read here, before a checkpoint is saved.
        problem = non_finite_loss(logs or {})
        if problem is not None:
            raise stopped(problem, state.global_step, args)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        self.check_before_save(args, state, control, model)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None, **kwargs: Any
    ) -> None:
        self.check_before_save(args, state, control, model)

    @staticmethod
    def check_before_save(args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any) -> None:
        # DefaultFlowCallback, called before this one, has decided whether Trainer saves a checkpoint now.
        if control.should_save and model is not None:
            problem = weights_problem(model)
            if problem is not None:
                raise stopped("the weights are not finite", state.global_step, args, problem)


def check_results(model: Any, results: dict[str, dict], args: TrainingArguments, step: int) -> None:
    """Before the output folder is written: the final model's weights and every loss it reports are finite."""
    problem = weights_problem(model)
    if problem is not None:
        raise stopped("the final model's weights are not finite", step, args, problem)
    for metrics in results.values():
        problem = non_finite_loss(metrics)
        if problem is not None:
            raise stopped(f"{problem} for the final model", step, args)


__all__ = ["StopOnNonFinite", "check_results", "last_good_checkpoint"]
