"""The pre-training loop's parts: fp16 with a loss scaler (on CPU), the time budget, ramps, lr schedules, the meter,
and the recipes (budget / paper)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
import torch

TINY = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(the first ~30 KB of the bundled Alice, a 600-token vocab.txt trained on it)."""
    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    d = tmp_path_factory.mktemp("corpus")
    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    path = d / "alice.txt"
    path.write_text(gzip.decompress(alice.read_bytes()).decode("utf-8")[:30_000], encoding="utf-8")
    train_vocab([path], vocab_size=600, output=d / "vocab", show_progress=False)
    return path, d / "vocab" / "vocab.txt"


def _config(corpus, out, **kw):
    from bertkit.recipes.pretrain import PretrainConfig

    base = dict(corpus=[str(corpus[0])], vocab=str(corpus[1]), output=str(out), model_size="bert-tiny",
                config_overrides=TINY, seq_len=32, batch_size=4, quiet=True, workers=1, precision="fp32", lr=1e-3,
                device="cpu")  # the tests compare with loops on the CPU, also on a machine with a GPU
    base.update(kw)
    return PretrainConfig(**base)


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def _rewind(run: Path, to: Path, step: int) -> None:
    """A copy of ``run`` as a kill right after its checkpoint at ``step`` would have left it."""
    shutil.copytree(run, to)
    for p in (to / "checkpoints").glob("step-*.pt"):
        if int(p.stem.split("-")[1]) > step:
            p.unlink()
    (to / "checkpoints" / "latest").write_text(f"step-{step:08d}.pt\n")
    for name in ("model.safetensors", "config.json"):
        (to / name).unlink()


# --------------------------------------------------------------------------------------------- fp16


def test_fp16_is_allowed_on_cpu_when_asked_and_never_picked_by_auto():
    from bertkit.precision import grad_scaler, resolve_precision

    assert resolve_precision("fp16", "cpu") == "fp16"
    assert resolve_precision("auto", "cpu") in ("bf16", "fp32")
    assert grad_scaler("fp16", "cpu").is_enabled() and not grad_scaler("bf16", "cpu").is_enabled()


def test_fp16_run_scales_the_loss_and_resumes_exactly(corpus, tmp_path):
    from bertkit.recipes.pretrain import pretrain
    from bertkit.training.checkpointing import load_checkpoint

    run = tmp_path / "fp16"
    pretrain(_config(corpus, run, precision="fp16", max_steps=6, save_every=2, keep_checkpoints=5))
    state = load_checkpoint(run / "checkpoints" / "step-00000002.pt")
    assert state["scaler"]["scale"] > 1.0  # a live loss scaler, its state in the checkpoint
    assert state["scaler"]["_growth_tracker"] == 2
    resumed = tmp_path / "resumed"
    _rewind(run, resumed, 2)
    pretrain(_config(corpus, resumed, precision="fp16", max_steps=6, save_every=2, keep_checkpoints=5, resume=True))
    a, b = _weights(run), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(resumed / "checkpoints" / "step-00000006.pt")["scaler"] == \
        load_checkpoint(run / "checkpoints" / "step-00000006.pt")["scaler"]


def test_fp16_scaler_keeps_small_gradients_from_underflowing():
    """A loss whose fp16 gradients underflow to zero unscaled gets non-zero gradients through the scaler."""
    from bertkit.precision import autocast, grad_scaler

    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    for scaled, expect_nonzero in ((False, False), (True, True)):
        layer.zero_grad()
        scaler = grad_scaler("fp16" if scaled else "fp32", "cpu")
        with autocast("fp16", "cpu"):
            out = layer(x)
            loss = (out.float() * 1e-8).sum()
        # the gradient flowing into the fp16 matmul is 1e-8, below fp16's smallest subnormal (6e-8): zero unscaled
        scaler.scale(loss).backward()
        scaler.unscale_(torch.optim.SGD(layer.parameters(), lr=0.1))
        assert bool(layer.weight.grad.abs().sum() > 0) == expect_nonzero


