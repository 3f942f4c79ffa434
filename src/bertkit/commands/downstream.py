"""``bertkit downstream``: the downstream meter, a model against a random initialisation of itself, per task."""

from __future__ import annotations

import json
import sys

from bertkit.experiments.downstream import DownstreamMeter, MeterConfig
from bertkit.experiments.runner import check_model_dir
from bertkit.outputs import check_output
from bertkit.training.interrupt import GracefulStop

CONFIG = MeterConfig
DESCRIPTION = (
    "Fine-tune each task from --model and from a random initialisation of the same config and vocabulary, with the "
    "same flags, learning-rate grid and seeds. Each route takes the learning rate with the best median dev score over "
    "the seeds; the gain is pretrained - random, in points of the task's official metric (SST-2 accuracy, MRPC (F1 + "
    "accuracy) / 2, CoLA MCC, CoNLL-2003 entity F1). Writes downstream.csv, downstream.md, downstream.png and "
    "cells.csv. Run the same command again to resume."
)


def run(cfg: MeterConfig) -> int:
    check_model_dir(cfg.model)  # its random initialisation and every cell read it
    check_output(cfg.output, {"--model": cfg.model, "--data-dir": cfg.data_dir}, overwrite=None)  # its cells resume
    with GracefulStop() as stop:
        report = DownstreamMeter(cfg, say=lambda m: print(m, file=sys.stderr, flush=True), stop=stop).run()
    print((report.output / "downstream.md").read_text(encoding="utf-8"), file=sys.stderr)
    summary = {
        "output": str(report.output),
        "tasks": {g.task.name: {"pretrained": g.pretrained.median, "random": g.random.median} for g in report.gains},
        "gains": {g.task.name: round(g.gain, 2) for g in report.gains},
        "mean_gain": None if report.mean_gain is None else round(report.mean_gain, 2),
        "cells_run": report.cells_run,
        "cells_kept": report.cells_kept,
        "files": [str(p) for p in report.files],
    }
    print(json.dumps(summary, sort_keys=True))
    return 0
