import json
import logging
import pickle
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit import BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel
from bertkit.checkpoint import CheckpointError


def test_roundtrip_is_exact(tmp_path, tiny_config):
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    stored = load_file(tmp_path / "model.safetensors")
    # tied weights are saved once, under the canonical names
    assert "cls.predictions.decoder.weight" not in stored and "cls.predictions.bias" in stored
    assert "bert.embeddings.word_embeddings.weight" in stored
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    back = BertForPreTraining.from_pretrained(tmp_path)
    for (k1, v1), (k2, v2) in zip(model.state_dict().items(), back.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)
    assert back.cls.predictions.decoder.weight is back.bert.embeddings.word_embeddings.weight


def test_state_dict_keys_match_hf_names(tiny_config):
    keys = set(BertForPreTraining(tiny_config).state_dict())
    for key in ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
                "bert.encoder.layer.1.attention.output.LayerNorm.bias",
                "bert.encoder.layer.0.intermediate.dense.weight",
                "cls.predictions.transform.dense.weight", "cls.seq_relationship.weight", "bert.pooler.dense.bias",
                "cls.predictions.decoder.weight", "cls.predictions.bias"):
        assert key in keys, key


def test_shape_mismatch_names_key_and_both_shapes(tmp_path, tiny_config):
    BertForPreTraining(tiny_config).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["bert.encoder.layer.0.intermediate.dense.weight"] = torch.zeros(40, 32)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError) as e:
        BertForPreTraining.from_pretrained(tmp_path)
    msg = str(e.value)
    assert "bert.encoder.layer.0.intermediate.dense.weight" in msg and "(40, 32)" in msg and "(37, 32)" in msg


def test_unknown_key_is_named(tmp_path, tiny_config):
    BertModel(tiny_config).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(2)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="encoder.layer.0.attention.self.rotary.weight"):
        BertModel.from_pretrained(tmp_path)


def test_missing_encoder_key_is_named(tmp_path, tiny_config):
    BertModel(tiny_config).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["encoder.layer.1.output.dense.bias"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.bias"):
        BertModel.from_pretrained(tmp_path)


def test_pretraining_checkpoint_into_classifier(tmp_path, tiny_config):
    torch.manual_seed(0)
    pt = BertForPreTraining(tiny_config)
    pt.save_pretrained(tmp_path)
    clf, info = BertForSequenceClassification.from_pretrained(tmp_path, num_labels=3, output_loading_info=True)
    assert clf.classifier.out_features == 3 and clf.config.num_labels == 3
    assert torch.equal(clf.bert.encoder.layer[0].attention.self.key.weight,
                       pt.bert.encoder.layer[0].attention.self.key.weight)
    assert "cls.seq_relationship.weight" in info.dropped
    assert info.initialised == ["classifier.bias", "classifier.weight"]
    assert info.source == str(tmp_path / "model.safetensors")
    assert not hasattr(clf, "_load_report")  # nothing stashed on the model


def test_loading_reports_through_logging_and_never_prints(tmp_path, tiny_config, capsys, caplog):
    BertModel(tiny_config).save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="bertkit.checkpoint"):
        model = BertForPreTraining.from_pretrained(tmp_path)
    assert isinstance(model, BertForPreTraining)  # without output_loading_info: the model alone
    assert capsys.readouterr().out == ""
    assert "initialised" in caplog.text and "cls.seq_relationship.weight" in caplog.text


def test_head_checkpoint_without_pooler_loads_into_bert_model(tmp_path, tiny_config):
    torch.manual_seed(0)
    mlm = BertForMaskedLM(tiny_config)
    mlm.save_pretrained(tmp_path)
    base, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info.initialised == ["pooler.dense.bias", "pooler.dense.weight"]
    assert torch.equal(base.encoder.layer[1].output.dense.weight, mlm.bert.encoder.layer[1].output.dense.weight)
    # an encoder key is still never initialised silently
    state = load_file(tmp_path / "model.safetensors")
    del state["bert.encoder.layer.0.output.dense.bias"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="encoder.layer.0.output.dense.bias"):
        BertModel.from_pretrained(tmp_path)


def test_old_gamma_beta_names(tmp_path, tiny_config):
    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_config)
    model.config.save_pretrained(tmp_path)
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in model.state_dict().items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    back = BertForMaskedLM.from_pretrained(tmp_path)
    assert torch.equal(back.bert.embeddings.LayerNorm.weight, model.bert.embeddings.LayerNorm.weight)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_pickle_is_never_trusted(tmp_path, tiny_config):
    BertModel(tiny_config).config.save_pretrained(tmp_path)
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(pickle.UnpicklingError):
        BertModel.from_pretrained(tmp_path)


def test_missing_directory_and_weights(tmp_path, tiny_config):
    with pytest.raises(FileNotFoundError, match="nope"):
        BertModel.from_pretrained(tmp_path / "nope")
    tiny_config.save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        BertModel.from_pretrained(tmp_path)


def test_sinusoidal_checkpoint_roundtrip(tmp_path, tiny_config):
    cfg = replace(tiny_config, position_embedding_type="sinusoidal")
    torch.manual_seed(0)
    model = BertModel(cfg).eval()
    model.save_pretrained(tmp_path)
    back = BertModel.from_pretrained(tmp_path)
    assert back.config.position_embedding_type == "sinusoidal"
    ids = torch.randint(5, 99, (2, 5))
    torch.testing.assert_close(model(ids).last_hidden_state, back(ids).last_hidden_state)
