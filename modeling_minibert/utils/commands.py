"""The one way a `minibert` command is wired: `HfArgumentParser` over the job's dataclasses.

A job declares its `CommandLine` beside its arguments, in a module that imports nothing of its optional extra, so
that `minibert CMD --help` works on a plain install:

    CommandLine(arguments=(ConvertBertArguments,), help="...", description="...",
                report=lambda path, options: f"wrote {path}")

The flags are the dataclasses' field names (`--model_name_or_path`, `--output_dir`, `--overwrite_output_dir`; dashes
or underscores alike, never abbreviated), and the job's Python function takes the very same names as keyword
options: `cli.py` parses the flags with `keywords` and calls the function with them. What the command prints on
success is `report(result, options)`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers import HfArgumentParser


class ArgumentParser(HfArgumentParser):
    """HfArgumentParser whose errors (an unknown flag, a missing one, a bad choice) are one line, as every other
    refusal of the command line is: a ValueError that `cli.main` prints as `minibert CMD: error: ...` (exit 2),
    instead of argparse's usage block."""

    def error(self, message: str):
        raise ValueError(f"{message} (see {self.prog} --help)")


class HelpFormatter(argparse.HelpFormatter):
    """Shows a default after the help only where it tells something: not None or False, not already said."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, argparse.SUPPRESS, False) or "default" in text or not action.option_strings:
            return text
        if action.option_strings[0].startswith("--no_"):
            return text
        default = " ".join(map(str, action.default)) if isinstance(action.default, list) else action.default
        return f"{text} (default: {default})"


@dataclass(frozen=True)
class CommandLine:
    """A job as `minibert` shows it: its dataclasses become the flags; `defaults` are parser defaults over the
    dataclasses' own; `renamed` maps an old spelling to the flag that replaced it, for a one-line hint."""

    arguments: tuple[type, ...]
    help: str
    description: str
    # What a successful run prints, from the function's result and the keyword options it was given.
    report: Callable[[Any, dict[str, Any]], str] = lambda result, options: ""  # noqa: E731
    defaults: dict[str, Any] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    positionals: str = ""  # the hint for words without a flag, where 0.1 took positional arguments
    # Exceptions that are the outside world's failure, not the user's input (the Hub, the network): one line, exit 1.
    failures: tuple[type[BaseException], ...] = ()

    def parser(self, prog: str) -> HfArgumentParser:
        # No abbreviations: `--overwrite` must not silently stand for `--overwrite_output_dir`.
        parser = ArgumentParser(
            self.arguments, prog=prog, description=self.description, formatter_class=HelpFormatter, allow_abbrev=False
        )
        parser.set_defaults(**self.defaults)
        return parser

    def options(self, prog: str, argv: list[str]) -> dict[str, Any]:
        """The job function's keyword options for the command-line words `argv` (--help exits here; a bad flag is
        a one-line ValueError)."""
        return self.keywords(self.parser(prog).parse_args(argv))

    def keywords(self, namespace: argparse.Namespace) -> dict[str, Any]:
        """The job function's keyword options: every field of the dataclasses, as parsed."""
        return {
            f.name: getattr(namespace, f.name) for cls in self.arguments for f in dataclasses.fields(cls) if f.init
        }

    def old_spelling(self, argv: list[str]) -> str | None:
        """A one-line hint for the first word of `argv` that is an old spelling of a flag, else None."""
        for word in argv:
            flag = word.split("=", 1)[0]
            if flag in self.renamed:
                return f"{flag} is now {self.renamed[flag]}"
        return None


def check_list_option(name: str, value: object) -> None:
    """TypeError in one line for a bare string given where a list is meant (Python's API; the command line makes
    lists itself): iterated, it would be read as its characters."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name}={value!r} is one {type(value).__name__}: pass a list ({name}=[{value!r}])")


def forget_interrupt() -> None:
    """Tell CPython that a KeyboardInterrupt the command caught was handled. One raised inside code an extension
    runs with `PyRun_String` (pybind11's `exec`, as torch's imports do) marks it unhandled for good, and the
    interpreter then kills itself with SIGINT at exit, whatever exit code the command asked (130 became -2).
    Running any code the same way clears the mark."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError, OSError):  # not CPython: no such mark
        pass


__all__ = ["ArgumentParser", "CommandLine", "HelpFormatter", "check_list_option", "forget_interrupt"]
