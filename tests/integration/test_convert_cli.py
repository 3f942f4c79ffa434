"""`bertkit convert` (a Google TensorFlow checkpoint -> a directory transformers loads) and `bertkit demo`, through the
command: outputs, and errors in one line naming what is wrong."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit import BertForPreTraining
from bertkit.cli import main


def test_convert_writes_a_directory_transformers_loads(tf_dir, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "converted"
    assert main(["convert", "--tf-checkpoint", str(tf_dir), "--output", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["class"] == "BertForPreTraining" and report["vocab"] is True
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    hf = transformers.BertForPreTraining.from_pretrained(out).eval()
    ours = BertForPreTraining.from_pretrained(tf_dir).eval()
    ids = torch.tensor([[2, 7, 9, 4, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        a, b = hf(input_ids=ids, attention_mask=mask), ours(ids, attention_mask=mask)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    # an existing model is not overwritten silently
    assert main(["convert", "--tf-checkpoint", str(tf_dir), "--output", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_demo_and_convert_errors_are_one_line(tmp_path, capsys):
    from bertkit.cli import main

    assert main(["demo", "--model-size", "bert-huge"]) == 2
    assert "bertkit demo: error: unknown preset 'bert-huge'" in capsys.readouterr().err
    assert main(["convert", "--tf-checkpoint", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    assert f"bertkit convert: error: {tmp_path}: no TensorFlow checkpoint" in capsys.readouterr().err
