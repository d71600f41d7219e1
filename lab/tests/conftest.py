"""The lab's tests run as the product's do (tests/conftest.py says why): one torch thread per process, the `auto`
precision's measurements in a folder of the run's own, a seeded start."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    os.environ.setdefault("MINIBERT_CACHE", tempfile.mkdtemp(prefix="minibert-measured-"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
