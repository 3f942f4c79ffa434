"""The books of a run counted in optimizer steps towards a total that ``--max-time`` may re-fit (pre-training):
the clock (training seconds, checkpoint writes included, evaluation added by the recipe), the log window (a
:class:`Meter` that a checkpoint saves), the progress bar, ``run.json``, resumable checkpoints every ``save_every``
steps (the TrainState, the feed's position, the window), and the stop every process agrees on (a signal, or the time
budget spent). A recipe's loop says what a step computes, what a log line holds and what is evaluated::

    run = StepRun(cfg, ctx, train, feed, total_steps, warmup, record, window, budget, cost)
    while run.going():
        t0 = time.perf_counter()
        loss = optimizer_step(..., on_not_finite=run.not_finite).loss
        run.stepped(loss, t0)                   # clock, window, bar; --max-time's re-fit
        if run.due(cfg.log_every): ...          # a metrics line
        if run.due(run.eval_every): ...         # an evaluation
        run.after_step(stop)                    # checkpoint cadence; the agreed stop
    run.end(stop)                               # the last checkpoint; Interrupted on a signal

``cfg`` carries ``output``, ``keep_checkpoints``, ``save_every``, ``eval_every``, ``schedule``, ``quiet`` and
``run_record()`` (the resolved settings a checkpoint records).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from bertkit.errors import LossNotFinite
from bertkit.files import write_json
from bertkit.training import distributed
from bertkit.training.checkpointing import latest_checkpoint
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.meter import Meter
from bertkit.training.rundir import RUN_JSON, RunDir


class StepRun:
    """``train``: the TrainState (resumed or fresh); ``feed``: the batches, whose ``position()`` a checkpoint
    saves; ``record``: run.json's content (its ``total_steps`` follows a re-fit); ``window``: a resumed run's log
    window; ``budget`` and ``cost``: ``--max-time``'s (None without it)."""

    def __init__(self, cfg, ctx, train, feed, total_steps: int, warmup: int, record: dict, window, budget, cost):
        from tqdm import tqdm

        self.cfg, self.ctx, self.train, self.feed, self.record = cfg, ctx, train, feed, record
        self.total_steps, self.warmup, self.budget, self.cost = total_steps, warmup, budget, cost
        self.dir = RunDir(cfg.output, ctx)
        self.meter = Meter(window)  # a resumed run's log window continues where it was
        self.elapsed, self.stop_why = train.elapsed, None
        self.bar = tqdm(
            total=total_steps,
            initial=train.step,
            desc="pre-training",
            unit="step",
            dynamic_ncols=True,
            disable=cfg.quiet or not ctx.is_main or not sys.stderr.isatty(),
            mininterval=0.5,
        )

    @property
    def step(self) -> int:
        return self.train.step

    @property
    def eval_every(self) -> int:
        return self.cfg.eval_every or max(1, self.total_steps // 10)

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
        from bertkit.training.optim import lr_schedule

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
        over, signalled = distributed.all_reduce_mean(
            self.ctx, [float(bool(self.budget and self.budget.over())), float(stop.requested)]
        )
        self.stop_why = "signal" if signalled else ("time" if over and step < self.total_steps else None)

    def close(self) -> None:
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
