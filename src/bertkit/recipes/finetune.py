"""Fine-tuning: the explicit loop, on one screen.

    features = task.featurize(examples)                       # token ids, labels (no padding yet)
    for epoch:
        for batch in length-bucketed shuffled batches:        # padded to the longest in the batch
            with autocast(precision): loss = model(**batch).loss
            (loss / grad_accum).backward()                    # every grad_accum micro-batches:
            clip grads to 1.0; AdamW step; linear warmup/decay step
        evaluate on dev -> if the task's main metric improved: save model, vocab, metrics.json, predictions

Everything a task family does differently (features, head, metric, output format) lives in ``bertkit.tasks``.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import InputError
from bertkit.files import write_json
from bertkit.options import option
from bertkit.precision import autocast, resolve_precision
from bertkit.tasks import feature_length, length_batches
from bertkit.tasks.options import RunOptions
from bertkit.training import distributed
from bertkit.training.distributed import DistContext
from bertkit.training.optim import build_optimizer, linear_schedule

TASK_CONFIG_NAME = "finetune_config.json"


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


def evaluate(task, model, examples, features, args: FinetuneArgs, precision: str) -> tuple[dict, list]:
    preds = task.predict(model, examples, features, args.eval_batch_size, precision, args.device,
                         progress=not args.quiet and sys.stderr.isatty())
    return task.metrics(examples, preds), preds


def finetune(
    task, model, tokenizer, train_examples, dev_examples, output_dir: str | os.PathLike, args: FinetuneArgs,
    ctx: DistContext | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``train_examples``; keep the checkpoint with the best dev ``task.main_metric``
    in ``output_dir``. Returns the best dev metrics (or the last training loss when there is no dev set).

    Under torchrun (``ctx`` from ``bertkit.training.distributed.setup``) the model is wrapped in
    DistributedDataParallel and each process trains on its share of every epoch's batches (an optimizer batch is
    then ``batch_size * grad_accum * world_size`` examples); rank 0 alone evaluates and writes."""
    from tqdm import tqdm

    output_dir = Path(output_dir)
    ctx = ctx or DistContext(device=torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")))
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
    if args.grad_accum < 1 or args.batch_size < 1:
        raise InputError(f"--batch-size and --grad-accum must be >= 1, got {args.batch_size} and {args.grad_accum}")
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
    params = [p for p in model.parameters() if p.requires_grad]

    best: dict[str, Any] | None = None
    history: list[dict] = []
    step, epoch, loss_sum, loss_n, t0 = 0, 0, 0.0, 0, time.perf_counter()

    def checkpoint() -> None:
        nonlocal best
        if dev_features is None or not ctx.is_main:
            distributed.barrier(ctx)
            return
        metrics, preds = evaluate(task, model, dev_examples, dev_features, args, precision)
        record = {**metrics, "step": step, "epoch": round(step / steps_per_epoch, 3),
                  "train_loss": loss_sum / max(loss_n, 1)}
        history.append(record)
        improved = best is None or metrics.get(task.main_metric, -math.inf) > best.get(task.main_metric, -math.inf)
        if improved:
            best = record
            save_output(task, model, tokenizer, output_dir, record, dev_examples, preds)
        if not args.quiet:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
            print(f"step {step}: dev {shown}{'  (best, saved)' if improved else ''}", file=sys.stderr)
        model.train()
        distributed.barrier(ctx)

    progress = tqdm(total=total_steps, desc=f"finetune {task.name}", unit="step",
                    disable=args.quiet or not ctx.is_main or not sys.stderr.isatty())
    while step < total_steps:
        batches = length_batches(lengths, args.batch_size, shuffle=True, seed=args.seed + epoch)
        batches = batches[ctx.rank::ctx.world_size][:batches_per_epoch]  # this process's share, equal on every rank
        for b, idx in enumerate(batches):
            batch = {k: v.to(device) for k, v in task.collate([train_features[i] for i in idx]).items()}
            # the last optimizer step of an epoch may average fewer micro-batches
            in_step = min(args.grad_accum, len(batches) - (b - b % args.grad_accum))
            last_micro = not (b + 1) % args.grad_accum or b + 1 == len(batches)
            no_sync = ddp_model.no_sync() if ctx.distributed and not last_micro else contextlib.nullcontext()
            with no_sync:
                with autocast(precision, device):
                    loss = ddp_model(**batch).loss
                (loss / in_step).backward()
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            if not last_micro:
                continue
            if args.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            progress.update(1)
            progress.set_postfix(loss=f"{loss_sum / loss_n:.4f}")
            if args.eval_every and step % args.eval_every == 0 and step < total_steps:
                checkpoint()
            if step >= total_steps:
                break
        epoch += 1
        if not args.eval_every or step >= total_steps:
            checkpoint()
    progress.close()
    if dev_features is None and ctx.is_main:
        save_output(task, model, tokenizer, output_dir, None, None, None)
    distributed.barrier(ctx)
    if dev_features is None or not ctx.is_main:
        best = {"step": step, "train_loss": loss_sum / max(loss_n, 1)}
        if not ctx.is_main:
            return best
    assert best is not None
    summary = {**best, "train_seconds": round(time.perf_counter() - t0, 2), "compute_precision": precision}
    write_json(output_dir / "train_log.json", {"args": asdict(args), "history": history, "best": summary,
                                                "train_examples": len(train_features)})
    return summary
