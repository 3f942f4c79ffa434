"""The pre-training loop's parts, without a run: fp16 allowed on CPU, the loss scaler, the time budget, the meter,
ramps, lr schedules, the recipe choice, the device check."""

from __future__ import annotations

import itertools

import pytest
import torch


def test_fp16_is_allowed_on_cpu_when_asked_and_never_picked_by_auto():
    from bertkit.precision import grad_scaler, resolve_precision

    assert resolve_precision("fp16", "cpu") == "fp16"
    assert resolve_precision("auto", "cpu") in ("bf16", "fp32")
    assert grad_scaler("fp16", "cpu").is_enabled() and not grad_scaler("bf16", "cpu").is_enabled()


def test_auto_precision_on_cpu_reads_the_bf16_flags_and_honours_an_isa_cap(monkeypatch):
    """bf16 where the CPU's flags name avx512_bf16 or amx_bf16, fp32 elsewhere, and fp32 under a oneDNN ISA cap below
    AVX512_CORE_BF16 (``$ONEDNN_MAX_CPU_ISA``: oneDNN then has no bf16 dot products)."""
    from bertkit.precision import cpu_supports_bf16, resolve_precision

    zen4, amx, zen3 = {"avx2", "avx512f", "avx512_bf16"}, {"avx512f", "amx_bf16", "amx_tile"}, {"avx2", "fma"}
    assert cpu_supports_bf16(zen4, "") and cpu_supports_bf16(amx, "ALL") and cpu_supports_bf16(amx, "avx512_core_amx")
    assert not cpu_supports_bf16(zen3, "")
    assert not cpu_supports_bf16(zen4, "avx2") and not cpu_supports_bf16(amx, "AVX512_CORE_VNNI")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # whatever this machine's flags, auto then picks fp32
    assert resolve_precision("auto", "cpu") == "fp32"


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


@pytest.mark.parametrize("ramp", [(), ((32, 0.7),), ((32, 0.9),), ((32, 0.95),), ((32, 0.5), (64, 0.85))])
def test_the_last_refit_times_the_last_stage(ramp):
    """The last re-fit's pace is timed inside the feed's last stage (where a ramp's longest sequences run), however
    late that stage begins, and it re-fits before the run ends (none when the stage is too short to time); without a
    ramp, or with the budget recipe's (from 70%), from 72% to 80% of the steps."""
    from bertkit.data.pretraining.ramps import plan_stages
    from bertkit.training.budget import late_window

    for steps in (300, 1673, 5232):
        last = plan_stages(steps, 128, 32, list(ramp), [], None)[-1].start
        window = late_window(steps, last)
        if window is None:
            assert steps - last < 30  # 95% of 300 steps: 15 steps, too few
            continue
        start, at = window
        assert last < start < at < steps - 1 and at - start > 10  # after_step keeps windows of more than 10
        if last <= 0.7 * steps:
            assert (start, at) == (int(0.72 * steps), int(0.8 * steps))


def test_a_short_last_stage_gets_the_shortest_window_the_refit_keeps():
    """A last stage of 40 steps in 1,000: timed from 2% after its start, for 11 steps (after_step keeps windows of
    more than 10)."""
    from bertkit.training.budget import late_window

    assert late_window(1000, 960) == (980, 991)


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
    # a last re-fit from the pace of the run's last stretch: there it slows to 0.4 s/step (a ramp's longer sequences)
    late_from, late_at = B.late_window(refit)
    assert tb.window == (late_from, late_at)
    last = None
    for step in range(int(0.45 * refit) + 1, late_at + 1):
        now[0] += 0.25 if step <= late_from else 0.4
        last = tb.after_step(step, refit, cost) or last
    remaining = 60.0 - (now[0] - 100.0)
    assert last == late_at + int(remaining / (0.4 * 1.04)) < refit  # fewer steps: the decay ends before the time
    assert tb.window is None
    for step in range(late_at + 1, last + 1):
        now[0] += 0.4
        assert tb.after_step(step, last, cost) is None  # no more re-fits
    assert not tb.over() and now[0] - 100.0 <= 60.0
    now[0] += 60
    assert tb.over()


