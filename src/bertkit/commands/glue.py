"""``bertkit glue``: the GLUE suite in one command (lr grid x seeds per task, GLUE score, leaderboard files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bertkit.experiments.glue import SuiteConfig, SuiteRunner, resolve_tasks
from bertkit.experiments.runner import check_model_dir
from bertkit.options import add_options, option_flags, output_path, parse_lrs, parse_seeds, parse_time, to_argv
from bertkit.outputs import check_output
from bertkit.recipes.finetune import FinetuneArgs  # finetune's flags are glue's: torch at -h already
from bertkit.tasks.options import FinetuneFiles, TaskOptions
from bertkit.training.interrupt import GracefulStop

# finetune flags the suite sets itself, or that make no sense per cell (the others pass through to every finetune)
_OWN = {"task", "train", "dev", "model", "output", "lr", "seed", "help", "resume", "save_every"}


def _finetune_options() -> list[type]:
    """The option dataclasses of ``bertkit finetune`` (so new finetune flags pass through as well)."""
    return [FinetuneFiles, FinetuneArgs, TaskOptions]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Fine-tune a model on every GLUE task found under --data (the GLUE download layout: CoLA/train.tsv, "
        "dev.tsv, test.tsv ...) with the paper's protocol: each learning rate over N seeds, the best median on dev. "
        "Writes results.csv, results.md, glue.png, cells.csv and, where test files exist, the leaderboard's "
        "submission.zip. Run the same command again to resume a stopped suite."
    )
    parser.add_argument("--model", required=True, help="bertkit or Hugging Face BERT directory")
    parser.add_argument(
        "--data",
        required=True,
        help="the GLUE directory (CoLA/, SST-2/, MRPC/, STS-B/, QQP/, MNLI/, QNLI/, RTE/, WNLI/, diagnostic/)",
    )
    parser.add_argument("--output", required=True, type=output_path, help="the suite's directory")
    parser.add_argument(
        "--tasks",
        default=None,
        help="comma-separated tasks (default: every one found), e.g. cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli",
    )
    parser.add_argument(
        "--seeds",
        default="3",
        help="seeds per learning rate: a count N (seeds 1..N) or a comma-separated list (default 3)",
    )
    parser.add_argument(
        "--lr", default="2e-5,3e-5,5e-5", help="the learning-rate grid, comma-separated (default 2e-5,3e-5,5e-5)"
    )
    parser.add_argument(
        "--max-time-per-run",
        default=None,
        metavar="DURATION",
        help="bound each fine-tuning (90s, 10m, 1h); the best dev checkpoint reached counts",
    )

    # only flags given on the command line are passed on (no defaults here: finetune's own apply)
    group = parser.add_argument_group("fine-tuning (passed to every `bertkit finetune`; see its -h)")
    for cls in _finetune_options():
        add_options(parser, cls, exclude=_OWN, passthrough=True, groups=_OneGroup(group))


class _OneGroup(dict):
    """Every group title maps to one argument group."""

    def __init__(self, group) -> None:
        super().__init__()
        self.group = group

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        return self.group


def finetune_argv(args: argparse.Namespace) -> list[str]:
    """The pass-through finetune flags given on the command line, as argv."""

    return [flag for cls in _finetune_options() for flag in to_argv(cls, args, exclude=_OWN)]


def run(args: argparse.Namespace) -> int:
    ft_flags = {flag for cls in _finetune_options() for flag in option_flags(cls).values()}
    cfg = SuiteConfig(
        model=Path(args.model),
        data=Path(args.data),
        output=Path(args.output),
        tasks=resolve_tasks(args.tasks),
        tasks_given=args.tasks is not None,
        seeds=parse_seeds(args.seeds),
        lrs=parse_lrs(args.lr),
        max_time_per_run=parse_time(args.max_time_per_run, "--max-time-per-run"),
        finetune_args=finetune_argv(args),
        max_time_flag="--max-time" in ft_flags,
    )
    check_model_dir(args.model)  # each cell would fail on it, after the suite made --output
    check_output(args.output, {"--model": args.model, "--data": args.data}, overwrite=None)  # its cells resume
    with GracefulStop() as stop:
        report = SuiteRunner(cfg, say=lambda m: print(m, file=sys.stderr, flush=True), stop=stop).run()
    print((Path(args.output) / "results.md").read_text(encoding="utf-8"), file=sys.stderr)
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
