"""bertkit: BERT (Devlin et al., 2018) from scratch in PyTorch.

Public names are imported lazily, so that ``import bertkit`` (and ``bertkit.BertClient``) stays light:
the client never pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BertConfig": "bertkit.config",
    "BertModel": "bertkit.modeling",
    "BertForPreTraining": "bertkit.modeling",
    "BertForMaskedLM": "bertkit.modeling",
    "BertForNextSentencePrediction": "bertkit.modeling",
    "BertForSequenceClassification": "bertkit.modeling",
    "BertForTokenClassification": "bertkit.modeling",
    "BertForQuestionAnswering": "bertkit.modeling",
    "BertForMultipleChoice": "bertkit.modeling",
    "ModernBertConfig": "bertkit.modeling_modernbert",
    "ModernBertModel": "bertkit.modeling_modernbert",
    "ModernBertForMaskedLM": "bertkit.modeling_modernbert",
    "ModernBertForSequenceClassification": "bertkit.modeling_modernbert",
    "ModernBertForTokenClassification": "bertkit.modeling_modernbert",
    "ModernBertForQuestionAnswering": "bertkit.modeling_modernbert",
    "ModernBertForMultipleChoice": "bertkit.modeling_modernbert",
    "BertTokenizer": "bertkit.tokenization",
    "FastTokenizer": "bertkit.tokenization",
    "load_tokenizer": "bertkit.tokenization",
    "Encoding": "bertkit.tokenization",
    "train_vocab": "bertkit.tokenization",
    "Encoder": "bertkit.features",
    "load_pipeline": "bertkit.pipelines",
    "BertClient": "bertkit.serve.client",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
