"""Fixtures and helpers shared by the pretraining test modules (a tiny corpus, tokenizer and recipe).

Imported by `test_pretraining_loop.py` and `test_pretraining_run_folder.py` (`from pretraining_fixtures import *`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from modeling_minibert.pretraining.data import load_bbc_news
from modeling_minibert.pretraining.run_folder import METRICS_FILE
from tokenization import train_tokenizer

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~45 BBC articles as a text file, one document per block (paragraph breaks become line breaks)."""
    path = tmp_path_factory.mktemp("corpus") / "news.txt"
    docs = load_bbc_news()[::50]
    path.write_text("\n\n".join(doc.replace("\n\n", "\n") for doc in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(corpus, tmp_path_factory) -> Path:
    # Given to every run: a run's own vocabulary would differ between processes (tokenizers' trainer breaks
    # ties in hash order), and the resume tests compare two runs.
    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer([corpus], vocab_size=800, output_dir=path, show_progress=False, overwrite=True)
    return path


@pytest.fixture(scope="module")
def tiny(corpus, tokenizer_dir) -> dict:
    return dict(
        train_file=[str(corpus)], tokenizer_name=str(tokenizer_dir), config_overrides=TINY_MODEL, max_seq_length=32,
        per_device_train_batch_size=8, per_device_eval_batch_size=8, validation_split_percentage=10,
        logging_steps=1, eval_steps=10, save_steps=10, warmup_steps=5, disable_tqdm=True, report_to=["none"],
        dupe_factor=1,
    )


pytestmark = pytest.mark.usefixtures("one_thread")


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"),
                TOKENIZERS_PARALLELISM="false", **extra)


def cli_args(**kwargs) -> list[str]:
    argv = []
    for key, value in kwargs.items():
        if isinstance(value, bool):
            argv += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            argv += [f"--{key}", *map(str, value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def read_metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / METRICS_FILE).read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


PYTHON = sys.executable
