"""`--max_time`: a time budget for a pretraining run, turned into a number of steps for the schedule."""

from __future__ import annotations

import time

import torch
from accelerate import Accelerator


class TimeBudget:
    """`--max_time`: train for a number of minutes, with the learning-rate schedule fitted to them.

    A schedule that decays to zero must know where the end is, so the budget is turned into a number of steps:
    after the first `FIT_AFTER` steps of the session, the seconds per step are measured (the first step, which
    pays for one-off allocations, is left out) and the total is set to the steps done plus the steps that fit in
    the time left, capped at `max_steps`; the schedule is then rebuilt for that total (`optimization.build_schedule`).
    The estimate is refreshed after every evaluation and checkpoint, with the time they took counted in, and the
    time the last evaluation and checkpoint took is kept in reserve for the final ones. Whatever the estimate,
    training stops once the budget is spent, then evaluates and saves as at the end of any run.
    A resumed run gets a new budget of `max_time` minutes for its session.
    """

    FIT_AFTER = 10

    def __init__(self, minutes: float, start_step: int):
        self.start_step = start_step
        self.begin = time.perf_counter()
        self.deadline = self.begin + minutes * 60
        self.first_step_done: float | None = None
        self.reserve = 0.0  # seconds the final evaluation and checkpoint will take
        self.eval_seconds = self.save_seconds = 0.0
        self.refresh = False

    def spent_on_eval(self, seconds: float) -> None:
        self.eval_seconds, self.refresh = seconds, True

    def spent_on_save(self, seconds: float) -> None:
        self.save_seconds, self.refresh = seconds, True

    def fit(self, done: int, max_steps: int, accelerator: Accelerator) -> int:
        """The total number of steps for the schedule, seen after step `done`; `done` itself means stop now."""
        now = time.perf_counter()
        if self.first_step_done is None:
            self.first_step_done = now
        self.reserve = self.eval_seconds + self.save_seconds
        # Every process must agree on when to stop; the main process's clock decides.
        stop = torch.tensor(float(now + self.reserve >= self.deadline), device=accelerator.device)
        if accelerator.num_processes > 1:
            stop = accelerator.reduce(stop, "max")
        if stop.item():
            return done
        measured = done - self.start_step - 1
        if measured < self.FIT_AFTER - 1 or not (measured == self.FIT_AFTER - 1 or self.refresh):
            return getattr(self, "total", max_steps)
        self.refresh = False
        seconds_per_step = (now - self.first_step_done) / measured
        fits = int((self.deadline - now - self.reserve) / seconds_per_step)
        total = torch.tensor(float(min(max_steps, done + max(fits, 1))), device=accelerator.device)
        if accelerator.num_processes > 1:
            total = accelerator.reduce(total, "min")
        self.total = int(total.item())
        return self.total
