"""``bertkit finetune --task simcse|pairs|sts``: train a sentence-embedding model (flags: ``EmbeddingTrainArgs``).

    bertkit finetune --task simcse --train sentences.txt --model runs/my-bert --output runs/simcse
    bertkit finetune --task pairs --train pairs.tsv --model runs/my-bert --output runs/pairs --batch-size 256 \\
        --mini-batch-size 32 --dev stsb_dev.tsv
    torchrun --nproc_per_node 2 -m bertkit.cli finetune --task pairs ...    # negatives span both processes
"""

from __future__ import annotations

import argparse
import json

from bertkit.embeddings.data import read_scored, read_training_rows
from bertkit.embeddings.recipe import EmbeddingTrainArgs, train_embeddings  # its flags: torch at -h already
from bertkit.errors import InputError
from bertkit.options import add_options, from_args
from bertkit.outputs import check_output
from bertkit.precision import resolve_device
from bertkit.training import distributed as D
from bertkit.training.log import say


def configure(parser: argparse.ArgumentParser) -> None:
    add_options(parser, EmbeddingTrainArgs)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = from_args(EmbeddingTrainArgs, args)
    except ValueError as e:
        raise InputError(str(e)) from None
    check_output(cfg.output, {"--model": cfg.model, "--train": cfg.train, "--dev": cfg.dev}, overwrite=None)
    rows = read_training_rows(cfg)
    dev = read_scored(cfg.dev, skip_bad_rows=cfg.skip_bad_rows) if cfg.dev else None
    ctx = D.setup(resolve_device(cfg.device))
    try:
        shape = {1: "texts", 2: "pairs", 3: "triplets"}.get(rows.width, f"{rows.width}-tuples")
        say(
            f"bertkit finetune --task {cfg.task}: {len(rows)} {shape} from {cfg.train}"
            + (f" ({rows.skipped} bad rows skipped)" if rows.skipped else ""),
            ctx,
            cfg.quiet,
        )
        try:
            summary = train_embeddings(cfg, rows, dev, ctx)
        except ValueError as e:
            raise InputError(str(e)) from None
    finally:
        D.cleanup(ctx)
    if ctx.is_main:
        print(json.dumps({"output": cfg.output, **summary}, sort_keys=True))
    return 0
