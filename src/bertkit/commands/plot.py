"""``bertkit plot``: training curves of pretrain / finetune runs (PNG + the numbers as CSV), or TensorBoard files."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.errors import InputError
from bertkit.experiments import plots
from bertkit.experiments.tables import csv_text
from bertkit.experiments.tensorboard import convert_run
from bertkit.files import write_text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Draw loss, MLM and NSP accuracy, dev metrics, learning rate and throughput against steps and wall time, from "
        "the metrics.jsonl (or finetune's train_log.json) of one or several run directories, on shared axes. The "
        "numbers go to a CSV beside the PNG. With --tensorboard, write TensorBoard event files instead."
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="pretrain or finetune output directories")
    parser.add_argument(
        "--output",
        default=None,
        help="the PNG (default curves.png; the CSV goes beside it); "
        "with --tensorboard: the event directory (default RUN_DIR/tensorboard)",
    )
    parser.add_argument("--names", default=None, help="comma-separated legend names (default: the directory names)")
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="convert each run's metrics to a TensorBoard event file (open with tensorboard --logdir)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    runs = [Path(r) for r in args.runs]
    for r in runs:
        if not r.is_dir():
            raise InputError(f"{r}: not a directory (expected a pretrain or finetune output)")
    if args.tensorboard:
        if args.output and len(runs) > 1:
            written = [convert_run(r, Path(args.output) / r.name) for r in runs]
        else:
            written = [convert_run(r, Path(args.output) if args.output else None) for r in runs]
        print(json.dumps({"event_files": [str(p) for p in written]}))
        print(
            f"open with: tensorboard --logdir {written[0].parent if len(written) == 1 else Path(args.output or '.')}",
            file=sys.stderr,
        )
        return 0
    names = args.names.split(",") if args.names else [r.name or str(r) for r in runs]
    if len(names) != len(runs):
        raise InputError(f"--names gives {len(names)} names for {len(runs)} runs")
    curves = [plots.read_run(r, n) for r, n in zip(runs, names)]
    out = Path(args.output or "curves.png")
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
