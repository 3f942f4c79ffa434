"""The model registry (bertkit.models): every entry resolves to real classes of its own architecture, a directory's
architecture is read from its config.json, a missing head role is refused naming the directory, and no module
outside the registry, the modeling files and the config asks which architecture it holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertkit import models
from bertkit.config import ConfigError
from bertkit.modeling import BertForPreTraining, BertForSequenceClassification, BertModel

SRC = Path(__file__).resolve().parents[2] / "src" / "bertkit"


@pytest.mark.parametrize("model_type", sorted(models.REGISTRY))
def test_every_entry_names_classes_of_its_own_architecture(model_type):
    arch = models.REGISTRY[model_type]
    config_class = arch.config_class()
    assert models.of_config(config_class()) is arch  # a default config of the class reads as its architecture
    for role, name in arch.classes.items():
        cls = arch.model_class(role)
        assert cls.__name__ == name
        assert models.of_class_name(name) == (arch, role)
    assert set(arch.head_keys) <= set(arch.classes)
    assert arch.inputs[:2] == ("input_ids", "attention_mask")


def _directory(tmp_path: Path, config: dict | None) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def test_a_directory_is_read_by_its_model_type(tmp_path):
    modern = _directory(tmp_path, {"model_type": "modernbert"})
    assert models.of_directory(modern).model_type == "modernbert"
    assert models.for_directory(BertForSequenceClassification, modern).__name__ == "ModernBertForSequenceClassification"
    assert models.for_directory(BertModel, modern).__name__ == "ModernBertModel"
    # no model_type (Google's bert_config.json, old files) and no config.json at all: BERT's
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    assert models.of_directory(plain).model_type == "bert"
    assert models.for_directory(BertForSequenceClassification, plain) is BertForSequenceClassification
    assert models.of_config({"model_type": "modernbert"}).ffn_matmuls == 3
    assert models.of_config({}).ffn_matmuls == 2


def test_a_role_the_architecture_lacks_is_refused_naming_the_directory(tmp_path):
    modern = _directory(tmp_path, {"model_type": "modernbert"})
    with pytest.raises(ConfigError, match=r"model: a modernbert model; BertForPreTraining has no modernbert .*pooler"):
        models.for_directory(BertForPreTraining, modern)
    with pytest.raises(ConfigError, match="model_type 'electrum' is not one bertkit knows"):
        models.get("electrum")


# what asks "which architecture is this?": a comparison with an architecture's name or an isinstance on its classes
ASKS = re.compile(r"""(==|!=)\s*["']modernbert["']|startswith\(["']ModernBert|isinstance\([^)]*ModernBert""")
# besides the registry: config.py refuses a ModernBERT config.json in BERT's reader, naming the class to use, and
# the pre-training recipe picks its objective by --arch (ModernBERT's masking, no NSP)
DISPATCH_FILES = {"models.py", "config.py", "recipes/pretrain/recipe.py"}


def test_architecture_dispatch_lives_in_the_registry():
    found = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if not p.name.startswith("modeling") and ASKS.search(p.read_text(encoding="utf-8"))
    }
    assert found <= DISPATCH_FILES, found - DISPATCH_FILES
    assert ASKS.search('if data.get("model_type") == "modernbert":')  # the pattern sees what it names
    assert ASKS.search("isinstance(bert, ModernBertModel)")
