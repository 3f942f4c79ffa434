"""The model registry (bertkit.models): every entry resolves to real classes of its own architecture, a directory's
architecture is read from its config.json, a missing head role is refused naming the directory, and no module
outside the registry, the modeling files and the config asks which architecture it holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

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
DISPATCH_FILES = {"models.py", "config.py", "recipes/pretrain.py"}


def test_architecture_dispatch_lives_in_the_registry():
    found = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if not p.name.startswith("modeling") and ASKS.search(p.read_text(encoding="utf-8"))
    }
    assert found <= DISPATCH_FILES, found - DISPATCH_FILES
    assert ASKS.search('if data.get("model_type") == "modernbert":')  # the pattern sees what it names
    assert ASKS.search("isinstance(bert, ModernBertModel)")


@pytest.mark.parametrize("model_type", sorted(models.REGISTRY))
def test_presets_map_bert_names_by_size_and_refuse_a_size_the_architecture_lacks(model_type):
    arch = models.REGISTRY[model_type]
    assert arch.presets and all(name.startswith(arch.preset_prefix) for name in arch.presets)
    assert set(arch.presets) <= set(models.preset_names())
    for name in arch.presets:
        assert arch.preset(name) == name
        assert arch.preset("bert-" + name.removeprefix(arch.preset_prefix)) == name  # BERT's name of that size
        assert models.of_preset(name) is arch
    with pytest.raises(ConfigError, match=rf"--model-size bert-huge: not a {model_type} size; choose one of"):
        arch.preset("bert-huge")
    assert model_type in models.names()


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer.from_pretrained(vocab_file)


@pytest.mark.parametrize("model_type", sorted(models.REGISTRY))
def test_build_for_pretraining_makes_the_fresh_model_of_a_preset_for_the_tokenizer(model_type, tokenizer):
    arch = models.REGISTRY[model_type]
    size = sorted(arch.presets, key=lambda n: arch.presets[n])[0]  # the smallest
    model = arch.build_for_pretraining(size, tokenizer, max_len=9000, initializer_range=0.01)
    assert type(model) is arch.model_class(arch.pretraining_role)
    layers, hidden = arch.presets[size][:2]
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (layers, hidden, len(tokenizer))
    assert config.max_position_embeddings == 9000 and config.initializer_range == 0.01  # more than its least
    for key, attr in arch.special_ids.items():
        assert getattr(config, key) == getattr(tokenizer, attr)
    assert arch.word_embeddings(model).shape == (len(tokenizer), hidden)
    assert arch.mlm_bias(model).shape == (len(tokenizer),)
    assert models.encoder_of(model) is arch.encoder_of(model)
    assert isinstance(arch.encoder_of(model), arch.model_class("base"))
    # from a config object: the overrides apply; a vocabulary smaller than the tokenizer's is refused
    again = arch.build_for_pretraining(config, tokenizer, initializer_range=0.03)
    assert again.config.initializer_range == 0.03 and config.initializer_range == 0.01  # a copy, not a change
    with pytest.raises(ConfigError, match=f"vocab_size is 5; the tokenizer has {len(tokenizer)} tokens"):
        arch.build_for_pretraining(config, tokenizer, vocab_size=5)
    other = next(a for a in models.REGISTRY.values() if a is not arch)
    with pytest.raises(ConfigError, match=f"is not a {other.model_type} config"):
        other.build_for_pretraining(config, tokenizer)


@pytest.mark.parametrize("model_type", sorted(models.REGISTRY))
def test_encoder_of_finds_the_encoder_by_base_model_prefix(model_type):
    arch = models.REGISTRY[model_type]
    config = arch.config_class()(
        vocab_size=50, pad_token_id=0, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24
    )
    base = arch.model_class("base")(config)
    assert models.encoder_of(base) is base
    head = arch.model_class("masked_lm")(config)
    assert models.encoder_of(head) is getattr(head, head.base_model_prefix)
    with pytest.raises(ConfigError, match=f"Linear holds no {arch.model_class('base').__name__}"):
        arch.encoder_of(torch.nn.Linear(2, 2))


def test_info_names_the_architecture():
    for name, arch in models.REGISTRY.items():
        assert arch.info()["architecture"] == name
