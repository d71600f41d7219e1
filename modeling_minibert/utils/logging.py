"""What transformers says while a job loads models: silenced where the job says it better itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars ("Loading weights", "Writing model shards") and load report silenced for the
    body, and restored: the run says in one line what a load leaves out (`Objective.check_source`), and its own
    bar is the one to watch."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
