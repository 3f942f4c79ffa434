"""Pre-training recipe: MLM + NSP from raw text, one explicit loop.

    corpus -> sentences (data) -> vocabulary (tokenization) -> memmap shards (data) -> BertForPreTraining -> OUTPUT/

Per optimizer step: ``grad_accum`` micro-batches under autocast (DDP syncs gradients only on the last; fp16 losses
are scaled), gradient clipping at ``clip``, AdamW step, lr schedule step. Every ``log_every`` steps a line goes to
``metrics.jsonl``; every ``eval_every`` steps the held-out MLM/NSP accuracy; every ``save_every`` steps, at the end,
and on SIGTERM/SIGINT an atomic checkpoint. ``resume=True`` continues from the latest checkpoint and ends with the
same weights as an uninterrupted run: the data position is (stage, epoch, index), batches are pure functions of the
seed, and every RNG state is restored.

Two recipes (``--recipe``, ``recipes/pretrain/tables.py``): ``paper`` is Devlin et al.'s; ``budget``, the default
when ``--max-time`` is given, is what measured best in minutes of CPU. Every choice is its own flag too. The books
of the run (clock, log window, checkpoints, the agreed stop, ``--max-time``'s schedule) are ``training.Run``'s;
a finished run's held-out figures are ``recipes/pretrain/evaluate.py``'s.

The objectives (``--objective``: ``mlm``, ``electra``, ``mntp``) are ``objectives/``'s, one file each, each with
its defaults, model and figures; the loop is this one. ``--processes N`` runs it as N processes under DDP.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from pathlib import Path
from typing import Any

from bertkit.data.pretraining.feed import Feed
from bertkit.data.pretraining.instances import VocabInfo
from bertkit.data.pretraining.masking import mlm_inputs, mlm_padding
from bertkit.data.pretraining.prefetch import Prefetcher, default_workers
from bertkit.precision import MasterWeights, autocast, uses_master_weights
from bertkit.recipes.pretrain import flops, objectives
from bertkit.recipes.pretrain.compiled import compile_step
from bertkit.recipes.pretrain.config import PretrainConfig, PretrainError
from bertkit.recipes.pretrain.setup import (
    build_model,
    check_batches,
    make_feed,
    open_run,
    remove_stale,
    removed_if_refused,
    say_run,
    schedule,
    tokenizer_and_shards,
)
from bertkit.recipes.pretrain.tables import processes, resolve, unused_parameters
from bertkit.tasks.blimp import BlimpProbe, Stopped, read_blimp
from bertkit.tasks.mlm import score_mlm
from bertkit.training import distributed as dist
from bertkit.training.distributed import all_reduce_mean
from bertkit.training.interrupt import GracefulStop
from bertkit.training.profile import StepProfile
from bertkit.training.rundir import os_errors
from bertkit.training.step import check_finite, optimizer_step, to_device

__all__ = ["PretrainError", "pretrain"]

# --------------------------------------------------------------------------------------------- the recipe


def pretrain(cfg: PretrainConfig) -> Path:
    """Run (or resume) a pre-training run; returns OUTPUT, which ends as a loadable model directory.

    Raises PretrainError for a run that cannot start, LossNotFinite when the loss stops being finite, and
    Interrupted (after saving a checkpoint) on SIGTERM/SIGINT."""
    import torch

    cfg = cfg if cfg.chosen else resolve(cfg)  # resolved once (the command resolves it): frozen from here
    if (n := processes(cfg)) > 1:  # this machine's processes (--processes), each running this under DDP
        return dist.launch(pretrain, (dataclasses.replace(cfg, processes=1),), n, cfg.threads)
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    ctx = dist.setup(cfg.device)
    try:  # the run's objects (the DDP wrapper holds the process group) are gone when _pretrain returns, before cleanup
        return _pretrain(cfg, ctx)
    finally:
        dist.cleanup(ctx)


def _pretrain(cfg: PretrainConfig, ctx) -> Path:
    out = Path(cfg.output)
    with GracefulStop() as stop, os_errors(out), removed_if_refused(cfg, ctx):
        # ---- recipe, output dir, vocabulary, shards, model, optimizer; every flag checked before a file is written
        objective = objectives.get(cfg.objective)
        check_batches(cfg)
        blimp = read_blimp(cfg.blimp) if cfg.blimp and ctx.is_main else None  # its bad files refused here
        run = open_run(cfg, ctx)  # the books; resumed: off when killed while preparing
        say_run(cfg, ctx, cfg.chosen)
        tokenizer, shard_dir = tokenizer_and_shards(cfg, ctx, run.opened.resumed)
        precision = run.precision
        feed = make_feed(cfg, shard_dir, VocabInfo.from_tokenizer(tokenizer), ctx)
        eval_batches = _eval_batches(cfg, feed)
        # ---- the model; the optimizer, the steps (fitted to --max-time) and the train state, or the checkpoint's
        # the objective's model around the architecture's pre-training model (ELECTRA's discriminator is that model)
        model, config = objective.build(cfg, tokenizer, shard_dir, feed.max_len, ctx.device, build_model)
        # its pairs checked against the model's positions before training (a sentence too long failed the first probe)
        limit = getattr(config, "max_position_embeddings", None)
        probe = BlimpProbe(blimp, tokenizer, cfg.blimp_pairs, max_length=limit, flag="--blimp") if blimp else None
        if probe is not None and cfg.max_steps is None:  # --max-time: the probe's seconds set aside in the fit
            seconds = probe.seconds(objective.masked_lm(model), run.precision)
            run.expect_evaluations(seconds, lambda steps: _eval_every(cfg, run, steps))
        # bf16 on a CPU: a bf16 model over fp32 master weights (what the optimizer steps and the checkpoints hold)
        masters = MasterWeights(model) if uses_master_weights(precision, ctx.device) and not ctx.distributed else None
        train, total_steps, reschedule = schedule(cfg, run, model, feed)
        if masters is not None:
            train.masters = masters
            masters.adopt(train.optimizer)
        run.record.update(world_size=ctx.world_size, model_config=config.to_dict("hf"))
        # run.json, metrics.jsonl cut back to the step resumed, the bar; the state restored from the checkpoint
        run.begin(train, total_steps, position=feed.position, reschedule=reschedule, tensorboard=cfg.tensorboard)
        last_stage = lambda steps: feed.plan(steps)[-1].start  # noqa: E731  (the step a ramp's last stage starts at)
        if cfg.max_steps is None:  # --max-time's steps, fitted from cold probe steps: re-fitted to the pace
            run.plan_refit(_eval_every(cfg, run), last_stage, lambda steps: _eval_every(cfg, run, steps))
        plain_mlm = "masked_positions" in inspect.signature(model.forward).parameters
        # compiled as --compile says (on a GPU: also graphed); checkpoints and evaluation: the plain model
        step_model = compile_step(cfg, ctx, dist.wrap(model, ctx, unused_parameters(cfg)), plain_mlm)
        say_run(
            cfg,
            ctx,
            f"model {cfg.model_shown()}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
            f"parameters, vocab {len(tokenizer)}, precision {precision}"
            f"{' (bf16 weights, fp32 masters)' if masters is not None else ''}"
            f"{step_model.said}, {ctx.world_size} process(es) on "
            f"{ctx.device.type}; {run.total_steps} steps",
        )

        # ---- the loop
        workers = cfg.loader_workers if cfg.loader_workers is not None else default_workers(ctx.device.type)
        loader = Prefetcher(workers)
        profile = StepProfile(cfg.profile, ctx.device)
        try:  # the workers (processes on a GPU) go when the loop does, also when it raises
            while run.going():
                t0 = time.perf_counter()
                # a ramp's next stage (before the step: resume-exact)
                if entered := feed.advance(run.step, run.total_steps):
                    say_run(cfg, ctx, entered)
                forward, count = _micro_batches(feed, loader, cfg, ctx, run.meter, objective, plain_mlm, step_model)
                step = optimizer_step(
                    train,
                    range(cfg.grad_accum),
                    forward,
                    clip=cfg.clip,
                    precision=precision,
                    device=ctx.device,
                    ctx=ctx,
                    ddp_model=step_model.model,
                    after_backward=count,
                    on_not_finite=run.not_finite,
                )
                feed.learned(_sum_over_ranks(ctx))  # adaptive masking's errors of this step (before its checkpoint)
                run.stepped(step.loss_sum, t0)  # on a GPU a device tensor: no host sync in the step
                if ctx.is_main and (profiled := profile.after_step(run.step, run.total_steps, last_stage)):
                    say_run(cfg, ctx, profiled)
                    (out / "profile.txt").write_text(profiled + "\n", encoding="utf-8")
                if run.due(cfg.log_every) or (cfg.save_every and run.step % cfg.save_every == 0):
                    check_finite(train, run.not_finite)  # a GPU's deferred check, before a log line or checkpoint
                if run.due(cfg.log_every):
                    _log(cfg, objective, run, feed, train.scheduler.get_last_lr()[0], loader.rates())
                if (eval_batches or probe) and ctx.is_main and run.due(_eval_every(cfg, run)):
                    run.timed(lambda: _held_out(cfg, objective, run, model, eval_batches, precision, probe, stop))
                run.after_step(stop)
        finally:
            run.close()
            loader.close()

        # ---- the end: checkpoint + model directory (config.json, model.safetensors, vocab.txt, tokenizer config)
        run.end(stop)
        if masters is not None:  # the saved model is the fp32 masters
            masters.restore()
        if ctx.is_main:
            _write_model(cfg, objective, ctx, model, tokenizer, run)
        dist.barrier(ctx)
        return out


def _eval_batches(cfg: PretrainConfig, feed: Feed) -> list[dict]:
    """The fixed held-out batches, ``eval_batches`` global batches' worth (none when no text is held out)."""
    eval_data = feed.make(cfg.seq_len, cfg.batch_size, "eval")
    return eval_data.eval_batches(cfg.eval_batches * feed.ctx.world_size) if eval_data.shards else []


