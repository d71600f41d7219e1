"""Mini-BERT: a small, fast BERT encoder as transformers classes.

Importing the package registers the config and every head with transformers' Auto classes, and marks them
for `trust_remote_code` saving (config `auto_map` + source files next to the weights).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForNextSentencePrediction,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_minibert import MiniBertConfig
from .modeling_minibert import (
    MiniBertForMaskedLM,
    MiniBertForMultipleChoice,
    MiniBertForNextSentencePrediction,
    MiniBertForPreTraining,
    MiniBertForQuestionAnswering,
    MiniBertForSequenceClassification,
    MiniBertForTokenClassification,
    MiniBertModel,
    MiniBertPreTrainedModel,
)

AUTO_CLASSES = {
    AutoModel: MiniBertModel,
    AutoModelForPreTraining: MiniBertForPreTraining,
    AutoModelForMaskedLM: MiniBertForMaskedLM,
    AutoModelForNextSentencePrediction: MiniBertForNextSentencePrediction,
    AutoModelForSequenceClassification: MiniBertForSequenceClassification,
    AutoModelForMultipleChoice: MiniBertForMultipleChoice,
    AutoModelForTokenClassification: MiniBertForTokenClassification,
    AutoModelForQuestionAnswering: MiniBertForQuestionAnswering,
}

AutoConfig.register(MiniBertConfig.model_type, MiniBertConfig, exist_ok=True)
MiniBertConfig.register_for_auto_class()
for _auto_class, _model_class in AUTO_CLASSES.items():
    _auto_class.register(MiniBertConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)

__all__ = [
    "AUTO_CLASSES",
    "MiniBertConfig",
    "MiniBertForMaskedLM",
    "MiniBertForMultipleChoice",
    "MiniBertForNextSentencePrediction",
    "MiniBertForPreTraining",
    "MiniBertForQuestionAnswering",
    "MiniBertForSequenceClassification",
    "MiniBertForTokenClassification",
    "MiniBertModel",
    "MiniBertPreTrainedModel",
]
