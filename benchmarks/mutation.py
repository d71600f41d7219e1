"""Mutation testing, one module at a time, bounded in time; outside CI.

mutmut plants small bugs ("mutants": `<` for `<=`, `None` for a value, a dropped argument...) in one source file and
runs the tests that cover the changed function. A mutant that no test notices ("survived") marks behaviour the suite
does not check. This script runs mutmut over each module in `MODULES` against that module's own tests, samples the
mutants when there are more than `--max_mutants` (seeded, so a rerun checks the same ones), stops a module after
`--budget_minutes`, and writes the per-module counts to `--output` (benchmarks/results/mutation.json holds the
committed ones), with the surviving mutants' diffs and the equivalent mutants (no observable change) listed in
`EQUIVALENT` below with their reason.

mutmut is not part of any extra (mutation testing is a habit, not a CI gate); install it into the dev venv first:

    pip install "mutmut>=3.8,<4"
    OMP_NUM_THREADS=1 python -m benchmarks.mutation                    # every module in MODULES
    OMP_NUM_THREADS=1 python -m benchmarks.mutation --module tokenization/wordpiece.py --max_mutants 40

mutmut copies the project into `mutants/` beside the code it mutates; this script runs it in a temporary copy of the
work tree (tracked and untracked-but-not-ignored files, uncommitted edits included), so nothing is written in the work
tree except the results file, and the copy is removed at the end (`--keep` keeps it to look at `mutmut show NAME`).

Score = (killed + timeout + crashed) / (checked - equivalent): a mutant that makes the tests hang or crash is caught.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import default_output, write_results

ROOT = Path(__file__).resolve().parent.parent

# The one table: module -> the pytest arguments that select the tests covering it (its own test module; a `-k`
# expression drops tests that cannot run under mutmut).
MODULES: dict[str, list[str]] = {
    # torch.compile cannot trace through mutmut's trampolines (the function that picks the mutant at run time)
    "modeling_minibert/modeling_minibert.py": ["tests/modeling/test_modeling_minibert.py", "-k", "not torch_compile"],
    "tokenization/wordpiece.py": ["tests/tokenization/test_tokenization.py"],
    "modeling_minibert/training/finetuning/metrics.py": ["tests/training/finetuning/test_finetuning_metrics.py"],
    "modeling_minibert/training/pretraining/data.py": ["tests/training/pretraining/test_pretraining_data.py"],
    "modeling_minibert/training/pretraining/loop.py": ["tests/training/pretraining/test_pretraining_loop.py"],
}

# Mutants that change no observable behaviour, by mutmut's name, with the mutated line as mutmut shows it (so a
# stale entry -- the function changed and the number now names another mutant -- is reported, not trusted).
EQUIVALENT: dict[str, tuple[str, str]] = {
    "modeling_minibert.modeling_minibert.xǁMiniBertIntermediateǁ__init____mutmut_8": (
        "IN_PLACE_ACTIVATIONS.get(None)",
        "the in-place activation only saves memory: the out-of-place one gives the same values",
    ),
    "modeling_minibert.training.finetuning.metrics.x_token_classification_metrics__mutmut_83": (
        "output_dict=True, zero_division=None)",
        "only the report's F1 is read: a type with a 0/0 precision or recall has "
        "0 for the other, so its F1 is 0 whatever zero_division sets",
    ),
    "modeling_minibert.training.finetuning.metrics.x_token_classification_metrics__mutmut_115": (
        '+        "macro_f1": float(f1_score(flat_ref, flat_pred, average="macro", )),',
        "F1 = 2TP / (2TP + FP + FN) "
        "is never 0/0 for a tag that occurs in the references or predictions, the only tags scored",
    ),
    "tokenization.wordpiece.x_build_backend__mutmut_8": (
        'unk_token=SPECIAL_TOKENS["unk_token"],',
        'tokenizers\' WordPiece defaults unk_token to "[UNK]", the same token',
    ),
    "tokenization.wordpiece.x_build_backend__mutmut_9": (
        "continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,",
        'WordPiece\'s default continuing_subword_prefix is "##"',
    ),
    "tokenization.wordpiece.x_build_backend__mutmut_39": (
        "single=None,",
        "transformers' BertTokenizer sets its own [CLS] $A [SEP] template when it wraps the backend, "
        "and make_tokenizer is the only caller that passes a vocabulary",
    ),
    "tokenization.wordpiece.x_build_backend__mutmut_23": (
        "+        handle_chinese_chars=True,",
        "BertNormalizer's default clean_text is True",
    ),
}

# Folders and files the tests read besides the packages (mutmut copies tests/, setup.cfg and pyproject.toml itself).
ALSO_COPY = ["tools", "benchmarks", "examples", "notebooks", "README.md"]
SOURCE_PATHS = ["modeling_minibert", "tokenization"]


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("mutmut", "pytest", "torch", "transformers", "tokenizers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _copy_work_tree(destination: Path) -> None:
    """Copy what git would see (tracked plus untracked, not ignored), so local edits are tested too."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source = ROOT / name
        if not source.is_file():  # deleted in the work tree but still in the index
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _write_mutmut_config(project: Path, module: str, tests: list[str]) -> None:
    # mutmut reads [tool.mutmut] from pyproject.toml before setup.cfg; the copy gets a section for this module only.
    section = f"""
[tool.mutmut]
source_paths = {_toml_list(SOURCE_PATHS)}
only_mutate = {_toml_list([module])}
also_copy = {_toml_list([p for p in ALSO_COPY if (project / p).exists()])}
pytest_add_cli_args_test_selection = {_toml_list(tests)}
# in mutmut's own process: setup.cfg's pytest-xdist workers would run the tests where mutmut cannot see them
pytest_add_cli_args = ["-p", "no:cacheprovider", "-n", "0"]
# torch's thread pools are not fork-safe: fork mutants from a server that never ran a test
process_isolation = "forkserver"
use_git_change_detection = false
"""
    with open(project / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write(section)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # the mutated copy, not this work tree, must be what the tests import
    env.pop("PYTHONPATH", None)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    return env


def _mutmut(project: Path, args: list[str], timeout: float | None = None) -> tuple[int | None, str]:
    """Run mutmut in its own process group (so a budget stop ends its workers too); None = stopped by the budget."""
    executable = Path(sys.executable).with_name("mutmut")
    command = [str(executable) if executable.exists() else "mutmut", *args]
    process = subprocess.Popen(
        command,
        cwd=project,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        return None, output


def _read_meta(project: Path, module: str) -> dict[str, int | None]:
    meta = project / "mutants" / (module + ".meta")
    if not meta.exists():
        return {}
    return json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]


def run_module(module: str, args: MutationArguments, workdir: Path) -> dict:
    from mutmut.stats import status_by_exit_code

    tests = MODULES[module]
    project = workdir / module.replace("/", "_")
    project.mkdir()
    _copy_work_tree(project)
    _write_mutmut_config(project, module, tests)
    started = time.monotonic()
    deadline = started + args.budget_minutes * 60

    # Pass 1: generate the mutants and record which tests reach which function (cached for pass 2). A filter that
    # matches nothing stops mutmut right after that, before it tests any mutant.
    code, output = _mutmut(
        project,
        ["run", "--max-children", str(args.max_children), "__list_mutants_only__"],
        timeout=max(deadline - time.monotonic(), 1),
    )
    names = sorted(_read_meta(project, module))
    if not names:
        raise RuntimeError(f"mutmut generated no mutants for {module} (exit {code}):\n{output[-3000:]}")

    sample = names
    if args.max_mutants and len(names) > args.max_mutants:
        sample = sorted(random.Random(args.seed).sample(names, args.max_mutants))
    code, output = _mutmut(
        project,
        ["run", "--max-children", str(args.max_children), *sample],
        timeout=max(deadline - time.monotonic(), 1),
    )
    (project / "mutmut-run.log").write_text(output, encoding="utf-8")
    seconds = time.monotonic() - started

    exit_codes = _read_meta(project, module)
    if code is not None and all(exit_codes.get(name) is None for name in sample):
        raise RuntimeError(f"mutmut checked no mutant of {module} (exit {code}):\n{output[-3000:]}")
    counts = {"killed": 0, "timeout": 0, "crashed": 0, "survived": 0, "suspicious": 0, "no_tests": 0, "not_checked": 0}
    survivors = []
    for name in sample:
        status = status_by_exit_code[exit_codes.get(name)]
        key = {
            "segfault": "crashed",
            "no tests": "no_tests",
            "not checked": "not_checked",
            "check was interrupted by user": "not_checked",
            "skipped": "not_checked",
            "caught by type check": "killed",
        }.get(status, status)
        counts[key] += 1
        if key in ("survived", "suspicious", "no_tests"):
            survivors.append(name)

    equivalent, stale, survived = [], [], []
    for name in survivors:
        shown = _mutmut(project, ["show", name], timeout=120)[1]
        diff = "\n".join(
            line for line in shown.splitlines() if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        )
        if name in EQUIVALENT:
            line, reason = EQUIVALENT[name]
            if line in diff:
                equivalent.append({"mutant": name, "reason": reason, "diff": diff})
                continue
            stale.append(name)
        survived.append({"mutant": name, "status": status_by_exit_code[exit_codes.get(name)], "diff": diff})

    checked = len(sample) - counts["not_checked"]
    caught = counts["killed"] + counts["timeout"] + counts["crashed"]
    scored = checked - len(equivalent)
    return {
        "tests": tests,
        "mutants_total": len(names),
        "mutants_sampled": len(sample),
        "sampled": len(sample) < len(names),
        "seed": args.seed,
        "budget_minutes": args.budget_minutes,
        "budget_exhausted": code is None,
        "checked": checked,
        **counts,
        "equivalent": len(equivalent),
        "score": round(caught / checked, 3) if checked else None,
        "score_excluding_equivalent": round(caught / scored, 3) if scored else None,
        "seconds": round(seconds, 1),
        "equivalent_mutants": equivalent,
        "surviving_mutants": survived,
        "stale_equivalent_entries": stale,
    }


def _percent(score: float | None) -> str:
    return "n/a" if score is None else f"{score:.0%}"


def readme_table(results: dict) -> str:
    """The README's table of `results` (the contents of mutation.json), one row per module, in `MODULES` order."""
    lines = [
        "| module | mutants checked (of all) | killed | timeout or crash | survived | equivalent | score | minutes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    modules = results["modules"]
    for module in sorted(modules, key=lambda m: list(MODULES).index(m) if m in MODULES else len(MODULES)):
        r = modules[module]
        lines.append(
            f"| `{module}` | {r['checked']} ({r['mutants_total']}) | {r['killed']} | {r['timeout'] + r['crashed']} "
            f"| {r['survived'] + r['suspicious'] + r['no_tests'] - r['equivalent']} | {r['equivalent']} "
            f"| {_percent(r['score_excluding_equivalent'])} | {r['seconds'] / 60:.0f} |"
        )
    return "\n".join(lines)


@dataclass
class MutationArguments:
    """The script's options (HfArgumentParser, as every command of the project)."""

    module: list[str] = field(
        default_factory=list,
        metadata={
            "help": "modules to mutate (default: every module in MODULES)",
            "nargs": "+",
            "choices": sorted(MODULES),
        },
    )
    max_mutants: int = field(default=80, metadata={"help": "seeded sample size per module; 0 = every mutant"})
    seed: int = field(default=0)
    budget_minutes: float = field(
        default=15.0, metadata={"help": "wall-clock limit per module; unchecked mutants are left out of the score"}
    )
    max_children: int = field(default=2, metadata={"help": "mutants tested at once"})
    output: Path = field(
        default=default_output("mutation"),
        metadata={
            "help": "the results JSON (modules run before stay in it); the committed one is benchmarks/results/mutation.json"
        },
    )
    keep: bool = field(default=False, metadata={"help": "keep the temporary copy (prints its path)"})


def main(argv: list[str] | None = None) -> None:
    built = parser(MutationArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    try:
        import mutmut  # noqa: F401
    except ImportError:
        built.exit(2, 'mutation: error: mutmut is not installed; pip install "mutmut>=3.8,<4"\n')

    modules = args.module or list(MODULES)
    results = json.loads(args.output.read_text(encoding="utf-8")) if args.output.exists() else {}
    results.setdefault("modules", {})
    workdir = Path(tempfile.mkdtemp(prefix="minibert-mutation-"))
    try:
        for module in modules:
            print(f"mutating {module} against {' '.join(MODULES[module])} ...", flush=True)
            result = run_module(module, args, workdir)
            results["modules"][module] = result
            print(
                f"  {result['checked']} checked, score {result['score_excluding_equivalent']}, "
                f"{len(result['surviving_mutants'])} survived, {result['seconds']:.0f} s",
                flush=True,
            )
            for survivor in result["surviving_mutants"]:
                print(f"  survived: {survivor['mutant']}\n    " + survivor["diff"].replace("\n", "\n    "))
            command = "OMP_NUM_THREADS=1 python -m benchmarks.mutation " + " ".join(
                argv if argv is not None else sys.argv[1:]
            )
            # Each module records its own run, since modules may be rerun one at a time; the file's run block is
            # the newest (benchmarks/report.py: the one results format).
            result.update(
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                command=command.split(" --output")[0],
                versions=_versions(),
            )
            write_results(args.output, {k: v for k, v in results.items() if k != "run"}, command=command)
    finally:
        if args.keep:
            print(f"kept the mutated copies in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(readme_table(results))


if __name__ == "__main__":
    main()
