"""The documentation's runnable blocks and result tables, for tests/test_readme.py and tests/test_docs.py, and for
refreshing the tables.

Documents: README.md, the pages of the documentation site (docs/, in the order of mkdocs.yml's `nav`) and the
benchmarks' lab notebook, benchmarks/README.md.

Result tables: a line `<!-- results: FILE [FILE ...] RENDERER -->` is followed by a Markdown table that is the
renderer's output on those committed results files (paths from the repository root), so a figure cannot drift from
its run. RENDERER is `NAME` for `readme_table(results)` of the benchmark module `benchmarks.NAME`, `FOLDER/NAME`
for `readme_table` of the module `FOLDER.NAME`, and `FOLDER/NAME:FUNCTION` for another
function, given one argument per file (as the README's headline table, `tools/readme:headline_table`). After a benchmark run,
`python tools/readme.py` renders every table again.

Runnable blocks: every ```bash and ```python block of README.md and of the docs pages runs (tests/test_readme.py),
in that order, from the root of one fresh copy of the repository, except a block right after a line
`<!-- readme-test: skip REASON -->`.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
LAB_NOTEBOOK = REPO / "benchmarks" / "README.md"
RESULTS_MARKER = re.compile(r"<!-- results: ((?:\S+ )+)(\S+) -->")
SKIP_MARKER = re.compile(r"<!-- readme-test: skip (.+?) -->")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    skip: str | None  # the reason, for a block not to run


@dataclass
class ResultTable:
    line: int  # of the marker, 1-based
    files: tuple[str, ...]  # results files, from the repository root
    renderer: str
    written: str  # the table as the document has it ("" if none follows the marker)

    @property
    def marker(self) -> str:
        return f"<!-- results: {' '.join(self.files)} {self.renderer} -->"


def docs_pages() -> list[Path]:
    """The site's own Markdown pages (docs/), in the order of mkdocs.yml's `nav`; pages the hooks add from outside
    docs/ (the notebooks, the lab notebook, the changelog) and generated ones are not among them."""
    import yaml

    def entries(nav) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [path for value in nav.values() for path in entries(value)]
        return [path for item in nav for path in entries(item)]

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    return [DOCS / path for path in entries(config["nav"]) if path.endswith(".md") and (DOCS / path).is_file()]


def runnable_documents() -> list[Path]:
    """The documents whose blocks run, in the order they run: the README, then the docs pages."""
    return [README, *docs_pages()]


def table_documents() -> list[Path]:
    """The documents whose result tables are checked: the runnable ones and the lab notebook."""
    return [*runnable_documents(), LAB_NOTEBOOK]


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


def result_tables(text: str) -> list[ResultTable]:
    """Every results marker of a Markdown text, with the table that follows it."""
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
        found.append(ResultTable(i + 1, tuple(match.group(1).split()), match.group(2), "\n".join(table)))
    return found


def renderer(name: str) -> Callable[..., str]:
    """The function a marker's RENDERER names (its module imported by name: benchmarks and tools run as
    `python -m benchmarks.NAME`, `python -m tools.NAME` from the repository root)."""
    path, _, function = name.partition(":")
    if "/" not in path:
        path = f"benchmarks/{path}"
    if path == "tools/readme":
        return globals()[function or "readme_table"]
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return getattr(importlib.import_module(path.replace("/", ".")), function or "readme_table")


def rendered(table: ResultTable) -> str:
    results = [json.loads((REPO / name).read_text(encoding="utf-8")) for name in table.files]
    return renderer(table.renderer)(*results)


def refresh(text: str) -> str:
    """`text` with every results table rendered anew from its results files."""
    for table in result_tables(text):
        new = rendered(table)
        if table.written:
            text = text.replace(table.marker + "\n" + table.written, table.marker + "\n" + new, 1)
        else:
            text = text.replace(table.marker + "\n", table.marker + "\n" + new + "\n", 1)
    return text


# ---------------------------------------------------------------------------------------------------------------
# The README's headline table: one row per claim, each number from its results file


def _times(ratio: float, digits: int = 1) -> str:
    return f"**{ratio:.{digits}f}×**"


def headline_table(distillation: dict, embeddings: dict, speed: dict) -> str:
    """The README's results: the recipe's distilled student against its teacher and TF-IDF on Rotten Tomatoes
    (`benchmarks.distill_rotten_tomatoes`), the distilled sentence embedder against its teacher
    (`benchmarks.embeddings`), and Mini-BERT against transformers' BERT with the same weights
    (`benchmarks.bench_model`)."""
    systems = distillation["systems"]
    student, teacher, tfidf = systems["Mini-BERT distilled"], systems["teacher fine-tuned"], systems["TF-IDF + LR"]
    rows = embeddings["rows"]
    embedder, embedding_teacher = rows["Mini-BERT distilled"], rows["teacher all-MiniLM-L6-v2"]
    short_teacher = rows["teacher, cut to 64 tokens"]
    by_key = {(r["mode"], r["batch"], r["impl"]): r for r in speed["rows"] if r["size"] == "mini"}

    def accuracy(system: dict) -> str:
        return f"{system['test']['accuracy']:.3f}"

    def parameters(system: dict) -> str:
        return f"{system['throughput']['parameters'] / 1e6:.1f}M parameters"

    lines = [
        "| measured | Mini-BERT | compared with |",
        "| --- | ---: | --- |",
        f"| Rotten Tomatoes sentiment, test accuracy | **{accuracy(student)}** ({parameters(student)}) | teacher "
        f"all-MiniLM-L6-v2 fine-tuned: {accuracy(teacher)} ({parameters(teacher)}); TF-IDF + logistic regression: "
        f"{accuracy(tfidf)} |",
        f"| the same, inference examples/s on one thread | **{student['throughput']['examples_per_second']:,.0f}** "
        f"| teacher: {teacher['throughput']['examples_per_second']:,.0f} ({_times(distillation['student_speedup'])}) |",
        f"| sentence embeddings, BBC News title → body retrieval, MRR | **{embedder['mrr']:.3f}** | teacher "
        f"all-MiniLM-L6-v2: {embedding_teacher['mrr']:.3f} ({embedder['mrr'] / embedding_teacher['mrr']:.1%} of it) |",
        f"| the same, sentences/s on one thread | **{embedder['sentences_per_s']:,.0f}** | teacher cut to 64 tokens: "
        f"{short_teacher['sentences_per_s']:,.1f} ({_times(embedder['sentences_per_s'] / short_teacher['sentences_per_s'])}) |",
    ]
    for mode, what, bert in (("inference", "inference", "BertModel"), ("training", "pretraining steps", "BertForPreTraining")):
        mini, base = by_key[(mode, "mixed", "minibert")], by_key[(mode, "mixed", "transformers")]
        lines.append(
            f"| {what} on mixed-length batches, real tokens/s on {speed['threads']} threads "
            f"| **{mini['tokens_per_second']:,.0f}** | transformers' {bert} (sdpa), same config and weights: "
            f"{base['tokens_per_second']:,.0f} ({_times(mini['speedup'], 2)}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    for document in table_documents():
        document.write_text(refresh(document.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"refreshed {len(result_tables(document.read_text(encoding='utf-8')))} result tables in {document.relative_to(REPO)}")
