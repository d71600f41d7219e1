"""Fixtures every test module gets. Shared helpers and module-level fixtures live in `tests/fixtures/`, named for
their purpose and imported as `from fixtures.NAME import ...`."""

from __future__ import annotations

import pytest
import torch


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
