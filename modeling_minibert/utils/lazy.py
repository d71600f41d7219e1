"""A package face whose names load on first use: `from modeling_minibert.training import finetune` imports the
fine-tuning job (and the [train] extra it needs) only then, so that importing a face stays light.

transformers has `_LazyModule` for the same purpose, but it is private and replaces the module object; a module
`__getattr__` (PEP 562) is the public way, and this is the one place that writes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_face(package: str, names_by_module: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], list[str]]:
    """A module `__getattr__` for `package`, and its `__all__`: each name in `names_by_module[module]` is imported
    from `package.module` on first use. A name must not be a submodule's: importing that submodule would set the
    package attribute to the module (tests/cross_cutting/test_layout.py checks the faces)."""
    module_of = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)

    return __getattr__, list(module_of)
