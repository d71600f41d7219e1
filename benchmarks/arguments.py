"""How a benchmark takes its options: `HfArgumentParser` over dataclasses, as every `minibert` command does.

A benchmark of its own (a speed measurement, a plot) parses one small dataclass of its options (`parser`). A
benchmark that runs a job (fine-tuning, distillation) parses that job's own dataclasses and every
`TrainingArguments` field beside the dataclass of what is the benchmark's alone (`job_parser`): its defaults are
the job's, a job option passes through under the job's own name (`job_options`), and what the benchmark decides
itself (its task, its data) is refused on the command line in one line (`set_by_benchmark`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from transformers import HfArgumentParser

T = TypeVar("T")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help shows the script's docstring as written, and an option's default where `minibert`'s help would.

    `minibert`'s rule is imported when help is shown, not with this module: importing the package (torch,
    transformers' models) would cost a benchmark that only reads and writes files, as the GPU check's report does
    after every part, 5 of its 6 seconds."""

    def _get_help_string(self, action: argparse.Action) -> str:
        from modeling_minibert.utils.commands import HelpFormatter as MinibertHelpFormatter

        return MinibertHelpFormatter._get_help_string(self, action)


class BenchmarkParser(HfArgumentParser):
    """HfArgumentParser whose unknown options are a one-line usage error (exit 2), as argparse's own are:
    `parse_args_into_dataclasses` raises a ValueError, with its traceback, for them."""

    def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, **options):
        *parsed, remaining = super().parse_args_into_dataclasses(args, return_remaining_strings=True, **options)
        if remaining and not return_remaining_strings:
            self.error(f"unrecognized arguments: {' '.join(remaining)}")
        return (*parsed, remaining) if return_remaining_strings else tuple(parsed)


def parser(*dataclass_types: type, module: str, doc: str | None) -> HfArgumentParser:
    """The options of `dataclass_types` (a benchmark's own) of the benchmark `module` (its `__spec__.name`), with
    `doc` (its docstring) as --help's text."""
    return BenchmarkParser(
        dataclass_types, prog=f"python -m {module}", description=doc, formatter_class=HelpFormatter, allow_abbrev=False
    )


def job_parser(
    *dataclass_types: type, module: str, doc: str | None, defaults: dict[str, Any] | None = None
) -> HfArgumentParser:
    """The benchmark's dataclass and the job's (`dataclass_types`, in that order), then every `TrainingArguments`
    field with fine-tuning's defaults, as the job's own command line builds them; `defaults`: the job's own
    training defaults over fine-tuning's (distillation's epochs and learning rate), or a benchmark's recipe."""
    from modeling_minibert.training.finetuning.arguments import build_parser

    built = build_parser(
        *dataclass_types,
        prog=f"python -m {module}",
        description=doc,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    built.set_defaults(**(defaults or {}))
    return built


def parse(built: HfArgumentParser, argv: list[str] | None) -> dict[str, Any]:
    """The command line's words (default: this process's) -> {option: value}."""
    return vars(built.parse_args(argv))


def take(cls: type[T], values: dict[str, Any]) -> T:
    """The dataclass `cls` built from the parsed `values` of its fields."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: v for k, v in values.items() if k in names})


def job_options(values: dict[str, Any], job: type, job_defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keyword options to call a job with: the fields of its dataclass `job`, and the `TrainingArguments`
    fields whose parsed values differ from the job's own defaults (fine-tuning's, with `job_defaults` over them),
    which the job applies itself."""
    from modeling_minibert.training.finetuning.arguments import training_options

    return {**dataclasses.asdict(take(job, values)), **training_options(values, job_defaults)}


def set_by_benchmark(built: HfArgumentParser, values: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """`values` with `settings`: job options this benchmark decides itself (its task, its data, its folders). One
    given on the command line is refused in one line (exit 2), naming it."""
    for name in settings:
        if values.get(name) != built.get_default(name):
            built.error(f"--{name} is set by this benchmark itself; leave it out")
    return {**values, **settings}


def require(built: HfArgumentParser, values: dict[str, Any], **what: str) -> None:
    """Refuse in one line (exit 2), before any work, a run without the options `what` names (option: what it is)."""
    for name, meaning in what.items():
        if values.get(name) is None:
            built.error(f"--{name} is required ({meaning})")
