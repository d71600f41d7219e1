"""Mini-BERT: a small, fast BERT encoder as transformers classes.

Importing the package registers the config and every head with transformers' Auto classes, and marks them
for `trust_remote_code` saving (config `auto_map` + source files next to the weights).
"""

import gc as _gc
import sys as _sys


def _interrupted_while_importing(kind, value, traceback):
    """A Ctrl-C while this package imports (seconds: torch, transformers), left uncaught, as one line rather than a
    traceback of the import machinery: the `minibert` command is at that point, before its own handling runs."""
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted (while importing modeling_minibert)", file=_sys.stderr)
    else:
        _hook(kind, value, traceback)


# Installed for the imports below only, and left in place only if they are interrupted (or fail, for which it defers
# to the hook it replaced).
_hook, _sys.excepthook = _sys.excepthook, _interrupted_while_importing
# The cycle collector paused while torch and transformers import: they leave about 400,000 long-lived objects,
# which each of its full passes would walk again (half a second of a 6-second import). The caller's setting comes
# back whatever happens, a failed import included.
_collecting = _gc.isenabled()
_gc.disable()
try:
    import transformers
    from transformers import AutoConfig

    from . import modeling_minibert as _modeling
    from .configuration_minibert import MiniBertConfig
    from .modeling_minibert import *  # noqa: F403  (the base class, the output classes and every head in AUTO_MAP)
    from .modeling_minibert import AUTO_MAP
finally:
    if _collecting:
        _gc.enable()

_sys.excepthook = _hook

# transformers' Auto class -> Mini-BERT head, derived from AUTO_MAP (the one list of heads).
AUTO_CLASSES = {
    getattr(transformers, auto_name): getattr(_modeling, target.split(".")[-1])
    for auto_name, target in AUTO_MAP.items()
}

AutoConfig.register(MiniBertConfig.model_type, MiniBertConfig, exist_ok=True)
MiniBertConfig.register_for_auto_class()
for _auto_class, _model_class in AUTO_CLASSES.items():
    _auto_class.register(MiniBertConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = ["AUTO_CLASSES", "MiniBertConfig", *_modeling.__all__]
