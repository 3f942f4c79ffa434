"""HF-layout checkpoints: save/load round trips exactly, state-dict keys equal transformers' names, and a wrong shape,
an unknown or a missing key is named in one line."""

import json
import logging
import os
import pickle
import stat
import time
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
    for key in (
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.1.attention.output.LayerNorm.bias",
        "bert.encoder.layer.0.intermediate.dense.weight",
        "cls.predictions.transform.dense.weight",
        "cls.seq_relationship.weight",
        "bert.pooler.dense.bias",
        "cls.predictions.decoder.weight",
        "cls.predictions.bias",
    ):
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
    assert torch.equal(
        clf.bert.encoder.layer[0].attention.self.key.weight, pt.bert.encoder.layer[0].attention.self.key.weight
    )
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
    state = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in model.state_dict().items()
    }
    torch.save(state, tmp_path / "pytorch_model.bin")
    back = BertForMaskedLM.from_pretrained(tmp_path)
    assert torch.equal(back.bert.embeddings.LayerNorm.weight, model.bert.embeddings.LayerNorm.weight)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickle_is_refused_as_unsafe_without_torchs_advice(tmp_path, tiny_config, capsys, recwarn):
    BertModel(tiny_config).config.save_pretrained(tmp_path)
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(CheckpointError) as e:
        BertModel.from_pretrained(tmp_path)
    assert [str(w.message) for w in recwarn] == []  # nor torch's warning about the pickle's protocol
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "pytorch_model.bin")) and "refused as unsafe" in msg
    assert "convert it to safetensors" in msg
    assert "weights_only" not in msg and "\n" not in msg and e.value.__suppress_context__  # no retry advice
    assert "pwned" not in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "bad-json", "header-only"])
def test_broken_safetensors_is_a_one_line_error_naming_the_file(tmp_path, tiny_config, damage):
    BertModel(tiny_config).save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    path.write_bytes(
        {
            "truncate": data[: len(data) // 2],
            "garbage": bytes(range(256)) * 40,
            "empty": b"",
            "bad-json": data[:8] + b"{" * n + data[8 + n :],
            "header-only": data[: 8 + n],
        }[damage]
    )
    with pytest.raises(CheckpointError) as e:
        BertModel.from_pretrained(tmp_path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "data,words",
    [(b"PK\x03\x04" + bytes(500), "not a readable PyTorch checkpoint"), (bytes(range(256)) * 4, "neither torch.save")],
    ids=["broken-zip", "random-bytes"],
)
def test_garbage_pytorch_bin_is_a_one_line_error(tmp_path, tiny_config, data, words):
    """Bytes that are neither torch.save's zip nor a pickle are "not a PyTorch checkpoint" (they were called a
    pickle with code, refused as unsafe)."""
    tiny_config.save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(data)
    with pytest.raises(CheckpointError, match="pytorch_model.bin: not a") as e:
        BertModel.from_pretrained(tmp_path)
    assert words in str(e.value) and "unsafe" not in str(e.value) and "\n" not in str(e.value)


def test_weights_of_a_dtype_bertkit_does_not_load_are_refused_naming_the_tensor(tmp_path, tiny_config):
    """fp8 tensors (no isfinite, no exact cast back) are refused by name, not a NotImplementedError."""
    BertModel(tiny_config).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    save_file({k: v.to(torch.float8_e4m3fn) for k, v in state.items()}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="is float8_e4m3fn; bertkit loads fp32, fp16, bf16 or fp64") as e:
        BertModel.from_pretrained(tmp_path)
    assert str(e.value).startswith(str(tmp_path / "model.safetensors"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path, tiny_config, value):
    BertModel(tiny_config).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["encoder.layer.1.attention.self.key.weight"][3, 4] = value
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="'encoder.layer.1.attention.self.key.weight' holds 1 NaN or infinite"):
        BertModel.from_pretrained(tmp_path)


def _edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_hidden_layers", 1_000_000),
        ("vocab_size", 10**12),
        ("hidden_size", 2**20),
        ("intermediate_size", 10**9),
        ("max_position_embeddings", 10**9),
        ("type_vocab_size", 10**9),
        ("num_hidden_layers", 1),
    ],
)
@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_config_sizes_are_checked_against_the_weights_before_building(tmp_path, tiny_config, field, value, weights):
    BertForPreTraining(tiny_config).save_pretrained(tmp_path)
    if weights == "pytorch_model.bin":  # no cheap header: checked after reading, still before building
        torch.save(load_file(tmp_path / "model.safetensors"), tmp_path / weights)
        (tmp_path / "model.safetensors").unlink()
    _edit_config(tmp_path, **{field: value})
    start = time.process_time()  # CPU time: a busy machine slows the wall clock, not this
    with pytest.raises(CheckpointError) as e:
        BertModel.from_pretrained(tmp_path)
    assert time.process_time() - start < 2.0
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'config.json'}: {field} is {value} but {tmp_path / weights}"), msg


@pytest.mark.parametrize("field,value", [("vocab_size", 10**12), ("hidden_size", 2**20), ("num_hidden_layers", 10**9)])
def test_config_without_weights_too_large_for_memory_is_refused(tiny_config, field, value):
    from bertkit.config import ConfigError

    config = replace(tiny_config, **{field: value})
    start = time.process_time()  # CPU time: a busy machine slows the wall clock, not this
    with pytest.raises(ConfigError, match=f"BertConfig.{field} is {value}: the model would hold .* GiB of memory"):
        BertForPreTraining(config)
    assert time.process_time() - start < 2.0
    with pytest.raises(ConfigError, match="hidden_size"):  # the estimate is tested against a known budget too
        replace(tiny_config, hidden_size=4096).check_fits_in_memory(available_bytes=4 * 1000)
    actual = sum(p.numel() for p in BertForPreTraining(tiny_config).parameters())
    assert 0.95 * actual <= tiny_config.num_parameters() <= actual  # all but the NSP head
    tiny_config.check_fits_in_memory(available_bytes=4 * actual)


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


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_save_pretrained_files_get_the_umasks_mode(tmp_path, tiny_config, umask):
    """Weights used to be written 0600 (safetensors' temp file) while every other output was 0644."""
    old = os.umask(umask)
    try:
        BertModel(tiny_config).save_pretrained(tmp_path / "model")
        (tmp_path / "normal.txt").write_text("x")
    finally:
        os.umask(old)
    want = stat.S_IMODE((tmp_path / "normal.txt").stat().st_mode)
    assert want == 0o666 & ~umask
    for name in ("model.safetensors", "config.json"):
        assert stat.S_IMODE((tmp_path / "model" / name).stat().st_mode) == want, name