def _write_model(cfg: PretrainConfig, objective, ctx, model, tokenizer, run) -> None:
    """The end of a run: OUTPUT as a model directory (config.json, model.safetensors, vocab.txt, tokenizer config)."""

    out = Path(cfg.output)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    objective.save(out, tokenizer)  # ELECTRA's generator directory gets the vocabulary too
    remove_stale(out)
    run.mark_finished()  # TensorBoard's file whole; run.json: finished, so that --resume refuses it
    say_run(cfg, ctx, f"done: {run.step} steps in {run.elapsed:.0f}s; model saved to {out}")


# --------------------------------------------------------------------------------------------- the loop's parts


def _held_out(cfg: PretrainConfig, objective, run, model, batches, precision: str, probe=None, stop=None) -> None:
    """Evaluate on the held-out batches and the BLiMP probe's pairs, write and say the result (rank 0). The probe
    (seconds to a minute) gives way, between two of its batches, to a signal or a spent --max-time: the run then
    checkpoints within seconds, and the figures it did compute are recorded."""

    ctx, step = run.ctx, run.step
    result = _evaluate(model, objective, batches, precision, ctx.device) if batches else {}  # inputs are [MASK]
    give_way = (lambda: stop.requested or run.spent()) if stop is not None else None
    if probe is not None:  # BLiMP's sample, by the same scorer as `bertkit evaluate --task blimp`
        try:
            result["eval_blimp"] = probe(objective.masked_lm(model), precision, stop=give_way)
        except Stopped:
            probe = None
            say_run(cfg, ctx, f"  step {step}: the BLiMP probe stopped part-way (a signal, or --max-time spent)")
    run.record_metrics({"step": step, **result}, board=True)
    said = (
        f"MLM acc {result['eval_mlm_acc']:.3f} at [MASK] (best constant {result['eval_mlm_baseline']:.3f}), "
        f"MLM loss {result['eval_mlm_loss']:.3f}"
        + (f", NSP acc {result['eval_nsp_acc']:.3f}" if "eval_nsp_acc" in result else "")
        + objective.held_out_said(result)
        + f", loss {result['eval_loss']:.3f}"
        if batches
        else ""
    )
    blimp = f"BLiMP {result['eval_blimp']:.1f}% ({probe.pairs} pairs)" if probe is not None else ""
    say_run(cfg, ctx, f"  held-out at step {step}: " + ", ".join(x for x in (said, blimp) if x))


