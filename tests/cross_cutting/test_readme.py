"""The README and the documentation pages run as pasted, and the README stays a short page.

Their shell blocks run in order (the README's, then each docs page's in the site's order) from the root of one fresh
copy of the repository (its tracked files), as a user pasting them would, in the environment the README's first
command creates: a `.venv` whose interpreter sees the package with its `[train]` extra and nothing else
(`fresh_venv`: `python -S` over a folder of links into this environment, as tests/cross_cutting/test_install.py builds the plain
install); its `pip` installs the clone's other extras the same way, so a block that needs one must say how to get
it. The README's first block (the setup and the full default pretraining) is skipped; its `minibert pretrain` runs
first, shortened, since later blocks start from the folder it writes. Pretraining is shortened by appending step
limits (`SHORTEN`), which argparse lets win over earlier values; fine-tuning runs as written, and its results must
pass `EXAMPLE_FLOORS`. Python blocks run with the venv's interpreter from the same root. A block shown on two pages
(the README's examples are the docs pages' own) runs once.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from fixtures.environment import REPO
from fixtures.install import distribution_links, install_site

from tools.readme import README, blocks, command_problem, minibert_commands, runnable_documents

# Appended to each pretraining and distillation command of a block: enough steps to exercise every stage of the job
# (a checkpoint before the last one; one held-out evaluation, at the end, since each reads the whole held-out split;
# one pass of NSP pairs, not five: building them is most of a 4-step run on the default corpus). Fine-tuning runs as
# written: its results are the examples' (`EXAMPLE_FLOORS`).
SHORTEN = {
    "minibert pretrain": "--max_steps 4 --eval_steps 4 --save_steps 2 --logging_steps 1 --per_device_train_batch_size 8 "
    "--dupe_factor 1",
    "minibert distill": "--max_steps 2 --per_device_train_batch_size 8",
}
# The README's first block pretrains the model every later example starts from (`minibert-pretrained/`); the test
# runs this command of it first, shortened. docs/pretraining.md shows it as a block of its own, which then counts as run.
QUICK_START = ".venv/bin/minibert pretrain\n"
# The fine-tuning examples must show the model working: each output folder's all_results.json at or above these
# floors (chance: accuracy 0.5, entity F1 and exact match near 0), from a model pretrained for only SHORTEN's 4 steps,
# so a user's longer pretraining has room to spare. The examples are templated (examples/make_examples.py).
EXAMPLE_FLOORS = {
    "runs/topics": {"test_accuracy": 0.3},  # five topics, the largest 26% of the test split; 0.40 from 4 steps
    "runs/sentiment": {"test_accuracy": 0.9},
    "runs/ner": {"eval_f1": 0.6},
    # 60 questions; chance near 0. The run differs by CPU: an AVX2-only Zen 3 EPYC gave 50.0 / 54.6, at the edge of
    # the floors first set here (50 / 55), so they leave ten points of room.
    "runs/qa": {"eval_exact_match": 40.0, "eval_f1": 45.0},
}
# What the pipeline blocks print for their three examples: the sentiment, every entity, the answer.
PIPELINE_SHOWS = (
    "'label': 'positive'",
    "'entity_group': 'PER', 'score'",
    "'word': 'ana'",
    "'entity_group': 'ORG', 'score'",
    "'word': 'acme'",
    "'entity_group': 'LOC', 'score'",
    "'word': 'lisbon'",
    "'answer': 'Oslo'}",
)
README_LINES = 250  # what it is, the fresh-machine commands, one short example per job, the results, links


def readme() -> str:
    return README.read_text(encoding="utf-8")


def name(document: Path) -> str:
    return str(document.relative_to(REPO))


def shortened(code: str) -> str:
    """`code` with continuation lines joined and each training command given its step limits."""
    lines = code.replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        command = line.split("#", 1)[0].rstrip()
        for prefix, limits in SHORTEN.items():
            if prefix in command:
                line = f"{command} {limits}"
        out.append(line)
    return "\n".join(out) + "\n"


# The `.venv/bin` of the README's first command (`bash .ci/setup`: `pip install -e '.[train]'`), each a launcher of
# this interpreter without its own site-packages (-S) over the fresh venv's, and without the working directory on
# sys.path (-P) where a console script would not have it. The folder is named as a venv's because libraries look at
# the name: dill (datasets' hashing) pickles modules from outside a "site-packages" path by value, and fails.
SITE = Path("lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
LAUNCHERS = {
    "python": 'PYTHONPATH="$SITE" exec "$PYTHON" -S "$@"',
    "minibert": 'PYTHONPATH="$SITE" exec "$PYTHON" -S -P -c '
    "'import sys; from modeling_minibert.cli import console_main; sys.exit(console_main())' \"$@\"",
    "pip": 'exec "$PYTHON" -S -P "$VENV/pip.py" "$SITE" "$@"',
}
# The venv's pip: `pip install -e '.[EXTRA,...]'` from the clone links what that install would add (offline, as
# its site-packages was built); anything else is refused, so the README cannot rely on an install this test cannot make.
PIP = """
import json, re, sys
from pathlib import Path
venv = Path(__file__).parent
site, args = Path(sys.argv[1]), sys.argv[2:]
wanted = re.fullmatch(r"(?:-e|--editable) \\.\\[([\\w,-]+)\\]", " ".join(args[1:])) if args[:1] == ["install"] else None
if not wanted:
    sys.exit(f"the README test's pip installs only this clone's extras (pip install -e '.[EXTRA]'), not {args}")
