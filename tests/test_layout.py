"""The package's shape, read from its code: wings by audience, imports only downward, no circles (strings that
name a module count as imports), the model's travelling files self-contained, and the size limits.

The layers, lowest first; a module may import its own layer and those below, never one above:

    model         configuration_minibert, modeling_minibert, checks_minibert, question_answering_pipeline, the face
    utils         shared chores: safe writes, output-folder names, precision, logging, the command convention
    tokenization  the vocabulary and the tokenizer
    sharing       what a folder publishes, the model card, BERT conversion, the Hub
    deployment    fill-mask, sentence embeddings, int8, ONNX, transformers.js
    finetuning < distillation < pretraining   the training jobs (distillation builds on fine-tuning; general
                  distillation, a pretraining objective, reads attention relations as task distillation does)
    cli           the `minibert` command
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.environment import REPO

from modeling_minibert import cli

PACKAGES = ("modeling_minibert", "tokenization")
MODEL_FILES = ("configuration_minibert", "modeling_minibert", "checks_minibert", "question_answering_pipeline")
LAYERS = [
    ("model", ["modeling_minibert", *(f"modeling_minibert.{name}" for name in MODEL_FILES)]),
    ("utils", ["modeling_minibert.utils"]),
    ("tokenization", ["tokenization"]),
    ("sharing", ["modeling_minibert.sharing"]),
    ("deployment", ["modeling_minibert.deployment"]),
    ("finetuning", ["modeling_minibert.training.finetuning"]),
    ("distillation", ["modeling_minibert.training.distillation"]),
    ("pretraining", ["modeling_minibert.training.pretraining", "modeling_minibert.training"]),
    ("cli", ["modeling_minibert.cli"]),
]


def modules() -> dict[str, Path]:
    """Every module of the installed packages, by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that module `name` imports: import statements anywhere in it (in functions too, and
    under TYPE_CHECKING), and strings that name a module ("a.b.c", or "a.b.c:NAME" as cli.py's table has them)."""
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
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value.split(":")[0])
    return {module for module in found if module in known and module != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix that holds `module`."""
    best = max(((len(prefix), i) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def test_the_model_files_import_nothing_else_of_ours():
    """They travel beside every checkpoint for trust_remote_code: only torch, transformers and each other."""
    model = {f"modeling_minibert.{name}" for name in MODEL_FILES}
    for name in sorted(model):
        assert graph()[name] <= model, f"{name} imports {sorted(graph()[name] - model)}"


def test_every_import_runs_down_the_layers():
    upward = [f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
              for a, targets in graph().items() for b in sorted(targets) if layer_of(b) > layer_of(a)]
    assert upward == []


def test_no_import_circles():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_layout_check_sees_an_upward_import_and_a_circle(tmp_path):
    """The checks above can fail: a string naming a higher module counts, and a loop through it is found."""
    known = {"modeling_minibert.utils.x": tmp_path / "x.py", "modeling_minibert.cli": tmp_path / "cli.py"}
    known["modeling_minibert.utils.x"].write_text("TABLE = {'a': 'modeling_minibert.cli:main'}\n")
    known["modeling_minibert.cli"].write_text("from modeling_minibert.utils import x\n")
    found = {name: imports(name, path, known) for name, path in known.items()}
    assert found == {"modeling_minibert.utils.x": {"modeling_minibert.cli"}, "modeling_minibert.cli": {"modeling_minibert.utils.x"}}
    assert layer_of("modeling_minibert.cli") > layer_of("modeling_minibert.utils.x")


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
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        exported = {element.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Tuple)
                    for element in node.elts if isinstance(element, ast.Constant)}
        submodules = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}
        clashes += [f"{name}.{x}" for x in sorted(exported & submodules)]
    assert clashes == []
