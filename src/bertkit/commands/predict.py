"""``bertkit predict``: run a fine-tuned model on a (possibly unlabelled) file; write the task's prediction files.

The same flags and run as ``bertkit evaluate``, without labels or metrics."""

from __future__ import annotations

import argparse

from bertkit.commands.evaluate import configure  # noqa: F401  (the same flags)


def run(args: argparse.Namespace) -> int:
    from bertkit.commands.evaluate import run as run_evaluate

    return run_evaluate(args, labelled=False)
