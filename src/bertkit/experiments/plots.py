"""The figures of the studies, drawn with matplotlib's non-interactive Agg backend (no display needed).

Each function writes one PNG atomically. The numbers behind a figure are written beside it (CSV or NPZ) by its
caller; the figures also print their values next to the bars / cells, so a PNG reads on its own.

Curves: ``read_run(dir)`` reads a pretrain or finetune output directory into named series; ``curves`` draws them
against steps and wall time, several runs on shared axes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.files import atomic_write


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported here: matplotlib is only needed when drawing)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: fig.savefig(p, dpi=dpi, format="png", bbox_inches="tight"))
    pyplot().close(fig)
    return path


def bar_chart(
    path: Path,
    labels: Sequence[str],
    values: Sequence[float],
    low: Sequence[float] | None = None,
    high: Sequence[float] | None = None,
    ylabel: str = "",
    title: str = "",
    groups: dict[str, Sequence[float]] | None = None,
) -> Path:
    """Bars with their value written above; ``low``/``high`` draw the min-max spread as error bars.

    ``groups`` (series name -> values, one per label) draws grouped bars instead of ``values``.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(labels) * (len(groups) if groups else 1) + 1.5), 3.8))
    series = groups or {"": values}
    width = 0.8 / len(series)
    for k, (name, vals) in enumerate(series.items()):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(labels))]
        ys = [float("nan") if v is None else float(v) for v in vals]
        err = None
        if low is not None and high is not None and not groups:
            err = [[y - lo for y, lo in zip(ys, low)], [hi - y for y, hi in zip(ys, high)]]
        bars = ax.bar(xs, ys, width=width * 0.95, yerr=err, capsize=4, label=name or None)
        tops = list(high) if err is not None else ys  # the number goes above the error bar
        for b, y, top in zip(bars, ys, tops):
            if math.isfinite(y):
                ax.annotate(
                    f"{y:.1f}" if abs(y) >= 1 else f"{y:.3f}",
                    (b.get_x() + b.get_width() / 2, top),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if len(labels) > 6 else 0, ha="right" if len(labels) > 6 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if groups:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def line_chart(
    path: Path,
    xs: Sequence[float],
    series: dict[str, Sequence[float | None]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    low: dict[str, Sequence[float]] | None = None,
    high: dict[str, Sequence[float]] | None = None,
    logx: bool = False,
) -> Path:
    """One line per series over ``xs`` with markers and values written at each point; optional min-max bands."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for name, ys in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        for x, y in pts:
            ax.annotate(f"{y:.3g}", (x, y), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=7)
        if low and high and name in low:
            ax.fill_between(xs, low[name], high[name], alpha=0.2)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def heatmap(
    path: Path,
    matrix: Sequence[Sequence[float | None]],
    rows: Sequence[str],
    columns: Sequence[str],
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    annotate: bool = True,
    cmap: str = "viridis",
    figsize: tuple[float, float] | None = None,
) -> Path:
    """A matrix as coloured cells (NaN / None blank), each cell's value written in it when ``annotate``."""
    import numpy as np

    plt = pyplot()
    m = np.array([[np.nan if v is None else float(v) for v in row] for row in matrix], dtype=float)
    size = figsize or (max(3.5, 0.9 * len(columns) + 2.0), max(2.5, 0.45 * len(rows) + 1.5))
    fig, ax = plt.subplots(figsize=size)
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(
        columns,
        rotation=45 if max((len(c) for c in columns), default=0) > 4 else 0,
        ha="right" if max((len(c) for c in columns), default=0) > 4 else "center",
        fontsize=8,
    )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if annotate and m.size and np.isfinite(m).any():
        lo, hi = np.nanmin(m), np.nanmax(m)
        digits = 1 if np.nanmax(np.abs(m)) >= 10 else 2
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if np.isfinite(m[i, j]):
                    dark = hi > lo and (m[i, j] - lo) / (hi - lo) < 0.5
                    ax.text(
                        j,
                        i,
                        f"{m[i, j]:.{digits}f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "black",
                    )
    return save_figure(fig, path)


# ----------------------------------------------------------------------------------------------- training curves

# what each panel shows: (title, the keys that may hold it, in order of preference)
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("loss", "train_loss")),
    ("held-out / dev loss", ("eval_loss",)),
    ("MLM accuracy (train: own inputs; held-out: [MASK])", ("train_mlm_acc", "mlm_acc", "eval_mlm_acc")),
    ("NSP accuracy", ("nsp_acc", "eval_nsp_acc")),
    ("dev metric", ("accuracy", "f1", "mcc", "pearson", "spearman", "exact", "exact_match")),
    ("learning rate", ("lr",)),
    ("throughput (tokens/s)", ("tokens_per_s", "examples_per_s", "samples_per_s")),
)


