"""Sequence-length and batch-size ramps: a run as stages of (sequence length, batch size) over its steps.

A ramp is written ``VALUE:UNTIL,...``: ``64:0.3`` runs length 64 for the first 30% of the steps, then the run's
``--seq-len``; ``8:0.05,16:0.15`` runs batches of 8 until 5%, 16 until 15%, then ``--batch-size``. Short sequences
and small batches early mean more updates in the minutes when the model learns most (cramming; Devlin et al.'s
128 -> 512 phases are the same idea at the other end, ``two_phase``). Stage boundaries are fractions of the
scheduled steps, so a stage is a pure function of (step, total steps): resume needs only the stage index.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.errors import InputError


@dataclass(frozen=True)
class Stage:
    start: int  # the first step of the stage
    seq_len: int
    batch_size: int


def parse_ramp(text: str | None, flag: str) -> list[tuple[int, float]]:
    """``"64:0.3"`` -> [(64, 0.3)]; ``None``/``""``/``"off"`` -> []. Fractions must increase within (0, 1)."""
    if text is None or str(text).strip().lower() in ("", "off", "none"):
        return []
    points, last = [], 0.0
    for part in str(text).split(","):
        value, sep, until = part.strip().partition(":")
        try:
            point = (int(value), float(until))
        except ValueError:
            raise InputError(f"{flag} {text!r}: expected VALUE:UNTIL_FRACTION[,...], e.g. 64:0.3") from None
        if not sep or point[0] < 1 or not last < point[1] < 1:
            raise InputError(f"{flag} {text!r}: values must be >= 1 and fractions increase within (0, 1)")
        points.append(point)
        last = point[1]
    return points


def plan_stages(
    total_steps: int,
    seq_len: int,
    batch_size: int,
    seq_ramp: list[tuple[int, float]] = (),
    batch_ramp: list[tuple[int, float]] = (),
    phase2: tuple[int, int] | None = None,
) -> list[Stage]:
    """The stages of a run of ``total_steps``: ramps first, then (seq_len, batch_size), then ``phase2`` (sequence
    length, batch size) for the last 10% when given (the paper's two phases). Consecutive equal stages merge."""
    phase2_start = int(0.9 * total_steps) if phase2 else None

    def value_at(step: int, ramp, final: int, index: int) -> int:
        for value, until in ramp:
            if step < int(until * total_steps):
                return value
        return phase2[index] if phase2_start is not None and step >= phase2_start else final

    starts = {0} | {int(f * total_steps) for _, f in [*seq_ramp, *batch_ramp]}
    if phase2_start is not None:
        starts.add(phase2_start)
    stages: list[Stage] = []
    for start in sorted(s for s in starts if s < total_steps or s == 0):
        stage = Stage(start, value_at(start, seq_ramp, seq_len, 0), value_at(start, batch_ramp, batch_size, 1))
        if not stages or (stages[-1].seq_len, stages[-1].batch_size) != (stage.seq_len, stage.batch_size):
            stages.append(stage)
    return stages


def stage_at(stages: list[Stage], step: int) -> int:
    """Index of the stage that holds ``step``."""
    return max(i for i, s in enumerate(stages) if s.start <= step)
