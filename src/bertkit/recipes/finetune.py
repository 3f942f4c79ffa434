"""Fine-tuning: the explicit loop, on one screen.

    features = task.featurize(examples)                       # token ids, labels (no padding yet)
    for epoch:
        for batch in length-bucketed shuffled batches:        # padded to the longest in the batch
            with autocast(precision): loss = model(**batch).loss
            scaler.scale(loss / grad_accum).backward()        # fp16: loss scaling, so small gradients survive
            every grad_accum micro-batches: unscale, clip grads to 1.0; AdamW step (skipped by the scaler when a
                gradient is inf/NaN); linear warmup/decay step
            SIGTERM / SIGINT: finish the step, write a checkpoint, exit (``--resume`` continues exactly)
        evaluate on dev -> if the task's main metric improved: save model, vocab, metrics.json, predictions

Everything a task family does differently (features, head, metric, output format) lives in ``bertkit.tasks``.
A resumable checkpoint (``OUTPUT/checkpoints/step-N.pt``: model, optimizer, scheduler, loss scaler, data position,
RNG states, best-so-far and history) is written on a signal and every ``save_every`` steps, and removed when the run
finishes.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import InputError
from bertkit.experiments.tensorboard import EventWriter
from bertkit.files import remove_stale_temp_files, write_json
from bertkit.options import option
from bertkit.precision import autocast, resolve_precision
from bertkit.tasks import feature_length, length_batches
from bertkit.tasks.options import RunOptions
from bertkit.training import distributed
from bertkit.training.checkpointing import (
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from bertkit.training.distributed import DistContext
from bertkit.training.interrupt import GracefulStop
from bertkit.training.optim import build_optimizer, linear_schedule

TASK_CONFIG_NAME = "finetune_config.json"
# settings that change what is computed: a resumed run must use the same
RESUME_KEYS = ("epochs", "batch_size", "grad_accum", "lr", "warmup_proportion", "weight_decay", "max_grad_norm",
               "seed", "precision", "eval_every", "max_steps")


@dataclass
class FinetuneArgs(RunOptions):
    """The settings of a fine-tuning run; each field is also its ``bertkit finetune`` flag."""

    epochs: float = option(3.0, group="training", help="passes over the training set (fractions allowed)")
    batch_size: int = option(32, group="training", help="examples per micro-batch")
    grad_accum: int = option(1, group="training", help="micro-batches per optimizer step (the optimizer batch is "
                                                        "batch-size x grad-accum)")
    lr: float = option(5e-5, group="training", help="peak learning rate (AdamW)")
    warmup_proportion: float = option(0.1, group="training", help="fraction of the steps with linear warmup")
    weight_decay: float = option(0.01, group="training", help="decoupled weight decay (none on biases, LayerNorm)")
    max_grad_norm: float = option(1.0, group="training", help="clip the gradient norm to this (0 = no clipping)")
    seed: int = option(42, group="training", help="seed of the head's initialisation, shuffling and dropout")
    eval_batch_size: int = option(64, group="training", help="examples per evaluation batch")
    eval_every: int = option(0, group="training", help="evaluate on dev every N steps (0 = at the end of each epoch)")
    max_steps: int = option(0, group="training", help="stop after N optimizer steps (0 = no limit)")
    save_every: int = option(0, group="checkpoints", help="also write a resumable checkpoint every N steps (0 = only "
                                                          "when stopped by SIGTERM / SIGINT)")
    tensorboard: bool = option(False, group="checkpoints", help="also write TensorBoard event files (train loss and "
                                                                "dev metrics per evaluation) to OUTPUT/tensorboard")
    resume: bool = option(False, group="checkpoints", help="continue the interrupted run in OUTPUT from its checkpoint "
                                                           "(same flags): the result equals an uninterrupted run's")


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass


def save_output(task, model, tokenizer, directory: Path, metrics: dict | None, examples, preds) -> None:
    """The fine-tuned model (config.json + model.safetensors), its vocabulary, the task config, the dev
    metrics and the dev predictions. Each file is written atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_json(directory / TASK_CONFIG_NAME, {"family": task.family, **task.task_config()})
    if metrics is not None:
        write_json(directory / "metrics.json", metrics)
    if preds is not None:
        task.write_predictions(directory, examples, preds)


def evaluate(task, model, examples, features, args: FinetuneArgs, precision: str,
             device: torch.device | str) -> tuple[dict, list]:
    preds = task.predict(model, examples, features, args.eval_batch_size, precision, device,
                         progress=not args.quiet and sys.stderr.isatty())
    return task.metrics(examples, preds), preds


