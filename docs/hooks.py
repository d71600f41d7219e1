"""MkDocs hooks (mkdocs.yml `hooks:`): the site's pages that do not live in docs/.

- The notebooks (`notebooks/*.ipynb`, committed without outputs; rendered by mkdocs-jupyter from the executed
  copies a test run leaves in `build/notebooks/` where there are some, tests/test_notebooks.py), the benchmarks'
  lab notebook (`benchmarks/README.md` with the figures it shows) and `CHANGELOG.md` stay where a reader of the
  repository looks for them; the site takes them from there, under the same paths.
- A docs page links to them as the repository has them (`../benchmarks/README.md`), so that the link works on a
  code host too; in the site that path is one level up, and `links_into_the_site` says so.
- The API reference has a page per package face (`FACES`): the face's docstring, then every name in its `__all__`
  from the module that defines it, found by importing the face (the faces load their names lazily, which a
  static reading cannot follow). A name that moves to another module moves in the reference by itself.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
# Outside docs/, in the site at the same relative path.
OUTSIDE = ("notebooks/*.ipynb", "benchmarks/README.md", "CHANGELOG.md")
FIGURE = re.compile(r"!\[[^\]]*\]\((results/[^)\s]+\.png)\)")
# API page -> (title, the face whose `__all__` it documents)
FACES = {
    "api/model.md": ("The model", "modeling_minibert"),
    "api/training.md": ("Training", "modeling_minibert.training"),
    "api/deployment.md": ("Deployment", "modeling_minibert.deployment"),
    "api/sharing.md": ("Sharing", "modeling_minibert.sharing"),
    "api/tokenization.md": ("Tokenization", "tokenization"),
}


EXECUTED = REPO / "build" / "notebooks"  # a test run's executed notebooks, with their outputs


def outside_files() -> list[str]:
    """Paths (from the repository root) of the pages and figures the site takes from outside docs/."""
    paths = [str(p.relative_to(REPO)) for pattern in OUTSIDE for p in sorted(REPO.glob(pattern))]
    lab_notebook = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    paths += sorted({f"benchmarks/{figure}" for figure in FIGURE.findall(lab_notebook)})
    return paths


def api_page(title: str, face: str) -> str:
    """The reference page of `face`: its docstring, then each public name from its defining module."""
    package = importlib.import_module(face)
    lines = [f"# {title}: `{face}`", "", f"::: {face}", "    options:", "      members: false",
             "      show_root_heading: false", "      show_root_toc_entry: false", ""]
    for name in package.__all__:
        target = getattr(package, name)
        module = getattr(target, "__module__", None) if callable(target) else None
        lines += [f"::: {module or face}.{name}", ""]
    return "\n".join(lines)


@event_priority(100)  # before mkdocs-jupyter's on_files, which must see the notebooks
def on_files(files: Files, config) -> Files:
    for path in outside_files():
        source = REPO
        if path.startswith("notebooks/") and (EXECUTED / Path(path).name).is_file():
            source = EXECUTED.parent  # build/notebooks/NAME.ipynb: the same page, with the run's outputs
        files.append(File(path, src_dir=str(source), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls))
    for path, (title, face) in FACES.items():
        files.append(File.generated(config, path, content=api_page(title, face)))
    return files


def links_into_the_site(markdown: str, src_uri: str) -> str:
    """A docs page's links to `../benchmarks/...`, `../notebooks/...` and `../CHANGELOG.md` (the repository's
    paths) as the site has them, one level up; the lab notebook's and the changelog's links to docs pages likewise."""
    if src_uri == "benchmarks/README.md":
        return markdown.replace("](../docs/", "](../")
    if src_uri == "CHANGELOG.md":
        return markdown.replace("](docs/", "](")
    depth = src_uri.count("/")
    up = "../" * depth
    return re.sub(r"\]\(" + re.escape("../" * (depth + 1)) + r"(benchmarks/|notebooks/|CHANGELOG\.md)", rf"]({up}\1", markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return links_into_the_site(markdown, page.file.src_uri)
