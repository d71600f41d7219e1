"""Non-finite values (NaN, infinity) that stop a job: the one error every job raises for them, and the cheap checks
that find them in weights, losses and cached targets.

A run whose loss or weights become NaN keeps "training" without a complaint: every later step is NaN too, and the
saved model predicts one class for everything. Each job checks where it costs least (the loss it already reads at
its logging steps, the weights before each save, a teacher's weights and outputs before they teach) and stops with
`NonFiniteError`, naming the step and the likely cause, before anything non-finite is saved as its result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch


class NonFiniteError(FloatingPointError, ValueError):
    """A loss, weights or targets became NaN or infinite: one line naming where, at which step, and the likely
    cause. A FloatingPointError, and a ValueError so that `minibert` says it in one line (exit 2), as every
    other refusal of what the user gave (a learning rate, a teacher, a cache file)."""


def non_finite_names(tensors: Iterable[tuple[str, torch.Tensor]]) -> tuple[list[str], int]:
    """The names of the floating-point tensors that hold a NaN or an infinity, and how many tensors were looked at.

    One device sync for all of them (the flags are stacked before they are read), not one per tensor."""
    names, flags = [], []
    for name, tensor in tensors:
        tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor: this process's shard
        if tensor.is_floating_point() and tensor.numel():
            names.append(name)
            flags.append(torch.isfinite(tensor.detach()).all())
    if not flags:
        return [], 0
    finite = torch.stack([flag.to(flags[0].device) for flag in flags]).tolist()
    return [name for name, ok in zip(names, finite) if not ok], len(names)


def describe(bad: list[str], total: int, kind: str = "tensor") -> str:
    """'3 of 57 tensors, the first: encoder.layer.0.attention.query.weight'."""
    return f"{len(bad)} of {total} {kind}{'s' if total != 1 else ''}, the first: {bad[0]}"


def weights_problem(model: torch.nn.Module) -> str | None:
    """None if every floating-point parameter and buffer of `model` is finite, else which are not (`describe`)."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    bad, total = non_finite_names(tensors)
    return describe(bad, total) if bad else None


def check_finite_weights(model: torch.nn.Module, what: str, cause: str) -> None:
    """NonFiniteError "`what` has non-finite weights (...): `cause`" unless every weight of `model` is finite."""
    problem = weights_problem(model)
    if problem is not None:
        raise NonFiniteError(f"{what} has non-finite weights ({problem}): {cause}")


def non_finite_values(values: Mapping[str, object], keys: Iterable[str] | None = None) -> dict[str, float]:
    """The numbers among `values` (those of `keys`, or all) that are NaN or infinite."""
    chosen = values if keys is None else {k: values[k] for k in keys if k in values}
    return {
        k: v
        for k, v in chosen.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v)
    }


def non_finite_rows(rows: Iterable[torch.Tensor] | torch.Tensor) -> tuple[int, int, int | None]:
    """How many of `rows` (one tensor per example, or a tensor's rows) hold a NaN or an infinity, of how many, and
    the first one's index."""
    if isinstance(rows, torch.Tensor):
        finite = torch.isfinite(rows.reshape(len(rows), -1)).all(1).tolist() if len(rows) else []
    else:
        rows = list(rows)
        finite = torch.stack([torch.isfinite(r).all() for r in rows]).tolist() if rows else []
    if not finite:
        return 0, 0, None
    bad = [i for i, ok in enumerate(finite) if not ok]
    return len(bad), len(finite), bad[0] if bad else None


def learning_rate_cause(learning_rate: float, flag: str = "--learning_rate") -> str:
    """The likely cause of a run that diverged, for its message."""
    return f"the learning rate {learning_rate:g} is likely too high (lower {flag})"


def last_checkpoint_note(checkpoint: Path | None) -> str:
    """What a stopped run leaves to continue from, for the end of its message."""
    if checkpoint is None:
        return "nothing was saved as the model, and no checkpoint before this step"
    return f"nothing was saved as the model; the last good checkpoint, {checkpoint}, is kept"


__all__ = [
    "NonFiniteError",
    "check_finite_weights",
    "describe",
    "last_checkpoint_note",
    "learning_rate_cause",
    "non_finite_names",
    "non_finite_rows",
    "non_finite_values",
    "weights_problem",
]
