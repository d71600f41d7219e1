"""The size limits, measured: functions of the installed package over 80 lines, source files over 600.

    .venv/bin/python tools/code_size.py [--longest 10]

A function's length is its `def` line to its last line (decorators, docstring and comments included), as a reader
scrolls it. Exits 1 when a limit is broken, so CI or a hook can run it; modeling_minibert.py (the model, one file
in data-flow order like transformers' modeling_bert.py) is the one file allowed past 600 lines.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "modeling_minibert"
FUNCTION_LIMIT, FILE_LIMIT = 80, 600
FILE_EXCEPTIONS = {"modeling_minibert/modeling_minibert.py"}
SOURCE_FOLDERS = ("modeling_minibert", "tokenization", "tools", "examples", "benchmarks", "lab")


def function_lengths(folder: Path) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method under `folder`."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(
                    (node.end_lineno - node.lineno + 1, f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
                )
    return sorted(found, reverse=True)


def file_lengths() -> list[tuple[int, str]]:
    files = [p for folder in SOURCE_FOLDERS for p in (REPO / folder).rglob("*.py")]
    return sorted(
        ((len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(REPO))) for p in files), reverse=True
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--longest", type=int, default=10, help="how many of the longest functions to list")
    args = parser.parse_args()
    functions = function_lengths(PACKAGE)
    long_functions = [f for f in functions if f[0] > FUNCTION_LIMIT]
    long_files = [f for f in file_lengths() if f[0] > FILE_LIMIT and f[1] not in FILE_EXCEPTIONS]
    print(f"functions in modeling_minibert/: {len(functions)}; over {FUNCTION_LIMIT} lines: {len(long_functions)}")
    for lines, where in functions[: args.longest]:
        print(f"  {lines:4d}  {where}")
    print(f"source files over {FILE_LIMIT} lines (besides modeling_minibert.py): {len(long_files)}")
    for lines, where in long_files:
        print(f"  {lines:4d}  {where}")
    return 1 if long_functions or long_files else 0


if __name__ == "__main__":
    sys.exit(main())
