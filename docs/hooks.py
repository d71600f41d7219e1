"""MkDocs hooks (mkdocs.yml `hooks:`): the site's pages that do not live in docs/.

- The notebooks (`notebooks/*.ipynb`, committed without outputs; rendered by mkdocs-jupyter from the executed
  copies a test run leaves in `build/notebooks/` where there are some, tests/cross_cutting/test_notebooks.py, else as committed
  with a note at the top saying how to get the outputs), `CHANGELOG.md` and the lab notebook (`lab/README.md` with
  the figures it shows; not in the navigation, the docs pages link to its entries) stay where a reader of the
  repository looks for them; the site takes them from there, under the same paths.
- A docs page links to them as the repository has them (`../lab/README.md`), so that the link works on a code host
  too; in the site that path is one level up, and `links_into_the_site` says so.
- The API reference has a page per package face (`FACES`): the face's docstring, then every name in its `__all__`
  from the module that defines it. A face that loads its names lazily (`lazy_face`) says which module holds each,
  so the page is made without importing those modules (a name that moves to another module moves in the reference
  by itself) and the site builds with the `[docs]` extra alone, without the training extras those modules need.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
LAB_NOTEBOOK = "lab/README.md"
# Outside docs/, in the site at the same relative path.
OUTSIDE = ("notebooks/*.ipynb", "CHANGELOG.md", LAB_NOTEBOOK)
FIGURE = re.compile(r"!\[[^\]]*\]\(((?:\.\./)?[\w/]*results/[^)\s]+\.png)\)")
# API page -> (title, the face whose `__all__` it documents)
FACES = {
    "api/model.md": ("The model", "modeling_minibert"),
    "api/training.md": ("Training", "modeling_minibert.training"),
    "api/deployment.md": ("Deployment", "modeling_minibert.deployment"),
    "api/sharing.md": ("Sharing", "modeling_minibert.sharing"),
    "api/tokenization.md": ("Tokenization", "tokenization"),
}


EXECUTED = REPO / "build" / "notebooks"  # a test run's executed notebooks, with their outputs
NOT_EXECUTED = (
    "> **The outputs are not shown yet.** This page is the notebook as committed, without outputs: the site shows "
    "them once the tests have run it (`.venv/bin/python -m pytest tests/cross_cutting/test_notebooks.py` writes the executed "
    "copies to `build/notebooks/`, then build the site again), or run it yourself in Jupyter."
)


def outside_files() -> list[str]:
    """Paths (from the repository root) of the pages and figures the site takes from outside docs/."""
    paths = [str(p.relative_to(REPO)) for pattern in OUTSIDE for p in sorted(REPO.glob(pattern))]
    lab = REPO / Path(LAB_NOTEBOOK).parent
    figures = FIGURE.findall((REPO / LAB_NOTEBOOK).read_text(encoding="utf-8"))
    paths += sorted({str((lab / figure).resolve().relative_to(REPO)) for figure in figures})
    return paths


def notebook_source(name: str, executed: Path, scratch: Path) -> Path:
    """The folder whose `notebooks/NAME` the site renders: the executed copy's where a test run left one, else a
    copy in `scratch` of the committed notebook with `NOT_EXECUTED` as its first cell."""
    if (executed / name).is_file():
        return executed.parent
    notebook = json.loads((REPO / "notebooks" / name).read_text(encoding="utf-8"))
    notebook["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": [NOT_EXECUTED]})
    (scratch / "notebooks").mkdir(parents=True, exist_ok=True)
    (scratch / "notebooks" / name).write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return scratch


def lazy_names(face: str) -> dict[str, str]:
    """name -> the module that holds it, for a face that loads its names with `lazy_face(__name__, {MODULE: NAMES})`,
    read from its source (importing it would not say, and importing the modules would need their extras); {} for
    a face that imports its names."""
    source = Path(importlib.util.find_spec(face).origin).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_face":
            return {
                name: f"{face}.{module}" for module, names in ast.literal_eval(node.args[1]).items() for name in names
            }
    return {}


def defining_module(face: str, name: str) -> str | None:
    """The module that defines `face.name` (through the faces of sub-packages), or None where it is not a function
    or class of ours (a constant, documented under the face)."""
    lazy = lazy_names(face)
    if name not in lazy:
        target = getattr(importlib.import_module(face), name)
        return getattr(target, "__module__", None) if callable(target) else None
    module = lazy[name]
    if importlib.util.find_spec(module).submodule_search_locations:  # a sub-package: its own face says
        return defining_module(module, name)
    return module


def api_page(title: str, face: str) -> str:
    """The reference page of `face`: its docstring, then each public name from its defining module."""
    package = importlib.import_module(face)
    lines = [
        f"# {title}: `{face}`",
        "",
        f"::: {face}",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
    ]
    for name in package.__all__:
        lines += [f"::: {defining_module(face, name) or face}.{name}", ""]
    return "\n".join(lines)


_scratch: list[Path] = []  # this build's copies of the notebooks not run yet, removed after the build


@event_priority(100)  # before mkdocs-jupyter's on_files, which must see the notebooks
def on_files(files: Files, config) -> Files:
    scratch = Path(tempfile.mkdtemp(prefix="minibert-docs-"))
    _scratch.append(scratch)
    for path in outside_files():
        source = REPO
        if path.startswith("notebooks/"):
            source = notebook_source(Path(path).name, EXECUTED, scratch)
        files.append(
            File(path, src_dir=str(source), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls)
        )
    for path, (title, face) in FACES.items():
        files.append(File.generated(config, path, content=api_page(title, face)))
    return files


def on_post_build(config) -> None:
    while _scratch:
        shutil.rmtree(_scratch.pop(), ignore_errors=True)


def on_build_error(error) -> None:
    on_post_build(None)


def links_into_the_site(markdown: str, src_uri: str) -> str:
    """A docs page's links to `../lab/...`, `../benchmarks/...`, `../notebooks/...` and `../CHANGELOG.md` (the
    repository's paths) as the site has them, one level up; the lab notebook's and the changelog's links to docs
    pages likewise."""
    if src_uri == LAB_NOTEBOOK:
        return markdown.replace("](../docs/", "](../")
    if src_uri == "CHANGELOG.md":
        return markdown.replace("](docs/", "](")
    depth = src_uri.count("/")
    up = "../" * depth
    return re.sub(
        r"\]\(" + re.escape("../" * (depth + 1)) + r"(lab/|benchmarks/|notebooks/|CHANGELOG\.md)",
        rf"]({up}\1",
        markdown,
    )


def on_page_markdown(markdown: str, page, config, files) -> str:
    return links_into_the_site(markdown, page.file.src_uri)
