"""The documentation site builds strictly, its figures are its committed results', and its stated defaults are the
code's.

- `mkdocs build --strict` (mkdocs.yml): a broken link, a missing page or an API reference that does not resolve
  fails it. The notebooks are rendered from their committed outputs (`execute: false`), so the build takes seconds.
- Every results table of the README and the docs pages (tools/readme.py reads them, benchmarks/tables.py renders
  them) is what its renderer makes of its committed results files; the README and the benchmarks page hold no
  other tables. The lab notebook's are checked by the lab's tests (lab/tests/).
- The defaults tables (`<!-- defaults: NAME -->`) state the code's defaults.
The code blocks of the README and the docs pages run in tests/cross_cutting/test_readme.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.environment import REPO
from fixtures.install import install_site

from benchmarks.tables import rendered
from docs.hooks import EXECUTED, NOT_EXECUTED, notebook_source
from tools.readme import DOCS, README, docs_pages, result_tables, runnable_documents

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def tables():
    for document in runnable_documents():
        for table in result_tables(document.read_text(encoding="utf-8")):
            yield pytest.param(document, table, id=f"{document.relative_to(REPO)}:{table.line}")


@pytest.mark.parametrize(("document", "table"), list(tables()))
def test_result_tables_are_their_committed_results(document: Path, table):
    where = f"{document.relative_to(REPO)} line {table.line}"
    for name in table.files:
        assert (REPO / name).is_file(), f"{where}: {name} is not committed"
    assert table.written == rendered(table), (
        f"{where} differs from {table.files}: run `python -m benchmarks.tables` after the benchmark"
    )


@pytest.mark.parametrize("document", [README, DOCS / "benchmarks.md"], ids=lambda d: str(d.relative_to(REPO)))
def test_measurements_are_only_backed_tables(document: Path):
    """The README and the benchmarks page show measurements: each of their tables is a results table."""
    lines = document.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and not lines[i - 1].startswith("|")]
    unbacked = [lines[i] for i in starts if not lines[i - 1].startswith("<!-- results:")]
    assert starts and not unbacked, f"{document.relative_to(REPO)}: tables without a results file: {unbacked}"


def test_every_results_marker_has_its_table():
    empty = [
        (d.name, t.line)
        for d in runnable_documents()
        for t in result_tables(d.read_text(encoding="utf-8"))
        if not t.written
    ]
    assert not empty, f"results markers without a table (run `python -m benchmarks.tables`): {empty}"


def test_the_product_renders_its_tables_with_benchmarks_only():
    """A README or docs table drawn by a lab module would tie the product to the lab: refused by name."""
    from benchmarks.tables import renderer

    assert renderer("benchmarks/tables:headline_table").__name__ == "headline_table"
    with pytest.raises(
        ValueError,
        match=r"results renderer 'lab/suite_stopping': the README's and the docs' tables are "
        r"rendered by benchmarks/ modules",
    ):
        renderer("lab/suite_stopping")


def test_the_pages_name_no_path_of_a_machine():
    """Paths in the documents are the repository's, never where someone's clone or runs happened to be."""
    found = [
        (d.name, m)
        for d in [README, REPO / "CHANGELOG.md", *DOCS.rglob("*.md")]
        for m in re.findall(r"(?:/work/|/root/|/home/\w+|/tmp/)\S*", d.read_text(encoding="utf-8"))
    ]
    assert not found, found


# ---------------------------------------------------------------------------------------------------------------
# The site


@pytest.mark.slow(seconds=25)
@pytest.mark.timeout(300)
def test_the_site_builds_strictly_with_the_docs_extra_alone(tmp_path: Path):
    """As a docs host builds it after `pip install '.[docs]'`: mkdocs in an interpreter that sees the package with
    its `[docs]` extra and nothing else (tests/fixtures/install.py), so no training extra (the API pages are made
    without importing the jobs, docs/hooks.py)."""
    site = tmp_path / "site"
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": str(install_site(tmp_path / "site-packages", REPO, "docs")),
        "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),
    }  # the data files pip puts beside site-packages
    result = subprocess.run(
        [sys.executable, "-S", "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for page in docs_pages():  # every page of the nav, built
        built = site / page.relative_to(DOCS).with_suffix("") / "index.html"
        assert built.is_file() or (site / page.relative_to(DOCS).parent / "index.html").is_file(), page
    for notebook in NOTEBOOKS:  # rendered with their figures, or saying how to get them
        html = (site / "notebooks" / notebook.stem / "index.html").read_text(encoding="utf-8")
        if not (EXECUTED / notebook.name).is_file():
            assert "The outputs are not shown yet" in html and "tests/cross_cutting/test_notebooks.py" in html, (
                notebook.name
            )
        else:
            assert "data:image/png;base64" in html or notebook.stem.startswith("05_"), (
                f"{notebook.name} shows no figure"
            )
    training = (site / "api" / "training" / "index.html").read_text(encoding="utf-8")
    assert all(f'id="{name}' in training or f">{name}<" in training for name in ("pretrain", "finetune", "distill")), (
        "the API reference lacks the training jobs"
    )
    assert (site / "benchmarks" / "index.html").is_file() and (site / "CHANGELOG" / "index.html").is_file()
    assert (site / "lab" / "index.html").is_file(), (
        "the lab notebook, which the docs pages link to, is not in the site"
    )
    assert not (REPO / ".cache").exists() or not any((REPO / ".cache").glob("mkdocs*")), (
        "the build left a cache in the clone"
    )


def test_a_notebook_not_run_yet_says_how_to_get_its_outputs(tmp_path: Path):
    name = NOTEBOOKS[0].name
    executed, scratch = tmp_path / "build" / "notebooks", tmp_path / "scratch"
    source = notebook_source(name, executed, scratch)
    shown, committed = (json.loads(p.read_text(encoding="utf-8")) for p in (source / "notebooks" / name, NOTEBOOKS[0]))
    assert (
        source == scratch
        and shown["cells"][0]["source"] == [NOT_EXECUTED]
        and shown["cells"][1:] == committed["cells"]
    )
    executed.mkdir(parents=True)
    (executed / name).write_text(NOTEBOOKS[0].read_text(encoding="utf-8"), encoding="utf-8")
    assert notebook_source(name, executed, scratch) == executed.parent  # a test run's copy, as it is


def test_the_notebooks_and_every_page_are_in_the_site():
    """mkdocs.yml's nav lists every Markdown page of docs/ and every notebook."""
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(p.relative_to(DOCS)) for p in docs_pages()}
    assert pages == {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert all(f"notebooks/{n.name}" in nav for n in NOTEBOOKS)
    assert "lab/" not in nav.split("\nnav:", 1)[1], "the lab notebook is no page of the site's navigation"


# ---------------------------------------------------------------------------------------------------------------
# The defaults tables


def defaults_table(page: str, name: str, remarks: bool = False) -> dict[str, str]:
    """The `| field | value |` rows after `<!-- defaults: NAME -->` in docs/PAGE (with `remarks`: the whole cell)."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- defaults: {name} -->")
    rows = {}
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1] if remarks else cells[1].split(" (")[0]  # a remark in brackets may follow the value
    return rows


def as_written(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def field_defaults(cls: type) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def test_documented_model_defaults_are_the_config_defaults():
    from modeling_minibert import MiniBertConfig

    config = MiniBertConfig()
    documented = defaults_table("model.md", "model")
    assert len(documented) >= 10
    for field, value in documented.items():
        assert as_written(getattr(config, field)) == value, field


def test_documented_pretraining_defaults_are_the_job_defaults():
    from modeling_minibert.training import PretrainingArguments

    fields = field_defaults(PretrainingArguments)
    documented, remarks = (
        defaults_table("pretraining.md", "pretraining"),
        defaults_table("pretraining.md", "pretraining", remarks=True),
    )
    assert len(documented) >= 8
    resolved = PretrainingArguments()  # what the default run gets for the fields left unset
    for field, value in documented.items():
        assert as_written(fields[field]) == value, field
        if value == "unset":  # "unset (4,000; ...)": the value the default objective's recipe fills in
            assert remarks[field].split("(")[1].split(";")[0].replace(",", "") == as_written(
                getattr(resolved, field)
            ), field


def test_documented_finetuning_defaults_are_the_job_defaults():
    from modeling_minibert.training.finetuning.arguments import TRAINING_DEFAULTS

    documented = defaults_table("finetuning.md", "finetuning")
    assert len(documented) >= 6
    for field, value in documented.items():
        assert as_written(TRAINING_DEFAULTS[field]) == value, field


def test_documented_distillation_defaults_are_the_job_defaults():
    """Distillation's own training defaults over fine-tuning's, and its dataclass's fields."""
    from modeling_minibert.training import DistillationArguments
    from modeling_minibert.training.finetuning.arguments import TRAINING_DEFAULTS

    own = importlib.import_module(DistillationArguments.__module__).DISTILL_TRAINING_DEFAULTS
    defaults = {**TRAINING_DEFAULTS, **field_defaults(DistillationArguments), **own}
    documented = defaults_table("distillation.md", "distillation")
    assert len(documented) >= 10
    for field, value in documented.items():
        assert as_written(defaults[field]) == value, field


# ---------------------------------------------------------------------------------------------------------------
# Where a default was measured: the links in the code


def anchors(document: Path) -> set[str]:
    """The anchors of a Markdown document's headings, as the site makes them (python-markdown's toc slugify)."""
    headings = re.findall(r"^#+ (.+)$", document.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower()) for heading in headings}


