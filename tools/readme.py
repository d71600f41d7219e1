"""The documents' runnable blocks, result tables and `minibert` commands, read from their Markdown: for
tests/cross_cutting/test_readme.py and tests/cross_cutting/test_docs.py, for the tables' renderers (benchmarks/tables.py for the README and
the docs pages, lab/tables.py for the lab notebook) and for the lab's tests.

Documents: README.md and the pages of the documentation site (docs/, in the order of mkdocs.yml's `nav`); the lab
notebook (lab/README.md) is read the same way by the lab.

Result tables: a line `<!-- results: FILE [FILE ...] RENDERER -->` is followed by a Markdown table that is the
renderer's output on those committed results files (paths from the repository root), so a figure cannot drift from
its run. This module reads the markers and the tables; what RENDERER names, and rendering, is the renderers'.

Runnable blocks: every ```bash and ```python block of README.md and of the docs pages runs (tests/cross_cutting/test_readme.py),
in that order, from the root of one fresh copy of the repository, except a block right after a line
`<!-- readme-test: skip REASON -->`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
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

    def results(self) -> list[dict]:
        """The results files, read: the renderer's arguments."""
        return [json.loads((REPO / name).read_text(encoding="utf-8")) for name in self.files]


def docs_pages() -> list[Path]:
    """The site's own Markdown pages (docs/), in the order of mkdocs.yml's `nav`; pages the hooks add from outside
    docs/ (the notebooks, the changelog, the lab notebook) and generated ones are not among them."""
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


def refresh(text: str, rendered: Callable[[ResultTable], str]) -> str:
    """`text` with every results table rendered anew (`rendered(table)`: the table its renderer makes)."""
    for table in result_tables(text):
        new = rendered(table)
        if table.written:
            text = text.replace(table.marker + "\n" + table.written, table.marker + "\n" + new, 1)
        else:
            text = text.replace(table.marker + "\n", table.marker + "\n" + new + "\n", 1)
    return text


def minibert_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, argv after `minibert`) of every `.venv/bin/minibert` command in a document's fenced blocks, the
    skipped and the ```text ones too, continuation lines joined and comments dropped. A shell substitution or
    variable stands for a path (`X`), and the placeholder `N` for a number."""
    commands = []
    for block in blocks(text):
        lines = block.code.replace("\\\n", " ").splitlines()
        for offset, line in enumerate(lines):
            if not line.startswith(".venv/bin/minibert "):
                continue
            line = re.sub(r'"\$\(.*?\)"|"\$\w+"|\$\w+', "X", line)
            argv = ["1" if word == "N" else word for word in shlex.split(line, comments=True)[1:]]
            commands.append((block.line + 1 + offset, argv))
    return commands


# A `minibert CMD ...` code span in a document's prose (its text, a notebook's Markdown cells).
PROSE_COMMAND = re.compile(r"`(?:\.venv/bin/)?minibert ([a-z-]+(?: [^`]*)?)`")


def prose_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, argv after `minibert`) of every complete command in a Markdown text's prose: its code spans outside
    fenced blocks (a span may run over a line break), placeholders read as `minibert_commands` reads them. A span
    of the command's name alone names the command, and one that ends on a bare flag names that flag
    ("`minibert pretrain --teacher_model_name_or_path`"): neither is a command to paste."""
    lines = text.splitlines()
    inside = False
    for i, line in enumerate(lines):  # fenced blocks blanked: `minibert_commands` reads them
        fence = FENCE.match(line) is not None or (inside and line.startswith("```"))
        if fence or inside:
            lines[i] = ""
        inside = inside != fence
    prose = "\n".join(lines)
    commands = []
    for match in PROSE_COMMAND.finditer(prose):
        words = shlex.split(re.sub(r'"\$\(.*?\)"|"\$\w+"|\$\w+', "X", match.group(1).replace("\n", " ")))
        if len(words) > 1 and not words[-1].startswith("-"):
            commands.append((prose.count("\n", 0, match.start()) + 1, ["1" if w == "N" else w for w in words]))
    return commands


def notebook_prose(path: Path) -> str:
    """A notebook's Markdown cells, one after another (what its prose says, as a document's text)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def command_problem(argv: list[str]) -> str | None:
    """Why `minibert ARGV` would fail before any work (a flag that does not parse, a required option left out), or
    None. The long runs the documents show but the tests cannot run are checked this way."""
    from modeling_minibert import cli

    if {"-h", "--help"} & set(argv):  # help, which exits
        return None
    parser = cli.command_line(argv[0]).parser(f"minibert {argv[0]}")
    try:
        values = vars(parser.parse_args(argv[1:]))
    except (ValueError, SystemExit) as error:  # the command's parser raises a ValueError; argparse's own exits
        return f"`minibert {shlex.join(argv)}` does not parse: {error}"
    # the options the jobs check themselves, before any work: their help says "(required)"
    required = [a for a in parser._actions if a.help and "(required)" in a.help]
    missing = [a.option_strings[0] for a in required if values[a.dest] is None]
    return f"`minibert {shlex.join(argv)}` lacks {missing}" if missing else None
