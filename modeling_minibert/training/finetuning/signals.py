"""SIGINT (Ctrl-C) and SIGTERM (a scheduler preempting the job) during a Trainer job: the step in progress is kept.

While Trainer trains, a stop signal is only noted (`StopRequest`); once the step in progress ends, `StopOnSignal`
has Trainer save a checkpoint of it, then stops the job with `JobInterrupted`, whose one line names the checkpoint
and says how to continue (`--resume_from_checkpoint`). Outside training (reading data, labelling with a teacher,
scoring, saving the final folder), or at a second signal, the job stops at once, saying what is kept. `minibert`
prints the line and exits 128 + the signal's number; the run's folder is released on the way out.

Pretraining does the same in its own loop (`training/pretraining/session.py`); Trainer needs a callback instead,
as its loop is Trainer's: the checkpoint is Trainer's own (`_save_checkpoint`, asked for through
`control.should_save`), so a resume restores its optimizer, scheduler, RNG states and place in the data exactly.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from modeling_minibert.utils.outputs import CHECKPOINT_PREFIX, checkpoint_folders
from modeling_minibert.utils.signals import JobInterrupted, handled

RESUME = "continue with --resume_from_checkpoint"


class StopRequest:
    """The signal handler of a job's folder (`stop_signals`): noted while Trainer trains (`training`), else (and
    at a second signal) the job stops at once."""

    def __init__(self, output: Path):
        self.output = output
        self.signal: int | None = None
        self.training = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.training and self.signal is None:
            self.signal = signum
            return
        kept = [folder.name for _, folder in checkpoint_folders(self.output)]
        left = f"the newest checkpoint is {kept[-1]}; {RESUME}" if kept else f"nothing was kept in {self.output}"
        raise JobInterrupted(signum, f"stopped by {signal.Signals(signum).name} at once: {left}")


_ACTIVE: list[StopRequest] = []  # the jobs in progress in this process, innermost last (a teacher's run in distill)


@contextmanager
def stop_signals(output: Path) -> Iterator[StopRequest]:
    """SIGINT and SIGTERM handled by a `StopRequest` for the body (`utils.signals.handled`)."""
    request = StopRequest(output)
    _ACTIVE.append(request)
    try:
        with handled(request):
            yield request
    finally:
        _ACTIVE.remove(request)


def anyone_stopping(here: bool, args: TrainingArguments) -> bool:
    """Whether a signal reached this process or, in a distributed run, any of them: every process must save the
    same step and stop there together (one alone would wait for the others at the next collective)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return here
    flag = torch.tensor([float(here)], device=args.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


class StopOnSignal(TrainerCallback):
    """Trainer's side of the innermost `stop_signals`: after a signal, the step in progress ends with a checkpoint
    (Trainer's own save, before `StopOnNonFinite` checks what it saves), then `JobInterrupted`. `resumable`: what
    to say about continuing (a learning-rate search is run again instead)."""

    def __init__(self, resumable: bool = True):
        self.request = _ACTIVE[-1] if _ACTIVE else None
        self.resumable = resumable

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.request is not None:
            self.request.training = True

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.request is not None:
            self.request.training = False

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.request is not None and anyone_stopping(self.request.signal is not None, args):
            self.request.signal = (
                self.request.signal or signal.SIGTERM
            )  # a peer process's signal, in a distributed run
            control.should_save = True

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.request is None or self.request.signal is None:
            return
        self.request.training = False  # a second signal from here on stops at once
        saved = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
        then = RESUME if self.resumable else "a learning_rates search is not resumed: run it again"
        raise JobInterrupted(
            self.request.signal,
            f"stopped by {signal.Signals(self.request.signal).name} after step "
            f"{state.global_step}: saved {saved}; {then}",
        )


__all__ = ["StopOnSignal", "StopRequest", "stop_signals"]
