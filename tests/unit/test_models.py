"""The model registry (bertkit.models): every entry resolves to real classes of its own architecture, a directory's
architecture is read from its config.json, a missing head role is refused naming the directory, presets, the
fresh pre-training model and the encoder inside a head come from it, and a new architecture is one modeling file
plus one entry. (That nothing else asks which architecture a model is: test_source_rules.)"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("arch, named", [("bert", "(cls.predictions)"), ("modernbert", "(head, decoder)")])
def test_fill_mask_on_a_classifier_names_its_architectures_head_weights(tmp_path, fixtures_dir, arch, named):
    """Issue 60, item 13: the Encoder's (and so serve's) fill-mask refusal named BERT's cls.predictions for a
    ModernBERT classifier too; it names the registry's MLM keys of the model's architecture."""
    from tinymodels import FINETUNE_VOCAB, make_model_dir
    from tinymodernbert import fixture_vocab, make_modernbert_dir

    from bertkit import Encoder
    from bertkit.errors import InputError

    if arch == "bert":
        path = make_model_dir(tmp_path, FINETUNE_VOCAB, BertForSequenceClassification, layers=1, num_labels=2)
    else:
        path = make_modernbert_dir(tmp_path, fixture_vocab(fixtures_dir), "ModernBertForSequenceClassification")
    with pytest.raises(InputError, match=rf"fill-mask needs an MLM head \{named[:-1]}\)"):
        Encoder.from_pretrained(path).fill_mask(["the [MASK] film"])


@pytest.mark.parametrize("model_type", sorted(models.REGISTRY))
def test_presets_map_bert_names_by_size_and_refuse_a_size_the_architecture_lacks(model_type):
    arch = models.REGISTRY[model_type]
    assert arch.presets and all(name.startswith(arch.preset_prefix) for name in arch.presets)
    assert set(arch.presets) <= set(models.preset_names())
    for name in arch.presets:
        assert arch.preset(name) == name
        assert arch.preset("bert-" + name.removeprefix(arch.preset_prefix)) == name  # BERT's name of that size
        assert models.of_preset(name) is models.get(arch.base or model_type)  # a variant's sizes are its base's
    with pytest.raises(ConfigError, match=rf"--model-size bert-huge: not a {arch.title} size; choose one of"):
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


def test_a_variant_is_its_base_entry_renamed_and_its_directories_carry_its_transformers_code(tmp_path, monkeypatch):
    """models.variant: the base's entry with its own model_type, module and class names (sizes, inputs and head
    layout the base's); an --arch choice that adds no size preset; its saved directory gets its remote_code file and
    config.json's auto_map, an architecture transformers has gets neither."""
    base = models.get("modernbert")
    gate = models.variant(
        "modernbert", "modernbert-gate", "gate_modeling", ("ModernBert", "ModernBertGate"), remote_code="gate_hf.py"
    )
    assert (gate.model_type, gate.module, gate.base, gate.config_name) == (
        "modernbert-gate",
        "gate_modeling",
        "modernbert",
        "ModernBertGateConfig",
    )
    assert gate.classes == {
        role: "ModernBertGate" + name.removeprefix("ModernBert") for role, name in base.classes.items()
    }
    for key in (
        "inputs",
        "head_keys",
        "mlm_keys",
        "presets_module",
        "preset_prefix",
        "pretraining_role",
        "ffn_matmuls",
    ):
        assert getattr(gate, key) == getattr(base, key), key
    presets = models.preset_names()
    monkeypatch.setitem(models.REGISTRY, "modernbert-gate", gate)
    assert "modernbert-gate" in models.names() and models.preset_names() == presets
    assert models.of_preset("modernbert-tiny") is base and gate.preset("bert-mini") == "modernbert-mini"
    assert gate.info() == {"architecture": "modernbert-gate", "variant_of": "modernbert"}
    assert models.of_config({"model_type": "modernbert-gate"}) is gate

    code = tmp_path / "code"
    code.mkdir()
    (code / "gate_hf.py").write_text("# transformers classes\n", encoding="utf-8")
    monkeypatch.setattr(models, "REMOTE_CODE", code)
    out = tmp_path / "out"
    out.mkdir()
    config = {"model_type": "modernbert-gate"}
    gate.write_loader(out, config)
    assert (out / "gate_hf.py").read_text(encoding="utf-8") == "# transformers classes\n"
    assert config["auto_map"] == {
        "AutoConfig": "gate_hf.ModernBertGateConfig",
        "AutoModel": "gate_hf.ModernBertGateModel",
        "AutoModelForMaskedLM": "gate_hf.ModernBertGateForMaskedLM",
        "AutoModelForSequenceClassification": "gate_hf.ModernBertGateForSequenceClassification",
        "AutoModelForTokenClassification": "gate_hf.ModernBertGateForTokenClassification",
        "AutoModelForQuestionAnswering": "gate_hf.ModernBertGateForQuestionAnswering",
        "AutoModelForMultipleChoice": "gate_hf.ModernBertGateForMultipleChoice",
    }
    plain = {"model_type": "modernbert"}
    base.write_loader(tmp_path / "none", plain)  # nothing written, not even the directory
    assert plain == {"model_type": "modernbert"} and not (tmp_path / "none").exists()


