"""Fine-tuning: the explicit loop, on one screen.

    features = task.featurize(examples)                       # token ids, labels (no padding yet)
    for epoch:
        for grad_accum batches at a time (length-bucketed, shuffled; padded to the longest in the batch):
            optimizer_step(...)      # bertkit.training.step: autocast, fp16 loss scaling, unscale, clip to
                                     # --clip, AdamW step, linear warmup/decay step
            SIGTERM / SIGINT: finish the step, write a checkpoint, exit (``--resume`` continues exactly)
        evaluate on dev -> if the task's main metric improved: save model, vocab, metrics.json, predictions

Everything a task family does differently (features, head, metric, output format) lives in ``bertkit.tasks``.
A resumable checkpoint (``OUTPUT/checkpoints/step-N.pt``: model, optimizer, scheduler, loss scaler, data position,
RNG states, best-so-far and history) is written on a signal and every ``save_every`` steps, and removed when the run
finishes.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import InputError
from bertkit.files import write_json
from bertkit.options import (
    MAX_TIME_HELP,
    check_bounds,
    check_run_flags,
    clip_option,
    lr_option,
    max_steps_option,
    max_time_option,
    option,
    overwrite_option,
    precision_option,
    run_key,
    run_keys,
    seed_option,
    threads_option,
    warmup_option,
)
from bertkit.precision import grad_scaler, resolve_device, resolve_precision
from bertkit.tasks import TASK_CONFIG_NAME, feature_length, length_batches
from bertkit.tasks.options import FinetuneFiles, RunOptions, TaskOptions, task_option
from bertkit.training import distributed
from bertkit.training.distributed import DistContext
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.optim import build_optimizer, linear_schedule
from bertkit.training.run import Run
from bertkit.training.rundir import run_record
from bertkit.training.state import TrainState, seed_dropout, seed_everything
from bertkit.training.step import optimizer_step


@dataclass(frozen=True)
class FinetuneArgs(RunOptions):
    """The settings of a fine-tuning run; each field is also its ``bertkit finetune`` flag."""

    epochs: float = option(3.0, run=True, group="training", help="passes over the training set (fractions allowed)")
    batch_size: int = option(32, run=True, group="training", help="examples per micro-batch")
    grad_accum: int = option(
        1,
        run=True,
        group="training",
        help="micro-batches per optimizer step (the optimizer batch is batch-size x grad-accum)",
    )
    lr: float = run_key(lr_option(5e-5))
    warmup_fraction: float = run_key(warmup_option(0.1))
    weight_decay: float = option(
        0.01, run=True, group="training", help="decoupled weight decay (none on biases, LayerNorm)"
    )
    layer_decay: float = option(
        1.0,
        run=True,
        group="training",
        help="layer-wise lr decay: the task head trains at --lr, the top encoder layer at lr x decay, each layer "
        "below one factor more, the embeddings at lr x decay^(L+1) (1 = off; ELECTRA fine-tunes with 0.8)",
    )
    clip: float = run_key(clip_option(1.0))
    seed: int = run_key(seed_option(42))
    precision: str = run_key(precision_option())
    threads: int | None = threads_option()
    eval_batch_size: int = option(64, group="training", help="examples per evaluation batch")
    eval_every: int = option(
        0, run=True, group="training", help="evaluate on dev every N steps (0 = at the end of each epoch)"
    )
    max_steps: int | None = run_key(max_steps_option())
    max_time: float | None = max_time_option(MAX_TIME_HELP)
    save_every: int = option(
        0,
        group="checkpoints",
        help="also write a resumable checkpoint every N steps (0 = only when stopped by SIGTERM / SIGINT)",
    )
    tensorboard: bool = option(
        False,
        group="checkpoints",
        help="also write TensorBoard event files (train loss and dev metrics per evaluation) to OUTPUT/tensorboard",
    )
    resume: bool = option(
        False,
        group="checkpoints",
        help="continue the interrupted run in OUTPUT from its checkpoint "
        "(same flags): the result equals an uninterrupted run's",
    )
    overwrite: bool = overwrite_option("replace the finished run in OUTPUT", group="checkpoints")

    def __post_init__(self) -> None:
        # the ranges the flags are parsed with (options.BOUNDS: --batch-size, --grad-accum >= 1...), for a run made
        # in code too: the one place fine-tuning's and distillation's settings are checked
        check_bounds(self, InputError)
        check_run_flags(self.resume, self.overwrite)


# the settings that change what is computed (fields marked run): a resumed run must use the same
RESUME_KEYS = run_keys(FinetuneArgs)


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig(TaskOptions, FinetuneArgs, FinetuneFiles):
    """What ``bertkit finetune`` reads, writes and how it trains: ``--task``, the files, the run's settings and the
    task family's (each checked when made)."""

    task: str = task_option(required=True)


