"""The repository's shape, read from its code and its documents: wings by audience, imports only downward, no
circles (strings that name a module count as imports), the model's travelling files self-contained, and the size
limits.

The wings and layers, lowest first; a module (or a document) may import its own layer and those below, never one
above. The package's layers:

    model         configuration_minibert, modeling_minibert, checks_minibert, question_answering_pipeline, the face
    utils         shared chores: safe writes, output-folder names, precision, logging, the command convention
    tokenization  the vocabulary and the tokenizer
    sharing       what a folder publishes, the model card, BERT conversion, the sentence-transformers files, the Hub
    finetuning < distillation < pretraining   the training jobs (distillation builds on fine-tuning; general
                  distillation, a pretraining objective, reads attention relations as task distillation does)
    deployment    fill-mask, sentence embeddings, int8, ONNX, transformers.js, long texts (in fine-tuning's windows)
    cli           the `minibert` command

then the wings around it:

    tools         the local Hub server, the documents' reader (tools/readme.py), code_size.py
    examples      the example inputs and the recipes that write real data sets as files
    benchmarks    the measurements the README and the docs quote, and the renderer of their tables
    docs          README.md, CHANGELOG.md, docs/ (the pages and the site's hooks), notebooks/
    tests         the product's tests and their fixtures
    lab           the experiments, their notebook and their tests: nothing below imports it

A document imports what its results markers name as their renderer, what its `python -m MODULE` commands run and
what the Python of its code blocks (a notebook's cells) imports.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.environment import REPO

from modeling_minibert import cli
from tools.readme import RESULTS_MARKER, blocks

PACKAGES = ("modeling_minibert", "tokenization")
MODEL_FILES = ("configuration_minibert", "modeling_minibert", "checks_minibert", "question_answering_pipeline")
PACKAGE_LAYERS = [
    ("model", ["modeling_minibert", *(f"modeling_minibert.{name}" for name in MODEL_FILES)]),
    ("utils", ["modeling_minibert.utils"]),
    ("tokenization", ["tokenization"]),
    ("sharing", ["modeling_minibert.sharing"]),
    ("finetuning", ["modeling_minibert.training.finetuning"]),
    ("distillation", ["modeling_minibert.training.distillation"]),
    ("pretraining", ["modeling_minibert.training.pretraining", "modeling_minibert.training"]),
    ("deployment", ["modeling_minibert.deployment"]),
    ("cli", ["modeling_minibert.cli"]),
]
WINGS = [
    ("tools", ["tools"]),
    ("examples", ["examples"]),
    ("benchmarks", ["benchmarks"]),
    ("docs", ["docs", "README.md", "CHANGELOG.md", "notebooks"]),
    ("tests", ["tests"]),
    ("lab", ["lab"]),
]
LAYERS = PACKAGE_LAYERS + WINGS
# Where the Python lives, by wing; tests/ is also on sys.path (its fixtures import as `fixtures.NAME`).
SOURCES = (*PACKAGES, "tools", "examples", "benchmarks", "docs", "tests", "lab")
DOCUMENTS = ("README.md", "CHANGELOG.md", "docs/**/*.md", "notebooks/*.ipynb", "lab/**/*.md")
COMMAND = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")  # in a document
PYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(folders: tuple[str, ...] = SOURCES) -> dict[str, Path]:
    """Every Python module of `folders` (default: the whole repository), by dotted name from the repository root
    (a package by its own name)."""
    return {module_name(path): path for folder in folders for path in sorted((REPO / folder).rglob("*.py"))}


def documents() -> dict[str, Path]:
    """The Markdown documents and the notebooks, by their path from the repository root."""
    return {str(path.relative_to(REPO)): path for pattern in DOCUMENTS for path in sorted(REPO.glob(pattern))}


def known_as(name: str, known: dict[str, Path]) -> str | None:
    """The module of ours that `name` (as an import or a string has it) is: itself, or a test fixture's by the
    name tests/ being on sys.path gives it."""
    for candidate in (name, f"tests.{name}"):
        if candidate in known:
            return candidate
    return None


def imports(name: str, path: Path, known: dict[str, Path], strings: bool = True) -> set[str]:
    """The modules of ours that module `name` imports: import statements anywhere in it (in functions too, and
    under TYPE_CHECKING) and, with `strings`, strings that name a module by its dotted name ("a.b.c", or
    "a.b.c:NAME" as cli.py's table has them; a word such as "examples" alone is a word) or a package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # `from a.b import c`: the module a.b.c where there is one, else a.b itself.
            found.update(
                f"{base}.{alias.name}" if known_as(f"{base}.{alias.name}", known) else base for alias in node.names
            )
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = node.value.split(":")[0]
            if "." in named or named in PACKAGES:
                found.add(named)
    return {module for module in (known_as(m, known) for m in found) if module and module != name}


def renderer_module(renderer: str) -> str:
    """The module a results marker's RENDERER names (benchmarks/tables.py, lab/tables.py): `NAME` a benchmark's,
    `FOLDER/NAME[:FUNCTION]` FOLDER's."""
    path = renderer.partition(":")[0]
    return path.replace("/", ".") if "/" in path else f"benchmarks.{path}"


def document_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours a document imports: its results markers' renderers, the modules its `python -m` commands
    run, and what the Python of its code blocks (a notebook's code cells) imports."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        python = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
        text = "\n".join("".join(cell["source"]) for cell in cells)
    else:
        python = [block.code for block in blocks(text) if block.language == "python"]
    found = {renderer_module(match.group(2)) for match in RESULTS_MARKER.finditer(text)}
    found.update(COMMAND.findall(text))
    found.update(module for code in python for pair in PYTHON_IMPORT.findall(code) for module in pair if module)
    return {module for module in (known_as(m, known) for m in found) if module}


def graph(known: dict[str, Path] | None = None, docs: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module (or document) -> the modules of ours it imports, over the whole repository."""
    known = modules() if known is None else known
    docs = documents() if docs is None else docs
    # This module's strings are the check's own examples, not imports.
    return {
        **{
            name: imports(name, path, known, strings=name != "tests.cross_cutting.test_layout")
            for name, path in known.items()
        },
        **{name: document_imports(path, known) for name, path in docs.items()},
    }


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix that holds `module` (a document by its path)."""
    best = max(
        (
            (len(prefix), i)
            for i, (_, prefixes) in enumerate(LAYERS)
            for prefix in prefixes
            if module == prefix or module.startswith((prefix + ".", prefix + "/"))
        ),
        default=None,
    )
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def wing_of(module: str) -> str:
    """The package (every one of its layers), or the wing around it, that holds `module`."""
    index = layer_of(module)
    return "package" if index < len(PACKAGE_LAYERS) else LAYERS[index][0]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk of `edges` meets, each as the path that closes it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def wing_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Wing -> the wings its modules import."""
    wings: dict[str, set[str]] = {}
    for a, targets in edges.items():
        wings.setdefault(wing_of(a), set()).update(wing_of(b) for b in targets if wing_of(b) != wing_of(a))
    return wings


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return graph()


def test_the_model_files_import_nothing_else_of_ours(edges):
    """They travel beside every checkpoint for trust_remote_code: only torch, transformers and each other."""
    model = {f"modeling_minibert.{name}" for name in MODEL_FILES}
    for name in sorted(model):
        assert edges[name] <= model, f"{name} imports {sorted(edges[name] - model)}"


def test_the_graph_covers_the_whole_repository(edges):
    """Every wing has its modules in the graph, and the imports that tie them are seen: strings and documents too."""
    assert {wing_of(name) for name in edges} == {"package", *(wing for wing, _ in WINGS)}
    assert "benchmarks.tables" in edges["README.md"]  # the headline table's renderer, from its marker
    assert "examples.bbc_titles" in edges["README.md"]  # `python -m examples.bbc_titles`, in a block
    assert "lab.plot_seeds" in edges["lab.tests.test_plot_seeds"]  # `[sys.executable, "-m", "lab.plot_seeds"]`
    assert (
        "tests.fixtures.environment" in edges["tests.cross_cutting.test_layout"]
    )  # `from fixtures.environment import REPO`
    assert "tools.local_hub" in edges["lab.local_hub_listing"]  # importlib.import_module("tools.local_hub")


def test_every_import_runs_down_the_layers(edges):
    upward = [
        f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in edges.items()
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert upward == []


def test_no_import_circles(edges):
    assert circles(edges) == []


def test_no_circle_between_wings(edges):
    assert circles(wing_graph(edges)) == []


def test_nothing_edits_sys_path():
    """A module imports ours by their names from the repository root (`python -m PACKAGE.NAME`, pytest's
    `pythonpath`): one that put a folder on sys.path would import by names the graph above cannot see."""
    found = [
        name
        for name, path in modules().items()
        if "sys.path"
        in {
            ast.unparse(node)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute)
        }
    ]
    assert found == []


def test_the_layout_check_sees_an_upward_import_and_a_circle(tmp_path):
    """The checks above can fail: a string naming a higher module counts, and a loop through it is found."""
    known = {"modeling_minibert.utils.x": tmp_path / "x.py", "modeling_minibert.cli": tmp_path / "cli.py"}
    known["modeling_minibert.utils.x"].write_text("TABLE = {'a': 'modeling_minibert.cli:main'}\n")
    known["modeling_minibert.cli"].write_text("from modeling_minibert.utils import x\n")
    found = {name: imports(name, path, known) for name, path in known.items()}
    assert found == {
        "modeling_minibert.utils.x": {"modeling_minibert.cli"},
        "modeling_minibert.cli": {"modeling_minibert.utils.x"},
    }
    assert layer_of("modeling_minibert.cli") > layer_of("modeling_minibert.utils.x")
    assert circles(found) == [["modeling_minibert.cli", "modeling_minibert.utils.x", "modeling_minibert.cli"]]


def test_the_layout_check_sees_a_circle_between_wings_and_a_document_importing_the_lab(tmp_path):
    """No module circle, yet a wing circle: the docs renderer importing a benchmark named in a string, and that
    benchmark importing a tool; and a docs page whose table a lab module renders."""
    known = {
        "tools.readme": tmp_path / "readme.py",
        "benchmarks.x": tmp_path / "x.py",
        "tools.local_hub": tmp_path / "hub.py",
        "lab.y": tmp_path / "y.py",
    }
    known["tools.readme"].write_text("import importlib\nRENDERER = importlib.import_module('benchmarks.x')\n")
    known["benchmarks.x"].write_text("from tools import local_hub\n")
    known["tools.local_hub"].write_text("")
    known["lab.y"].write_text("")
    page = tmp_path / "page.md"
    page.write_text("<!-- results: lab/results/y.json lab/y -->\n| a |\n\n```bash\npython -m benchmarks.x\n```\n")
    found = graph(known, {"docs/page.md": page})
    assert found == {
        "tools.readme": {"benchmarks.x"},
        "benchmarks.x": {"tools.local_hub"},
        "tools.local_hub": set(),
        "lab.y": set(),
        "docs/page.md": {"lab.y", "benchmarks.x"},
    }
    assert circles(found) == [] and circles(wing_graph(found)) == [["benchmarks", "tools", "benchmarks"]]
    assert sorted(b for a, targets in found.items() for b in targets if layer_of(b) > layer_of(a)) == [
        "benchmarks.x",
        "lab.y",
    ]


def test_size_limits():
    """No function of the package over 80 lines, no source file over 600 but the model file (tools/code_size.py)."""
    result = subprocess.run([sys.executable, "tools/code_size.py"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_passes_its_flags_as_the_functions_keywords(command):
    """One convention: the flags are the dataclasses' fields, and the function takes the same names."""
    line = cli.command_line(command)
    assert line.arguments and all(hasattr(cls, "__dataclass_fields__") for cls in line.arguments)
    parameters = inspect.signature(cli.resolve(cli.COMMANDS[command].function)).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for cls in line.arguments:
        for name in cls.__dataclass_fields__:
            assert takes_any or name in parameters, f"{command}: --{name} is no keyword of its function"


# As on a plain install: the extras' modules are not found (transformers asks `find_spec` whether they are there),
# and importing one fails. Then every command's --help, each in its own exit code.
BLOCK_EXTRAS = """
import contextlib, importlib.abc, importlib.util, io, json, sys
EXTRAS = {extras!r}
find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in EXTRAS else find_spec(name, *a)
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Blocker())
from modeling_minibert.cli import main
shown = {{}}
for command in {commands!r}:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main([command, "--help"])  # returns only when it did not show the help
        except SystemExit as exit:
            code = exit.code
    shown[command] = [code, out.getvalue()]
print(json.dumps(shown))
"""


@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_help_works_without_any_extra():
    """`minibert CMD --help` on a plain install: no extra's module is imported to show the options."""
    extras = sorted({module for modules in cli.EXTRA_MODULES.values() for module in modules})
    code = BLOCK_EXTRAS.format(extras=extras, commands=list(cli.COMMANDS))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    for command in cli.COMMANDS:
        code, text = shown[command]
        assert code == 0 and f"usage: minibert {command}" in text and "Traceback" not in text, (command, text[-500:])


def test_extras_are_still_importable_here():
    """The blocker above hides installed modules: they are installed, so what it shows is not an accident."""
    assert all(importlib.util.find_spec(m) for modules in cli.EXTRA_MODULES.values() for m in modules)


def test_no_face_exports_a_name_its_package_has_a_module_of():
    """Importing a submodule sets it as an attribute of its package: a face's lazy name equal to a submodule's
    (say a function `fill_mask` beside a `fill_mask.py`) would turn into the module once something imported it."""
    clashes = []
    for name, path in modules(PACKAGES).items():
        if path.name != "__init__.py":
            continue
        exported = {
            element.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Tuple)
            for element in node.elts
            if isinstance(element, ast.Constant)
        }
        submodules = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}
        clashes += [f"{name}.{x}" for x in sorted(exported & submodules)]
    assert clashes == []


def test_ruff_finds_nothing_to_correct():
    """The lint configuration (pyproject.toml: pycodestyle, pyflakes, import order, comprehensions, pyupgrade) holds
    over the whole repository, notebooks included."""
    ruff = Path(sys.executable).with_name("ruff")
    assert ruff.is_file(), f"no ruff beside {sys.executable}: the dev extra installs it"
    found = subprocess.run(
        [str(ruff), "check", "--output-format", "concise", str(REPO)], capture_output=True, text=True, cwd=REPO
    )
    assert found.returncode == 0, found.stdout[-4000:] + found.stderr[-2000:]


def ruff_format_check(*paths: Path) -> subprocess.CompletedProcess:
    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff), "format", "--check", "--config", str(REPO / "pyproject.toml"), *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO)


def test_the_repository_is_as_ruff_formats_it(tmp_path):
    """`ruff format --check` (pyproject.toml's format: line length 119, as transformers') over the whole repository,
    notebooks included; the same check refuses a file the formatter would change."""
    found = ruff_format_check(REPO)
    assert found.returncode == 0, found.stdout[-4000:] + found.stderr[-2000:]
    (tmp_path / "loose.py").write_text("sizes = dict( hidden_size=192,num_hidden_layers=3 )\n")
    refused = ruff_format_check(tmp_path / "loose.py")
    assert refused.returncode == 1 and "loose.py" in refused.stdout + refused.stderr, refused