TOY_MODELING = '''"""A toy architecture, the whole of its modeling file: token embeddings, then tanh(linear) layers."""

from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

PRESETS = {"toy-tiny": (2, 8), "toy-mini": (3, 16)}  # name -> (layers, hidden)


@dataclass
class ToyConfig:
    vocab_size: int = 100
    hidden_size: int = 8
    num_hidden_layers: int = 2
    max_position_embeddings: int = 64
    initializer_range: float = 0.02
    model_type: str = "toy"

    @classmethod
    def from_preset(cls, name, **overrides):
        layers, hidden = PRESETS[name]
        return cls(num_hidden_layers=layers, hidden_size=hidden, **overrides)


class ToyEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)


class ToyModel(nn.Module):
    base_model_prefix = ""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = ToyEmbeddings(config)
        width, depth = config.hidden_size, config.num_hidden_layers
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=False, num_layers=None):
        states = [self.embeddings.word_embeddings(input_ids)]
        for layer in self.layers[:num_layers]:
            states.append(torch.tanh(layer(states[-1])))
        return SimpleNamespace(last_hidden_state=states[-1], hidden_states=tuple(states), pooler_output=None)


class ToyForMaskedLM(nn.Module):
    base_model_prefix = "toy"

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.toy = ToyModel(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
'''


def test_a_new_architecture_is_one_modeling_file_and_one_registry_entry(tmp_path, monkeypatch, tokenizer):
    """The moonshot: a newcomer writes ``toy_modeling.py`` and registers it; the registry's callers (a fresh
    pre-training model, a directory's architecture, the Encoder) then take it with no other change."""
    from bertkit.features import Encoder

    (tmp_path / "toy_modeling.py").write_text(TOY_MODELING, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = models.Architecture(
        model_type="toy",
        module="toy_modeling",
        config_name="ToyConfig",
        classes={"base": "ToyModel", "masked_lm": "ToyForMaskedLM"},
        inputs=("input_ids", "attention_mask"),
        has_pooler=False,
        head_keys={},
        features_role="masked_lm",
        mlm_keys=("decoder.",),
        pooler_keys=(),
        preset_prefix="toy-",
        presets_module="toy_modeling",
        pretraining_role="masked_lm",
        mlm_bias_key="decoder.bias",
    )
    monkeypatch.setitem(models.REGISTRY, "toy", toy)

    model = models.get("toy").build_for_pretraining("bert-mini", tokenizer)  # BERT's size name maps to toy-mini
    assert type(model).__name__ == "ToyForMaskedLM" and model.config.num_hidden_layers == 3
    assert toy.word_embeddings(model).shape == (len(tokenizer), 16)
    assert toy.mlm_bias(model).shape == (len(tokenizer),)
    assert "toy-tiny" in models.preset_names() and models.of_preset("toy-tiny") is toy
    assert models.of_directory(_directory(tmp_path, {"model_type": "toy"})) is toy
    assert toy.info()["architecture"] == "toy"

    encoder = Encoder(
        model, tokenizer, precision="fp32"
    )  # finds ToyModel through the registry (base_model_prefix "toy")
    assert encoder.bert is model.toy and not encoder.has_pooler
    vectors = encoder.encode(["the cat sat", "a dog ran far away"], layers=(-1,), pooling="cls")
    assert vectors.shape == (2, 16)
    with torch.no_grad():
        ids = torch.tensor([tokenizer.encode("the cat sat").ids])
        expected = model.toy(ids, num_layers=3).last_hidden_state[0, 0]
    torch.testing.assert_close(torch.as_tensor(vectors[0]), expected)