def _micro_batches(feed: Feed, loader, cfg: PretrainConfig, ctx, meter, objective, plain_mlm: bool, step_model):
    """(forward, count) for ``optimizer_step``: each micro-batch is the feed's next batch; ``count`` adds its
    figures to the log window: the MLM ones every objective has, then the objective's own. ``plain_mlm``: the model
    (the masked LM itself, not an objective's wrapper) takes ``masking.mlm_inputs``' host-side answers, its labelled
    positions padded as ``step_model`` (``compiled.CompiledStep``) asks; the padding counts nowhere."""

    current: dict[str, Any] = {}

    def forward(model, _):
        host = feed.next(loader)
        current["tokens"], current["rows"] = int(host["attention_mask"].sum()), len(host["attention_mask"])
        inputs = mlm_inputs(host, step_model.pad_to) if plain_mlm else host
        current["padding"] = mlm_padding(inputs, host) if plain_mlm else 0
        batch = to_device(inputs, ctx.device)
        step_model.begin()
        ids = batch["input_ids"]  # an objective's count reads the batch as the feed built it, its mask too
        current["batch"] = batch if "attention_mask" in batch else dict(batch, attention_mask=ids.new_ones(ids.shape))
        return model(**batch)

    def count(_, output) -> None:
        batch, n = current["batch"], output.masked_labels.numel() - current["padding"]  # the padding: at the end
        # tensors, summed on the device: the window is read (one host sync) at the log line, not per micro-batch
        ok = output.masked_logits.detach().max(-1).indices == output.masked_labels  # = argmax (padding: never)
        if feed.hard is not None:  # --mask-strategy adaptive: which ids the model still misses
            feed.hard.observe(output.masked_labels[:n].cpu().numpy(), (~ok[:n]).cpu().numpy())
        meter.add(
            mlm_loss=output.mlm_loss.detach().double() / cfg.grad_accum,  # as float(loss) / grad_accum: float64
            mlm_n=n,
            mlm_ok=ok.sum(),
            tokens=current["tokens"],
            sequences=current["rows"],
        )
        objective.count(meter, output, batch, cfg)

    return forward, count


