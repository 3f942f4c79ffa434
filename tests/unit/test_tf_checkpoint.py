"""Google TensorFlow checkpoints read without TensorFlow. Oracles (written by tests/fixtures/tf_checkpoint/
make_fixture.py in an environment that has them): TensorFlow's own reader for the values, and transformers 4.x's
``load_tf_weights_in_bert`` for the name mapping."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit import BertForPreTraining, BertModel
from bertkit.tf_checkpoint import TFCheckpointError, read_tf_checkpoint, tf_name_to_key


def test_reader_returns_what_tensorflow_reads(tf_dir):
    ours = read_tf_checkpoint(tf_dir / "bert_model.ckpt")
    expected = np.load(tf_dir / "tf_values.npz")
    assert sorted(ours) == sorted(expected.files)
    assert any(name.endswith("/adam_m") for name in ours) and "global_step" in ours
    for name in expected.files:
        assert ours[name].dtype == expected[name].dtype, name
        assert ours[name].shape == expected[name].shape, name
        assert np.array_equal(ours[name], expected[name]), name


def test_mapping_equals_transformers_load_tf_weights_in_bert(tf_dir):
    model, info = BertForPreTraining.from_pretrained(tf_dir, output_loading_info=True)  # bert_config.json + ckpt
    ours = model.state_dict()
    reference = load_file(str(tf_dir / "hf_state_dict.safetensors"))
    for key, value in reference.items():
        assert key in ours, key
        assert torch.equal(ours[key], value), key
    assert torch.equal(ours["cls.predictions.decoder.weight"], reference["bert.embeddings.word_embeddings.weight"])
    assert info.initialised == []


def test_bare_encoder_and_prefix_paths(tf_dir):
    encoder = BertModel.from_pretrained(tf_dir / "bert_model.ckpt")
    full = BertForPreTraining.from_pretrained(tf_dir / "bert_model.ckpt.index")
    for key, value in encoder.state_dict().items():
        assert torch.equal(value, full.state_dict()["bert." + key]), key


def test_truncated_data_file_names_the_file_and_variable(tf_dir, tmp_path):
    for path in tf_dir.glob("bert_model.ckpt*"):
        shutil.copy(path, tmp_path / path.name)
    data = tmp_path / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(TFCheckpointError, match=r"data-00000-of-00001: variable .* runs past the end"):
        read_tf_checkpoint(tmp_path / "bert_model.ckpt")
    data.unlink()
    with pytest.raises(FileNotFoundError, match="data shard"):
        read_tf_checkpoint(tmp_path / "bert_model.ckpt")


def test_not_an_index_is_a_clear_error(tmp_path):
    (tmp_path / "model.ckpt.index").write_bytes(b"\x00" * 100)
    with pytest.raises(TFCheckpointError, match="model.ckpt.index: not a TensorFlow checkpoint index"):
        read_tf_checkpoint(tmp_path / "model.ckpt")
    with pytest.raises(FileNotFoundError, match="no such TensorFlow checkpoint"):
        read_tf_checkpoint(tmp_path / "other.ckpt")


def test_name_table():
    assert tf_name_to_key("bert/encoder/layer_11/attention/self/query/kernel") == (
        "bert.encoder.layer.11.attention.self.query.weight",
        True,
    )
    assert tf_name_to_key("bert/embeddings/LayerNorm/beta") == ("bert.embeddings.LayerNorm.bias", False)
    assert tf_name_to_key("bert/embeddings/word_embeddings") == ("bert.embeddings.word_embeddings.weight", False)
    assert tf_name_to_key("cls/seq_relationship/output_weights") == ("cls.seq_relationship.weight", False)
    assert tf_name_to_key("output_weights") == ("classifier.weight", False)
    assert tf_name_to_key("cls/squad/output_bias") == ("qa_outputs.bias", False)
    assert tf_name_to_key("bert/pooler/dense/kernel/adam_v") is None
    assert tf_name_to_key("global_step") is None
    with pytest.raises(TFCheckpointError, match="'bert/encoder/layer_0/mystery'"):
        tf_name_to_key("bert/encoder/layer_0/mystery")
