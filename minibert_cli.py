"""The `minibert` command's entry point: `modeling_minibert.cli.main`, with Ctrl-C during start-up as one line.

Importing the package takes seconds (torch, transformers), and a Ctrl-C then raises KeyboardInterrupt inside an
import, before `cli.main` can catch anything: Python printed a traceback of torch's import machinery. This module
imports nothing heavy itself, so the console script (and `python -m minibert_cli`) catches it here: `minibert:
interrupted`, exit 130 (128 + SIGINT), and nothing is written (no job has started). Once `cli.main` runs, it
handles interruptions itself, naming the command.
"""

from __future__ import annotations

import importlib
import signal
import sys


def main() -> int:
    try:
        cli = importlib.import_module("modeling_minibert.cli")
    except KeyboardInterrupt as err:  # once cli.main runs, it catches its own
        print(f"minibert: {str(err) or 'interrupted'}", file=sys.stderr)
        forget_interrupt()
        return 128 + getattr(err, "signum", signal.SIGINT)
    return cli.main()


def forget_interrupt() -> None:
    """`modeling_minibert.utils.commands.forget_interrupt`, which this module cannot import (it is what was
    interrupted): CPython marks a KeyboardInterrupt raised inside code an extension runs with `PyRun_String`
    unhandled for good, and then kills itself with SIGINT at exit (exit code -2, not 130); running code the same
    way clears the mark."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError, OSError):  # not CPython: no such mark
        pass


if __name__ == "__main__":
    sys.exit(main())
