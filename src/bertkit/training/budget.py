"""A wall-clock budget for a training run (``--max-time``): how many steps fit, one re-fit, and the deadline.

As cramming's ``check_deadline``, the run stops when the time is spent; unlike it, the schedule is a function of the
step, not of the clock, so that a resumed run computes exactly what an uninterrupted one would. The step count is
fitted before training from a few timed probe steps (``cost``), then re-fitted to the pace the run measures (probe
steps run cold: allocator, kernels for new shapes): just after the first held-out evaluation; again before the middle;
and a last time late in the run, from the pace of its last stretch (a ramp's last stage, longer sequences, runs at its
own pace, which the probes can misjudge: on a 2-core AVX2 EPYC the 128-token steps ran 11% slower than the 32-token
pace the first two re-fits had measured, and a 30-minute run stopped at step 1,591 of 1,673 with its lr still at 10%
of the peak).

Evaluations (the held-out batches, a BLiMP probe) are kept out of the pace: their seconds (``evaluated``) are taken
off the time a re-fit measures, and a re-fit keeps the time the evaluations still due will take (each as long as the
last one measured) out of the steps it fits. A BLiMP probe of 25 s in a 60-second run had been read as a slow pace,
the schedule shrunk to a few steps, the evaluation interval (a tenth of the steps) with it to every step or two, and
the run ended after 85 s (issue 60, item 7).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bertkit.training import step  # a module: read at call time (tests replace its time_steps)

# cost(first_step, total_steps) -> predicted seconds for steps [first_step, total_steps) of a run scheduled for
# total_steps steps (stages of a ramp are fractions of the total, so the cost is not simply proportional)
Cost = Callable[[int, int], float]

PACE_FROM = 3  # steps left out of the measured pace (the first ones run cold)
PACE_SPAN = 11  # the fewest steps a later re-fit's pace is timed over (late_window plans it, after_step keeps it)
MARGIN, OVERHEAD, SLACK = 0.95, 2.0, 1.06  # of the budget; seconds; for logging, evaluation and checkpoints
EVAL_SHARE = 0.25  # the most of the budget evaluations are given, by widening their interval
# the last re-fit times steps [LATE_FROM, LATE_AT) of the run (fractions of its steps), or, when the feed's last
# stage (a ramp's, phase 2's) begins later than LATE_FROM - LATE_SETTLE, a window from LATE_SETTLE after that stage's
# first step, LATE_SPAN long or half what is left: the pace of the last stage, before the end of the decay
LATE_FROM, LATE_AT, LATE_SETTLE, LATE_SPAN = 0.72, 0.8, 0.02, 0.05


def late_window(steps: int, last_stage: int = 0) -> tuple[int, int] | None:
    """(step the last re-fit's pace is timed from, step it re-fits at) for a run of ``steps`` steps whose last stage
    begins at step ``last_stage``; None when that stage is too short to time (``PACE_SPAN`` steps or fewer before
    the last)."""
    start = max(int(LATE_FROM * steps), last_stage + max(PACE_FROM, int(LATE_SETTLE * steps)))
    at = max(int(LATE_AT * steps), start + max(PACE_SPAN, min(int(LATE_SPAN * steps), (steps - start) // 2)))
    return (start, at) if at < steps - 1 else None


def refit_steps(total_steps: int, eval_every: int) -> tuple[int, int] | None:
    """(step the pace is timed from, step the schedule is re-fitted at), or None for very short runs. The re-fit
    comes just after the first held-out evaluation, and at most a quarter of the way in."""
    least = PACE_FROM + 10
    at = min(max(least, eval_every + 1), max(least, total_steps // 4), total_steps - 1)
    return (PACE_FROM, at) if at > PACE_FROM else None


def _largest(fits: Callable[[int], bool], low: int) -> int:
    """The largest n >= low with fits(n) (fits is monotone: true up to some n), or low when none fits."""
    if not fits(low):
        return low
    hi = low + 1
    while fits(hi):
        hi = low + 2 * (hi - low)
    lo = low  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


class TimeBudget:
    """``seconds`` of wall clock, of which ``elapsed`` were spent before (a resumed run)."""

    def __init__(self, seconds: float, elapsed: float = 0.0):
        self.seconds = float(seconds)
        self.started = time.perf_counter()
        self.deadline = self.seconds - float(elapsed)  # seconds from `started`
        self.window: tuple[int, int] | None = None  # (pace from, re-fit at)
        self._pace_start: float | None = None
        self._refits_left = 0  # re-fits after the first: one before the middle, one late
        self._last_stage: Callable[[int], int] = lambda steps: 0
        self._every: Callable[[int], int] | None = None  # steps between evaluations in a run of n steps
        self.eval_seconds = 0.0  # spent evaluating since the clock started
        self._eval_last = 0.0  # the last evaluation's seconds: what each one still due is expected to take
        self._pace_evals = 0.0  # eval_seconds when the pace's window opened

    def start(self) -> None:
        """Start the clock (when the training loop starts: preparing the data and probing are not counted)."""
        self.started = time.perf_counter()

    def fit(self, cost: Cost) -> int:
        """Steps whose predicted cost, with the evaluations :meth:`expect` announced, fits the budget (at least 1)."""
        budget = self.seconds * MARGIN - OVERHEAD
        return _largest(lambda n: cost(0, n) * SLACK + self.evaluations(0, n) * self._eval_last <= budget, 1)

    def expect(self, seconds: float, every: Callable[[int], int]) -> None:
        """Evaluations of about ``seconds`` each, every ``every(n)`` steps of a run of n steps and after its last:
        their time is set aside when the steps are fitted (the first one measured replaces the estimate)."""
        self._eval_last, self._every = float(seconds), every

    def eval_interval(self, steps: int, interval: int) -> int:
        """``interval``, widened so that a run of ``steps`` steps spends at most ``EVAL_SHARE`` of the budget on
        evaluations of the length last measured (or expected): a probe of 25 s in a 60-second run evaluates once,
        after the last step, not every tenth of it."""
        if self._eval_last <= 0:
            return interval
        affordable = max(1, int(EVAL_SHARE * self.seconds / self._eval_last))
        return max(interval, -(-steps // max(1, affordable - 1)))  # one of them after the last step

    def plan_refit(
        self,
        total_steps: int,
        eval_every: int,
        last_stage: Callable[[int], int] = lambda steps: 0,
        every: Callable[[int], int] | None = None,
    ) -> None:
        """Re-fit just after the first evaluation, once more at 45% of the steps (the first measured pace still
        carries the cold start; before the middle, a trapezoid's lr is still flat), and a last time from the pace
        of the last stage (``late_window``; ``last_stage(steps)``: the first step of the feed's last stage in a run
        of ``steps`` steps; the lr steps down a little there). ``every(n)``: the steps between evaluations in a run
        of n steps (an evaluation also follows the last step), whose time a re-fit sets aside."""
        self.window = refit_steps(total_steps, eval_every)
        self._last_stage = last_stage
        self._every = every
        self._refits_left = 2 if self.window is not None else 0

    def evaluated(self, seconds: float) -> None:
        """An evaluation took ``seconds``: kept out of the pace, and the time of each one still due."""
        self.eval_seconds += seconds
        self._eval_last = seconds

    def evaluations(self, step: int, steps: int) -> int:
        """Evaluations after steps ``step + 1 .. steps`` of a run of ``steps`` steps (the last step's included)."""
        if self._every is None or steps <= step:
            return 0
        every = max(1, self._every(steps))
        return steps // every - step // every + (1 if steps % every else 0)

    def after_step(self, step: int, total_steps: int, cost: Cost) -> int | None:
        """Call after each optimizer step. At the re-fit step, returns the step count that fits the time left at the
        measured pace (None otherwise, and when it is within 3% of ``total_steps``)."""
        if self.window is None:
            return None
        start, at = self.window
        if step == start:
            self._pace_start, self._pace_evals = time.perf_counter(), self.eval_seconds
        if step != at or self._pace_start is None:
            return None
        self.window = None
        now = time.perf_counter()
        stepping = now - self._pace_start - (self.eval_seconds - self._pace_evals)  # the steps' time, not the evals'
        scale = stepping / max(1e-9, cost(start, total_steps) - cost(at, total_steps))
        remaining = self.deadline - (now - self.started)
        evals = self._eval_last
        fitted = _largest(
            lambda n: cost(step, n) * scale * 1.04 + self.evaluations(step, n) * evals <= remaining, step + 1
        )
        result = fitted if abs(fitted - total_steps) > 0.03 * total_steps else None
        if self._refits_left:
            self._refits_left -= 1
            steps = result or total_steps
            if self._refits_left == 1:  # the second: its pace timed from now to 45% of the steps
                window, pace_start = (step, int(0.45 * steps)), now
                self._pace_evals = self.eval_seconds
            else:  # the last: its pace timed within the last stage, when the run gets there
                window, pace_start = late_window(steps, self._last_stage(steps)), None
            if window is not None and window[0] >= step and window[1] - window[0] >= PACE_SPAN:
                self.window, self._pace_start = window, pace_start
        return result

    def plan(self) -> tuple:
        """The re-fits still planned (the next window, how many after it): what every rank adopts from rank 0."""
        return self.window, self._refits_left

    def adopt(self, plan: tuple) -> None:
        """Another budget's :meth:`plan` (rank 0's: it alone evaluates, so its pace and its fits are the run's; at
        each re-fit step the others take its result)."""
        self.window, self._refits_left = plan

    def over(self) -> bool:
        """True once the budget is spent."""
        return time.perf_counter() - self.started >= self.deadline


def fit_steps(budget: TimeBudget, feed, model, make_optimizer, ctx, *, precision: str, grad_accum: int, clip: float):
    """(cost, steps that fit ``budget``): a few steps of each (sequence length, batch size) ``feed`` will use, timed
    on a throwaway copy of ``model``."""

    def timer(data) -> float:
        batches = [step.to_device(data.batch(0, i % data.num_batches(0)), ctx.device) for i in range(4)]
        return step.time_steps(
            model, make_optimizer, batches, precision=precision, device=ctx.device, grad_accum=grad_accum, clip=clip
        )

    cost = feed.cost(feed.step_costs(timer))
    return cost, budget.fit(cost)
