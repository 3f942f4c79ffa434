"""``bertkit pretrain --arch modernbert`` end to end on a bundled book with a tiny ModernBERT: the run's defaults
(30% masking, no NSP), the output directory in transformers' ModernBERT layout (loaded by transformers with the
same logits), the training loss going down, and clear refusals. Under torchrun, and resume (the one pre-training
loop's, whatever the architecture): tests/integration/test_pretrain_run.py, as BERT's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

OVERRIDES = {
    "hidden_size": 32,
    "num_attention_heads": 2,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "local_attention": 16,
}


@pytest.fixture(scope="module")
def corpus(alice_corpus) -> tuple[Path, Path]:
    return alice_corpus


def _cfg(corpus, out, **kw):
    from bertkit.recipes.pretrain import PretrainConfig

    values = dict(
        corpus=[str(corpus[0])],
        vocab=str(corpus[1]),
        output=str(out),
        arch="modernbert",
        model_size="modernbert-tiny",
        config_overrides=dict(OVERRIDES),
        seq_len=48,
        batch_size=4,
        max_steps=10,
        save_every=5,
        log_every=2,
        eval_every=5,
        eval_batches=2,
        precision="fp32",
        quiet=True,
        workers=1,
        lr=3e-3,
        threads=1,
    )
    values.update(kw)
    return PretrainConfig(**values)


def test_pretrain_modernbert_writes_a_transformers_modernbert(corpus, tmp_path):
    from bertkit.modeling_modernbert import ModernBertForMaskedLM
    from bertkit.recipes.pretrain import pretrain

    out = tmp_path / "run"
    pretrain(_cfg(corpus, out, max_steps=30, save_every=100, eval_every=30))
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert config["local_attention"] == 16 and config["vocab_size"] == 600
    run = json.loads((out / "run.json").read_text())["config"]
    assert (run["arch"], run["mask_prob"], run["nsp"]) == ("modernbert", 0.3, False)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    assert losses[-1] < losses[0] - 0.3, losses  # it learns (from ~ln 600 = 6.4)
    assert any("eval_mlm_acc" in x for x in lines)

    transformers = pytest.importorskip("transformers")
    hf = transformers.ModernBertForMaskedLM.from_pretrained(out, attn_implementation="eager").eval()
    bk = ModernBertForMaskedLM.from_pretrained(out)
    ids = torch.randint(5, 600, (2, 40))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask).logits
        b = bk(ids, attention_mask=mask).logits
    assert (a - b)[mask.bool()].abs().max() < 1e-4


def test_nsp_trains_a_pretraining_only_head_and_saves_the_masked_lm(corpus, tmp_path):
    """``--nsp`` on ModernBERT: NSP pairs and a head for pre-training only (objectives/mlm_nsp.py); its accuracy is
    logged, and OUTPUT is the masked LM alone, as --no-nsp saves it (--objective mntp with --nsp: refused below)."""
    from safetensors.torch import load_file

    from bertkit.recipes.pretrain import pretrain

    out = tmp_path / "nsp"
    pretrain(_cfg(corpus, out, nsp=True, max_steps=6, save_every=100, eval_every=6))
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= x["nsp_acc"] <= 1.0 for x in lines if "loss" in x) and any("loss" in x for x in lines)
    assert json.loads((out / "run.json").read_text())["config"]["nsp"] is True
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    keys = set(load_file(str(out / "model.safetensors")))
    assert not any(k.startswith(("dense.", "classifier.", "base.")) for k in keys) and "head.dense.weight" in keys


def test_refusals_are_one_line(corpus, tmp_path, capsys):
    """Each refusal is exit 2 with a message naming why, no traceback and no model written: in-process through the
    command line's entry point (``bertkit.cli.main``, what the ``bertkit`` script calls), as test_pretrain_run.py
    tests pre-training's other refusals; a child process per refusal only added seconds of imports."""
    from bertkit.cli import main

    base = [
        "pretrain",
        "--corpus",
        str(corpus[0]),
        "--vocab",
        str(corpus[1]),
        "--arch",
        "modernbert",
        "--max-steps",
        "2",
        "--quiet",
        "--workers",
        "1",
        "--precision",
        "fp32",
    ]
    for extra, needle in (
        (["--model-size", "bert-medium"], "not a ModernBERT size"),
        (["--model-size", "modernbert-tiny", "--position-init", "sinusoidal"], "rotary"),
        (["--model-size", "modernbert-tiny", "--objective", "mntp", "--nsp"], "no next-sentence prediction"),
    ):
        out = tmp_path / extra[-1].strip("-")
        assert main(base + ["--output", str(out)] + extra) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, err
        assert not (out / "model.safetensors").exists()
