"""The README's runnable blocks and its result tables, for tests/test_readme.py and for refreshing the tables.

Result tables: a line `<!-- results: benchmarks/results/NAME.json SCRIPT -->` is followed by a Markdown table that
is `readme_table(results)` of the script `benchmarks/SCRIPT.py` (or `SCRIPT.py` when it names a folder, as
`tools/mutation`) on that committed results file, so a
figure cannot drift from its run. After a benchmark run, `python tools/readme.py` rewrites every such table.

Runnable blocks: every ```bash and ```python block runs (tests/test_readme.py), in order, from the root of a
fresh copy of the repository, except a block right after a line `<!-- readme-test: skip REASON -->`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RESULTS_MARKER = re.compile(r"<!-- results: (\S+) (\S+) -->")
SKIP_MARKER = re.compile(r"<!-- readme-test: skip (.+?) -->")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    skip: str | None  # the reason, for a block not to run


def blocks(text: str) -> list[Block]:
    """Fenced code blocks of a Markdown text, with their skip reasons."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        previous = lines[start - 1] if start else ""
        skip = SKIP_MARKER.search(previous)
        found.append(Block(match.group(1), "\n".join(body) + "\n", start + 1, skip.group(1) if skip else None))
        i += 1
    return found


def benchmark_module(script: str):
    """Import a script by path: `NAME` is benchmarks/NAME.py, `FOLDER/NAME` is FOLDER/NAME.py (benchmarks/ is not a
    package; its scripts import each other, so it goes on sys.path)."""
    folder = str(REPO / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    path = REPO / f"{script}.py" if "/" in script else REPO / "benchmarks" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(Path(script).name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result_tables(text: str) -> list[tuple[int, str, str, str]]:
    """(line, results file, script, the table as written) for every results marker."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = RESULTS_MARKER.search(line)
        if not match:
            continue
        table = []
        for following in lines[i + 1 :]:
            if not following.startswith("|"):
                break
            table.append(following)
        found.append((i + 1, match.group(1), match.group(2), "\n".join(table)))
    return found


def rendered(results_file: str, script: str) -> str:
    results = json.loads((REPO / results_file).read_text())
    return benchmark_module(script).readme_table(results)


def refresh(text: str) -> str:
    """`text` with every results table rendered anew from its results file."""
    for _, results_file, script, written in result_tables(text):
        marker = f"<!-- results: {results_file} {script} -->"
        new = rendered(results_file, script)
        text = text.replace(marker + "\n" + written, marker + "\n" + new, 1) if written else text.replace(
            marker + "\n", marker + "\n" + new + "\n", 1
        )
    return text


if __name__ == "__main__":
    README.write_text(refresh(README.read_text()))
    print(f"refreshed {len(result_tables(README.read_text()))} result tables in {README}")
