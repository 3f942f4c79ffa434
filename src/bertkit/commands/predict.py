"""``bertkit predict``: run a fine-tuned model on a (possibly unlabelled) file; write the task's prediction files.

The same flags and run as ``bertkit evaluate`` (``bertkit.tasks.inference``), without labels or metrics."""

from __future__ import annotations

import json

from bertkit.options import from_args, option_flags
from bertkit.tasks import check_flags_for_model
from bertkit.tasks.options import InferenceConfig, TaskOptions, configure_inference

CONFIG = InferenceConfig


configure = configure_inference  # the flags, for a caller that builds its own parser


def run(args: InferenceConfig) -> int:
    from bertkit.tasks import inference  # torch: kept out of -h

    check_flags_for_model(args.model, args.task, from_args(TaskOptions, args).given(), option_flags(TaskOptions))
    print(json.dumps(inference.run(args, labelled=False), sort_keys=True))
    return 0
