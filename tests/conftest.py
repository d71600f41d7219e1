"""Shared fixtures: tiny configs and a clean environment for fresh-process checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# Small enough to run in milliseconds, large enough to exercise every code path (several heads and layers).
TINY = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=24,
)


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


def clean_env(**extra: str) -> dict[str, str]:
    """An environment in which this repository is not importable (no PYTHONPATH), for fresh-process checks."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}, **extra)
    return env


# Makes the project's packages unimportable in a fresh interpreter even when they are pip-installed (editable
# installs put a finder on sys.meta_path), so a check proves that a saved folder works on its own.
BLOCK_PACKAGE = """
import importlib.abc, sys
class _BlockProject(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("modeling_minibert", "tokenization"):
            raise ModuleNotFoundError(f"{name} is deliberately not importable here")
sys.meta_path.insert(0, _BlockProject())
"""


def run_python(code: str, cwd: Path, without_package: bool = True, **env: str) -> str:
    """Run `code` in a fresh interpreter outside the repository; return stdout, fail with stderr.

    With `without_package`, the project's own packages cannot be imported by that interpreter.
    """
    if without_package:
        code = BLOCK_PACKAGE + code
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def padded_batch(vocab_size: int, batch: int = 3, length: int = 12, seed: int = 0):
    """ids, attention mask with ragged padding (one row full), token types with a second segment."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        mask[row, length - 2 * row - 1 :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    token_types = torch.zeros_like(ids)
    token_types[:, length // 2 :] = 1
    return ids, mask, token_types.masked_fill(mask == 0, 0)


# Rows of `ragged_batch`'s attention mask: (first, end) spans of real tokens in a length-40 row.
RAGGED_SPANS = [[(0, 40)], [(0, 33)], [(20, 40)], [(0, 10), (15, 22)], [(0, 16)], [(0, 9)], [(0, 1)], [(0, 31)]]


def ragged_batch(vocab_size: int, seed: int = 0):
    """ids, mask, token types of 8 rows of length 40 whose real tokens number 40, 33, 20 (left-padded), 17 (with a
    hole), 16, 9, 1 and 31: rows that fall into several of the unpadded encoder's attention buckets."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(len(RAGGED_SPANS), 40, dtype=torch.long)
    for row, spans in enumerate(RAGGED_SPANS):
        for first, end in spans:
            mask[row, first:end] = 1
    ids = torch.randint(5, vocab_size, mask.shape, generator=g) * mask
    token_types = (torch.arange(40) >= 20).long().expand_as(mask) * mask
    return ids, mask, token_types