@pytest.mark.parametrize("eval_s", [0.0, 2.0, 25.0, 90.0])
def test_evaluations_are_kept_out_of_the_pace_and_their_time_inside_the_budget(monkeypatch, eval_s):
    """Issue 60, item 7: a 60-second run of 0.1-second steps whose every evaluation (the held-out batches and a BLiMP
    probe) takes ``eval_s``, looped as the recipe loops: the probe's time estimated before the fit, an evaluation
    every tenth of the steps first planned (or of the run when longer) widened to keep evaluations within a quarter
    of the budget, and after the last step; the probe gives way between batches (0.2 s) once the budget is spent; the
    run stops at the first step past it. A 25-second probe read as a slow pace had shrunk the schedule and the
    interval with it to every step or two: 85 s. The run ends within the budget plus a step and a batch, and uses
    it."""
    from bertkit.training import budget as B

    now = [0.0]
    monkeypatch.setattr(B.time, "perf_counter", lambda: now[0])
    tb = B.TimeBudget(60.0)
    cost = lambda first, total: 0.1 * max(0, total - first)  # noqa: E731
    planned = 0
    every = lambda n: tb.eval_interval(n, max(1, max(n, planned) // 10))  # noqa: E731  (recipe._eval_every)
    tb.expect(eval_s, every)  # BlimpProbe.seconds' estimate
    total = planned = tb.fit(cost)
    tb.start()
    tb.plan_refit(total, every(total), every=every)
    step = 0
    while step < total:
        step += 1
        now[0] += 0.1
        total = tb.after_step(step, total, cost) or total
        if step % every(total) == 0 or step == total:
            took = min(eval_s, max(0.0, tb.deadline - now[0]) + 0.2)  # the probe gives way once the time is spent
            now[0] += took
            tb.evaluated(took)
        if tb.over() and step < total:
            break
    assert now[0] <= 60.0 + 0.3
    assert now[0] >= 0.85 * 60.0 or eval_s > 60.0  # the budget used, by steps and evaluations that fit it
    assert tb.eval_seconds <= B.EVAL_SHARE * 60.0 + 0.1 or eval_s > B.EVAL_SHARE * 60.0  # a quarter, or one


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


def test_ramp_stages_at_given_steps():
    from bertkit.data.pretraining.ramps import parse_ramp, plan_stages, stage_at

    stages = plan_stages(100, 128, 32, parse_ramp("64:0.3", "--seq-ramp"), parse_ramp("8:0.05,16:0.15", "-b"))
    at = {step: stages[stage_at(stages, step)] for step in (0, 4, 5, 14, 15, 29, 30, 99)}
    assert [(s.seq_len, s.batch_size) for s in at.values()] == [
        (64, 8),
        (64, 8),
        (64, 16),
        (64, 16),
        (64, 32),
        (64, 32),
        (128, 32),
        (128, 32),
    ]
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
    assert all(a <= b + 1e-12 for a, b in zip(f[:warmup], f[1 : warmup + 1]))  # warming up
    assert all(a >= b - 1e-12 for a, b in zip(f[warmup:], f[warmup + 1 :]))  # then never up again
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


def test_recipe_choice_budget_with_max_time_paper_otherwise_and_flags_win(tmp_path, monkeypatch):
    from bertkit import precision
    from bertkit.recipes.pretrain import BUDGET, PAPER, PretrainConfig, resolve
    from bertkit.recipes.pretrain.tables import ECHO_SHARE

    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: True)  # a CPU with bf16 units, whatever runs this
    timed = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60))
    line = timed.chosen
    assert timed.recipe == "budget" and line.startswith("recipe budget:")
    assert all(k in line for k in BUDGET)  # every choice is printed
    assert (timed.output_bias, timed.dropout, timed.nsp) == (BUDGET["output_bias"], BUDGET["dropout"], BUDGET["nsp"])
    stepped = resolve(PretrainConfig(corpus=["x"], output="o", max_steps=10))
    assert stepped.recipe == "paper"
    assert {k: getattr(stepped, k) for k in PAPER} == PAPER
    assert (stepped.lr, stepped.mask_prob, stepped.nsp, stepped.output_bias) == (1e-4, 0.15, True, "zero")
    mixed = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, recipe="paper", nsp=False, lr=3e-4))
    line = mixed.chosen
    assert (mixed.recipe, mixed.nsp, mixed.lr, mixed.schedule) == ("paper", False, 3e-4, "linear")
    assert "nsp=False (set)" in line and "lr=0.0003 (set)" in line
    # echoes: the budget's share without NSP; none beside NSP (the paper's, or --nsp on the budget); a share set wins
    assert timed.echo_share == BUDGET["echo_share"] > 0 and stepped.echo_share == 0.0
    assert resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, arch="bert", nsp=True)).echo_share == 0.0
    assert resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, segments="pair")).echo_share == 0.0
    set_share = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, echo_share=0.1))
    assert set_share.echo_share == 0.1 and "echo_share=0.1 (set)" in set_share.chosen
    # the share in every stage where the run trains in bf16; only in the short stage where a CPU run trains in fp32
    # (no bf16 units, or --precision fp32); a stage or a share set wins
    assert timed.echo_stage is None and stepped.echo_stage is None  # every stage (echoes.echo_stage)
    fp32 = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, precision="fp32"))
    assert (fp32.echo_share, fp32.echo_stage) == (ECHO_SHARE, "first") and fp32.chosen.endswith("echo_stage=first")
    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: False)  # an AVX2 CPU
    assert resolve(PretrainConfig(corpus=["x"], output="o", max_time=60)).echo_stage == "first"
    stage_set = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, echo_stage="all"))
    assert stage_set.echo_stage == "all" and "echo_stage=all (set)" in stage_set.chosen
    unshared = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, echo_share=0.0))
    assert (unshared.echo_share, unshared.echo_stage) == (0.0, None)
    electra = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, objective="electra"))  # its share: 0
    assert (electra.echo_share, electra.echo_stage) == (0.0, None)


