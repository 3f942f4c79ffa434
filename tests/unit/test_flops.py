"""FLOP count per pre-training step (recipes/pretrain/flops.py): a hand count for a tiny config, the same count measured
by
torch's own FLOP counter on bertkit's model, and the device peaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.recipes.pretrain import flops

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 99}


def test_hand_count_for_a_tiny_config():
    # two sequences of 7 and 5 tokens, 3 masked positions, NSP
    h, i, v = 32, 64, 99
    per_layer = (7 + 5) * (8 * h * h + 4 * h * i) + (7 * 7 + 5 * 5) * 4 * h
    hand = 2 * per_layer + 3 * (2 * h * h + 2 * h * v) + 2 * (2 * h * h + 4 * h)
    assert hand == 2 * (12 * (8192 + 8192) + 74 * 128) + 3 * (2048 + 6336) + 2 * (2048 + 128) == 441_664
    assert flops.forward_flops(TINY, [7, 5], 3, nsp=True) == hand
    assert flops.train_flops(TINY, [7, 5], 3, nsp=True) == 3 * hand
    assert flops.forward_flops(TINY, [7, 5], 3, nsp=False) == hand - 2 * (2 * h * h + 4 * h)
    # the per-token form agrees on equal lengths
    per_token = flops.flops_per_token(TINY, 6.0, 3 / 12, nsp=True)
    assert per_token * 12 == pytest.approx(flops.train_flops(TINY, [6, 6], 3, nsp=True))


def test_count_equals_torchs_flop_counter_on_bertkits_model():
    """torch.utils.flop_counter counts every matmul the forward and the backward run; without padding, the
    documented count is exactly that."""
    from torch.utils.flop_counter import FlopCounterMode

    from bertkit import BertConfig
    from bertkit.modeling import BertForPreTraining

    config = BertConfig(**TINY, max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    model.attn_implementation = "eager"  # plain matmuls: the counter does not know the CPU's fused SDPA kernel
    g = torch.Generator().manual_seed(0)
    B, T = 3, 11
    ids = torch.randint(5, 99, (B, T), generator=g)
    labels = torch.full((B, T), -100)
    picked = torch.tensor([[0, 2], [1, 5], [2, 9], [0, 7]])
    labels[picked[:, 0], picked[:, 1]] = ids[picked[:, 0], picked[:, 1]]
    nsp = torch.tensor([0, 1, 0])
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(
            input_ids=ids, attention_mask=torch.ones(B, T, dtype=torch.long), labels=labels, next_sentence_label=nsp
        )
    forward = counter.get_total_flops()
    assert forward == flops.forward_flops(config, [T] * B, 4, nsp=True)
    with counter:  # counts afresh: the backward alone is twice the forward
        out.loss.backward()
    assert forward + counter.get_total_flops() == flops.train_flops(config, [T] * B, 4, nsp=True)


def test_gpu_table_and_cpu_probe(tmp_path, monkeypatch):
    assert flops.gpu_peak("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert flops.gpu_peak("NVIDIA H100 PCIe", "bf16") == 756e12
    assert flops.gpu_peak("NVIDIA A100-SXM4-80GB", "fp32") == 19.5e12
    assert flops.gpu_peak("Tesla V100-SXM2-16GB", "bf16") == 15.7e12  # no bf16 tensor cores: the fp32 rate
    assert flops.gpu_peak("NVIDIA GeForce RTX 4090", "fp16") == 165e12
    assert flops.gpu_peak("Some Future GPU", "bf16") is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(flops, "_MEASURED", {})  # a fresh process
    peak = flops.cpu_peak("fp32", seconds=0.05)
    assert 1e8 < peak < 1e14
    path = tmp_path / "bertkit" / "cpu_peak.json"
    (key,) = [k for k in json.loads(path.read_text()) if not k.endswith("|probes")]
    assert flops.cpu_peak("fp32") == peak  # not measured again in this process
    assert flops.cpu_peak("fp32", seconds=0.05, refresh=True) >= peak  # measured again; the highest figure kept
    # a figure a busy machine measured low is raised by the next processes' probes, then trusted
    json.dump({key: 1.0, f"{key}|probes": 1}, path.open("w"))
    monkeypatch.setattr(flops, "_MEASURED", {})
    assert flops.cpu_peak("fp32", seconds=0.05) > 1e8 and json.loads(path.read_text())[f"{key}|probes"] == 2
    json.dump({key: 1.0, f"{key}|probes": flops.PROBES}, path.open("w"))
    monkeypatch.setattr(flops, "_MEASURED", {})
    assert flops.cpu_peak("fp32") == 1.0  # measured PROBES times: read, not measured
    # the key names the CPU's family and model, and an instruction-set cap (an AVX2 cap takes bf16 units away)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in flops._cpu_name() and flops.cpu_peak("fp32", seconds=0.05) > 1.0
    if "cpu family" in (Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""):  # x86 Linux
        assert "cpu family" in flops._cpu_name()
    assert flops.mfu(peak / 2, peak) == pytest.approx(0.5) and flops.mfu(1.0, None) is None


def test_the_cpu_probe_leaves_the_training_rng_alone(tmp_path, monkeypatch):
    """Issue 31's kill/resume flake: the probe runs at a run's first log line when the cache misses; drawing its
    matrices from the default generator shifted the dropout stream of that run only (a resumed run, or another
    process, found the cache and did not), so two runs of one seed ended 0.01 apart."""
    import torch

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a cold cache: the probe measures
    monkeypatch.setattr(flops, "_MEASURED", {})  # as a fresh process
    torch.manual_seed(0)
    before = torch.get_rng_state()
    flops.cpu_peak("fp32", seconds=0.01)
    assert torch.equal(torch.get_rng_state(), before)
    flops.cpu_peak("fp32", seconds=0.01, refresh=True)
    assert torch.equal(torch.get_rng_state(), before)


def test_log_fields_from_the_run_record(tmp_path, monkeypatch):
    """What a pretrain log line adds: model TFLOP/s over all ranks and MFU per device, from the meter's sums."""
    import json
    from types import SimpleNamespace

    (tmp_path / "run.json").write_text(
        json.dumps({"model_config": TINY, "precision": "bf16", "config": {"seq_len": 12}})
    )
    monkeypatch.setattr(flops, "device_peak", lambda device, precision: 1e9 if precision == "bf16" else None)
    ctx = SimpleNamespace(is_main=True, world_size=2, device=torch.device("cpu"))
    sums = {"tokens": 12.0, "mlm_n": 3.0, "nsp_n": 2.0}
    fields = flops.log_fields(ctx, tmp_path, 1000.0, sums)
    per_token = flops.train_flops(TINY, [6, 6], 3, nsp=True) / 12
    assert fields["model_tflops"] == pytest.approx(per_token * 1000 * 2 / 1e12, abs=1e-4)
    assert fields["mfu"] == pytest.approx(per_token * 1000 / 1e9, abs=1e-4)
    assert flops.log_fields(SimpleNamespace(is_main=False), tmp_path, 1000.0, sums) == {}