extras = json.loads((venv / "extras.json").read_text())
for extra in wanted.group(1).split(","):
    if extra not in extras:
        sys.exit(f"the README test's environment does not have the [{extra}] extra installed")
    for name, target in extras[extra].items():
        if not (site / name).exists():
            (site / name).symlink_to(target)
print(f"installed the clone with {wanted.group(1)}")
"""


def fresh_venv(root: Path) -> Path:
    """`root/.venv` as the README's first command leaves it: the clone with the `[train]` extra, nothing else."""
    venv = root / ".venv"
    install_site(venv / SITE, root, "train")
    extras = configparser.ConfigParser()
    extras.read(root / "setup.cfg")
    links = {}
    for extra in extras["options.extras_require"]:
        try:
            links[extra] = {k: str(v) for k, v in distribution_links(extra).items()}
        except (
            metadata.PackageNotFoundError
        ):  # an extra the dev setup leaves out (openvino): the venv's pip refuses it
            continue
    (venv / "extras.json").write_text(json.dumps(links))
    (venv / "pip.py").write_text(PIP)
    (venv / "bin").mkdir()
    for name, command in LAUNCHERS.items():
        launcher = venv / "bin" / name
        variables = {"VENV": venv, "SITE": venv / SITE, "PYTHON": sys.executable}
        launcher.write_text(
            "#!/bin/sh\n" + "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in variables.items()) + command + "\n"
        )
        launcher.chmod(0o755)
    return venv


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    """The repository's tracked files, as a fresh clone has them, with the `.venv` the README's first command makes."""
    root = tmp_path_factory.mktemp("readme") / "clone"  # beside it, the private HF_HOME of the blocks
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    fresh_venv(root)
    return root


def test_the_readme_venv_is_the_train_install(fresh_copy: Path):
    """What the blocks run in: the package and `[train]` importable, the other extras' and this test's tools not."""
    code = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
    names = ["modeling_minibert", "accelerate", "seqeval", "onnxruntime", "pytest", "nbclient", "hypothesis"]
    python = fresh_copy / ".venv" / "bin" / "python"
    result = subprocess.run([python, "-c", code, *names], cwd=fresh_copy.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "['modeling_minibert', 'accelerate', 'seqeval']"
    # ... which is what `.ci/setup` installs when given no argument
    assert re.search(r"else\n\s+\"\$py\" -m pip install -q -e '\.\[train\]'\nfi", (REPO / ".ci" / "setup").read_text())


# The blocks run about fifteen jobs, three fine-tunings to their results among them: about 3 CPU-minutes, which a
# machine whose cores are shared with other work stretches past the suite's default 10-minute hang guard.
@pytest.mark.slow(seconds=190)  # one worker's time (pytest --durations): orders the suite, tests/conftest.py
@pytest.mark.timeout(2400)
def test_readme_and_docs_blocks_run_as_pasted(fresh_copy: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HOME=str(fresh_copy.parent / "hf-home"),
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
    )
    first = blocks(readme())[0]
    assert first.skip and QUICK_START.strip() in first.code, (
        "the README's first block no longer runs `minibert pretrain`"
    )
    ran, printed = {QUICK_START}, ""
    run_block(fresh_copy, env, "bash", QUICK_START, "README line 1 (its first block's pretraining)")
    for document in runnable_documents():
        for block in blocks(document.read_text(encoding="utf-8")):
            if block.skip or block.language not in ("bash", "python") or block.code in ran:
                continue
            stdout = run_block(fresh_copy, env, block.language, block.code, f"{name(document)} line {block.line}")
            ran.add(block.code)
            printed += stdout if block.language == "python" else ""
    assert len(ran) >= 15, f"only {len(ran)} blocks ran"
    assert_examples_work(fresh_copy, printed)
    assert not unignored_new_files(fresh_copy), "the documented commands leave files git would show as untracked"


def run_block(root: Path, env: dict[str, str], language: str, code: str, where: str) -> str:
    """Run one block from `root` (a bash block with its training shortened); its stdout."""
    if language == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", shortened(code)]
    else:
        argv = [str(root / ".venv" / "bin" / "python"), "-c", code]
    # a hang guard: the block of three fine-tunings passed 600 s at load 14 on 2 cores
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1500)
    print(f"{where}: {time.perf_counter() - started:.1f} s")  # with -s: where the test's time goes
    assert result.returncode == 0, f"{where}:\n{code}\n{result.stderr[-3000:]}"
    return result.stdout


