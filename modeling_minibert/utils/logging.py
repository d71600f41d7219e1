"""What a job says, and what other libraries say while it runs: transformers' bars and reports silenced where the
job says it better itself, other libraries' warnings that tell a user nothing kept out, and the one line a job
gives of what it checked before calling its work done (`say_checked`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# The logger of `say_checked`: INFO, so that Python callers see it where they ask for INFO (as optimum logs its
# export's check), and the command line prints it on success (`cli.run`, through `checks_said`).
CHECKS_LOGGER = "modeling_minibert.checks"
logger = logging.getLogger(__name__)


@contextmanager
def transformers_bars_off() -> Iterator[None]:
    """transformers' own progress bars ("Loading weights", "Writing model shards") off for the body, and restored:
    inside a job's bar (Trainer's, while it saves a checkpoint) a second bar is noise, and in a log its cursor
    moves stay as escape codes."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars ("Loading weights", "Writing model shards") and load report silenced for the
    body, and restored: the run says in one line what a load leaves out (`Objective.check_source`), and its own
    bar is the one to watch."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with transformers_bars_off():
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def say_missing_weights(model, loading: dict, source: object, new_head: bool = False) -> None:
    """One warning line, ours, in place of transformers' load report (a page on every load, silenced by
    `quiet_transformers`), for what matters in it: weights of `model` that `source` did not hold, which start from
    random values. With `new_head` (a fine-tuning run's new classifier) the head's own are expected to; weights the
    checkpoint holds and `model` does not use (a pretraining head) are expected too."""
    prefix = f"{model.base_model_prefix}."
    missing = sorted(key for key in loading.get("missing_keys", ()) if not new_head or key.startswith(prefix))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        logger.warning(
            "%s holds no weights for %d parameter(s) of %s, which start from random values: %s",
            source,
            len(missing),
            type(model).__name__,
            shown,
        )


def say_checked(message: str) -> None:
    """One line saying what a job checked before calling its work done (an export's largest difference against
    PyTorch, a converted folder loaded back): its command prints it once the job has succeeded."""
    logging.getLogger(CHECKS_LOGGER).info(message)


@contextmanager
def checks_said() -> Iterator[list[str]]:
    """The `say_checked` lines of the body, collected in order (the logger's level restored after)."""
    checks, lines = logging.getLogger(CHECKS_LOGGER), []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler, level = Collect(logging.INFO), checks.level
    checks.addHandler(handler)
    checks.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        checks.removeHandler(handler)
        checks.setLevel(level)


@contextmanager
def unsaid(logger: str, *beginnings: str) -> Iterator[None]:
    """The records of `logger` whose message begins with one of `beginnings` dropped for the body: one warning
    known to tell a user nothing, where the logger's others may matter."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(beginnings)

    target = logging.getLogger(logger)
    target.addFilter(keep)
    try:
        yield
    finally:
        target.removeFilter(keep)


@contextmanager
def checks_unsaid() -> Iterator[None]:
    """`say_checked` silent for the body: a step of another job (a conversion inside an export) says nothing of
    its own; the job says what it checked."""
    checks = logging.getLogger(CHECKS_LOGGER)
    disabled, checks.disabled = checks.disabled, True
    try:
        yield
    finally:
        checks.disabled = disabled


@contextmanager
def quiet_libraries(*loggers: str) -> Iterator[None]:
    """Other libraries' chatter silenced for the body, where the job's own check says what matters: their Python
    warnings, the `loggers` named below ERROR, and whatever reaches the root logger unhandled (a library that
    calls `logging.warning` would otherwise also give the root logger a handler for the rest of the process).
    Errors still show; everything is restored after."""
    named = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in named]
    root, sink = logging.getLogger(), logging.NullHandler()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in named:
            logger.setLevel(logging.ERROR)
        root.addHandler(sink)
        try:
            yield
        finally:
            root.removeHandler(sink)
            for logger, level in zip(named, levels):
                logger.setLevel(level)
