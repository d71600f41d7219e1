"""A package face whose names load on first use: `from modeling_minibert.training import finetune` imports the
fine-tuning job (and the [train] extra it needs) only then, so that importing a face stays light.

transformers has `_LazyModule` for the same purpose, but it is private and replaces the module object; a module
`__getattr__` (PEP 562) is the public way, and this is the one place that writes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `names[name]` (a module under `package`) on first use of
    `name` and returns its attribute of that name."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{names[name]}"), name)

    return __getattr__
