"""The model registry: the architectures bertkit knows, and the one place that asks "which architecture is this?".

An :class:`Architecture` names, for one ``model_type`` of ``config.json``, its modeling module, its config class,
its classes per head role, and what its graphs take as inputs. Everything else (loaders, pipelines, export, the
feature extractor, the recipes) asks the registry instead of testing ``model_type`` itself, so a new architecture
is one entry here plus its modeling file.

    arch = models.of_directory("runs/my-bert")          # the directory's architecture (BERT when config.json
    cls = arch.model_class("sequence_classification")   # says nothing); its class for a head role
    cls = models.for_directory(BertModel, directory)     # a BertFor* class, or its counterpart in the directory's
                                                         # architecture

Classes are imported when first asked for, so ``bertkit --help`` imports no torch.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import ConfigError

CONFIG_NAME = "config.json"

# an encoder layer's index in a parameter name, in every registered architecture's layout (BERT's
# ``bert.encoder.layer.N.``, ModernBERT's ``model.layers.N.``, a bare encoder's ``layers.N.``): group 1 is N
LAYER_KEY = re.compile(r"(?:^|\.)layers?\.(\d+)\.")

# BERT's class name -> the head role it plays; a task names its head by BERT's class (``TaskBase.head``)
ROLES = {
    "BertModel": "base",
    "BertForPreTraining": "pretraining",
    "BertForMaskedLM": "masked_lm",
    "BertForNextSentencePrediction": "next_sentence",
    "BertForSequenceClassification": "sequence_classification",
    "BertForTokenClassification": "token_classification",
    "BertForQuestionAnswering": "question_answering",
    "BertForMultipleChoice": "multiple_choice",
}


@dataclass(frozen=True)
class Architecture:
    """One architecture: ``model_type`` -> modeling module, config class, a class per head role, graph inputs."""

    model_type: str
    module: str
    config_name: str
    classes: dict[str, str]  # head role -> class name in ``module``
    inputs: tuple[str, ...]  # what its graphs take (ModernBERT has no segment embeddings)
    has_pooler: bool
    head_keys: dict[str, str]  # head role -> its output layer's weight (what a fine-tuned directory must hold)
    features_role: str  # the class the Encoder loads: the encoder with its MLM head (and pooler, where it has one)
    mlm_keys: tuple[str, ...]  # key prefixes of the MLM head: absent from a checkpoint = no fill-mask
    pooler_keys: tuple[str, ...]  # key prefixes of the pooler: absent = no pooled output
    preset_prefix: str = "bert-"  # its size presets' names (BERT's names map by size: bert-mini -> modernbert-mini)
    absolute_positions: bool = True  # a learned position table (ModernBERT's positions are rotary)
    ffn_matmuls: int = 2  # H x I matmuls per feed-forward block (FLOPs): 2, or 3 for a gated (GeGLU) one
    note: str = ""  # why a role is missing, for the refusal

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config_name)

    def model_class(self, role: str, where: Any = None) -> type:
        """The class for a head ``role`` (see ``ROLES``); a role the architecture lacks is a ConfigError naming
        ``where`` (a directory, say)."""
        if role not in self.classes:
            wanted = next((k for k, v in ROLES.items() if v == role), role)
            prefix = f"{where}: " if where is not None else ""
            raise ConfigError(
                f"{prefix}a {self.model_type} model; {wanted} has no {self.model_type} counterpart{self.note}"
            )
        return getattr(importlib.import_module(self.module), self.classes[role])

    def preset(self, model_size: str) -> str:
        """A ``--model-size`` name in this architecture's presets: its own names as they are, BERT's mapped by size
        (``bert-mini`` -> ``modernbert-mini``), so one default size works for every architecture."""
        if model_size.startswith(self.preset_prefix):
            return model_size
        return self.preset_prefix + model_size.removeprefix("bert-")

    def class_names(self) -> set[str]:
        return set(self.classes.values())


REGISTRY: dict[str, Architecture] = {
    "bert": Architecture(
        model_type="bert",
        module="bertkit.modeling",
        config_name="BertConfig",
        classes={role: name for name, role in ROLES.items()},
        inputs=("input_ids", "attention_mask", "token_type_ids"),
        has_pooler=True,
        head_keys={
            "sequence_classification": "classifier.weight",
            "token_classification": "classifier.weight",
            "question_answering": "qa_outputs.weight",
        },
        features_role="pretraining",
        mlm_keys=("cls.predictions.",),
        pooler_keys=("bert.pooler.",),
    ),
    "modernbert": Architecture(
        model_type="modernbert",
        module="bertkit.modeling_modernbert",
        config_name="ModernBertConfig",
        classes={
            "base": "ModernBertModel",
            "masked_lm": "ModernBertForMaskedLM",
            "sequence_classification": "ModernBertForSequenceClassification",
            "token_classification": "ModernBertForTokenClassification",
            "question_answering": "ModernBertForQuestionAnswering",
            "multiple_choice": "ModernBertForMultipleChoice",
        },
        inputs=("input_ids", "attention_mask"),
        has_pooler=False,
        head_keys=dict.fromkeys(
            ("sequence_classification", "token_classification", "question_answering"), "classifier.weight"
        ),
        features_role="masked_lm",
        mlm_keys=("head.", "decoder."),
        pooler_keys=(),
        preset_prefix="modernbert-",
        absolute_positions=False,
        ffn_matmuls=3,  # GeGLU: its input projection is H x 2I
        note=" (ModernBERT has no pooler and no next-sentence head)",
    ),
}
DEFAULT = "bert"  # a config.json without model_type (Google's bert_config.json, old HF files) is BERT's


def get(model_type: str | None) -> Architecture:
    """The architecture of a ``model_type``; None means BERT's. An unknown one is a ConfigError naming it."""
    arch = REGISTRY.get(model_type or DEFAULT)
    if arch is None:
        raise ConfigError(f"model_type {model_type!r} is not one bertkit knows ({', '.join(sorted(REGISTRY))})")
    return arch


