"""A metrics window: sums of per-step values since the last log line, then means and rates."""

from __future__ import annotations

from collections import defaultdict

import torch


class Meter:
    """``meter.add(loss=..., mlm_ok=..., mlm_n=...)`` per micro-batch or step; ``meter.mean("loss", "steps")`` and
    ``meter.ratio("mlm_ok", "mlm_n")`` at a log line; ``meter.reset()`` after it.

    A value may be a tensor: it is summed where it is (a GPU's figures stay there: no host sync per micro-batch),
    floating ones in float64 and integer ones in int64, the same sums as of the numbers read one by one; reading
    the window (``sums``, ``ratio``) reads them all at once."""

    def __init__(self, sums: dict[str, float] | None = None) -> None:
        """``sums``: a window to continue (a resumed run's, saved in its checkpoint)."""
        self._sums: defaultdict[str, float | torch.Tensor] = defaultdict(float, sums or {})

    def add(self, **values: float | torch.Tensor) -> None:
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.device.type == "mps":  # no float64 there: read now
                value = float(value)
            had = self._sums[key]
            if isinstance(value, torch.Tensor) or isinstance(had, torch.Tensor):
                self._sums[key] = _as_sum(had) + _as_sum(value)  # a number joins as a CPU 0-d tensor: no copy
            else:
                self._sums[key] = had + float(value)

    @property
    def sums(self) -> defaultdict[str, float]:
        """The window's sums as numbers (one host sync for those added as tensors)."""
        pending = [k for k, v in self._sums.items() if isinstance(v, torch.Tensor)]
        if pending:
            device = self._sums[pending[0]].device
            numbers = torch.stack([self._sums[k].to(device, torch.float64) for k in pending]).tolist()  # one sync
            self._sums.update(zip(pending, numbers))
        return self._sums  # type: ignore[return-value]

    def ratio(self, numerator: str, denominator: str) -> float:
        """sum(numerator) / sum(denominator); 0 when the denominator is 0 (e.g. no NSP)."""
        sums = self.sums
        den = sums[denominator]
        return sums[numerator] / den if den else 0.0

    def reset(self) -> None:
        self._sums.clear()


def _as_sum(x: float | torch.Tensor) -> torch.Tensor:
    """``x`` as a sum's tensor: int64 for whole counts, float64 otherwise (float32 would round the sums)."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return x.to(torch.float64) if x.is_floating_point() else x.to(torch.int64)
    x = float(x)
    return torch.tensor(int(x)) if x.is_integer() else torch.tensor(x, dtype=torch.float64)
