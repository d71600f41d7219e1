"""Fixtures every test module gets, and how the suite is run (threads, order). Shared helpers and module-level
fixtures live in `tests/fixtures/`, named for their purpose and imported as `from fixtures.NAME import ...`."""

from __future__ import annotations

import os

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    """One torch/OpenMP thread in the test process and every process it starts (unless OMP_NUM_THREADS says
    otherwise), set here where the test process starts: the suite runs a process per core (pytest-xdist, setup.cfg)
    on tiny models, where a second thread per process only busy-waits for a core another process holds."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules holding a `slow` test first, in their order: pytest-xdist gives each module to one worker
    (`--dist loadscope`), and a long module started last would leave the other workers idle while it runs."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable: the order within stays


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
