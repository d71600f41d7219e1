"""How a recipe takes its options: `HfArgumentParser` over its dataclass, as every `minibert` command does."""

from __future__ import annotations

import argparse
from typing import TypeVar

from transformers import HfArgumentParser

T = TypeVar("T")


def parse_options(cls: type[T], argv: list[str] | None, module: str, doc: str | None) -> T:
    """The options of the recipe `module` (its `__spec__.name`) as its dataclass `cls`, with `doc` as --help's text.
    argparse's own `parse_args`: an unknown option is a one-line usage error (exit 2), as in every command."""
    built = HfArgumentParser(
        cls,
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    return cls(**vars(built.parse_args(argv)))
