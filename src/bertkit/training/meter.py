"""A metrics window: sums of per-step values since the last log line, then means and rates."""

from __future__ import annotations

from collections import defaultdict


class Meter:
    """``meter.add(loss=..., mlm_ok=..., mlm_n=...)`` per micro-batch or step; ``meter.mean("loss", "steps")`` and
    ``meter.ratio("mlm_ok", "mlm_n")`` at a log line; ``meter.reset()`` after it."""

    def __init__(self, sums: dict[str, float] | None = None) -> None:
        """``sums``: a window to continue (a resumed run's, saved in its checkpoint)."""
        self.sums: defaultdict[str, float] = defaultdict(float, sums or {})

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.sums[key] += float(value)

    def ratio(self, numerator: str, denominator: str) -> float:
        """sum(numerator) / sum(denominator); 0 when the denominator is 0 (e.g. no NSP)."""
        den = self.sums[denominator]
        return self.sums[numerator] / den if den else 0.0

    def reset(self) -> None:
        self.sums.clear()
