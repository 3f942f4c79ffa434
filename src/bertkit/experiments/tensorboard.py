"""A finished run's metrics -> a TensorBoard event file (``bertkit plot --tensorboard``). The writer itself is
``bertkit.training.tensorboard``, which the training loops use live."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.experiments.plots import read_records
from bertkit.training.tensorboard import convert_records


def convert_run(run_dir: str | os.PathLike, directory: str | os.PathLike | None = None) -> Path:
    """A pretrain / finetune output's metrics (metrics.jsonl, or finetune's train_log.json) -> an event file in
    ``directory`` (default ``RUN_DIR/tensorboard``); wall times start at the run.json / metrics file's mtime."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    source = run_dir / "metrics.jsonl"
    start = None
    if source.is_file():
        last = [r for r in records if isinstance(r.get("elapsed_s"), (int, float))]
        start = source.stat().st_mtime - (float(last[-1]["elapsed_s"]) if last else 0.0)
    return convert_records(records, directory or run_dir / "tensorboard", start)
