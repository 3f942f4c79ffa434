"""Pre-training recipe: MLM + NSP from raw text, one explicit loop.

    corpus -> sentences (data) -> vocabulary (tokenization) -> memmap shards (data) -> BertForPreTraining -> OUTPUT/

Per optimizer step: ``grad_accum`` micro-batches under autocast (DDP syncs gradients only on the last; fp16 losses
are scaled), gradient clipping at ``clip``, AdamW step, lr schedule step. Every ``log_every`` steps a line goes to
``metrics.jsonl``; every ``eval_every`` steps the held-out MLM/NSP accuracy; every ``save_every`` steps, at the end,
and on SIGTERM/SIGINT an atomic checkpoint. ``resume=True`` continues from the latest checkpoint and ends with the
same weights as an uninterrupted run: the data position is (stage, epoch, index), batches are pure functions of the
seed, and every RNG state is restored.

Two recipes (``--recipe``): ``paper`` is Devlin et al.'s (lr 1e-4, linear schedule, dropout 0.1, 15% masking, NSP);
``budget``, the default when ``--max-time`` is given, is what measured best in minutes of CPU (docs/pretraining.md
has the ablation): the MLM output bias starts at the corpus's unigram log-frequencies, no dropout, a higher lr on a
trapezoidal schedule, 30% masking, MLM only on full packed sequences. Every choice is its own flag too.

Two objectives (``--objective``): ``mlm``, and ``electra``: replaced-token detection with a small generator
(``recipes/electra.py``: its model, masking defaults and figures; the loop is this one).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from bertkit.errors import LossNotFinite
from bertkit.recipes.pretrain_config import (  # noqa: F401 (public here too)
    RECIPES,
    RUN_KEYS,
    SCHEDULES,
    PretrainConfig,
    PretrainError,
    parse_duration,
    parse_mask_mix,
)
from bertkit.recipes.pretrain_setup import (
    build_model,
    make_feed,
    os_errors,
    prepare_output,
    read_record,
    remove_stale,
    say_run,
    tokenizer_and_shards,
)
from bertkit.training.feed import Feed, to_device
from bertkit.training.prefetch import Prefetcher

__all__ = ["LossNotFinite", "PretrainConfig", "PretrainError", "held_out_accuracy", "pretrain"]

# --------------------------------------------------------------------------------------------- the two recipes

PAPER = {
    "lr": 1e-4,
    "schedule": "linear",
    "warmup_fraction": 0.05,
    "dropout": None,
    "mask_prob": 0.15,
    "nsp": True,
    "short_seq_prob": 0.1,
    "output_bias": "zero",
    "seq_ramp": "off",
    "batch_ramp": "off",
    "mask_mix": "80/10/10",
    "position_init": "normal",
    "seq_len": 128,
    "batch_size": 32,
}
# chosen by measurement (docs/pretraining.md, "Pre-training in minutes"); lr by model width below
BUDGET = {
    "lr": None,
    "schedule": "trapezoid",
    "warmup_fraction": 0.05,
    "dropout": 0.0,
    "mask_prob": 0.3,
    "nsp": False,
    "short_seq_prob": 0.0,
    "output_bias": "unigram",
    "seq_ramp": "32:0.7",
    "batch_ramp": "128:0.7",
    "mask_mix": "80/10/10",
    "position_init": "sinusoidal",
    "seq_len": 128,
    "batch_size": 32,
}
BUDGET_LR = {"bert-tiny": 4e-3, "bert-mini": 1e-3, "bert-small": 5e-4, "bert-medium": 5e-4}  # others: 2e-4


def resolve_recipe(cfg: PretrainConfig) -> tuple[PretrainConfig, str]:
    """``cfg`` with every recipe choice the user left unset filled in, and a line saying what was chosen."""
    name = cfg.recipe_name()
    table = dict(BUDGET if name == "budget" else PAPER)
    size = cfg.model_size
    if cfg.arch == "modernbert":  # its own recipe's masking and objectives; lr as BERT's of the same size
        from bertkit.recipes import modernbert

        table.update(modernbert.DEFAULTS, position_init=None)  # rotary positions: no table to initialise
        cfg = dataclasses.replace(cfg, model_size=modernbert.preset(cfg.model_size))  # a bad size fails here, early
        size = cfg.model_size.replace("modernbert-", "bert-")
    if cfg.objective == "electra":  # ELECTRA's masking, no NSP (recipes/electra.py)
        from bertkit.recipes import electra

        electra.check(cfg)
        table.update(electra.DEFAULTS)
    if table["lr"] is None:
        table["lr"] = BUDGET_LR.get(size, 2e-4) if not cfg.init_from else 1e-4
    chosen = {k: v for k, v in table.items() if getattr(cfg, k) is None}
    resolved = dataclasses.replace(cfg, recipe=name, **chosen)
    vocab = resolved.vocab or f"{resolved.vocab_size} tokens trained on the corpus"
    shown = f"{resolved.model_size}, vocabulary {vocab}; " + ", ".join(
        f"{k}={getattr(resolved, k)}" + ("" if k in chosen else " (set)") for k in table
    )
    return resolved, f"recipe {name}: {shown}"


# --------------------------------------------------------------------------------------------- the recipe


def pretrain(cfg: PretrainConfig) -> Path:
    """Run (or resume) a pre-training run; returns OUTPUT, which ends as a loadable model directory.

    Raises PretrainError for a run that cannot start, LossNotFinite when the loss stops being finite, and
    Interrupted (after saving a checkpoint) on SIGTERM/SIGINT."""
    import torch

    from bertkit.data.pretraining import VocabInfo
    from bertkit.precision import resolve_precision
    from bertkit.training import distributed as dist
    from bertkit.training.interrupt import GracefulStop
    from bertkit.training.step import optimizer_step
    from bertkit.training.steprun import StepRun

    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    ctx, out = dist.setup(cfg.device), Path(cfg.output)
    try:
        with GracefulStop() as stop, os_errors(out):
            # ---- recipe, output dir, vocabulary, shards, model, optimizer
            cfg, chosen = resolve_recipe(cfg)
            cfg = dist.on_main(ctx, lambda: prepare_output(cfg), PretrainError)
            say_run(cfg, ctx, chosen)
            tokenizer, shard_dir = tokenizer_and_shards(cfg, ctx)
            precision = resolve_precision(cfg.precision, ctx.device)
            feed = make_feed(cfg, shard_dir, VocabInfo.from_tokenizer(tokenizer), ctx)
            eval_batches = _eval_batches(cfg, feed)
            # ---- the model, the schedule (steps fitted to --max-time) or the checkpoint resumed, the train state
            model, config, train, window, budget, cost, total_steps, warmup = _model_and_schedule(
                cfg, ctx, tokenizer, shard_dir, feed, precision
            )
            ddp_model = dist.wrap(model, ctx, find_unused_parameters=not cfg.nsp)
            if cfg.compile:  # after DDP, as PyTorch's DDP + compile guide does; checkpoints save the plain model
                ddp_model = torch.compile(ddp_model)
            record = _start_record(cfg, ctx, model, config, len(tokenizer), precision, total_steps, warmup)
            run = StepRun(cfg, ctx, train, feed, total_steps, warmup, record, window, budget, cost)
            run.write_record()
            run.dir.truncate_metrics(train.step)

            # ---- the loop
            workers = cfg.loader_workers if cfg.loader_workers is not None else (2 if ctx.device.type == "cuda" else 0)
            loader = Prefetcher(workers)
            if budget is not None:
                budget.start()
            try:  # the workers (processes on a GPU) go when the loop does, also when it raises
                while run.going():
                    t0 = time.perf_counter()
                    # a ramp's next stage (before the step: resume-exact)
                    if entered := feed.advance(run.step, run.total_steps):
                        say_run(cfg, ctx, entered)
                    forward, count = _micro_batches(feed, loader, cfg, ctx, run.meter)
                    step_loss = optimizer_step(
                        train,
                        range(cfg.grad_accum),
                        forward,
                        clip=cfg.clip,
                        precision=precision,
                        device=ctx.device,
                        ctx=ctx,
                        ddp_model=ddp_model,
                        after_backward=count,
                        on_not_finite=run.not_finite,
                    ).loss
                    run.stepped(step_loss, t0)
                    if run.due(cfg.log_every):
                        _log(cfg, run, train.scheduler.get_last_lr()[0])
                    if eval_batches and ctx.is_main and run.due(run.eval_every):
                        run.timed(lambda: _held_out(cfg, ctx, model, eval_batches, precision, run.step))
                    run.after_step(stop)
            finally:
                run.close()
                loader.close()

            # ---- the end: checkpoint + model directory (config.json, model.safetensors, vocab.txt, tokenizer config)
            run.end(stop)
            if ctx.is_main:
                _write_model(cfg, ctx, model, tokenizer, run)
            dist.barrier(ctx)
            return out
    finally:
        dist.cleanup(ctx)


def _model_and_schedule(cfg: PretrainConfig, ctx, tokenizer, shard_dir: Path, feed: Feed, precision: str):
    """The model (the factory keyed by --arch), its optimizer and loss scaler; the steps (fitted to --max-time, or
    the resumed run's) and the schedule; a TrainState, restored from the checkpoint when resuming (its position
    the feed placed at its data position.
    Returns (model, config, train state, the checkpoint's log window, budget, cost, total steps, warmup steps)."""
    from bertkit.precision import grad_scaler
    from bertkit.training.optim import build_optimizer, lr_schedule
    from bertkit.training.state import TrainState, seed_dropout

    if cfg.arch == "modernbert":
        from bertkit.recipes.modernbert import build_model as make_model
    else:
        make_model = build_model
    if cfg.objective == "electra":  # the discriminator is the architecture's model, beside its generator
        from functools import partial

        from bertkit.recipes import electra

        make_model = partial(electra.build_model, build_base=make_model)
    model, config = make_model(cfg, tokenizer, shard_dir, feed.max_len, ctx.device)
    optimizer = build_optimizer(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    state, budget, cost, total_steps = _schedule(cfg, ctx, feed, model, precision)
    warmup = max(1, int(cfg.warmup_fraction * total_steps)) if cfg.warmup_steps is None else cfg.warmup_steps
    if cost is not None and cfg.max_steps is None:  # the probe ran cold: re-fit once to the measured pace
        budget.plan_refit(total_steps, cfg.eval_every or max(1, total_steps // 10))
    train = TrainState(
        model, optimizer, lr_schedule(optimizer, cfg.schedule, warmup, total_steps), grad_scaler(precision, ctx.device)
    )
    if state is None:
        seed_dropout(cfg.seed, ctx)  # dropout differs per rank; weights are rank 0's (DDP)
    else:
        train.load(state, ctx)
    feed.start(total_steps, (state.get("position") or state.get("data")) if state else None)
    window = (state.get("meter") or {}) if state else {}
    return model, config, train, window, budget, cost, total_steps, warmup


def _eval_batches(cfg: PretrainConfig, feed: Feed) -> list[dict]:
    """The fixed held-out batches (none when the corpus is too small to hold text out)."""
    eval_data = feed.make(cfg.seq_len, cfg.batch_size, "eval")
    return eval_data.eval_batches(cfg.eval_batches) if eval_data.shards else []


def _start_record(
    cfg: PretrainConfig, ctx, model, config, vocab_size: int, precision: str, total_steps: int, warmup: int
) -> dict[str, Any]:
    """run.json's record (the run keys and what was resolved), and the run's summary line."""
    say_run(
        cfg,
        ctx,
        f"model {cfg.model_size}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"parameters, vocab {vocab_size}, precision {precision}, {ctx.world_size} process(es) on "
        f"{ctx.device.type}; {total_steps} steps",
    )
    return {
        "config": cfg.run_record(),
        "total_steps": total_steps,
        "warmup_steps": warmup,
        "precision": precision,
        "world_size": ctx.world_size,
        "model_config": config.to_dict("hf"),
    }


def _write_model(cfg: PretrainConfig, ctx, model, tokenizer, run) -> None:
    """The end of a run: OUTPUT as a model directory (config.json, model.safetensors, vocab.txt, tokenizer config)."""
    from bertkit.training.tensorboard import convert_metrics

    out = Path(cfg.output)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if cfg.objective == "electra":  # the generator's directory (fill-mask) gets the vocabulary too
        from bertkit.recipes.electra import GENERATOR_DIR

        tokenizer.save_pretrained(out / GENERATOR_DIR)
    if cfg.tensorboard:
        convert_metrics(out)
    remove_stale(out)
    step, total_steps = run.step, run.total_steps
    say_run(cfg, ctx, f"--max-time reached at step {step} of {total_steps}" if run.stop_why == "time" else "")
    say_run(cfg, ctx, f"done: {step} steps in {run.elapsed:.0f}s; model saved to {out}")


def held_out_accuracy(
    output: str | Path, max_batches: int = 20, draws: int = 8, shards: str | Path | None = None
) -> dict[str, float]:
    """A finished run's honest held-out MLM figures (``bertkit.tasks.mlm``: text never trained on, the run's
    sequences, 15% of tokens chosen and every one of them [MASK]): ``{"mlm_acc", "mlm_baseline", "mlm_loss",
    "masked_tokens"}``, where the baseline is the best constant guess at the same positions (the plateau a model
    sits on until it learns context). The held-out text is small (2% of the corpus), so it is masked ``draws``
    times with different seeds (up to ``max_batches`` batches in all): a figure from ~1,000 masked tokens moves by
    about a point between mask draws. ``shards``: another prepared directory whose held-out split is scored instead
    (the quickstart's: books the run never read), tokenized with the run's vocabulary."""
    import torch

    from bertkit import models
    from bertkit.data.pretraining import VocabInfo
    from bertkit.tasks.mlm import score_mlm
    from bertkit.tokenization import BertTokenizer
    from bertkit.training.distributed import DistContext

    out = Path(output)
    # the run's sequences, masked at the paper's 15% whatever the run trained with, so runs compare
    cfg = PretrainConfig(
        **{
            **read_record(out / "run.json")["config"],
            "output": str(out),
            "max_steps": 1,
            "mask_prob": 0.15,
            "max_predictions": None,
        }
    )
    tokenizer = BertTokenizer.from_pretrained(out)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    batches: list = []
    for draw in range(max(1, draws)):
        where = Path(shards) if shards is not None else out / "data" / "shards"
        data = make_feed(dataclasses.replace(cfg, seed=cfg.seed + draw), where, vocab, DistContext()).make(
            cfg.seq_len, cfg.batch_size, "eval"
        )
        if not data.shards:
            break
        batches += data.eval_batches(max_batches - len(batches))
        if len(batches) >= max_batches:
            break
    if not batches:
        raise PretrainError(f"{out}: no held-out text to evaluate on (the corpus is too small)")
    # ELECTRA's run: its generator is the masked LM (the model kept is the discriminator, which has no MLM head)
    where = out / "generator" if cfg.objective == "electra" else out
    arch = models.of_directory(where)  # the masked LM of the run's architecture
    model = arch.model_class(arch.features_role).from_pretrained(where).eval()
    score = score_mlm(model, ({k: torch.from_numpy(v) for k, v in b.items()} for b in batches), vocab.mask_id)
    return {
        "mlm_acc": score.mlm_acc,
        "mlm_baseline": score.mlm_baseline,
        "mlm_loss": score.mlm_loss,
        "masked_tokens": score.masked_tokens,
    }


# --------------------------------------------------------------------------------------------- the loop's parts


def _schedule(cfg: PretrainConfig, ctx, feed: Feed, model, precision: str):
    """(checkpoint state or None, TimeBudget or None, cost model or None, total steps). The steps are a resumed
    run's, or fitted to --max-time by timing a few steps of each (sequence length, batch size) on a throwaway copy
    of the model, or --max-steps."""
    from bertkit.training.budget import TimeBudget, fit_steps
    from bertkit.training.distributed import broadcast_object
    from bertkit.training.optim import build_optimizer
    from bertkit.training.rundir import RunDir

    out = Path(cfg.output)
    # the newest readable checkpoint: a corrupted latest one is skipped with a warning naming it
    found = RunDir(out, ctx).latest_intact_checkpoint() if cfg.resume else None
    last, state = found if found else (None, None)
    budget = TimeBudget(cfg.max_time, float(state["elapsed"]) if state else 0.0) if cfg.max_time else None
    if state is not None:
        say_run(cfg, ctx, f"resuming from {last} (step {state['step']} of {state['total_steps']})")
        return state, budget, None, int(state["total_steps"])
    if cfg.resume:
        return state, budget, None, int(read_record(out / "run.json")["total_steps"])
    if budget is None:
        return state, budget, None, int(cfg.max_steps)
    cost, fitted = fit_steps(
        budget,
        feed,
        model,
        lambda m: build_optimizer(m, lr=cfg.lr, weight_decay=cfg.weight_decay),
        ctx,
        precision=precision,
        grad_accum=cfg.grad_accum,
        clip=cfg.clip,
    )
    total_steps = int(broadcast_object(ctx, min(fitted, cfg.max_steps or 1 << 62)))
    say_run(
        cfg, ctx, f"--max-time {cfg.max_time:.0f}s at {cost(0, 1) * 1000:.0f} ms/step: scheduling {total_steps} steps"
    )
    return state, budget, cost, total_steps


def _held_out(cfg: PretrainConfig, ctx, model, batches: list[dict], precision: str, step: int) -> None:
    """Evaluate on the held-out batches, write and say the result."""
    from bertkit.training.rundir import RunDir
    from bertkit.training.tensorboard import convert_metrics

    result = _evaluate(model, batches, precision, ctx.device)  # eval_batches: every labelled input is [MASK]
    RunDir(cfg.output).append_metrics({"step": step, **result})
    if cfg.tensorboard:
        convert_metrics(cfg.output)
    say_run(
        cfg,
        ctx,
        f"  held-out at step {step}: MLM acc {result['eval_mlm_acc']:.3f} at [MASK] "
        f"(best constant {result['eval_mlm_baseline']:.3f}), MLM loss {result['eval_mlm_loss']:.3f}"
        + (f", NSP acc {result['eval_nsp_acc']:.3f}" if "eval_nsp_acc" in result else "")
        + (
            f", RTD acc {result['eval_rtd_acc']:.3f} (all-original {1 - result['eval_replaced']:.3f}), balanced "
            f"{result['eval_rtd_balanced_acc']:.3f}, AUC {result['eval_rtd_auc']:.3f}"
            if "eval_rtd_auc" in result
            else ""
        )
        + f", loss {result['eval_loss']:.3f}",
    )


def _micro_batches(feed: Feed, loader, cfg: PretrainConfig, ctx, meter):
    """(forward, count) for ``optimizer_step``: each micro-batch is the feed's next batch; ``count`` adds its
    figures to the log window."""
    current: dict[str, Any] = {}

    def forward(model, _):
        current["batch"] = batch = to_device(feed.next(loader), ctx.device)
        return model(**batch)

    def count(_, output) -> None:
        batch = current["batch"]
        meter.add(
            mlm_loss=float(output.mlm_loss.detach()) / cfg.grad_accum,
            mlm_n=output.masked_labels.numel(),
            mlm_ok=int((output.masked_logits.max(-1).indices == output.masked_labels).sum()),  # = argmax
            tokens=int(batch["attention_mask"].sum()),
            sequences=int(batch["attention_mask"].shape[0]),
        )
        if cfg.objective == "electra":
            from bertkit.recipes.electra import count as count_rtd

            count_rtd(meter, output, cfg.grad_accum)
        if cfg.nsp:
            labels = batch["next_sentence_label"]
            meter.add(
                nsp_loss=float(output.nsp_loss.detach()) / cfg.grad_accum,
                nsp_n=labels.numel(),
                nsp_ok=int((output.seq_relationship_logits.argmax(-1) == labels).sum()),
            )

    return forward, count


def _log(cfg: PretrainConfig, run, lr: float) -> None:
    """A metrics line (means over the window and the ranks), the progress bar's figures, and a reset window."""
    from bertkit.training import flops
    from bertkit.training.distributed import all_reduce_mean

    ctx, meter, bar, step = run.ctx, run.meter, run.bar, run.step
    m = meter
    vals = all_reduce_mean(
        ctx,
        [
            m.ratio("loss", "steps"),
            m.ratio("mlm_loss", "steps"),
            m.ratio("nsp_loss", "steps"),
            m.ratio("mlm_ok", "mlm_n"),
            m.ratio("nsp_ok", "nsp_n"),
            m.ratio("tokens", "time"),
        ],
    )
    rates = flops.log_fields(ctx, run.dir.path, vals[5], dict(m.sums))  # model TFLOP/s and MFU (docs/pretraining.md)
    rtd = {}
    if cfg.objective == "electra":  # the discriminator's window figures (recipes/electra.py)
        from bertkit.recipes.electra import window_fields

        rtd = window_fields(ctx, meter)
    meter.reset()
    # train_mlm_acc: on the training batches' own 80/10/10 inputs (kept tokens count): a training-window figure,
    # not a quality meter; the held-out records (eval_mlm_acc) are
    line = {
        "step": step,
        "loss": vals[0],
        "mlm_loss": vals[1],
        "train_mlm_acc": vals[3],
        "lr": lr,
        "tokens_per_s": vals[5] * ctx.world_size,
        "elapsed_s": round(run.elapsed, 2),
        "epoch": run.feed.epoch,
        **rtd,
        **rates,
    }
    if cfg.nsp:
        line.update(nsp_loss=vals[2], nsp_acc=vals[4])
    if not ctx.is_main:
        return
    run.dir.append_metrics(line)
    nsp = {"nsp": f"{vals[4]:.3f}"} if cfg.nsp else {}
    mfu = {"mfu": f"{rates['mfu']:.1%}"} if "mfu" in rates else {}
    bar.set_postfix(
        loss=f"{vals[0]:.3f}",
        train_mlm=f"{vals[3]:.3f}",
        **nsp,
        tok_s=f"{line['tokens_per_s']:.0f}",
        **mfu,
        refresh=False,
    )
    if bar.disable and not cfg.quiet:
        say_run(
            cfg,
            ctx,
            f"step {step}/{run.total_steps}  loss {vals[0]:.3f}  train-window mlm acc {vals[3]:.3f}"
            + (f"  nsp acc {vals[4]:.3f}" if cfg.nsp else "")
            + (f"  rtd balanced acc {rtd['train_rtd_balanced_acc']:.3f}" if rtd else "")
            + f"  {line['tokens_per_s']:.0f} tokens/s"
            + (f"  MFU {mfu['mfu']}" if mfu else ""),
        )


def _evaluate(model, batches: list[dict], precision: str, device, mask_id: int | None = None) -> dict[str, float]:
    """The honest held-out meter (``bertkit.tasks.mlm``) on fixed batches: MLM accuracy at [MASK] positions, the
    best-constant baseline and the MLM loss at the same positions, NSP accuracy where the batches have pairs, and
    the whole pre-training loss (``eval_loss``)."""
    import torch

    from bertkit.precision import autocast
    from bertkit.recipes.electra import RtdScore
    from bertkit.tasks.mlm import score_mlm

    model.eval()
    losses: list[float] = []
    rtd = RtdScore()  # ELECTRA's discriminator figures, where the model has one

    def forward(**batch):
        out = model(**batch)
        losses.append(float(out.loss))
        rtd.add(out)
        return out

    try:
        score = score_mlm(
            forward, (to_device(b, device) for b in batches), mask_id, context=lambda: autocast(precision, device)
        )
    finally:
        model.train()
    with torch.no_grad():
        return {"eval_loss": sum(losses) / max(1, len(losses)), **score.as_record(), **rtd.as_record()}
