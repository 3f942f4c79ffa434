"""``bertkit pretrain --arch modernbert-elc``: the variant is an ``--arch`` choice (the registry's names), trains
like ModernBERT (masked LM only, the variant's pre-training class), moves its layer mix, and writes a directory that
the registry's loaders read back and that carries its transformers code."""

from __future__ import annotations

import json

import torch
from tinymodels import run_cli


def test_pretrain_with_the_elc_variant_trains_its_mix_and_saves_a_loadable_directory(alice_corpus, tmp_path):
    from bertkit import models
    from bertkit.checkpoint import read_state_dict

    path, vocab = alice_corpus
    out = tmp_path / "run"
    overrides = dict(hidden_size=32, num_attention_heads=2, intermediate_size=48, num_hidden_layers=3)
    run_cli(
        ["pretrain", "--corpus", path, "--vocab", vocab, "--output", out, "--arch", "modernbert-elc"]
        + ["--model-size", "modernbert-tiny", "--max-steps", "3", "--seq-len", "32", "--batch-size", "4"]
        + ["--precision", "fp32", "--workers", "1", "--quiet"]
        + [flag for key, value in overrides.items() for flag in ("--config-override", f"{key}={value}")]
    )
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert (config["model_type"], config["architectures"]) == ("modernbert-elc", ["ModernBertElcForMaskedLM"])
    assert "AutoModelForMaskedLM" in config["auto_map"] and (out / "modeling_modernbert_elc.py").is_file()
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))["config"]
    assert (run["arch"], run["nsp"]) == ("modernbert-elc", False)

    state = read_state_dict(out / "model.safetensors")
    mix = [state[f"model.layer_mix.{i}"] for i in range(3)]
    assert all(not torch.equal(w, (torch.arange(len(w)) == len(w) - 1).float()) for w in mix)  # trained, all 3
    model = models.of_directory(out).model_class("masked_lm").from_pretrained(out)
    assert type(model).__name__ == "ModernBertElcForMaskedLM"
    assert all(torch.equal(a, b) for a, b in zip(model.model.layer_mix, mix, strict=True))