@dataclass
class RunCurves:
    """A run's metric series: name -> list of (step, wall seconds or None, value)."""

    name: str
    series: dict[str, list[tuple[float, float | None, float]]] = field(default_factory=dict)

    def add(self, key: str, step: float, seconds: float | None, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return
        self.series.setdefault(key, []).append((float(step), seconds, float(value)))


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The metric records of a run directory: ``metrics.jsonl`` (pretrain, and finetune where it writes one),
    else the ``history`` of finetune's ``train_log.json``. Torn lines (a killed run) are skipped."""
    run_dir = Path(run_dir)
    jsonl = run_dir / "metrics.jsonl"
    if jsonl.is_file():
        out = []
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out
    log = run_dir / "train_log.json"
    if log.is_file():
        data = json.loads(log.read_text(encoding="utf-8"))
        return [r for r in data.get("history", []) if isinstance(r, dict)]
    raise InputError(f"{run_dir}: no metrics.jsonl or train_log.json (not a pretrain or finetune output directory)")


def read_run(run_dir: Path, name: str | None = None) -> RunCurves:
    """Series of a run: every numeric field of its records by step; wall time from ``elapsed_s`` where the records
    have it (held-out records without it, which fall between training records, take the time interpolated between
    the training records around their step)."""
    import bisect

    records = read_records(run_dir)
    curves = RunCurves(name or Path(run_dir).name)
    time_at: dict[float, float] = {}
    for r in records:
        if "step" in r and isinstance(r.get("elapsed_s"), (int, float)):
            time_at[float(r["step"])] = float(r["elapsed_s"])
    known = sorted(time_at)

    def seconds_at(step: float) -> float | None:
        if step in time_at:
            return time_at[step]
        i = bisect.bisect_left(known, step)
        if 0 < i < len(known):
            a, b = known[i - 1], known[i]
            return time_at[a] + (time_at[b] - time_at[a]) * (step - a) / (b - a)
        return None  # before the first or after the last timed record: no honest time to give it

    for r in records:
        if "step" not in r:
            continue
        step = float(r["step"])
        seconds = seconds_at(step)
        for k, v in r.items():
            if k not in ("step", "elapsed_s", "epoch"):
                curves.add(k, step, seconds, v)
    return curves


def curves_table(runs: Sequence[RunCurves]) -> list[dict[str, Any]]:
    """Long-format rows (run, metric, step, seconds, value): the numbers behind ``curves``."""
    rows = []
    for run in runs:
        for key, pts in sorted(run.series.items()):
            for step, seconds, value in pts:
                rows.append({"run": run.name, "metric": key, "step": step, "seconds": seconds, "value": value})
    return rows


def curves(path: Path, runs: Sequence[RunCurves]) -> Path:
    """Panels (loss, MLM / NSP accuracy, dev metric, lr, throughput) against steps (top row) and wall time
    (bottom row, where the records carry it); one line per run and series, shared axes per panel."""
    plt = pyplot()
    panels = []
    for title, keys in PANELS:
        present = [k for k in keys if any(k in r.series for r in runs)]
        if present:
            panels.append((title, present))
    if not panels:
        raise InputError("no plottable metrics in " + ", ".join(r.name for r in runs))
    has_time = any(s is not None for r in runs for pts in r.series.values() for _, s, _ in pts)
    n_rows = 2 if has_time else 1
    fig, axes = plt.subplots(n_rows, len(panels), figsize=(3.4 * len(panels), 2.9 * n_rows), squeeze=False)
    for j, (title, keys) in enumerate(panels):
        for row in range(n_rows):
            ax = axes[row][j]
            for run in runs:
                for key in keys:
                    pts = run.series.get(key)
                    if not pts:
                        continue
                    if row == 0:
                        xs, ys = [p[0] for p in pts], [p[2] for p in pts]
                    else:
                        sel = [p for p in pts if p[1] is not None]
                        xs, ys = [p[1] for p in sel], [p[2] for p in sel]
                    if not xs:
                        continue
                    label = run.name if len(keys) == 1 else f"{run.name}: {key}"
                    ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=label, linewidth=1.2)
            ax.set_xlabel("step" if row == 0 else "wall time (s)")
            if row == 0:
                ax.set_title(title, fontsize=10)
            if title == "learning rate":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0] and (len(runs) > 1 or len(keys) > 1):
                ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)
