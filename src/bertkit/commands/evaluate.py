"""``bertkit evaluate``: run a fine-tuned model on a labelled file; write metrics.json and the predictions.

``bertkit predict`` is the same run on a file that may have no labels (no metrics); the run is
``bertkit.tasks.inference``'s."""

from __future__ import annotations

import argparse
import json

from bertkit.embeddings import EVALUATION_TASKS, ROUTE_HELP
from bertkit.options import from_args, option_flags
from bertkit.tasks import check_flags_for_model
from bertkit.tasks.options import TaskOptions, configure_inference

EPILOG = ROUTE_HELP["evaluate"] + "; BLiMP (a pre-trained model): --task blimp (see `bertkit evaluate --task blimp -h`)"


def configure(parser: argparse.ArgumentParser) -> None:
    configure_inference(parser, routed=(*EVALUATION_TASKS, "blimp"))  # cli.ROUTES' tasks: named in "invalid choice"


def run(args: argparse.Namespace) -> int:
    from bertkit.tasks import inference  # torch: kept out of -h

    check_flags_for_model(args.model, args.task, from_args(TaskOptions, args).given(), option_flags(TaskOptions))
    print(json.dumps(inference.run(args, labelled=True), sort_keys=True))
    return 0
