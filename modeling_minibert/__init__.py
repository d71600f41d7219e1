"""Mini-BERT: a small, fast BERT encoder as transformers classes.

Importing the package registers the config and every head with transformers' Auto classes, and marks them
for `trust_remote_code` saving (config `auto_map` + source files next to the weights).
"""

import transformers
from transformers import AutoConfig

from . import modeling_minibert as _modeling
from .configuration_minibert import MiniBertConfig
from .modeling_minibert import *  # noqa: F403  (the base class, the output classes and every head in AUTO_MAP)
from .modeling_minibert import AUTO_MAP

# transformers' Auto class -> Mini-BERT head, derived from AUTO_MAP (the one list of heads).
AUTO_CLASSES = {
    getattr(transformers, auto_name): getattr(_modeling, target.split(".")[-1]) for auto_name, target in AUTO_MAP.items()
}

AutoConfig.register(MiniBertConfig.model_type, MiniBertConfig, exist_ok=True)
MiniBertConfig.register_for_auto_class()
for _auto_class, _model_class in AUTO_CLASSES.items():
    _auto_class.register(MiniBertConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = ["AUTO_CLASSES", "MiniBertConfig", *_modeling.__all__]