def test_the_recipe_chooses_the_model_the_user_left_out(tmp_path, monkeypatch):
    """--max-time without --arch/--model-size/--vocab-size builds the budget recipe's model (ModernBERT-tiny on an
    8,000-token vocabulary: the downstream meter's winner; a size up where the machine reads enough, which
    test_pretrain_sizing checks: here a slow machine's rate); the paper recipe keeps BERT-mini and 30,522 tokens;
    ELECTRA trains a BERT discriminator of the recipe's size; --init-from continues the model's own architecture; a
    named size names its architecture; what the user sets wins; the line names no output bias or position table for
    a loaded model, which keeps its own."""
    from bertkit.recipes.pretrain import PretrainConfig, resolve, sizing

    monkeypatch.setattr(sizing, "tokens_per_second", lambda *a: 100.0)  # mini reads 360k tokens in an hour

    def chosen(**kw):
        cfg = resolve(PretrainConfig(corpus=["x"], output="o", **kw))
        return cfg.arch, cfg.model_size, cfg.vocab_size

    assert chosen(max_time=60) == ("modernbert", "modernbert-tiny", 8000)
    assert chosen(max_time=3600, arch="bert") == ("bert", "bert-tiny", 8000)  # sized for ModernBERT only
    assert chosen(max_steps=10) == ("bert", "bert-mini", 30522)
    assert chosen(max_time=60, objective="electra") == ("modernbert", "modernbert-tiny", 8000)  # as MLM's
    assert chosen(max_steps=10, objective="electra") == ("bert", "bert-mini", 30522)
    assert chosen(max_time=60, arch="bert", vocab_size=500) == ("bert", "bert-tiny", 500)
    assert chosen(max_steps=10, arch="modernbert") == ("modernbert", "modernbert-mini", 30522)
    assert chosen(max_time=60, model_size="bert-mini") == ("bert", "bert-mini", 8000)  # the size names BERT
    assert chosen(max_time=60, model_size="modernbert-small")[0] == "modernbert"
    lr = lambda **kw: resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, **kw)).lr  # noqa: E731
    # the budget's lr by the BERT name of the size, in either architecture's name; tiny at the budget's shape (6
    # layers: tables.SHAPE_LR) its own, the preset named or another depth the size's
    assert (lr(), lr(model_size="modernbert-mini"), lr(arch="bert"), lr(model_size="bert-small")) == (
        2e-3,
        1e-3,
        4e-3,
        5e-4,
    )
    assert lr(model_size="modernbert-tiny") == lr(config_overrides={"num_hidden_layers": 3}) == 4e-3
    assert lr(config_overrides={"num_hidden_layers": 6, "num_attention_heads": 4}) == 2e-3
    # LAMB's one lr whatever the size and recipe (its steps are relative to each weight's norm); --lr wins
    assert (lr(optimizer="lamb"), lr(optimizer="lamb", model_size="bert-small"), lr(optimizer="lamb", lr=1e-3)) == (
        7e-3,
        7e-3,
        1e-3,
    )
    init = tmp_path / "mb"
    init.mkdir()
    (init / "config.json").write_text('{"model_type": "modernbert", "hidden_size": 64}', encoding="utf-8")
    (init / "vocab.txt").write_text("[PAD]\n", encoding="utf-8")
    assert chosen(max_steps=10, init_from=str(init))[0] == "modernbert"
    line = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60)).chosen
    assert line.startswith("recipe budget: modernbert-tiny with num_hidden_layers=6 (the budget reads about ")
    assert "tokens (the corpus's size unknown)), vocabulary 8000 tokens trained on the corpus;" in line
    line = resolve(PretrainConfig(corpus=["x"], output="o", max_steps=10, init_from=str(init))).chosen
    assert line.startswith(f"recipe paper: from {init}, ")  # not the default size the model does not have
    line = resolve(PretrainConfig(corpus=["x"], output="o", max_time=60, init_from=str(init))).chosen
    assert "lr=" in line and not any(k in line for k in ("output_bias", "position_init", "embedding_init"))  # its own
    lamb = PretrainConfig(corpus=["x"], output="o", max_steps=10, init_from=str(init), optimizer="lamb")
    assert resolve(lamb).lr == 7e-4


