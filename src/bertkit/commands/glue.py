"""``bertkit glue``: the GLUE suite in one command (lr grid x seeds per task, GLUE score, leaderboard files)."""

from __future__ import annotations

import dataclasses
import json
import sys

from bertkit.experiments.glue import SuiteConfig, SuiteRunner
from bertkit.experiments.runner import check_model_dir
from bertkit.outputs import check_output
from bertkit.training.interrupt import GracefulStop

CONFIG = SuiteConfig
DESCRIPTION = (
    "Fine-tune a model on every GLUE task found under --data (the GLUE download layout: CoLA/train.tsv, dev.tsv, "
    "test.tsv ...) with the paper's protocol: each learning rate over N seeds, the best median on dev. Writes "
    "results.csv, results.md, glue.png, cells.csv and, where test files exist, the leaderboard's submission.zip. Run "
    "the same command again to resume a stopped suite."
)


def run(cfg: SuiteConfig) -> int:
    cfg = dataclasses.replace(cfg, max_time_flag=True)  # finetune bounds its own run (--max-time)
    check_model_dir(cfg.model)  # each cell would fail on it, after the suite made --output
    check_output(cfg.output, {"--model": cfg.model, "--data": cfg.data}, overwrite=None)  # its cells resume
    with GracefulStop() as stop:
        report = SuiteRunner(cfg, say=lambda m: print(m, file=sys.stderr, flush=True), stop=stop).run()
    print((cfg.output / "results.md").read_text(encoding="utf-8"), file=sys.stderr)
    print(
        json.dumps(
            {
                "output": str(report.output),
                "glue_score": None if report.glue.score is None else round(report.glue.score, 2),
                "complete": report.glue.complete,
                "tasks": {k: round(s.median, 2) for k, s in report.summaries.items()},
                "cells_run": report.cells_run,
                "cells_kept": report.cells_kept,
                "submission": None if report.submission is None else str(report.submission),
            },
            sort_keys=True,
        )
    )
    return 0