set_seed = seed_everything  # the name `bertkit finetune` calls


def run_in_context(args, body) -> int:
    """``body(args, ctx)`` in this process's distributed context on ``args.device`` (one process, or one of
    torchrun's): how ``bertkit finetune`` and ``bertkit distill`` run."""
    ctx = distributed.setup(resolve_device(args.device))
    try:
        return body(args, ctx)
    finally:
        distributed.cleanup(ctx)


def save_output(task, model, tokenizer, directory: Path, metrics: dict | None, examples, preds) -> None:
    """The fine-tuned model (config.json + model.safetensors), its vocabulary, the task config, the dev
    metrics and the dev predictions. Each file is written atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    task_config = task.task_config()
    if task_config is not None:  # None: no task head (a distilled sentence-embedding model)
        write_json(directory / TASK_CONFIG_NAME, {"family": task.family, **task_config})
    if metrics is not None:
        write_json(directory / "metrics.json", metrics)
    if preds is not None:
        task.write_predictions(directory, examples, preds)


def evaluate(
    task, model, examples, features, args: FinetuneArgs, precision: str, device: torch.device | str
) -> tuple[dict, list]:
    preds = task.predict(
        model,
        examples,
        features,
        args.eval_batch_size,
        precision,
        device,
        progress=not args.quiet and sys.stderr.isatty(),
    )
    return task.metrics(examples, preds), preds


def finetune(
    task,
    model,
    tokenizer,
    train_examples,
    dev_examples,
    output_dir: str | os.PathLike,
    args: FinetuneArgs,
    ctx: DistContext | None = None,
    resume_keys: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``train_examples``; keep the checkpoint with the best dev ``task.main_metric``
    in ``output_dir``. Returns the best dev metrics (or the last training loss when there is no dev set).

    Under torchrun (``ctx`` from ``bertkit.training.distributed.setup``) the model is wrapped in
    DistributedDataParallel and each process trains on its share of every epoch's batches (an optimizer batch is
    then ``batch_size * grad_accum * world_size`` examples); rank 0 alone evaluates and writes.

    On SIGTERM / SIGINT the current optimizer step finishes, a checkpoint is written and ``Interrupted`` is raised
    (exit code 128 + signal); ``args.resume`` then continues from it, bit for bit as if never stopped.

    ``model`` may be any module whose forward in training mode returns an output with a ``.loss`` (a recipe's own
    loss: ``bertkit.recipes.distill``) and in eval mode the task head's output; ``resume_keys`` are that recipe's
    settings a resumed run must share."""
    ctx = ctx or distributed.local(args.device)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    seed_everything(args.seed)
    device = ctx.device
    precision = resolve_precision(args.precision, device)
    model.to(device).train()
    ddp_model = distributed.wrap(model, ctx)
    seed_dropout(args.seed, ctx)
    train_features = task.featurize(train_examples, tokenizer, training=True)
    dev_features = task.featurize(dev_examples, tokenizer) if dev_examples else None
    lengths = [feature_length(f) for f in train_features]
    batches_per_epoch, steps_per_epoch, total_steps = _steps(len(train_features), args, ctx)
    optimizer = build_optimizer(model, lr=args.lr, weight_decay=args.weight_decay, layer_decay=args.layer_decay)
    scheduler = linear_schedule(optimizer, int(args.warmup_fraction * total_steps), total_steps)
    state = TrainState(model, optimizer, scheduler, grad_scaler(precision, device), position={"epoch": 0, "batch": 0})
    run, saved = _open_run(
        task, output_dir, ctx, args, state, precision, len(train_features), steps_per_epoch, total_steps, resume_keys
    )
    if saved is not None:
        say(f"resuming {output_dir} at step {state.step} of {total_steps}", ctx, args.quiet)

    def forward(module, indices: list[int]):
        batch = task.collate([train_features[i] for i in indices])
        return module(**{k: v.to(device) for k, v in batch.items()})

    def evaluate_dev() -> dict:
        metrics, preds = evaluate(task, model, dev_examples, dev_features, args, precision, device)
        kept["preds"] = preds
        return metrics

    def save(record: dict) -> None:
        save_output(task, model, tokenizer, run.path, record, dev_examples, kept.pop("preds", None))

    kept: dict[str, Any] = {}

    def plan(epoch: int) -> list[list[int]]:
        batches = length_batches(lengths, args.batch_size, shuffle=True, seed=args.seed + epoch)
        return batches[ctx.rank :: ctx.world_size][:batches_per_epoch]  # this process's share, equal everywhere

    dev = evaluate_dev if dev_features is not None else None
    # ---- the loop: an optimizer step of grad_accum micro-batches (the last of an epoch may average fewer)
    with GracefulStop() as stop:
        if run.eval_pending:  # the evaluation a stop pre-empted in the run resumed from
            run.evaluate(dev, save)
        for group in run.groups(plan, args.grad_accum):
            t0 = time.perf_counter()
            result = optimizer_step(
                state,
                group,
                forward,
                clip=args.clip,
                precision=precision,
                device=device,
                ctx=ctx,
                ddp_model=ddp_model,
                after_backward=lambda micro, out: run.count(out.loss.item(), len(micro)),  # micro: its rows' indices
            )
            run.stepped(result.loss, t0)  # the step's own loss (its micro-batches' mean) into the log window
            if run.due(50):
                run.log_progress()
            if run.after_step(stop, run.eval_due(args.eval_every)):  # checkpoint cadence; the agreed stop
                run.evaluate(dev, save)
        run.close()
        run.end(stop, checkpoint=False)  # a signal: the checkpoint, then Interrupted
    return _finish(run, task, model, tokenizer, args, precision, len(train_features))