def _resume_state(output_dir: Path, args: FinetuneArgs, run: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint ``--resume`` continues from (None: start afresh). Without ``--resume`` an interrupted run's
    checkpoint is refused rather than overwritten; with it, settings that differ from the run's are refused."""
    path = latest_checkpoint(checkpoint_dir(output_dir))
    if not args.resume:
        if path is not None:
            raise InputError(f"{output_dir} holds an interrupted fine-tuning run ({path}): pass --resume to continue "
                             f"it, or remove {checkpoint_dir(output_dir)} to start afresh")
        return None
    if path is None:
        if (output_dir / "train_log.json").is_file():
            raise InputError(f"--resume: {output_dir} holds a finished run (train_log.json) and no checkpoint: "
                             "nothing to resume")
        if not args.quiet:
            print(f"--resume: no checkpoint in {checkpoint_dir(output_dir)}; starting from step 0", file=sys.stderr)
        return None
    try:
        state = load_checkpoint(path)
    except ValueError as e:
        raise InputError(f"--resume: {e}") from None
    saved = state.get("run", {})
    differ = [f"--{k.replace('_', '-')} {run['args'][k]} (the run used {saved.get('args', {}).get(k)})"
              for k in RESUME_KEYS if saved.get("args", {}).get(k) != run["args"][k]]
    differ += [f"{k}: {run[k]} (the run had {saved.get(k)})" for k in ("task", "train_examples", "world_size")
               if saved.get(k) != run[k]]
    if differ:
        raise InputError(f"--resume: these differ from the interrupted run in {output_dir}: " + "; ".join(differ))
    return state


def finetune(
    task, model, tokenizer, train_examples, dev_examples, output_dir: str | os.PathLike, args: FinetuneArgs,
    ctx: DistContext | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``train_examples``; keep the checkpoint with the best dev ``task.main_metric``
    in ``output_dir``. Returns the best dev metrics (or the last training loss when there is no dev set).

    Under torchrun (``ctx`` from ``bertkit.training.distributed.setup``) the model is wrapped in
    DistributedDataParallel and each process trains on its share of every epoch's batches (an optimizer batch is
    then ``batch_size * grad_accum * world_size`` examples); rank 0 alone evaluates and writes.

    On SIGTERM / SIGINT the current optimizer step finishes, a checkpoint is written and ``Interrupted`` is raised
    (exit code 128 + signal); ``args.resume`` then continues from it, bit for bit as if never stopped."""
    from tqdm import tqdm

    output_dir = Path(output_dir)
    ctx = ctx or DistContext(device=torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")))
    if args.grad_accum < 1 or args.batch_size < 1:
        raise InputError(f"--batch-size and --grad-accum must be >= 1, got {args.batch_size} and {args.grad_accum}")
    set_seed(args.seed)
    device = ctx.device
    precision = resolve_precision(args.precision, device)
    model.to(device).train()
    ddp_model = distributed.wrap(model, ctx)
    if ctx.rank:
        torch.manual_seed(args.seed + 1000 * ctx.rank)  # dropout differs per process; weights are rank 0's
    train_features = task.featurize(train_examples, tokenizer, training=True)
    dev_features = task.featurize(dev_examples, tokenizer) if dev_examples else None
    lengths = [feature_length(f) for f in train_features]
    batches_per_epoch = math.ceil(len(train_features) / args.batch_size) // ctx.world_size
    if batches_per_epoch == 0:
        raise InputError(f"{len(train_features)} training examples make fewer batches of {args.batch_size} than "
                         f"there are processes ({ctx.world_size})")
    steps_per_epoch = math.ceil(batches_per_epoch / args.grad_accum)
    total_steps = max(1, math.ceil(steps_per_epoch * args.epochs))
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    optimizer = build_optimizer(model, lr=args.lr, weight_decay=args.weight_decay)
    scheduler = linear_schedule(optimizer, int(args.warmup_proportion * total_steps), total_steps)
    # fp16 needs loss scaling (bf16 has fp32's range and does not); a disabled scaler is a pass-through
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    params = [p for p in model.parameters() if p.requires_grad]

    best: dict[str, Any] | None = None
    history: list[dict] = []
    step, epoch, next_batch, loss_sum, loss_n, elapsed = 0, 0, 0, 0.0, 0, 0.0
    run = {"task": task.name, "args": {k: getattr(args, k) for k in RESUME_KEYS},
           "train_examples": len(train_features), "world_size": ctx.world_size}
    if ctx.is_main:
        for directory in (output_dir, checkpoint_dir(output_dir)):
            remove_stale_temp_files(directory)  # what a killed run left half-written
    state = _resume_state(output_dir, args, run)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        step, elapsed, best, history = int(state["step"]), float(state["elapsed"]), state["best"], state["history"]
        epoch, next_batch = int(state["position"]["epoch"]), int(state["position"]["batch"])
        loss_sum, loss_n = float(state["loss"][0]), int(state["loss"][1])
        set_rng_state(state["rank_rng"][ctx.rank] if state.get("rank_rng") else state["rng"])
        if not args.quiet and ctx.is_main:
            print(f"resuming {output_dir} at step {step} of {total_steps}", file=sys.stderr)
    t0 = time.perf_counter()
    board = EventWriter(output_dir / "tensorboard") if args.tensorboard and ctx.is_main else None

    def evaluate_and_keep_best() -> None:
        nonlocal best
        if dev_features is None or not ctx.is_main:
            distributed.barrier(ctx)
            return
        metrics, preds = evaluate(task, model, dev_examples, dev_features, args, precision, device)
        record = {**metrics, "step": step, "epoch": round(step / steps_per_epoch, 3),
                  "train_loss": loss_sum / max(loss_n, 1)}
        history.append(record)
        if board is not None:
            board.add_record(record)
        improved = best is None or metrics.get(task.main_metric, -math.inf) > best.get(task.main_metric, -math.inf)
        if improved:
            best = record
            save_output(task, model, tokenizer, output_dir, record, dev_examples, preds)
        if not args.quiet:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
            print(f"step {step}: dev {shown}{'  (best, saved)' if improved else ''}", file=sys.stderr)
        model.train()
        distributed.barrier(ctx)

    def save_training_state(eval_pending: bool) -> Path:
        """A resumable checkpoint (rank 0 writes it; every rank's RNG state goes in)."""
        rngs = [rng_state()]
        if ctx.distributed:
            rngs = [None] * ctx.world_size
            torch.distributed.all_gather_object(rngs, rng_state())
        path = None
        if ctx.is_main:
            path = save_checkpoint(checkpoint_dir(output_dir), step, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "position": {"epoch": epoch, "batch": next_batch}, "loss": [loss_sum, loss_n],
                "best": best, "history": history, "eval_pending": eval_pending, "run": run, "rank_rng": rngs,
                "elapsed": elapsed + time.perf_counter() - t0,
            }, keep=1)
        return distributed.broadcast_object(ctx, path)

    if state is not None and state.get("eval_pending"):
        evaluate_and_keep_best()  # the evaluation the signal pre-empted
    progress = tqdm(total=total_steps, initial=step, desc=f"finetune {task.name}", unit="step",
                    disable=args.quiet or not ctx.is_main or not sys.stderr.isatty())
    with GracefulStop() as stop:
        while step < total_steps:
            batches = length_batches(lengths, args.batch_size, shuffle=True, seed=args.seed + epoch)
            batches = batches[ctx.rank::ctx.world_size][:batches_per_epoch]  # this process's share, equal everywhere
            for b in range(next_batch, len(batches)):
                batch = {k: v.to(device) for k, v in task.collate([train_features[i] for i in batches[b]]).items()}
                # the last optimizer step of an epoch may average fewer micro-batches
                in_step = min(args.grad_accum, len(batches) - (b - b % args.grad_accum))
                last_micro = not (b + 1) % args.grad_accum or b + 1 == len(batches)
                no_sync = ddp_model.no_sync() if ctx.distributed and not last_micro else contextlib.nullcontext()
                with no_sync:
                    with autocast(precision, device):
                        loss = ddp_model(**batch).loss
                    scaler.scale(loss / in_step).backward()
                loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
                if not last_micro:
                    continue
                scaler.unscale_(optimizer)  # clip the true gradients
                if args.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step, next_batch = step + 1, b + 1
                progress.update(1)
                progress.set_postfix(loss=f"{loss_sum / loss_n:.4f}")
                if step >= total_steps:
                    break
                eval_due = bool(args.eval_every) and step % args.eval_every == 0
                stopping = stop.requested
                if ctx.distributed:  # every process stops at the same step
                    stopping = distributed.all_reduce_mean(ctx, [float(stopping)])[0] > 0
                if stopping:
                    progress.close()
                    path = save_training_state(eval_pending=eval_due)
                    stop.raise_(f"stopped at step {step} of {total_steps}; checkpoint {path}. Continue with the "
                                "same command and --resume")
                if eval_due:
                    evaluate_and_keep_best()
                if args.save_every and step % args.save_every == 0:
                    save_training_state(eval_pending=False)
            next_batch = 0
            epoch += 1
            if not args.eval_every or step >= total_steps:
                evaluate_and_keep_best()
    progress.close()
    if dev_features is None and ctx.is_main:
        save_output(task, model, tokenizer, output_dir, None, None, None)
    distributed.barrier(ctx)
    if dev_features is None or not ctx.is_main:
        best = {"step": step, "train_loss": loss_sum / max(loss_n, 1)}
        if not ctx.is_main:
            return best
    assert best is not None
    summary = {**best, "train_seconds": round(elapsed + time.perf_counter() - t0, 2), "compute_precision": precision}
    write_json(output_dir / "train_log.json", {"args": asdict(args), "history": history, "best": summary,
                                                "train_examples": len(train_features)})
    shutil.rmtree(checkpoint_dir(output_dir), ignore_errors=True)  # finished: nothing left to resume
    if board is not None:
        board.close()
    return summary
