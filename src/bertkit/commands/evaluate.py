"""``bertkit evaluate``: run a fine-tuned model on a labelled file; write metrics.json and the predictions.

``bertkit predict`` is the same run on a file that may have no labels (no metrics); the run is
``bertkit.tasks.inference``'s."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from bertkit.embeddings import EVALUATION_TASKS, ROUTE_HELP
from bertkit.options import add_options, from_args, option_flags
from bertkit.tasks import check_flags_for_model
from bertkit.tasks.options import InferenceConfig, TaskOptions, task_option

EPILOG = ROUTE_HELP["evaluate"] + "; BLiMP (a pre-trained model): --task blimp (see `bertkit evaluate --task blimp -h`)"


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(InferenceConfig):
    """``InferenceConfig`` whose ``--task`` choices name the tasks cli.VARIANTS hands to their own modules too (the
    embedding evaluations, blimp): an unknown task's "invalid choice" names every task ``evaluate`` runs."""

    task: str | None = task_option(required=False, extra=(*EVALUATION_TASKS, "blimp"))


CONFIG = EvaluateConfig


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags (``EvaluateConfig``'s), for a caller that builds its own parser."""
    add_options(parser, EvaluateConfig)


def run(args: InferenceConfig) -> int:
    from bertkit.tasks import inference  # torch: kept out of -h

    check_flags_for_model(args.model, args.task, from_args(TaskOptions, args).given(), option_flags(TaskOptions))
    print(json.dumps(inference.run(args, labelled=True), sort_keys=True))
    return 0