# --------------------------------------------------------------------------------------------- time budget, meter


def test_time_budget_fits_steps_to_the_probed_cost_and_refits_to_the_measured_pace(monkeypatch):
    from bertkit.training import budget as B

    now = [100.0]
    monkeypatch.setattr(B.time, "perf_counter", lambda: now[0])
    tb = B.TimeBudget(60.0)
    cost = lambda first, total: 0.5 * max(0, total - first)  # noqa: E731  (0.5 s per step probed)
    total = tb.fit(cost)
    assert cost(0, total) * B.SLACK <= 60 * B.MARGIN - B.OVERHEAD < cost(0, total + 1) * B.SLACK
    tb.start()
    tb.plan_refit(total, eval_every=10)
    start, at = tb.window
    refit = None
    for step in range(1, at + 1):
        now[0] += 0.25  # the run goes twice as fast as the cold probe said
        refit = tb.after_step(step, total, cost) or refit
    remaining = 60.0 - 0.25 * at
    assert refit == at + int(remaining / (0.25 * 1.04))
    assert tb.window == (at, int(0.45 * refit))  # a second re-fit before the middle, from the pace since the first
    for step in range(at + 1, int(0.45 * refit) + 1):
        now[0] += 0.25
        assert tb.after_step(step, refit, cost) is None  # the pace held: no change
    assert tb.window is None
    assert not tb.over()
    now[0] += 60
    assert tb.over()


def test_time_budget_counts_a_resumed_runs_elapsed_time(monkeypatch):
    from bertkit.training import budget as B

    now = [0.0]
    monkeypatch.setattr(B.time, "perf_counter", lambda: now[0])
    tb = B.TimeBudget(60.0, elapsed=50.0)
    tb.start()
    now[0] = 9.9
    assert not tb.over()
    now[0] = 10.1
    assert tb.over()


def test_meter_sums_and_ratios():
    from bertkit.training.meter import Meter

    m = Meter()
    m.add(ok=3, n=4)
    m.add(ok=1, n=4, loss=2.0)
    assert m.ratio("ok", "n") == 0.5 and m.ratio("nsp_ok", "nsp_n") == 0.0 and m.sums["loss"] == 2.0
    m.reset()
    assert m.ratio("ok", "n") == 0.0


# --------------------------------------------------------------------------------------------- ramps and schedules


def test_ramp_stages_at_given_steps():
    from bertkit.training.ramps import parse_ramp, plan_stages, stage_at

    stages = plan_stages(100, 128, 32, parse_ramp("64:0.3", "--seq-ramp"), parse_ramp("8:0.05,16:0.15", "-b"))
    at = {step: stages[stage_at(stages, step)] for step in (0, 4, 5, 14, 15, 29, 30, 99)}
    assert [(s.seq_len, s.batch_size) for s in at.values()] == [
        (64, 8), (64, 8), (64, 16), (64, 16), (64, 32), (64, 32), (128, 32), (128, 32)]
    assert [s.start for s in stages] == [0, 5, 15, 30]
    two = plan_stages(100, 128, 32, phase2=(512, 8))
    assert [(s.start, s.seq_len, s.batch_size) for s in two] == [(0, 128, 32), (90, 512, 8)]
    assert plan_stages(100, 128, 32) == plan_stages(100, 128, 32, parse_ramp("off", "x"))
    for bad in ("64", "64:1.5", "64:0.5,32:0.2", "x:0.1", "0:0.5"):
        with pytest.raises(ValueError, match="expected|fractions"):
            parse_ramp(bad, "--seq-ramp")


