"""The books a training run keeps, the same for every recipe: the run directory and its resume keys, the training
loss so far, the dev history and the best record (saved with the model when it improves), resumable checkpoints of
all of it with the TrainState, the epoch loop with the data position and the eval / save / stop cadence after
each step, and the final ``train_log.json``. A recipe says how an epoch's batches are made, what a step does, what
is evaluated and how the model is saved::

    run = Run(output, ctx, keys, main_metric="accuracy", quiet=args.quiet)
    saved = run.start(state, resume=args.resume, overwrite=args.overwrite)   # None: a fresh run
    run.train(total_steps, plan, step, evaluate=..., save=..., eval_every=..., save_every=...)
    run.save_if_no_best(save)                                                # no dev set: the last model
    run.finish(asdict(args), best=summary)                                   # train_log.json

``plan(epoch)`` returns this process's batches of the epoch; ``step(group)`` takes one optimizer step on the next
of them (``optimizer_step(...)``; ``run.count(loss)``). ``evaluate()`` returns the dev metrics (rank 0 only calls
it); ``save(record)`` writes the model with its record. On SIGTERM / SIGINT the step in flight finishes, a
checkpoint is written and ``Interrupted`` is raised; resuming restores the books and the data position with the
TrainState, so the result equals an uninterrupted run's.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertkit.files import write_json
from bertkit.training import distributed
from bertkit.training.distributed import DistContext
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.rundir import RunDir, run_record
from bertkit.training.state import TrainState
from bertkit.training.tensorboard import EventWriter

TRAIN_LOG = "train_log.json"


class Run:
    """A recipe's run directory and books (``keys``: the settings a resumed run must share; ``main_metric``: the
    dev metric whose improvement saves the model)."""

    def __init__(
        self,
        output: str | os.PathLike,
        ctx: DistContext,
        keys: dict[str, Any],
        *,
        main_metric: str,
        quiet: bool = False,
        steps_per_epoch: int = 1,
        precision: str = "fp32",
    ):
        self.dir = RunDir(output, ctx)
        self.path, self.ctx, self.keys, self.main_metric = self.dir.path, ctx, keys, main_metric
        self.quiet, self.steps_per_epoch, self.precision = quiet, max(1, steps_per_epoch), precision
        self.state: TrainState | None = None
        self.best: dict[str, Any] | None = None
        self.history: list[dict] = []
        self.loss_sum, self.loss_n, self.seen = 0.0, 0, 0
        self.t0, self.elapsed0 = time.perf_counter(), 0.0
        self.board = None  # a TensorBoard EventWriter, when the recipe asks for one
        self.eval_pending = False  # the run resumed from was stopped before an evaluation that was due
        if ctx.is_main:
            self.dir.check_writable()

    # ------------------------------------------------------------------------------------------ start and resume

    def start(self, state: TrainState, *, resume: bool, overwrite: bool, tensorboard: bool = False) -> dict | None:
        """Remove what a killed run left half-written, check the keys against a checkpoint to resume (refusing to
        overwrite a finished run unless ``overwrite``), restore the books, and write the keys. Returns the
        checkpoint resumed from, or None."""
        self.state = state
        self.dir.remove_stale()
        saved = self.dir.resume_checkpoint(self.keys, resume, finished=TRAIN_LOG, overwrite=overwrite)
        if saved is not None:
            state.load(saved, self.ctx)
            self.best, self.history = saved["best"], saved["history"]
            self.loss_sum, self.loss_n, self.seen = (list(saved["loss"]) + [0])[:3]
            self.elapsed0 = state.elapsed
            self.eval_pending = bool(saved.get("eval_pending"))
        self.dir.write_keys(self.keys)
        if tensorboard and self.ctx.is_main:
            self.board = EventWriter(self.path / "tensorboard")
        return saved

    # ------------------------------------------------------------------------------------------ during the run

    def seconds(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.t0

    def count(self, loss: float, rows: int = 0) -> None:
        self.loss_sum, self.loss_n, self.seen = self.loss_sum + loss, self.loss_n + 1, self.seen + rows

    def train_loss(self) -> float:
        return self.loss_sum / max(self.loss_n, 1)

    def say_progress(self, total_steps: int, every: int = 50) -> None:
        """A progress line every ``every`` steps and at the last: the training loss so far and rows per second."""
        step = self.state.step
        if step % every == 0 or step == total_steps:
            rate = self.seen / max(self.seconds(), 1e-9)
            say(f"step {step}/{total_steps}: loss {self.train_loss():.4f} ({rate:.1f} rows/s)", self.ctx, self.quiet)

    def train(
        self,
        total_steps: int,
        plan: Callable[[int], Sequence],
        step: Callable[[Sequence], None],
        *,
        evaluate: Callable[[], dict] | None,
        save: Callable[[dict], None],
        eval_every: int,
        save_every: int,
        per_step: int = 1,
        on_stop: Callable[[], str] | None = None,
    ) -> None:
        """The epoch loop, from where a resumed run left off: ``plan(epoch)`` is this process's batches of the
        epoch, ``step(group)`` one optimizer step on the next ``per_step`` of them (fewer at an epoch's end).
        Around it: the evaluation a signal pre-empted in the run resumed from, the data position kept in the
        TrainState, the cadence after each step (:meth:`after_step`), and the evaluation at each epoch's end
        (without ``eval_every``) and after the last step."""
        state = self.state
        if self.eval_pending:
            self.eval_pending = False
            self.evaluate(evaluate, save)
        with GracefulStop() as stop:
            while state.step < total_steps:
                epoch, b = state.position["epoch"], state.position["batch"]
                batches = plan(epoch)
                while b < len(batches):
                    group = batches[b : b + per_step]
                    step(group)
                    b += len(group)
                    state.position = {"epoch": epoch, "batch": b}
                    if state.step >= total_steps:
                        break
                    self.after_step(
                        stop,
                        total_steps,
                        evaluate=evaluate,
                        save=save,
                        eval_every=eval_every,
                        save_every=save_every,
                        on_stop=on_stop,
                    )
                else:
                    state.position = {"epoch": epoch + 1, "batch": 0}
                if not eval_every or state.step >= total_steps:
                    self.evaluate(evaluate, save)

    def evaluate(self, evaluate: Callable[[], dict] | None, save: Callable[[dict], None]) -> None:
        """Rank 0: the dev metrics (``evaluate()``), a record in the history, and ``save(record)`` when the main
        metric improved; then every rank meets. Nothing without a dev set (``evaluate`` None)."""
        ctx, state = self.ctx, self.state
        if evaluate is None or not ctx.is_main:
            distributed.barrier(ctx)
            return
        metrics = evaluate()
        record = {
            **metrics,
            "step": state.step,
            "epoch": round(state.step / self.steps_per_epoch, 3),
            "train_loss": self.train_loss(),
            **run_record(self.precision, ctx.device),
        }
        self.history.append(record)
        if self.board is not None:
            self.board.add_record(record)
        best = self.best
        improved = best is None or metrics.get(self.main_metric, -math.inf) > best.get(self.main_metric, -math.inf)
        if improved:
            self.best = record
            save(record)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        say(f"step {state.step}: dev {shown}{'  (best, saved)' if improved else ''}", ctx, self.quiet)
        state.model.train()
        distributed.barrier(ctx)

    def checkpoint(self, eval_pending: bool) -> Path | None:
        """A resumable checkpoint (every rank calls it): the TrainState and the books; its path on every rank."""
        self.state.elapsed = self.seconds()
        path = self.state.save(
            self.dir.checkpoints,
            self.ctx,
            keep=1,
            loss=[self.loss_sum, self.loss_n, self.seen],
            best=self.best,
            history=self.history,
            eval_pending=eval_pending,
            run=self.keys,
        )
        return distributed.broadcast_object(self.ctx, path)

    def after_step(
        self,
        stop: GracefulStop,
        total_steps: int,
        *,
        evaluate,
        save,
        eval_every: int,
        save_every: int,
        on_stop: Callable[[], str] | None = None,
    ) -> None:
        """The cadence after an optimizer step: on a signal (agreed by every process) a checkpoint, then
        ``Interrupted``; an evaluation every ``eval_every`` steps; a checkpoint every ``save_every`` steps. The
        last step's evaluation is :meth:`train`'s. ``on_stop()`` may save what a stopped run leaves in OUTPUT and
        returns words for the message."""
        step = self.state.step
        if step >= total_steps:
            return
        eval_due = bool(eval_every) and step % eval_every == 0
        if stop.agreed(self.ctx) == "signal":  # every process stops at the same step
            path = self.checkpoint(eval_pending=eval_due)
            said = (on_stop() if on_stop is not None else None) or ""
            stop.raise_(
                f"stopped at step {step} of {total_steps}; checkpoint {path}{said}. Continue with the same command "
                "and --resume"
            )
        if eval_due:
            self.evaluate(evaluate, save)
        if save_every and step % save_every == 0:
            self.checkpoint(eval_pending=False)

    # ------------------------------------------------------------------------------------------ the end

    def save_if_no_best(self, save: Callable[[dict], None]) -> None:
        """No dev set, or stopped before the first evaluation: rank 0 saves the current model (``save(record)``,
        the record its step and training loss); then every rank meets."""
        if self.ctx.is_main and self.best is None:
            save({"step": self.state.step, "train_loss": self.train_loss()})
        distributed.barrier(self.ctx)

    def totals(self) -> dict[str, Any]:
        """The run's own figures for its summary: steps, training loss, seconds, rows per second, and how it was
        computed."""
        seconds = self.seconds()
        return {
            "steps": self.state.step,
            "train_loss": self.train_loss(),
            "train_seconds": round(seconds, 2),
            "rows_per_second": round(self.seen / seconds, 2),
            "compute_precision": self.precision,
            **run_record(self.precision, self.ctx.device),
        }

    def finish(self, args_record: dict, **log: Any) -> None:
        """Rank 0 writes ``train_log.json`` (the args, the history and ``log``) and removes the checkpoints (nothing
        left to resume); every rank meets."""
        if self.ctx.is_main:
            write_json(self.path / TRAIN_LOG, {"args": args_record, "history": self.history, **log})
            shutil.rmtree(self.dir.checkpoints, ignore_errors=True)
            if self.board is not None:
                self.board.close()
        distributed.barrier(self.ctx)
