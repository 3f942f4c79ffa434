"""``bertkit predict``: run a fine-tuned model on a (possibly unlabelled) file; write the task's prediction files."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from bertkit.commands.finetune import add_task_options

    parser.add_argument("--model", required=True, help="a fine-tuned OUTPUT directory of `bertkit finetune`")
    parser.add_argument("--data", required=True, help="input file in the task's format (labels not needed)")
    parser.add_argument("--output", default=None, help="where the predictions go (default: MODEL/predict-<data>)")
    parser.add_argument("--batch-size", type=int, default=64)
    add_task_options(parser, task_required=False)


def run(args: argparse.Namespace) -> int:
    from bertkit.commands.evaluate import run as run_evaluate

    return run_evaluate(args, labelled=False)