def test_every_link_from_the_code_to_a_measurement_leads_to_its_section():
    """A default in code names where it was measured (`lab/README.md#SECTION`, `docs/PAGE.md#SECTION`): the section
    is there."""
    link = re.compile(r"\b((?:lab|docs)/[\w/]+\.md)#([\w-]+)")
    sources = [*REPO.glob("modeling_minibert/**/*.py"), *REPO.glob("tokenization/*.py"), REPO / "setup.cfg"]
    found = [(path, *match) for path in sources for match in link.findall(path.read_text(encoding="utf-8"))]
    assert len(found) >= 10
    broken = [
        f"{path.relative_to(REPO)}: {page}#{anchor}"
        for path, page, anchor in found
        if anchor not in anchors(REPO / page)
    ]
    assert broken == []


def test_the_version_is_the_changelogs_latest_release():
    """One version number: setup.cfg's is the newest release the changelog has a section for (bumped together),
    and the pages that name a version name that one or an older one."""
    import configparser

    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    version = config["metadata"]["version"]
    releases = re.findall(r"^## (\d+\.\d+\.\d+)$", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert releases and version == releases[0], (
        f"setup.cfg says {version}, the changelog's latest release is {releases[:1]}"
    )
    named = re.findall(r"(?:in|version) (\d+\.\d+)\b", (DOCS / "cli.md").read_text(encoding="utf-8"), re.I)
    newest = tuple(map(int, version.split(".")[:2]))
    assert named and all(tuple(map(int, n.split("."))) <= newest for n in named), named
