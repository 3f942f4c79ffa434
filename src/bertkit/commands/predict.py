"""``bertkit predict``: run a fine-tuned model on a (possibly unlabelled) file; write the task's prediction files.

The same flags and run as ``bertkit evaluate`` (``bertkit.tasks.inference``), without labels or metrics."""

from __future__ import annotations

import argparse
import json

from bertkit.tasks.options import configure_inference


def configure(parser: argparse.ArgumentParser) -> None:
    configure_inference(parser)


def run(args: argparse.Namespace) -> int:
    from bertkit.tasks import inference  # torch: kept out of -h

    print(json.dumps(inference.run(args, labelled=False), sort_keys=True))
    return 0