def test_modernbert_geglu_feed_forward_counts_three_matmuls():
    h, i = 32, 64
    plain = flops.forward_flops(TINY, [7], 0, nsp=False)
    geglu = flops.forward_flops({**TINY, "model_type": "modernbert"}, [7], 0, nsp=False)
    assert geglu - plain == 2 * 7 * 2 * h * i  # per layer and token: one more H x I matmul


def test_log_fields_use_the_windows_own_sequences_and_never_exceed_the_peak(tmp_path, monkeypatch):
    """A ramp trains 32-token sequences under a final --seq-len of 128: the count follows the meter's sequences, not
    run.json's seq_len. A peak probed on a busy machine below what the run achieves gives no MFU, not one over 100%."""
    import json
    from types import SimpleNamespace

    (tmp_path / "run.json").write_text(
        json.dumps({"model_config": TINY, "precision": "fp32", "config": {"seq_len": 128}})
    )
    ctx = SimpleNamespace(is_main=True, world_size=1, device=torch.device("cpu"))
    sums = {"tokens": 64.0, "mlm_n": 16.0, "sequences": 2.0}
    per_token = flops.train_flops(TINY, [32, 32], 16, nsp=False) / 64
    monkeypatch.setattr(flops, "device_peak", lambda device, precision: 1e9)
    fields = flops.log_fields(ctx, tmp_path, 1000.0, sums)
    assert fields["mfu"] == pytest.approx(per_token * 1000 / 1e9, abs=1e-4)
    assert per_token < flops.train_flops(TINY, [128, 128], 64, nsp=False) / 256  # seq_len 128 would count more
    monkeypatch.setattr(flops, "device_peak", lambda device, precision: per_token * 1000 / 2)  # probe measured low
    fields = flops.log_fields(ctx, tmp_path / ".", 1000.0, sums)
    assert "mfu" not in fields and fields["model_tflops"] > 0


def test_the_peak_on_the_models_own_products():
    """Issue 56's peak: the model's products (the feed-forward's GeGLU input projection is H x 2I in ModernBERT) and
    their weight-gradient transposes; the rate is measured from its own generator (a run's random stream untouched)."""
    bert = flops.model_shapes(TINY, tokens=64, masked=10)
    h, i, v = TINY["hidden_size"], TINY["intermediate_size"], TINY["vocab_size"]
    assert bert[:4] == [(64, h, h), (64, h, i), (64, i, h), (10, h, v)]
    assert bert[4:] == [(h, 64, h), (h, 64, i), (i, 64, h), (h, 10, v)]
    assert flops.model_shapes({**TINY, "model_type": "modernbert"}, 64, 10)[1] == (64, h, 2 * i)
    rng = torch.get_rng_state()
    assert flops.shapes_peak(bert[:2], "fp32", seconds=0.05) > 0
    assert torch.equal(torch.get_rng_state(), rng)
