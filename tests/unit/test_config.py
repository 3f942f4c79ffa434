"""BertConfig: the presets and their sizes against the papers', unknown presets and invalid values named by field, JSON
in and out with Google's and HF's names, keys bertkit does not use kept (and said once)."""

import json

import pytest

from bertkit import BertConfig
from bertkit.config import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    layers, hidden, heads = PRESETS[name]
    c = BertConfig.from_preset(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads) == (layers, hidden, heads)
    assert c.intermediate_size == 4 * hidden
    assert (c.vocab_size, c.max_position_embeddings, c.type_vocab_size) == (30522, 512, 2)


def test_preset_values_match_the_papers_sizes():
    assert PRESETS["bert-base"] == (12, 768, 12)
    assert PRESETS["bert-large"] == (24, 1024, 16)
    assert PRESETS["bert-tiny"] == (2, 128, 2)
    assert BertConfig.from_preset("bert-mini", vocab_size=100).vocab_size == 100


def test_unknown_preset():
    with pytest.raises(ValueError, match="bert-huge"):
        BertConfig.from_preset("bert-huge")


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 0),
        ("num_hidden_layers", -1),
        ("vocab_size", 0),
        ("intermediate_size", 0),
        ("hidden_act", "swish"),
        ("hidden_dropout_prob", 1.5),
        ("attention_probs_dropout_prob", -0.1),
        ("position_embedding_type", "rotary"),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        BertConfig(**{field: value})


def test_hidden_not_divisible_by_heads():
    with pytest.raises(ValueError, match="hidden_size.*num_attention_heads"):
        BertConfig(hidden_size=100, num_attention_heads=12)


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"])
def test_activations_accepted(act):
    assert BertConfig(hidden_act=act).hidden_act == act


def test_google_config_roundtrip(tmp_path):
    google = {
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "type_vocab_size": 2,
        "vocab_size": 30522,
    }
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(google))
    c = BertConfig.from_pretrained(tmp_path)
    assert c.hidden_size == 768 and c.type_vocab_size == 2
    out = tmp_path / "out.json"
    c.to_json_file(out, flavour="google")
    assert json.loads(out.read_text()) == google


def test_hf_config_roundtrip_with_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    c = BertConfig.from_preset("bert-tiny", hidden_act="gelu_new", type_vocab_size=3, layer_norm_eps=1e-7)
    c.save_pretrained(tmp_path)
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    for field in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "type_vocab_size",
        "layer_norm_eps",
        "vocab_size",
    ):
        assert getattr(hf, field) == getattr(c, field), field
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(hf_dir)
    back = BertConfig.from_pretrained(hf_dir)
    assert back.to_dict() == c.to_dict()


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_a_key_bertkit_does_not_use_is_kept_said_once_and_saved_back(tmp_path, arch, caplog):
    """Issue 60, item 14: transformers loads a config.json with a key its class does not name and keeps it
    (``ModernBertConfig(..., mask_token_id=103)``); bertkit refused it ("unknown config field"), so such a model did not
    load at all. It loads, says once which keys bertkit does not use (a misspelt field among them), and writes them
    back on save; a known field of the wrong type is still refused, naming it."""
    import logging

    from bertkit import ModernBertConfig

    cls = {"bert": BertConfig, "modernbert": ModernBertConfig}[arch]
    small = dict(hidden_size=64, num_attention_heads=4, intermediate_size=96, num_hidden_layers=2, vocab_size=128)
    if arch == "modernbert":  # its special ids default to ModernBERT's 50k vocabulary's
        small.update(pad_token_id=0, eos_token_id=2, bos_token_id=1, cls_token_id=1, sep_token_id=2)
    written = {**cls(**small).to_dict(), "mask_token_id": 103, "hiden_act": "relu"}
    (tmp_path / "config.json").write_text(json.dumps(written))
    with caplog.at_level(logging.WARNING, logger="bertkit.config"):
        config = cls.from_pretrained(tmp_path)
        cls.from_pretrained(tmp_path)  # the same file again: not said twice
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "'mask_token_id', 'hiden_act': not a field bertkit uses" in said[0]
    assert config.hidden_size == 64 and config.to_dict() == written  # the round trip keeps them
    (tmp_path / "config.json").write_text(json.dumps({**written, "hidden_size": "64"}))
    with pytest.raises(ValueError, match="hidden_size must be a positive integer"):
        cls.from_pretrained(tmp_path)


def test_invalid_value_in_file_names_file_and_field(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_dropout_prob": 2.0}))
    with pytest.raises(ValueError, match=r"config\.json.*hidden_dropout_prob"):
        BertConfig.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "field,value", [("layer_norm_eps", "NaN"), ("initializer_range", "Infinity"), ("hidden_dropout_prob", "-Infinity")]
)
def test_non_finite_values_are_refused_naming_the_field(tmp_path, field, value):
    path = tmp_path / "config.json"
    text = json.dumps(BertConfig.from_preset("bert-tiny").to_dict("hf")).replace("}", f', "{field}": 0.5}}')
    path.write_text(text.replace("0.5", value), encoding="utf-8")  # JSON as Python writes NaN / Infinity
    with pytest.raises(ValueError, match=f"{field} must be a finite number") as e:
        BertConfig.from_json_file(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"hidden_size": 1' + "0" * 5000 + "}", "not a model config"),  # past Python's int-conversion limit
        ('{"id2label": ["NEG", "POS"]}', "id2label must be an object of label ids"),
        ('{"id2label": {"x": "NEG"}}', "id2label must be an object of label ids"),
        ('{"id2label": {"-1": "NEG"}}', "label ids are integers >= 0"),
        ('{"model_type": "gpt2"}', "model_type 'gpt2' is not a model bertkit reads"),
        ('{"model_type": ["bert"]}', "model_type ['bert'] is not a model bertkit reads"),
        ('{"model_type": 3}', "model_type 3 is not a model bertkit reads"),
    ],
    ids=["huge-int", "id2label-list", "id2label-key", "id2label-negative", "gpt2", "type-list", "type-int"],
)
def test_a_config_json_of_the_wrong_kind_is_one_config_error_naming_the_file(tmp_path, text, words):
    """Issue 54, item 9's kin: every config.json that is JSON but not a BERT config is a ConfigError naming the file
    and the field (a huge number, labels of the wrong shape, another architecture), never a ValueError or an
    AttributeError from inside the loader, and never a model of another architecture read as BERT."""
    from bertkit import models
    from bertkit.config import ConfigError

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError) as e:
        models.of_directory(tmp_path).config_class().from_pretrained(tmp_path)
    assert str(e.value).startswith(str(tmp_path / "config.json")) and words in str(e.value), e.value
    assert "\n" not in str(e.value)


def test_wrongly_typed_value_is_a_config_error(tmp_path):
    from bertkit.config import ConfigError

    with pytest.raises(ConfigError, match="pad_token_id"):
        BertConfig.from_dict({"pad_token_id": "x"}, source="c.json")


def test_a_config_json_too_large_to_be_one_is_refused_before_it_is_read(tmp_path):
    """A 3 GB config.json was read whole (6.5 GB of memory, 25 s) before the parser refused it: its size is checked
    first (a sparse file here: nothing is written)."""
    from bertkit.config import MAX_CONFIG_BYTES, ConfigError

    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match=r"config\.json: 16,777,217 bytes, not a model config"):
        BertConfig.from_pretrained(tmp_path)