def test_the_budget_recipe_sizes_its_steps_for_a_gpu(monkeypatch):
    """On a GPU (no --device where CUDA is available) the budget recipe builds ModernBERT-small with 32,768 tokens a
    step (256 x 128, ramped through 1,024 x 32) at lr 1e-3 and says so; another size keeps its lr by size, the
    paper recipe and a CPU run keep theirs, and a flag still wins."""
    import torch

    from bertkit.recipes.pretrain import PretrainConfig, resolve

    def run(**kw):
        return resolve(PretrainConfig(corpus=["x"], output="o", **kw))

    cpu = run(max_time=60)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = run(max_time=60)
    assert (gpu.model_size, gpu.batch_size, gpu.batch_ramp, gpu.lr) == ("modernbert-small", 256, "1024:0.7", 1e-3)
    assert gpu.chosen.startswith("recipe budget for the GPU (32,768 tokens a step): modernbert-small")
    assert (cpu.model_size, cpu.batch_size, cpu.batch_ramp, cpu.lr) == ("modernbert-tiny", 32, "128:0.7", 2e-3)
    mini = run(max_time=60, model_size="modernbert-mini")
    assert (mini.batch_size, mini.lr) == (256, 1e-3) and run(max_time=60, model_size="bert-small").lr == 5e-4
    assert run(max_time=60, batch_size=64, lr=3e-4).batch_size == 64 and run(max_time=60, lr=3e-4).lr == 3e-4
    assert run(max_steps=10).batch_size == 32  # the paper recipe: the paper's batch
    assert run(max_time=60, device="cpu").model_size == "modernbert-tiny"


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


