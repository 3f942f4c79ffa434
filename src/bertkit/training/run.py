"""The books a training run keeps, one keeper for every recipe (pre-training, ELECTRA, fine-tuning, distillation,
embeddings): the run directory opened by its one resume protocol (``RunDir.open``), one run record (``run.json``),
one metrics sink (``metrics.jsonl``, the console, TensorBoard), one progress display, the training clock, the log
window (a :class:`Meter` a checkpoint saves), the dev history and the best record, resumable checkpoints, the stop
every process agrees on (a signal, or ``--max-time``'s budget spent) and ``--max-time``'s schedule. Its API is
explicit, so that a recipe's loop stays visible::

    run = Run(output, ctx, keys, precision=..., save_every=..., max_time=...)
    opened = run.open(resume, overwrite)          # the checkpoint to continue from (opened.checkpoint), or None
    run.begin(state, total_steps)                 # run.json, metrics.jsonl cut back to the step resumed, the bar
    with GracefulStop() as stop:
        while run.going():
            t0 = time.perf_counter()
            loss = optimizer_step(..., on_not_finite=run.not_finite).loss
            run.stepped(loss, t0)                 # clock, window, bar; --max-time's re-fit
            if run.due(log_every): run.log(...)   # a metrics line
            if run.due(eval_every): ...           # an evaluation
            run.after_step(stop)                  # the checkpoint cadence; the agreed stop
        run.end(stop)                             # the last checkpoint; Interrupted on a signal

An epoch-based recipe (fine-tuning, distillation, embeddings) writes the same loop over :meth:`groups` (its
batches, epoch after epoch, the data position kept), evaluating with the best model saved::

    if run.eval_pending: run.evaluate(dev, save)            # the evaluation a stop pre-empted
    for group in run.groups(plan, per_step):
        ...; run.stepped(loss, t0)
        if run.after_step(stop, run.eval_due(eval_every)):  # True: evaluate now
            run.evaluate(dev, save)
    run.end(stop, checkpoint=False)

On SIGTERM / SIGINT the step in flight finishes, a checkpoint is written and ``Interrupted`` is raised; resuming
restores the books and the data position with the TrainState, so the result equals an uninterrupted run's.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import LossNotFinite, RunRefused
from bertkit.files import write_json
from bertkit.training import distributed
from bertkit.training.budget import TimeBudget, fit_steps
from bertkit.training.checkpointing import latest_checkpoint
from bertkit.training.distributed import DistContext
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.meter import Meter
from bertkit.training.rundir import METRICS, Opened, RunDir, run_record
from bertkit.training.state import TrainState
from bertkit.training.tensorboard import convert_metrics

TRAIN_LOG = "train_log.json"


class Run:
    """A recipe's run directory and books. ``keys``: the settings a resumed run must share; ``record``: what else
    run.json records; ``main_metric``: the dev metric whose improvement saves the model; ``keep``: checkpoints
    kept; ``save_every``: steps between checkpoints (0: none on a cadence); ``max_time``: ``--max-time`` in
    seconds (the run stops when it is spent; :meth:`fit` schedules its steps to it)."""

    def __init__(
        self,
        output: str | os.PathLike,
        ctx: DistContext,
        keys: dict[str, Any],
        *,
        main_metric: str | None = None,
        quiet: bool = False,
        steps_per_epoch: int = 1,
        precision: str = "fp32",
        record: dict[str, Any] | None = None,
        keep: int = 1,
        save_every: int = 0,
        max_time: float | None = None,
        desc: str = "training",
    ):
        self.dir = RunDir(output, ctx)
        self.path, self.ctx, self.keys, self.main_metric = self.dir.path, ctx, keys, main_metric
        self.quiet, self.steps_per_epoch, self.precision = quiet, max(1, steps_per_epoch), precision
        self.record = {**keys, **(record or {})}
        self.keep, self.save_every, self.max_time, self.desc = keep, save_every, max_time, desc
        self.opened = Opened(False, None, None)
        self.state: TrainState | None = None
        self.total_steps = 0
        self.best: dict[str, Any] | None = None
        self.history: list[dict] = []
        self.loss_sum, self.loss_n, self.seen = 0.0, 0, 0
        self.meter = Meter({})
        self.elapsed = 0.0  # the training clock: steps, evaluations and checkpoint writes (a resumed run's included)
        self.budget: TimeBudget | None = None
        self.clock_started = False
        self.cost = None  # --max-time's cost model, when the steps were fitted to it
        self.position: Callable[[], dict] | None = None  # the data's position, when a feed keeps it
        self.reschedule: Callable[[int], Any] | None = None  # a new lr schedule over n steps (--max-time's re-fit)
        self.planned_steps = 0  # the total steps :meth:`begin` was given
        self.tensorboard = False  # TensorBoard files beside metrics.jsonl, when the recipe asks for them
        self.bar = None
        self.stop_why: str | None = None
        self.eval_pending = False  # an evaluation due at the step a checkpoint is taken, not yet done
        self.epoch_end = False  # the group of batches :meth:`groups` gave last ends its epoch
        if ctx.is_main:
            self.dir.check_writable()

    # ------------------------------------------------------------------------------------------ open and begin

    def open(
        self, resume: bool, overwrite: bool, files: Sequence[str] | None = None, prepared: Sequence[str] = ()
    ) -> Opened:
        """Remove what a killed run left half-written and open the directory by the one resume protocol
        (``RunDir.open``: refusals, keys, ``files`` a run writes, those it ``prepared`` before its run.json);
        ``--max-time``'s budget starts from the time the run resumed from has spent."""
        self.dir.remove_stale()
        self.opened = self.dir.open(self.keys, resume, overwrite, files, prepared)
        saved = self.opened.checkpoint
        if saved is not None and not (type(saved.get("total_steps")) is int and type(saved["step"]) is int):
            raise RunRefused(  # every checkpoint :meth:`save` writes has both (a recipe schedules from them)
                f"--resume: {self.opened.path} is not a checkpoint of a bertkit run (no integer step and "
                "total_steps); remove it to resume from an earlier checkpoint, or start again with --overwrite"
            )
        if self.max_time:
            spent = float(self.opened.checkpoint.get("elapsed", 0.0)) if self.opened.checkpoint else 0.0
            self.budget = TimeBudget(self.max_time, spent)
        return self.opened

    def recorded_steps(self) -> int | None:
        """The total steps run.json recorded (a run resumed before its first checkpoint), else None."""
        record = self.dir.read_keys()
        return int(record["total_steps"]) if record and "total_steps" in record else None

    def fit(self, feed, model, make_optimizer, *, grad_accum: int, clip: float, max_steps: int | None) -> int:
        """--max-time's steps: a few steps of each (sequence length, batch size) ``feed`` will use, timed on a
        throwaway copy of ``model``, fitted to the budget (at most ``max_steps``), rank 0's on every rank."""
        ctx = self.ctx
        self.cost, fitted = fit_steps(
            self.budget, feed, model, make_optimizer, ctx, precision=self.precision, grad_accum=grad_accum, clip=clip
        )
        total_steps = int(distributed.broadcast_object(ctx, min(fitted, max_steps or 1 << 62)))
        say(
            f"--max-time {self.max_time:.0f}s at {self.cost(0, 1) * 1000:.0f} ms/step: scheduling {total_steps} steps",
            ctx,
            self.quiet,
        )
        return total_steps

    def begin(
        self,
        state: TrainState,
        total_steps: int,
        *,
        position: Callable[[], dict] | None = None,
        reschedule: Callable[[int], Any] | None = None,
        tensorboard: bool = False,
    ) -> None:
        """The TrainState restored from the checkpoint opened (and the books with it), run.json written,
        metrics.jsonl cut back to the step resumed, and the progress bar. ``position()``: the data's position a
        checkpoint saves (else the TrainState's own); ``reschedule(n)``: a new lr schedule over n steps, for
        --max-time's re-fit."""
        from tqdm import tqdm

        self.state, self.total_steps, self.position, self.reschedule = state, int(total_steps), position, reschedule
        self.planned_steps = self.total_steps  # the steps this process began with (a re-fit may change total_steps)
        saved = self.opened.checkpoint
        if saved is not None:
            try:  # the state, then the books
                state.load(saved, self.ctx)
                self.best, self.history = saved.get("best"), list(saved.get("history") or [])
                self.loss_sum, self.loss_n, self.seen = (list(saved.get("loss") or [0.0, 0]) + [0])[:3]
                self.eval_pending = bool(saved.get("eval_pending"))
                self.meter = Meter(saved.get("meter") or {})  # a resumed run's log window continues
            except (KeyError, IndexError, RuntimeError, TypeError, ValueError) as e:  # another model's, or torn
                lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [type(e).__name__]
                self._refuse(lines[1 if len(lines) > 1 and lines[0].startswith("Error(s) in loading") else 0])
            records = ([] if self.best is None else [self.best]) + self.history
            if not all(isinstance(r, dict) for r in records) or not all(
                type(x) in (int, float) for x in (self.loss_sum, self.loss_n, self.seen)
            ):
                self._refuse("its dev records or training loss are not what a run saves")
        self.elapsed = state.elapsed
        self.record.update(total_steps=self.total_steps, finished=False)
        self.write_record()
        # a pending evaluation's line (a cadence checkpoint is taken before it) is written again
        self.dir.truncate_metrics(state.step, self.main_metric if self.eval_pending else None)
        self.tensorboard = tensorboard
        self.bar = tqdm(
            total=self.total_steps,
            initial=state.step,
            desc=self.desc,
            unit="step",
            dynamic_ncols=True,
            disable=self.quiet or not self.ctx.is_main or not sys.stderr.isatty(),
            mininterval=0.5,
        )

    def _refuse(self, why: str) -> None:
        """The checkpoint opened cannot continue this run: a one-line RunRefused naming it and ``why``."""
        raise RunRefused(
            f"--resume: {self.opened.path} does not fit this run ({why[:200]}); remove it to resume from an earlier "
            "checkpoint, or start again with --overwrite"
        )

    def start(self, state: TrainState, *, resume: bool, overwrite: bool, total_steps: int = 0, **begin) -> dict | None:
        """:meth:`open` and :meth:`begin` at once (an epoch-based recipe); the checkpoint resumed from, or None."""
        self.open(resume, overwrite)
        self.begin(state, total_steps, **begin)
        return self.opened.checkpoint

    def write_record(self) -> None:
        self.dir.write_keys(self.record)

    # ------------------------------------------------------------------------------------------ the loop

    @property
    def step(self) -> int:
        return self.state.step

    def going(self) -> bool:
        """Whether to take another step. The first call starts the time budget's clock (preparing the data,
        probing, wrapping and compiling the model are not counted)."""
        if self.budget is not None and not self.clock_started:
            self.budget.start()
            self.clock_started = True
        return self.step < self.total_steps and self.stop_why is None

    def seconds(self) -> float:
        """Seconds of training so far (the clock: a resumed run's earlier ones included)."""
        return self.elapsed

    def count(self, loss: float, rows: int = 0) -> None:
        """The training loss so far (and rows seen), kept in the books a checkpoint saves."""
        self.loss_sum, self.loss_n, self.seen = self.loss_sum + loss, self.loss_n + 1, self.seen + rows

    def train_loss(self) -> float:
        return self.loss_sum / max(self.loss_n, 1)

    def stepped(self, loss, t0: float) -> None:
        """After an optimizer step that began at ``t0``: the clock, the window, the bar, and ``--max-time``'s
        re-fit of the schedule to the measured pace. ``loss``: a number, or a device tensor the window sums without
        a host sync (a GPU step's ``StepResult.loss_sum``)."""
        dt = time.perf_counter() - t0
        self.elapsed += dt
        self.meter.add(loss=loss, steps=1, time=dt)
        self.bar.update(1)
        if self.cost is None:
            return
        budget = self.budget
        due = budget.window is not None and self.step == budget.window[1]
        fitted = budget.after_step(self.step, self.total_steps, self.cost)
        if due and self.ctx.distributed:  # rank 0's re-fit and next window on every rank (its evaluations are its own)
            fitted, plan = distributed.broadcast_object(self.ctx, (fitted, budget.plan()))
            budget.adopt(plan)
        if fitted is not None:
            self.refit(fitted)

    def plan_refit(
        self, eval_every: int, last_stage: Callable[[int], int], every: Callable[[int], int] | None = None
    ) -> None:
        """--max-time's re-fits of a schedule fitted from cold probe steps (``TimeBudget.plan_refit``; ``every(n)``:
        the steps between evaluations in a run of n steps, whose time a re-fit sets aside)."""
        if self.cost is not None:
            self.budget.plan_refit(self.total_steps, eval_every, last_stage, every)

    def expect_evaluations(self, seconds: float, every: Callable[[int], int]) -> None:
        """--max-time: evaluations of about ``seconds`` each, every ``every(n)`` steps of an n-step run, set aside
        when the steps are fitted (``TimeBudget.expect``)."""
        if self.budget is not None:
            self.budget.expect(seconds, every)

    def eval_interval(self, steps: int, interval: int) -> int:
        """``interval`` between evaluations, widened under --max-time so that they take at most a quarter of it
        (``TimeBudget.eval_interval``)."""
        return self.budget.eval_interval(steps, interval) if self.budget is not None else interval

    def spent(self) -> bool:
        """Whether --max-time's budget is spent (an evaluation in flight may stop early on it)."""
        return self.budget is not None and self.clock_started and self.budget.over()

    def refit(self, fitted: int) -> None:
        """The schedule re-fitted to ``fitted`` steps (rank 0's) at the measured pace, the lr of this step on the
        new schedule; run.json says so."""
        state = self.state
        self.total_steps = self.bar.total = self.record["total_steps"] = int(
            distributed.broadcast_object(self.ctx, fitted)
        )
        say(f"--max-time: re-scheduled to {self.total_steps} steps at the measured pace", self.ctx, self.quiet)
        state.scheduler = self.reschedule(self.total_steps)
        state.scheduler.last_epoch = state.step - 1
        state.scheduler.step()
        self.write_record()

    def due(self, every: int) -> bool:
        """Every ``every`` steps, and at the last."""
        return self.step % every == 0 or self.step == self.total_steps

    def timed(self, work: Callable[[], Any]) -> Any:
        """``work()``, its seconds counted as training time (an evaluation), also when it raises, and kept out of
        the pace ``--max-time``'s re-fits measure (``TimeBudget.evaluated``)."""
        t0 = time.perf_counter()
        try:
            return work()
        finally:
            seconds = time.perf_counter() - t0
            self.elapsed += seconds
            if self.budget is not None:
                self.budget.evaluated(seconds)

    def after_step(self, stop: GracefulStop, eval_due: bool = False) -> bool:
        """A checkpoint every ``save_every`` steps (recording ``eval_due``: an evaluation due at this step and not
        yet done); then every process agrees whether to stop (a signal, or the time budget spent before the
        last step). Returns whether to evaluate now: one is due and the run was not signalled (a signalled run's
        checkpoint says it is pending, and the resumed run does it first), or ``--max-time`` ended the run here (its
        last step, evaluated as an uninterrupted run's last is)."""
        step, self.eval_pending = self.step, eval_due
        if self.save_every and step % self.save_every == 0 and step < self.total_steps:
            self.save()
        why = stop.agreed(self.ctx, spent=bool(self.budget and self.budget.over()))
        self.stop_why = why if why == "signal" or (why == "time" and step < self.total_steps) else None
        return (eval_due or self.stop_why == "time") and self.stop_why != "signal"

    def log(self, line: dict[str, Any], postfix: dict[str, str], said: str) -> None:
        """A metrics line into the one sink (:meth:`record`), then :meth:`show`."""
        self.record_metrics(line)
        self.show(postfix, said)

    def record_metrics(self, line: dict[str, Any], board: bool = False) -> None:
        """The one metrics sink (rank 0): ``line`` appended to metrics.jsonl; with ``board`` (an evaluation's
        record), the TensorBoard file rewritten from it (when the run writes one)."""
        if self.ctx.is_main:
            self.dir.append_metrics(line)
            if board:
                self.write_board()

    def write_board(self) -> None:
        """OUTPUT/tensorboard from metrics.jsonl, rewritten whole (rank 0; exact after a resume too, where the
        lines a killed run wrote after its checkpoint are gone), when the run writes TensorBoard files."""
        if self.tensorboard and self.ctx.is_main and (self.path / METRICS).is_file():
            convert_metrics(self.path)

    def show(self, postfix: dict[str, str], said: str) -> None:
        """The one progress display (rank 0): ``postfix`` on the progress bar, and ``said`` as a message when
        there is no bar (not a terminal) and not --quiet."""
        if not self.ctx.is_main:
            return
        self.bar.set_postfix(**postfix, refresh=False)
        if self.bar.disable and not self.quiet:
            say(said, self.ctx, self.quiet)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    # ------------------------------------------------------------------------------------------ epochs

    def groups(self, plan: Callable[[int], Sequence], per_step: int = 1) -> Iterator[Sequence]:
        """An epoch-based run's data: this process's next ``per_step`` batches of ``plan(epoch)`` (fewer at an
        epoch's end), epoch after epoch from the data position kept in the TrainState, while the run goes on. The
        position is the one after the group (a checkpoint taken after its step continues from there);
        ``epoch_end`` says whether the group ends its epoch."""
        state = self.state
        while self.going():
            epoch, b = state.position["epoch"], state.position["batch"]
            batches = plan(epoch)
            while b < len(batches) and self.going():
                group = batches[b : b + per_step]
                b += len(group)
                state.position, self.epoch_end = {"epoch": epoch, "batch": b}, b >= len(batches)
                yield group
            if self.stop_why is not None:
                return  # stopped: the checkpoint keeps the position reached
            if b >= len(batches):
                state.position = {"epoch": epoch + 1, "batch": 0}

    def eval_due(self, every: int) -> bool:
        """Whether an evaluation is due after this step: every ``every`` steps, else at an epoch's end; and after
        the last step."""
        return (self.step % every == 0 if every else self.epoch_end) or self.step == self.total_steps

    def log_progress(self) -> None:
        """An epoch-based run's metrics line: its training loss so far and rows per second."""
        loss, rate = self.train_loss(), self.seen / max(self.seconds(), 1e-9)
        said = f"step {self.step}/{self.total_steps}: loss {loss:.4f} ({rate:.1f} rows/s)"
        self.log({"step": self.step, "train_loss": loss, "rows_per_s": round(rate, 2)}, {"loss": f"{loss:.4f}"}, said)

    def evaluate(self, evaluate: Callable[[], dict] | None, save: Callable[[dict], None]) -> None:
        """Rank 0: the dev metrics (``evaluate()``), a record in the history and the metrics sink, and
        ``save(record)`` when the main metric improved; then every rank meets. Nothing without a dev set
        (``evaluate`` None). Its seconds count as training time (:meth:`timed`)."""
        self.timed(lambda: self._evaluate(evaluate, save))
        self.eval_pending = False

    def _evaluate(self, evaluate: Callable[[], dict] | None, save: Callable[[dict], None]) -> None:
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
        self.record_metrics(record, board=True)
        best = self.best
        improved = best is None or metrics.get(self.main_metric, -math.inf) > best.get(self.main_metric, -math.inf)
        if improved:
            self.best = record
            save(record)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        say(f"step {state.step}: dev {shown}{'  (best, saved)' if improved else ''}", ctx, self.quiet)
        state.model.train()
        distributed.barrier(ctx)

    # ------------------------------------------------------------------------------------------ checkpoints

    def save(self) -> Path | None:
        """A resumable checkpoint (every rank calls it): the TrainState with the data's position, the total steps,
        the run keys and the books (loss, window, dev history, best, a pending evaluation). Its writing counts as
        training time. Its path on every rank."""
        t_save, state = time.perf_counter(), self.state
        state.elapsed = self.elapsed
        if self.position is not None:
            state.position = self.position()
        path = state.save(
            self.dir.checkpoints,
            self.ctx,
            keep=self.keep,
            total_steps=self.total_steps,
            run=self.keys,
            meter=dict(self.meter.sums),
            loss=[self.loss_sum, self.loss_n, self.seen],
            best=self.best,
            history=self.history,
            eval_pending=self.eval_pending,
        )
        self.elapsed += time.perf_counter() - t_save
        return distributed.broadcast_object(self.ctx, path)

    def end(self, stop: GracefulStop, *, checkpoint: bool = True, on_stop: Callable[[], str] | None = None) -> None:
        """The last checkpoint (always when ``checkpoint``, else on a signal); on a signal, ``Interrupted`` naming
        it (``on_stop()`` may save what a stopped run leaves in OUTPUT and returns words for the message)."""
        signalled = self.stop_why == "signal"
        path = self.save() if checkpoint or signalled else None
        if signalled:
            said = (on_stop() if on_stop is not None else None) or ""
            stop.raise_(
                f"stopped at step {self.step} of {self.total_steps} on a signal; the checkpoint {path} is saved"
                f"{said}. Continue with the same command and --resume"
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
            "rows_per_second": round(self.seen / max(seconds, 1e-9), 2),
            "compute_precision": self.precision,
            **run_record(self.precision, self.ctx.device),
        }

    def mark_finished(self) -> None:
        """The TensorBoard file from the whole metrics.jsonl, and run.json says the run ended (its model is
        written: ``--resume`` refuses it from now on), after how many steps and why: ``"max_time"`` (the budget
        was spent first) or ``"total_steps"``."""
        self.write_board()
        stopped = "max_time" if self.stop_why == "time" else "total_steps"
        self.record.update(finished=True, steps=self.step, stopped=stopped)
        self.write_record()
        if stopped == "max_time":
            say(f"--max-time reached at step {self.step} of {self.total_steps}", self.ctx, self.quiet)

    def finish(self, args_record: dict, **log: Any) -> None:
        """Rank 0 writes ``train_log.json`` (the args, the history and ``log``), marks run.json finished and removes
        the checkpoints (nothing left to resume); every rank meets."""
        if self.ctx.is_main:
            write_json(self.path / TRAIN_LOG, {"args": args_record, "history": self.history, **log})
            self.mark_finished()
            shutil.rmtree(self.dir.checkpoints, ignore_errors=True)
        distributed.barrier(self.ctx)
