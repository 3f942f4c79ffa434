"""``bertkit downstream``: the downstream meter, a model against a random initialisation of itself, per task."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.errors import InputError
from bertkit.experiments.downstream import (
    DEFAULT_TASKS,
    METER_TASKS,
    DownstreamMeter,
    MeterConfig,
    default_lrs,
    resolve_meter_tasks,
)
from bertkit.experiments.runner import CELL_FLAGS, check_model_dir, configure_finetune
from bertkit.options import flag_string, number, output_path, parse_lrs, parse_seeds, parse_time
from bertkit.outputs import check_output
from bertkit.training.interrupt import GracefulStop

# the finetune flags the meter sets for each of its runs (or from its own flags, recorded for a resume):
# --finetune-args may not give them
METER_FLAGS = (*CELL_FLAGS, "--epochs", "--max-train-examples")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Fine-tune each task from --model and from a random initialisation of the same config and vocabulary, with "
        "the same flags, learning-rate grid and seeds. Each route takes the learning rate with the best median dev "
        "score over the seeds; the gain is pretrained - random, in points of the task's official metric (SST-2 "
        "accuracy, MRPC (F1 + accuracy) / 2, CoLA MCC, CoNLL-2003 entity F1). Writes downstream.csv, downstream.md, "
        "downstream.png and cells.csv. Run the same command again to resume."
    )
    parser.add_argument("--model", required=True, help="bertkit or Hugging Face BERT / ModernBERT directory")
    parser.add_argument(
        "--data-dir",
        required=True,
        help="where the task files are: the shared data's layout (glue/SST-2/train.tsv, ner/conll2003/train.txt), "
        "a GLUE download (SST-2/train.tsv ...) or one folder of TASK_train.tsv / TASK_dev.tsv files",
    )
    # output_path: an unwritable one is refused when the command line is parsed, and nothing is made there until
    # every flag, the model and the task files are checked (the meter makes it)
    parser.add_argument("--output", required=True, type=output_path, help="the meter's directory")
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASKS),
        help=f"comma-separated, from {', '.join(METER_TASKS)} (default {','.join(DEFAULT_TASKS)})",
    )
    parser.add_argument("--seeds", default="3", help="fine-tuning seeds: a count N (1..N) or a list (default 3)")
    parser.add_argument(
        "--lr",
        default=None,
        help="the learning-rate grid both routes share (default by the model's width: 3e-4,1e-3,3e-3 up to hidden "
        "size 128, where the tiny models' best lrs were 3e-4..3e-3 and 1e-2 was worse; 1e-4,3e-4,1e-3 up to 256; "
        "5e-5,1e-4,3e-4 above: docs/pretraining.md, 'Which model for a budget')",
    )
    parser.add_argument(
        "--sst2-examples",
        type=number(int, "sst2_examples"),
        default=20000,
        help="SST-2's training subset: its first N examples (0 = all)",
    )
    parser.add_argument(
        "--max-train-examples",
        type=number(int, "max_train_examples"),
        default=0,
        help="every task: use only the first N examples (0 = all)",
    )
    parser.add_argument(
        "--epochs", type=number(float, "epochs"), default=None, help="fine-tuning epochs (default: finetune's)"
    )
    parser.add_argument(
        "--init-seed", type=number(int, "init_seed"), default=0, help="seed of the random initialisation (default 0)"
    )
    parser.add_argument("--max-time-per-run", default=None, metavar="DURATION", help="bound each fine-tuning")
    parser.add_argument(
        "--jobs",
        type=number(int, "jobs"),
        default=1,
        help="fine-tunings run at once (default 1): on a GPU several share it; on a CPU give each one core with "
        '--finetune-args "--threads 1"',
    )
    parser.add_argument(
        "--finetune-args",
        default="",
        type=flag_string(METER_FLAGS, configure_finetune),
        help='more finetune flags for both routes, e.g. "--batch-size 16 --threads 1" (not the flags the meter sets '
        f"for each run: {', '.join(METER_FLAGS)})",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if not Path(args.model).is_dir():
        raise InputError(f"--model {args.model}: not a directory")
    if not Path(args.data_dir).is_dir():
        raise InputError(f"--data-dir {args.data_dir}: not a directory")
    for flag in ("sst2_examples", "max_train_examples"):
        if getattr(args, flag) < 0:
            raise InputError(f"--{flag.replace('_', '-')}: expected 0 (all) or a positive count")
    if args.jobs < 1:
        raise InputError(f"--jobs: expected 1 or more, got {args.jobs}")
    if args.epochs is not None and not args.epochs > 0:
        raise InputError(f"--epochs: expected a positive number, got {args.epochs:g}")
    cfg = MeterConfig(
        model=Path(args.model),
        data_dir=Path(args.data_dir),
        output=Path(args.output),
        tasks=resolve_meter_tasks(args.tasks),
        seeds=parse_seeds(args.seeds),
        lrs=parse_lrs(args.lr) if args.lr else default_lrs(Path(args.model)),
        sst2_examples=args.sst2_examples,
        max_train_examples=args.max_train_examples,
        epochs=args.epochs,
        init_seed=args.init_seed,
        max_time_per_run=parse_time(args.max_time_per_run, "--max-time-per-run"),
        finetune_args=args.finetune_args,
        jobs=args.jobs,
    )
    check_model_dir(args.model)  # its random initialisation and every cell read it
    check_output(args.output, {"--model": args.model, "--data-dir": args.data_dir}, overwrite=None)  # its cells resume
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
