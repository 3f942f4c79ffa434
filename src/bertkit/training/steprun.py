"""The books of a run counted in optimizer steps towards a total that ``--max-time`` may re-fit (pre-training):
the clock (training seconds, checkpoint writes included, evaluation added by the recipe), the log window (a
:class:`Meter` that a checkpoint saves), the progress bar, ``run.json``, resumable checkpoints every ``save_every``
steps (the TrainState, the feed's position, the window), and the stop every process agrees on (a signal, or the time
budget spent). A recipe's loop says what a step computes, what a log line holds and what is evaluated::

    run = StepRun(cfg, ctx, model, feed, precision, resume)   # optimizer, steps, TrainState (resumed: its checkpoint)
    run.begin(model_config)                             # run.json, metrics.jsonl, the bar, the budget's clock
    while run.going():
        t0 = time.perf_counter()
        loss = optimizer_step(..., on_not_finite=run.not_finite).loss
        run.stepped(loss, t0)                   # clock, window, bar; --max-time's re-fit
        if run.due(cfg.log_every): run.log(...) # a metrics line
        if run.due(run.eval_every): ...         # an evaluation
        run.after_step(stop)                    # checkpoint cadence; the agreed stop
    run.end(stop)                               # the last checkpoint; Interrupted on a signal

``cfg`` carries the run's settings: ``output``, ``resume``, ``max_steps``, ``max_time``, ``lr``, ``weight_decay``,
``schedule``, ``warmup_fraction``, ``warmup_steps``, ``grad_accum``, ``clip``, ``seed``, ``keep_checkpoints``,
``save_every``, ``eval_every``, ``quiet``, and ``run_record()`` (the resolved settings a checkpoint records).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from bertkit.errors import LossNotFinite
from bertkit.files import write_json
from bertkit.precision import grad_scaler
from bertkit.training import distributed
from bertkit.training.budget import TimeBudget, fit_steps
from bertkit.training.checkpointing import latest_checkpoint
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.meter import Meter
from bertkit.training.optim import build_optimizer, lr_schedule
from bertkit.training.rundir import RUN_JSON, RunDir, read_record
from bertkit.training.state import TrainState, seed_dropout


class StepRun:
    """``model``: the model to train (built, on its device); ``feed``: the batches, whose ``position()`` a
    checkpoint saves. Builds the optimizer and the lr schedule over the run's steps (a resumed run's, fitted to
    ``--max-time``, or ``--max-steps``) and the TrainState, restored from the newest readable checkpoint when
    ``resume``, with the feed placed at its data position."""

    def __init__(self, cfg, ctx, model, feed, precision: str, resume: bool):

        self.cfg, self.ctx, self.feed, self.precision, self.resume = cfg, ctx, feed, precision, resume
        self.dir = RunDir(cfg.output, ctx)
        optimizer = build_optimizer(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
        state, self.budget, self.cost, total_steps = self._plan(model)
        self.total_steps = total_steps
        warmup = max(1, int(cfg.warmup_fraction * total_steps)) if cfg.warmup_steps is None else cfg.warmup_steps
        self.warmup = warmup
        if self.cost is not None and cfg.max_steps is None:  # the probe ran cold: re-fit to the measured pace
            self.budget.plan_refit(total_steps, self.eval_every, lambda steps: feed.plan(steps)[-1].start)
        self.train = train = TrainState(
            model,
            optimizer,
            lr_schedule(optimizer, cfg.schedule, warmup, total_steps),
            grad_scaler(precision, ctx.device),
        )
        if state is None:
            seed_dropout(cfg.seed, ctx)  # dropout differs per rank; weights are rank 0's (DDP)
        else:
            train.load(state, ctx)
        feed.start(total_steps, (state.get("position") or state.get("data")) if state else None)
        self.meter = Meter((state.get("meter") or {}) if state else {})  # a resumed run's log window continues
        self.elapsed, self.stop_why, self.record, self.bar = train.elapsed, None, {}, None

    def _plan(self, model):
        """(checkpoint state or None, TimeBudget or None, cost model or None, total steps). The steps are a resumed
        run's, or fitted to --max-time by timing a few steps of each (sequence length, batch size) on a throwaway
        copy of the model, or --max-steps."""

        cfg, ctx = self.cfg, self.ctx
        # the newest readable checkpoint: a corrupted latest one is skipped with a warning naming it
        found = self.dir.latest_intact_checkpoint() if self.resume else None
        last, state = found if found else (None, None)
        budget = TimeBudget(cfg.max_time, float(state["elapsed"]) if state else 0.0) if cfg.max_time else None
        if state is not None:
            say(f"resuming from {last} (step {state['step']} of {state['total_steps']})", ctx, cfg.quiet)
            return state, budget, None, int(state["total_steps"])
        if self.resume:
            return state, budget, None, int(read_record(self.dir.path / RUN_JSON)["total_steps"])
        if budget is None:
            return state, budget, None, int(cfg.max_steps)
        cost, fitted = fit_steps(
            budget,
            self.feed,
            model,
            lambda m: build_optimizer(m, lr=cfg.lr, weight_decay=cfg.weight_decay),
            ctx,
            precision=self.precision,
            grad_accum=cfg.grad_accum,
            clip=cfg.clip,
        )
        total_steps = int(distributed.broadcast_object(ctx, min(fitted, cfg.max_steps or 1 << 62)))
        say(
            f"--max-time {cfg.max_time:.0f}s at {cost(0, 1) * 1000:.0f} ms/step: scheduling {total_steps} steps",
            ctx,
            cfg.quiet,
        )
        return state, budget, cost, total_steps

    def begin(self, model_config: dict) -> None:
        """run.json (the run keys and what was resolved), metrics.jsonl cut back to the step resumed, the progress
        bar, and the time budget's clock (preparing the data and probing are not counted)."""
        from tqdm import tqdm

        cfg, ctx = self.cfg, self.ctx
        self.record = {
            "config": cfg.run_record(),
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup,
            "precision": self.precision,
            "world_size": ctx.world_size,
            "model_config": model_config,
            "finished": False,
        }
        self.write_record()
        self.dir.truncate_metrics(self.step)
        self.bar = tqdm(
            total=self.total_steps,
            initial=self.step,
            desc="pre-training",
            unit="step",
            dynamic_ncols=True,
            disable=cfg.quiet or not ctx.is_main or not sys.stderr.isatty(),
            mininterval=0.5,
        )
        if self.budget is not None:
            self.budget.start()

    @property
    def step(self) -> int:
        return self.train.step

    @property
    def eval_every(self) -> int:
        return self.cfg.eval_every or max(1, self.total_steps // 10)

    def finish(self) -> None:
        """run.json says the run ended (its model is written): ``--resume`` refuses it from now on."""
        self.record["finished"] = True
        self.write_record()

    def write_record(self) -> None:
        if self.ctx.is_main:
            write_json(self.dir.path / RUN_JSON, self.record, sort_keys=False)

    # ------------------------------------------------------------------------------------------ the loop

    def going(self) -> bool:
        return self.step < self.total_steps and self.stop_why is None

    def stepped(self, loss: float, t0: float) -> None:
        """After an optimizer step that began at ``t0``: the clock, the window, the bar, and ``--max-time``'s
        re-fit of the schedule to the measured pace."""
        self.elapsed += time.perf_counter() - t0
        self.meter.add(loss=loss, steps=1, time=time.perf_counter() - t0)
        self.bar.update(1)
        fitted = self.budget.after_step(self.step, self.total_steps, self.cost) if self.budget else None
        if fitted is not None:
            self.refit(fitted)

    def refit(self, fitted: int) -> None:
        """The schedule re-fitted to ``fitted`` steps (rank 0's) at the measured pace, the lr of this step on the
        new schedule; run.json says so."""

        train = self.train
        self.total_steps = self.bar.total = self.record["total_steps"] = int(
            distributed.broadcast_object(self.ctx, fitted)
        )
        say(f"--max-time: re-scheduled to {self.total_steps} steps at the measured pace", self.ctx, self.cfg.quiet)
        train.scheduler = lr_schedule(train.optimizer, self.cfg.schedule, self.warmup, self.total_steps)
        train.scheduler.last_epoch = train.step - 1
        train.scheduler.step()
        self.write_record()

    def due(self, every: int) -> bool:
        """Every ``every`` steps, and at the last."""
        return self.step % every == 0 or self.step == self.total_steps

    def timed(self, work) -> Any:
        """``work()``, its seconds counted as training time (an evaluation)."""
        t0 = time.perf_counter()
        result = work()
        self.elapsed += time.perf_counter() - t0
        return result

    def after_step(self, stop: GracefulStop) -> None:
        """A checkpoint every ``save_every`` steps; then every process agrees whether to stop (a signal, or the
        time budget spent before the last step)."""
        step = self.step
        if step % self.cfg.save_every == 0 and step < self.total_steps:
            self.save()
        why = stop.agreed(self.ctx, spent=bool(self.budget and self.budget.over()))
        self.stop_why = why if why == "signal" or (why == "time" and step < self.total_steps) else None

    def log(self, line: dict[str, Any], postfix: dict[str, str], said: str) -> None:
        """Rank 0: ``line`` appended to metrics.jsonl, ``postfix`` on the progress bar, and ``said`` as a message
        when there is no bar (not a terminal) and not --quiet."""
        if not self.ctx.is_main:
            return
        self.dir.append_metrics(line)
        self.bar.set_postfix(**postfix, refresh=False)
        if self.bar.disable and not self.cfg.quiet:
            say(said, self.ctx, self.cfg.quiet)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    # ------------------------------------------------------------------------------------------ checkpoints

    def save(self) -> Path | None:
        """A resumable checkpoint (every rank calls it): the TrainState with the feed's position, the total steps,
        the resolved settings and the log window. Its writing counts as training time."""
        t_save, train = time.perf_counter(), self.train
        train.elapsed, train.position = self.elapsed, self.feed.position()
        path = train.save(
            self.dir.checkpoints,
            self.ctx,
            keep=self.cfg.keep_checkpoints,
            total_steps=self.total_steps,
            config=self.cfg.run_record(),
            meter=dict(self.meter.sums),
        )
        self.elapsed += time.perf_counter() - t_save
        return path

    def end(self, stop: GracefulStop) -> None:
        """The last checkpoint; on a signal, ``Interrupted`` naming it."""
        path = self.save()
        if self.stop_why == "signal":
            stop.raise_(
                f"stopped at step {self.step} of {self.total_steps} on a signal; the checkpoint {path} is saved. "
                f"Continue with the same command and --resume"
            )

    def not_finite(self, loss: float, norm: float) -> None:
        """``optimizer_step``'s ``on_not_finite``: LossNotFinite naming the last good checkpoint."""
        last = latest_checkpoint(self.dir.checkpoints)
        raise LossNotFinite(
            f"the loss became {loss} (gradient norm {norm}) at step {self.step + 1}; stopping. "
            + (
                f"The last good checkpoint is {last}: resume with --resume, perhaps with a lower --lr."
                if last
                else "No checkpoint was saved yet: restart with a lower --lr or --precision fp32."
            )
        )