@pytest.mark.parametrize("kind", ["linear", "trapezoid", "onecycle"])
def test_lr_schedules(kind):
    from bertkit.training.optim import linear_schedule, lr_factor, lr_schedule

    total, warmup = 100, 10
    f = [lr_factor(kind, s, warmup, total) for s in range(total + 1)]
    assert max(f) == pytest.approx(1.0) and f[total] == pytest.approx(0.0, abs=1e-12)
    assert all(a <= b + 1e-12 for a, b in zip(f[:warmup], f[1:warmup + 1]))  # warming up
    assert all(a >= b - 1e-12 for a, b in zip(f[warmup:], f[warmup + 1:]))  # then never up again
    if kind == "trapezoid":
        assert f[warmup:50] == [1.0] * (50 - warmup) and f[75] == pytest.approx(0.5)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = lr_schedule(opt, kind, warmup, total)
    lrs = []
    for _ in range(total):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2.0 * x for x in f[:total]])
    if kind == "linear":  # the paper's schedule, as before
        ref = linear_schedule(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0), warmup, total)
        assert [ref.lr_lambdas[0](s) for s in range(total)] == pytest.approx(f[:total])


# --------------------------------------------------------------------------------------------- the recipes


def test_recipe_choice_budget_with_max_time_paper_otherwise_and_flags_win(tmp_path):
    from bertkit.recipes.pretrain import BUDGET, PAPER, PretrainConfig, resolve_recipe

    timed, line = resolve_recipe(PretrainConfig(corpus=["x"], output="o", max_time=60))
    assert timed.recipe == "budget" and line.startswith("recipe budget:")
    assert all(k in line for k in BUDGET)  # every choice is printed
    assert (timed.output_bias, timed.dropout, timed.nsp) == (BUDGET["output_bias"], BUDGET["dropout"], BUDGET["nsp"])
    stepped, _ = resolve_recipe(PretrainConfig(corpus=["x"], output="o", max_steps=10))
    assert stepped.recipe == "paper"
    assert {k: getattr(stepped, k) for k in PAPER} == PAPER
    assert (stepped.lr, stepped.mask_prob, stepped.nsp, stepped.output_bias) == (1e-4, 0.15, True, "zero")
    mixed, line = resolve_recipe(PretrainConfig(corpus=["x"], output="o", max_time=60, recipe="paper", nsp=False,
                                                lr=3e-4))
    assert (mixed.recipe, mixed.nsp, mixed.lr, mixed.schedule) == ("paper", False, 3e-4, "linear")
    assert "nsp=False (set)" in line and "lr=0.0003 (set)" in line


