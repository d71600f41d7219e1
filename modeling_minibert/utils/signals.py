"""SIGINT (Ctrl-C) and SIGTERM (a scheduler preempting a job) as an exception the job can clean up after.

Python's default for SIGTERM ends the process on the spot: no `finally`, no `with` block's exit, so temporary
folders and a run's lock stay behind. A job that handles both (`handled`) stops by `JobInterrupted`, a
`KeyboardInterrupt` whose message says what was kept; `minibert` prints it in one line and exits 128 + the
signal's number. The training jobs keep the step in progress first (`training/finetuning/signals.py`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class JobInterrupted(KeyboardInterrupt):
    """A job stopped by SIGINT or SIGTERM; the message says what was kept and how to continue."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


def stop_at_once(what: str) -> Callable[[int, Any], None]:
    """A handler that stops the job at once: `JobInterrupted` saying `what` (what is kept, or not)."""

    def handler(signum: int, frame: Any) -> None:
        raise JobInterrupted(signum, f"stopped by {signal.Signals(signum).name}: {what}")

    return handler


@contextmanager
def handled(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT and SIGTERM handled by `handler` for the body (in the main thread only: Python delivers signals
    there), then the handlers there were before: a notebook that calls the job keeps its own."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, previous in handlers.items():
            signal.signal(signum, previous)


__all__ = ["JobInterrupted", "STOP_SIGNALS", "handled", "stop_at_once"]