def test_the_loop_answers_from_the_host_what_a_plain_masked_lm_would_ask_the_device():
    """The loop's micro-batch (recipe._micro_batches) for a masked LM that takes ``masked_positions``: the labelled
    positions found on the host, and no attention mask where nothing is padded (a GPU's step then waits for
    nothing); a padded batch keeps its mask. A graphed step's positions are padded to its multiple with unlabelled
    ones. The loss is the plain call's, and the log counts the same tokens and labels, padding or not."""
    from types import SimpleNamespace

    import numpy as np
    from tinymodels import tiny_config

    from bertkit.modeling import BertForPreTraining
    from bertkit.recipes.pretrain import objectives
    from bertkit.recipes.pretrain.compiled import POSITIONS_MULTIPLE, CompiledStep
    from bertkit.recipes.pretrain.recipe import _micro_batches
    from bertkit.training.meter import Meter

    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(3, 8))
    labels = np.where(rng.random((3, 8)) < 0.3, ids, -100)
    labels[0, 0] = ids[0, 0]  # at least one label
    padded_mask = np.ones((3, 8), dtype=np.int64)
    padded_mask[2, 5:] = 0
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config(vocab_size=100, layers=1)).eval()
    seen = []

    def recording(**kw):
        seen.append(kw)
        return model(**kw)

    cfg = SimpleNamespace(grad_accum=1, nsp=False)
    ctx = SimpleNamespace(device=torch.device("cpu"))
    labelled = np.flatnonzero(labels.reshape(-1) != -100).tolist()
    for mask, step_model in itertools.product((np.ones((3, 8), dtype=np.int64), padded_mask), (False, True)):
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        feed = SimpleNamespace(next=lambda loader, b=batch: b, hard=None)
        meter = Meter()
        step_model = CompiledStep(None, graphed=step_model)
        forward, count = _micro_batches(feed, None, cfg, ctx, meter, objectives.get("mlm"), True, step_model)
        out = forward(recording, 0)
        count(0, out)
        positions = seen[-1]["masked_positions"].tolist()
        assert positions[: len(labelled)] == labelled
        assert len(positions) == (POSITIONS_MULTIPLE if step_model.graphed else len(labelled))
        assert ("attention_mask" in seen[-1]) == (not mask.all())
        plain = model(torch.from_numpy(ids), torch.from_numpy(mask), labels=torch.from_numpy(labels))
        torch.testing.assert_close(out.loss, plain.loss, rtol=1e-6, atol=0)
        ok = (plain.masked_logits.argmax(-1) == plain.masked_labels).sum()
        assert meter.sums["tokens"] == mask.sum() and meter.sums["mlm_n"] == len(labelled)
        assert meter.sums["mlm_ok"] == ok


def test_the_pretraining_only_nsp_head_adds_berts_nsp_loss_to_the_masked_lms_own(tmp_path):
    """``--nsp`` on ModernBERT (no next-sentence head in its layout): loss = the masked LM's own loss + BERT's NSP
    cross-entropy over dense -> tanh -> linear of the masked mean of the final states (recomputed by hand), and
    what it saves is the masked LM alone."""
    from tinymodernbert import modernbert_config

    from bertkit.modeling_modernbert import ModernBertForMaskedLM
    from bertkit.recipes.pretrain.objectives.mlm_nsp import NextSentenceHead

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
    torch.manual_seed(0)
    base = ModernBertForMaskedLM(modernbert_config(vocab, classifier_pooling="mean")).eval()  # the presets'
    model = NextSentenceHead(base).eval()
    ids = torch.randint(5, len(vocab), (3, 12))
    mask = torch.ones_like(ids)
    mask[2, 8:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    ids[:, 3] = 4
    nsp = torch.tensor([0, 1, 1])
    with torch.no_grad():
        out = model(ids, mask, labels=labels, next_sentence_label=nsp)
        plain = base(ids, mask, labels=labels)
        hidden = base.model(ids, mask).last_hidden_state
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        logits = model.classifier(torch.tanh(model.dense(pooled)))
    torch.testing.assert_close(out.mlm_loss, plain.loss)
    torch.testing.assert_close(out.seq_relationship_logits, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, plain.loss + torch.nn.functional.cross_entropy(logits, nsp), atol=1e-5, rtol=0)
    model.save_pretrained(tmp_path)  # the masked LM alone: the head stays in the checkpoints
    from safetensors.torch import load_file

    base.save_pretrained(tmp_path / "plain")
    assert set(load_file(str(tmp_path / "model.safetensors"))) == set(
        load_file(str(tmp_path / "plain/model.safetensors"))
    )
    assert {"dense.weight", "classifier.weight"} <= set(model.state_dict())
