"""Fixtures every test module gets, and how the suite is run (threads, order). Shared helpers and module-level
fixtures live in `tests/fixtures/`, named for their purpose and imported as `from fixtures.NAME import ...`."""

from __future__ import annotations

import gc
import os
import tempfile

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    """One torch/OpenMP thread in the test process and every process it starts (unless OMP_NUM_THREADS says
    otherwise), set here where the test process starts: the suite runs a process per core (pytest-xdist, setup.cfg)
    on tiny models, where a second thread per process only busy-waits for a core another process holds."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # `auto` precision's measurements (utils/measured.py) are remembered in a folder of the run's own, made where
    # the suite starts (pytest-xdist's workers inherit it), not in the user's Hugging Face cache.
    os.environ.setdefault("MINIBERT_CACHE", tempfile.mkdtemp(prefix="minibert-measured-"))
    os.environ.setdefault(WORKER_NOTES, tempfile.mkdtemp(prefix="minibert-workers-"))  # see worker_notes


# Modules whose tests share no module fixture, so that pytest-xdist may give each test to a worker of its own
# (`--dist loadscope` otherwise keeps a module on one worker): the notebooks, a kernel each, are together the
# longest module, and one worker running all of them behind the README's blocks was the suite's critical path.
INDEPENDENT_TESTS = ("tests/cross_cutting/test_notebooks.py::",)


def scope(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: the test itself in `INDEPENDENT_TESTS`, else what `--dist
    loadscope` groups by (the nodeid up to its last `::`: the module, or the class)."""
    return nodeid if nodeid.startswith(INDEPENDENT_TESTS) else nodeid.rsplit("::", 1)[0]


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a machine without pytest-xdist still runs the suite
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` with each of `INDEPENDENT_TESTS` a unit of its own (tryfirst: before pytest-xdist's own
    choice)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    return Scheduling(config, log)


# What a pytest-xdist worker was doing when it died. A worker that dies (a signal, a C library's exit) takes its
# stderr with it, and pytest-xdist's report of the test it was running can be lost when replacing the worker
# fails; each worker notes its running test and any fatal-signal traceback (faulthandler) in files the controller
# prints when a worker goes down.
WORKER_NOTES = "MINIBERT_TEST_WORKER_NOTES"


def worker_notes(worker: str) -> tuple[str, str]:
    folder = os.environ[WORKER_NOTES]
    return os.path.join(folder, f"{worker}.running"), os.path.join(folder, f"{worker}.faults")


def pytest_sessionstart(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        import faulthandler

        session.config._minibert_faults = open(worker_notes(worker)[1], "w")  # open for the whole session
        faulthandler.enable(file=session.config._minibert_faults, all_threads=True)


def pytest_runtest_logstart(nodeid: str, location) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        with open(worker_notes(worker)[0], "w") as f:
            f.write(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: a worker that died says what it was running and any fault dump."""
    if error is None:
        return
    running, faults = worker_notes(node.gateway.id)
    for label, path in (("was running", running), ("fault dump", faults)):
        if os.path.isfile(path) and os.path.getsize(path):
            with open(path) as f:
                print(f"\n[{node.gateway.id}] {label}:\n{f.read()}", flush=True)


GPU_TESTS_ON_CPU = "MINIBERT_GPU_TESTS_ON_CPU"  # set to 1: the `gpu` tests run on the CPU (a dry run of their code)


def gpu_skip_reason() -> str | None:
    """Why the `gpu` tests cannot run here (no CUDA device, and no dry run asked for), or None."""
    if torch.cuda.is_available() or os.environ.get(GPU_TESTS_ON_CPU) == "1":
        return None
    return f"needs a CUDA GPU (torch {torch.__version__} sees none); {GPU_TESTS_ON_CPU}=1 runs it on the CPU"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`gpu` tests skipped, saying why, where there is no GPU. Then units holding `slow` tests first, the longest
    first (`slow(seconds=...)`: one worker's time, measured): pytest-xdist hands units out in this order, so a long
    one started last would leave the other workers idle while it runs, and the short units fill in beside the long
    ones."""
    reason = gpu_skip_reason()
    for item in items:
        if reason and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=reason))
    cost: dict[str, float] = {}
    counted: set[tuple[str, str]] = set()
    for item in items:
        unit = scope(item.nodeid)
        shared = module_marks(item.module, "slow")
        for mark in item.iter_markers("slow"):
            if mark in shared:  # the module's own mark (its whole time): counted once for the unit
                if (unit, item.module.__name__) in counted:
                    continue
                counted.add((unit, item.module.__name__))
            cost[unit] = cost.get(unit, 0.0) + mark.kwargs.get("seconds", 1.0)
    items.sort(key=lambda item: -cost.get(scope(item.nodeid), 0.0))  # stable: the order within a unit stays


def module_marks(module, name: str) -> list[pytest.Mark]:
    """The marks called `name` that a test module gives all its tests (`pytestmark`)."""
    marks = getattr(module, "pytestmark", [])
    return [
        getattr(m, "mark", m)
        for m in (marks if isinstance(marks, list) else [marks])
        if getattr(m, "name", None) == name
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, the package, the test modules: objects that live to the end)
    moved out of the cycle collector's reach, as `minibert`'s own process does (cli.console_main): its full passes
    during the tests then walk only what the tests made."""
    gc.freeze()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models train fastest on one thread (a second only busy-waits on a shared machine), and seeded runs
    that tests compare with recorded numbers are reproducible on one. Modules that train take it with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