def test_paper_recipe_is_the_plain_bert_loop(corpus, tmp_path):
    """--recipe paper computes what a plain loop does (Devlin et al.: lr 1e-4 with 5% linear warmup and linear decay,
    dropout 0.1, MLM + NSP, 15% masks, 10% short sequences, zero output bias), bit for bit."""
    from bertkit import BertConfig, BertForPreTraining
    from bertkit.data.pretraining import DataOptions, PretrainingData, VocabInfo
    from bertkit.recipes.pretrain import pretrain
    from bertkit.tokenization import BertTokenizer
    from bertkit.training.optim import build_optimizer, linear_schedule

    out, steps, seed = tmp_path / "paper", 6, 5
    pretrain(_config(corpus, out, recipe="paper", lr=None, max_steps=steps, seed=seed, eval_batches=1))
    tok = BertTokenizer.from_pretrained(out)
    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=len(tok), **TINY)).train()
    assert model.config.hidden_dropout_prob == 0.1
    opt = build_optimizer(model, lr=1e-4, weight_decay=0.01)
    sched = linear_schedule(opt, 1, steps)
    data = PretrainingData(out / "data" / "shards", VocabInfo.from_tokenizer(tok),
                           DataOptions(max_seq_length=32, batch_size=4, nsp=True, mask_prob=0.15, short_seq_prob=0.1,
                                       seed=seed))
    torch.manual_seed(seed)
    for i in range(steps):
        loss = model(**{k: torch.from_numpy(v) for k, v in data.batch(0, i).items()}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    ours = _weights(out)
    theirs = model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert float((ours["cls.predictions.bias"]).abs().max()) < 0.01  # started at zero


def test_unigram_output_bias_starts_training_at_the_unigram_entropy(corpus, tmp_path):
    """With --output-bias unigram the first held-out loss is the cross-entropy of the held-out tokens under the
    training text's unigram distribution (the plateau a zero-bias model needs many steps to reach); with zero bias
    it is about log(V)."""
    import math

    import numpy as np

    from bertkit.data.pretraining import DataOptions, PretrainingData, VocabInfo, read_meta
    from bertkit.recipes.pretrain import pretrain
    from bertkit.tokenization import BertTokenizer

    losses = {}
    for bias in ("unigram", "zero"):
        out = tmp_path / bias
        pretrain(_config(corpus, out, recipe="budget", output_bias=bias, max_steps=1, lr=1e-12, eval_batches=25,
                         nsp=False, short_seq_prob=0.0, mask_prob=0.15))
        evals = [x for x in map(eval_line, (out / "metrics.jsonl").read_text().splitlines()) if "eval_loss" in x]
        losses[bias] = evals[0]["eval_loss"]
    shards = tmp_path / "unigram" / "data" / "shards"
    tok = BertTokenizer.from_pretrained(tmp_path / "unigram")
    v = VocabInfo.from_tokenizer(tok)
    train = np.concatenate([np.load(shards / f"{s['name']}.tokens.npy").astype(np.int64)
                            for s in read_meta(shards)["shards"]])
    p = np.bincount(train, minlength=len(tok)) / len(train)
    held = PretrainingData(shards, v, DataOptions(max_seq_length=32, batch_size=4, nsp=False, short_seq_prob=0.0),
                           split="eval").eval_batches(25)
    labels = np.concatenate([b["labels"][b["labels"] != -100] for b in held])
    cross_entropy = float(-np.log(np.maximum(p[labels], 1e-12)).mean())
    entropy = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    assert losses["unigram"] == pytest.approx(cross_entropy, rel=0.03)
    assert losses["unigram"] == pytest.approx(entropy, rel=0.15)
    assert losses["zero"] == pytest.approx(math.log(len(tok)), rel=0.03)
    assert losses["zero"] - cross_entropy > 0.3  # (a 600-token vocabulary on 30 KB is far from uniform, not very)


def eval_line(text: str) -> dict:
    import json

    return json.loads(text)


def test_resume_across_a_ramp_boundary_is_exact(corpus, tmp_path):
    """Sequence-length and batch-size ramps change stage at given steps; a run rewound to a checkpoint before a
    boundary and resumed crosses it to the uninterrupted run's weights, bit for bit."""
    from bertkit.recipes.pretrain import pretrain
    from bertkit.training.checkpointing import load_checkpoint

    kw = dict(recipe="budget", max_steps=12, save_every=1, keep_checkpoints=20, seq_ramp="16:0.5",
              batch_ramp="2:0.25", log_every=1, eval_batches=1, dropout=0.1)
    run = tmp_path / "ramped"
    pretrain(_config(corpus, run, **kw))
    # the stage of the data position after N steps (the next step's stage begins with it)
    stage = {s: load_checkpoint(run / "checkpoints" / f"step-{s:08d}.pt")["position"]["phase"] for s in (2, 3, 4, 6, 7)}
    assert stage == {2: 0, 3: 0, 4: 1, 6: 1, 7: 2}  # (16, 2) for steps 0-2, (16, 4) for 3-5, then (32, 4)
    for at in (3, 5):
        resumed = tmp_path / f"from-{at}"
        _rewind(run, resumed, at)
        pretrain(_config(corpus, resumed, resume=True, **kw))
        a, b = _weights(run), _weights(resumed)
        assert all(torch.equal(a[k], b[k]) for k in a), f"resumed from step {at}"


def test_more_processes_than_gpus_is_a_clear_error(monkeypatch):
    """torchrun with more processes per node than GPUs: a one-line error naming the fix, not CUDA's "invalid device
    ordinal" from deep inside set_device (seen with --nproc_per_node 2 on a one-GPU machine)."""
    from bertkit.errors import RunError
    from bertkit.training import distributed

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail("set_device reached"))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RunError, match=r"GPU 1, but this machine has 1.*--nproc_per_node 1.*--device cpu"):
        distributed.setup("cuda")