def _open_run(
    task, output_dir, ctx, args: FinetuneArgs, state, precision, n_train, steps_per_epoch, total_steps, resume_keys
) -> tuple[Run, Any]:
    """The run in ``output_dir`` (``Run``), started or resumed with ``state``: (run, the checkpoint resumed or None).
    Its keys (what a resumed run must share): the task, the run keys of ``args``, the data's size, the processes,
    and the recipe's ``resume_keys``."""
    keys = {
        "task": task.name,
        "args": {k: getattr(args, k) for k in RESUME_KEYS},
        "train_examples": n_train,
        "world_size": ctx.world_size,
        **(resume_keys or {}),
    }
    run = Run(
        output_dir,
        ctx,
        keys,
        main_metric=task.main_metric,
        quiet=args.quiet,
        steps_per_epoch=steps_per_epoch,
        precision=precision,
        desc=f"finetune {task.name}",
        save_every=args.save_every,
        max_time=args.max_time,
    )
    saved = run.start(
        state, resume=args.resume, overwrite=args.overwrite, total_steps=total_steps, tensorboard=args.tensorboard
    )
    return run, saved


def _steps(n_features: int, args: FinetuneArgs, ctx: DistContext) -> tuple[int, int, int]:
    """(batches per epoch per process, optimizer steps per epoch, total optimizer steps)."""
    batches_per_epoch = math.ceil(n_features / args.batch_size) // ctx.world_size
    if batches_per_epoch == 0:
        raise InputError(
            f"{n_features} training examples make fewer batches of {args.batch_size} than there are "
            f"processes ({ctx.world_size})"
        )
    steps_per_epoch = math.ceil(batches_per_epoch / args.grad_accum)
    total_steps = max(1, math.ceil(steps_per_epoch * args.epochs))
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    return batches_per_epoch, steps_per_epoch, total_steps


def _finish(run: Run, task, model, tokenizer, args: FinetuneArgs, precision: str, n: int) -> dict[str, Any]:
    """The model saved when there is no dev set, train_log.json, the checkpoints removed: the summary."""
    ctx = run.ctx
    run.save_if_no_best(lambda _: save_output(task, model, tokenizer, run.path, None, None, None))
    best = run.best
    if best is None or not ctx.is_main:
        best = {"step": run.state.step, "train_loss": run.train_loss(), **run_record(precision, ctx.device)}
    summary = {**best, "train_seconds": round(run.seconds(), 2), "compute_precision": precision}
    run.finish(asdict(args), best=summary, train_examples=n)
    return summary if ctx.is_main else best
