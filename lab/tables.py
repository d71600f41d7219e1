"""The lab notebook's results tables (lab/README.md), each rendered from its committed results files.

The markers are the README's (tools/readme.py): `<!-- results: FILE [FILE ...] RENDERER -->`, where RENDERER is
`lab/NAME[:FUNCTION]` for a lab module's renderer and `NAME` or `benchmarks/NAME[:FUNCTION]` for a benchmark's
(benchmarks/tables.py). After a lab run:

    python -m lab.tables      # every results table of the lab notebook, rendered again
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from benchmarks import tables
from tools.readme import REPO, ResultTable, refresh, result_tables

LAB_NOTEBOOK = REPO / "lab" / "README.md"


def renderer(name: str) -> Callable[..., str]:
    """The function a marker's RENDERER names: a lab module's, else a benchmark's."""
    path, _, function = name.partition(":")
    folder, _, module = path.rpartition("/")
    if folder != __package__:
        return tables.renderer(name)
    return getattr(importlib.import_module(f"{__package__}.{module}"), function or "readme_table")


def rendered(table: ResultTable) -> str:
    return renderer(table.renderer)(*table.results())


def main() -> None:
    LAB_NOTEBOOK.write_text(refresh(LAB_NOTEBOOK.read_text(encoding="utf-8"), rendered), encoding="utf-8")
    print(f"refreshed {len(result_tables(LAB_NOTEBOOK.read_text(encoding='utf-8')))} result tables in lab/README.md")


if __name__ == "__main__":
    main()
