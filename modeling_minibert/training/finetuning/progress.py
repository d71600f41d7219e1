"""Trainer's progress bars as a log keeps them: the evaluation's bar inside the training bar only on a terminal.

tqdm draws a bar inside another by moving the cursor up and down (`ESC[A`); a terminal redraws, a log file keeps
the codes. Where the job's errors go is not a terminal (a log, CI, `2> file`), an evaluation during training says
itself by its logged line alone, as Trainer's `PrinterCallback` would, while the training bar goes on.
"""

from __future__ import annotations

import sys
from typing import Any

from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ProgressCallback


class ProgressBars(ProgressCallback):
    """`ProgressCallback` without the nested evaluation bar where stderr is not a terminal."""

    def on_prediction_step(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        eval_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        if self.training_bar is not None and not sys.stderr.isatty():
            return
        super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)


def use_progress_bars(trainer: Trainer) -> None:
    """Trainer's terminal `ProgressCallback` (it adds one unless `disable_tqdm`) replaced by `ProgressBars`; a
    notebook's own bars are left as they are."""
    for callback in list(trainer.callback_handler.callbacks):
        if type(callback) is ProgressCallback:
            trainer.callback_handler.remove_callback(callback)
            trainer.add_callback(ProgressBars())


__all__ = ["ProgressBars", "use_progress_bars"]
