"""The `minibert` command line: one sub-command per job, each a thin wrapper over a Python function.

Every job module exposes `add_cli(subparsers)`, which adds its sub-command(s) and sets
`func` (called with the parsed `argparse.Namespace`) as the parser default.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands, in the order `minibert --help` lists them.
JOB_MODULES = [
    "tokenization.training",
    "modeling_minibert.convert_bert",
    "modeling_minibert.pretraining",
    "modeling_minibert.finetuning",
    "modeling_minibert.fill_mask",
    "modeling_minibert.export_onnx",
    "modeling_minibert.hub",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibert", description="Mini-BERT: train, fine-tune, convert, share.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in JOB_MODULES:
        importlib.import_module(name).add_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        # Bad input is the user's to fix: say what is wrong without a traceback.
        print(f"minibert {args.command}: error: {err}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