def _sum_over_ranks(ctx):
    """A function summing a numpy array over the ranks (adaptive masking's counts); None in one process."""
    if not ctx.distributed:
        return None
    import torch

    def reduce(array):
        tensor = torch.from_numpy(array).to(ctx.device)
        torch.distributed.all_reduce(tensor)
        return tensor.cpu().numpy()

    return reduce


def _eval_every(cfg: PretrainConfig, run, steps: int | None = None) -> int:
    """Steps between held-out evaluations in a run of ``steps`` steps (the run's own): --eval-every, else a tenth of
    the run, re-fitted with it but never below the tenth this process planned (a re-fit that shrinks the run does
    not evaluate it more often: a 25-second probe every step or two had overrun a 60-second --max-time), and under
    --max-time wide enough that evaluations take at most a quarter of it (``Run.eval_interval``)."""
    steps = run.total_steps if steps is None else steps
    return cfg.eval_every or run.eval_interval(steps, max(1, max(steps, run.planned_steps) // 10))


def _log(cfg: PretrainConfig, objective, run, feed: Feed, lr: float, loader: dict) -> None:
    """A metrics line (means over the window and the ranks), the progress bar's figures, and a reset window.
    ``loader``: this rank's loader over the window (``Prefetcher.rates``): its rate alone, and the seconds the step
    waited for it, beside the step's own rate."""

    ctx, m = run.ctx, run.meter
    loss, mlm_loss, mlm_acc, tok_s, tokens = all_reduce_mean(
        ctx,
        [m.ratio("loss", "steps"), m.ratio("mlm_loss", "steps"), m.ratio("mlm_ok", "mlm_n"), m.ratio("tokens", "time")]
        + [m.sums["tokens"]],
    )
    rates = flops.log_fields(ctx, run.dir.path, tok_s, dict(m.sums))  # model TFLOP/s and MFU (docs/pretraining.md)
    own = objective.window(ctx, m, cfg)  # NSP's, or the discriminator's (ELECTRA)
    m.reset()
    # train_mlm_acc: on the training batches' own 80/10/10 inputs (kept tokens count): a training-window figure,
    # not a quality meter; the held-out records (eval_mlm_acc) are
    line = {
        "step": run.step,
        "loss": loss,
        "mlm_loss": mlm_loss,
        "train_mlm_acc": mlm_acc,
        "lr": lr,
        "tokens_per_s": tok_s * ctx.world_size,
        "tokens": round(tokens * ctx.world_size),  # the window's real tokens, all ranks: their sum is what was read
        "elapsed_s": round(run.elapsed, 2),
        "epoch": feed.epoch,
        **own,
        **rates,
        **loader,
    }
    nsp = {"nsp": f"{own['nsp_acc']:.3f}"} if "nsp_acc" in own else {}
    mfu = {"mfu": f"{rates['mfu']:.1%}"} if "mfu" in rates else {}
    run.log(
        line,
        dict(loss=f"{loss:.3f}", train_mlm=f"{mlm_acc:.3f}", **nsp, tok_s=f"{line['tokens_per_s']:.0f}", **mfu),
        f"step {run.step}/{run.total_steps}  loss {loss:.3f}  train-window mlm acc {mlm_acc:.3f}"
        + objective.said(own)
        + f"  {line['tokens_per_s']:.0f} tokens/s"
        + (f"  MFU {mfu['mfu']}" if mfu else "")
        + (f"  (loader alone {loader['loader_tokens_per_s']:.0f}/s)" if "loader_tokens_per_s" in loader else ""),
    )


def _evaluate(model, objective, batches: list[dict], precision: str, device) -> dict[str, float]:
    """The honest held-out meter (``bertkit.tasks.mlm``) on fixed batches: MLM accuracy at [MASK] positions, the
    best-constant baseline and the MLM loss at the same positions, NSP accuracy where the batches have pairs, the
    objective's own figures, and the whole pre-training loss (``eval_loss``)."""
    import torch

    model.eval()
    losses: list[float] = []
    own = objective.scorer()  # ELECTRA's discriminator figures

    def forward(**batch):
        out = model(**batch)
        losses.append(float(out.loss))
        own.add(out)
        return out

    try:
        score = score_mlm(forward, (to_device(b, device) for b in batches), context=lambda: autocast(precision, device))
    finally:
        model.train()
    with torch.no_grad():
        return {"eval_loss": sum(losses) / max(1, len(losses)), **score.as_record(), **own.as_record()}
