"""``bertkit plot``: training curves of pretrain / finetune runs (PNG + the numbers as CSV), or TensorBoard files."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.experiments import plots
from bertkit.experiments.tables import csv_text
from bertkit.experiments.tensorboard import convert_run
from bertkit.files import write_text
from bertkit.options import option


@dataclass(frozen=True, kw_only=True)
class PlotConfig:
    """What ``bertkit plot`` reads and draws."""

    runs: list[str] = option(
        flag="RUN_DIR", nargs="+", default_factory=list, help="pretrain or finetune output directories"
    )
    output: str | None = option(
        None,
        help="the PNG (default curves.png; the CSV goes beside it); with --tensorboard: the event directory (default "
        "RUN_DIR/tensorboard)",
    )
    names: str | None = option(None, help="comma-separated legend names (default: the directory names)")
    tensorboard: bool = option(
        False, help="convert each run's metrics to a TensorBoard event file (open with tensorboard --logdir)"
    )


CONFIG = PlotConfig
DESCRIPTION = (
    "Draw loss, MLM and NSP accuracy, dev metrics, learning rate and throughput against steps and wall time, from "
    "the metrics.jsonl (or finetune's train_log.json) of one or several run directories, on shared axes. The "
    "numbers go to a CSV beside the PNG. With --tensorboard, write TensorBoard event files instead."
)


def run(cfg: PlotConfig) -> int:
    from pathlib import Path

    runs = [Path(r) for r in cfg.runs]
    for r in runs:
        if not r.is_dir():
            raise InputError(f"{r}: not a directory (expected a pretrain or finetune output)")
    if cfg.tensorboard:
        if cfg.output and len(runs) > 1:
            written = [convert_run(r, Path(cfg.output) / r.name) for r in runs]
        else:
            written = [convert_run(r, Path(cfg.output) if cfg.output else None) for r in runs]
        print(json.dumps({"event_files": [str(p) for p in written]}))
        print(
            f"open with: tensorboard --logdir {written[0].parent if len(written) == 1 else Path(cfg.output or '.')}",
            file=sys.stderr,
        )
        return 0
    names = cfg.names.split(",") if cfg.names else [r.name or str(r) for r in runs]
    if len(names) != len(runs):
        raise InputError(f"--names gives {len(names)} names for {len(runs)} runs")
    curves = [plots.read_run(r, n) for r, n in zip(runs, names)]
    out = Path(cfg.output or "curves.png")
    plots.curves(out, curves)

    table = out.with_suffix(".csv")
    write_text(table, csv_text(plots.curves_table(curves)))
    print(
        json.dumps(
            {
                "png": str(out),
                "csv": str(table),
                "runs": len(runs),
                "metrics": sorted({k for c in curves for k in c.series}),
            }
        )
    )
    return 0