def model_type(directory: str | os.PathLike) -> str | None:
    """``model_type`` of a directory's config.json ("bert", "modernbert", ...), None when absent or unreadable (the
    loader then names the problem)."""
    try:
        data = json.loads((Path(directory) / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("model_type") if isinstance(data, dict) else None


def of_directory(directory: str | os.PathLike) -> Architecture:
    """The architecture of a model directory (BERT's when its config.json names none, or is absent)."""
    return REGISTRY.get(model_type(directory) or DEFAULT, REGISTRY[DEFAULT])


def of_config(config: Any) -> Architecture:
    """The architecture of a config object or a config.json dict."""
    kind = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    return REGISTRY.get(kind or DEFAULT, REGISTRY[DEFAULT])


def base_classes() -> tuple[type, ...]:
    """Every architecture's bare encoder class (``BertModel``, ``ModernBertModel``): what an isinstance asks."""
    return tuple(arch.model_class("base") for arch in REGISTRY.values())


def of_preset(name: str) -> Architecture:
    """The architecture whose size presets include ``name`` (``modernbert-tiny``: ModernBERT's; ``bert-tiny``:
    BERT's)."""
    for arch in REGISTRY.values():
        if arch.model_type != DEFAULT and name.startswith(arch.preset_prefix):
            return arch
    return REGISTRY[DEFAULT]


def of_class_name(name: str) -> tuple[Architecture, str] | None:
    """(architecture, head role) of a class name such as ``ModernBertForSequenceClassification``; None when no
    architecture has it."""
    for arch in REGISTRY.values():
        for role, class_name in arch.classes.items():
            if class_name == name:
                return arch, role
    return None


def for_directory(model_class: type, directory: str | os.PathLike) -> type:
    """``model_class`` (a ``BertFor*``), or its counterpart (the same head role) in the architecture of
    ``directory``; a role the architecture lacks is refused naming the directory."""
    arch = of_directory(directory)
    if arch.model_type == DEFAULT:
        return model_class
    return arch.model_class(ROLES.get(model_class.__name__, model_class.__name__), where=directory)