def assert_examples_work(root: Path, printed: str) -> None:
    for folder, floors in EXAMPLE_FLOORS.items():
        results = json.loads((root / folder / "all_results.json").read_text())
        reached = {name: results[name] for name in floors}
        print(f"{folder}: {reached}")  # with -s: each example's result, as the closing notes quote them
        assert all(reached[name] >= floor for name, floor in floors.items()), f"{folder}: {reached}, floors {floors}"
    print(printed)
    missing = [shown for shown in PIPELINE_SHOWS if shown not in printed]
    assert not missing, f"the pipelines printed {printed!r}, without {missing}"


def unignored_new_files(root: Path) -> list[str]:
    """Files under `root` that are neither tracked nor ignored by the repository's .gitignore (the venv aside)."""
    tracked = set(
        subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\n")
    )
    new = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) != root / ".venv"]
        new += [name for name in (str(Path(folder, f).relative_to(root)) for f in files) if name not in tracked]
    check = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=REPO,
        input="\n".join(new),
        capture_output=True,
        text=True,
    )
    return sorted(set(new) - set(check.stdout.split("\n")))


def test_every_minibert_command_shown_parses():
    """The long runs the documents show but the tests cannot run (skipped blocks, ```text recipes) still take their
    flags as written: a required flag left out or an option renamed fails here, not on a user's machine."""
    commands = [
        (f"{name(d)} line {line}", argv)
        for d in runnable_documents()
        for line, argv in minibert_commands(d.read_text(encoding="utf-8"))
    ]
    assert len(commands) >= 20 and {argv[0] for _, argv in commands} >= {
        "pretrain",
        "finetune",
        "distill",
        "fill-mask",
        "train-tokenizer",
        "convert-bert",
        "export-onnx",
    }
    problems = [f"{where}: {problem}" for where, argv in commands if (problem := command_problem(argv))]
    assert problems == []


def test_a_command_with_a_renamed_flag_or_without_a_required_one_is_caught():
    assert (
        command_problem(
            [
                "finetune",
                "--task",
                "sequence-classification",
                "--model_name_or_path",
                "m",
                "--train_file",
                "t.csv",
                "--output_dir",
                "o",
            ]
        )
        is None
    )
    assert command_problem(["finetune", "--epochs", "3"]) == (
        "`minibert finetune --epochs 3` does not parse: unrecognized "
        "arguments: --epochs 3 (see minibert finetune --help)"
    )
    assert (
        command_problem(["finetune", "--model_name_or_path", "m"])
        == "`minibert finetune --model_name_or_path m` lacks ['--task']"
    )


def test_the_readme_states_no_test_count_or_suite_time():
    """Such figures drift with every test added and every machine; the Tests section says how to get them instead."""
    section = readme().split("\n## Tests\n", 1)[1]
    suite = next(paragraph for paragraph in section.split("\n\n") if "pytest" in paragraph)  # the suite's paragraph
    assert not re.search(r"\d[\d,]* tests|\d+(\.\d+)? (minutes|seconds|hours)", suite), suite


def test_only_the_setup_and_long_runs_are_skipped():
    skipped = [
        block.skip for d in runnable_documents() for block in blocks(d.read_text(encoding="utf-8")) if block.skip
    ]
    assert skipped and all(len(reason) > 10 for reason in skipped), skipped


def test_the_readme_is_a_short_page():
    lines = readme().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines; the docs pages hold the rest"


def test_the_readme_links_lead_somewhere():
    """Its relative links (docs pages, the benchmarks, the changelog) name files that exist."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    assert not [link for link in local if not (REPO / link).exists()]
