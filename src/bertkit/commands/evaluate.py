"""``bertkit evaluate``: run a fine-tuned model on a labelled file; write metrics.json and the predictions.

``bertkit predict`` is the same run on a file that may have no labels (no metrics); the run is
``bertkit.tasks.inference``'s."""

from __future__ import annotations

import json

from bertkit.embeddings import ROUTE_HELP
from bertkit.options import from_args, option_flags
from bertkit.tasks import check_flags_for_model
from bertkit.tasks.options import InferenceConfig, TaskOptions, configure_inference

EPILOG = ROUTE_HELP["evaluate"] + "; BLiMP (a pre-trained model): --task blimp (see `bertkit evaluate --task blimp -h`)"


CONFIG = InferenceConfig


configure = configure_inference  # the flags, for a caller that builds its own parser


def run(args: InferenceConfig) -> int:
    from bertkit.tasks import inference  # torch: kept out of -h

    check_flags_for_model(args.model, args.task, from_args(TaskOptions, args).given(), option_flags(TaskOptions))
    print(json.dumps(inference.run(args, labelled=True), sort_keys=True))
    return 0
