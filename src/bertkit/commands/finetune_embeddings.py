"""``bertkit finetune --task simcse|pairs|sts``: train a sentence-embedding model (flags: ``EmbeddingTrainArgs``).

    bertkit finetune --task simcse --train sentences.txt --model runs/my-bert --output runs/simcse
    bertkit finetune --task pairs --train pairs.tsv --model runs/my-bert --output runs/pairs --batch-size 256 \\
        --mini-batch-size 32 --dev stsb_dev.tsv
    torchrun --nproc_per_node 2 -m bertkit.cli finetune --task pairs ...    # negatives span both processes
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bertkit.config import read_config_file
from bertkit.embeddings.data import read_scored, read_training_rows
from bertkit.embeddings.recipe import EmbeddingTrainArgs, train_embeddings  # its flags: torch at -h already
from bertkit.errors import InputError
from bertkit.outputs import check_output, removed_if_refused
from bertkit.precision import resolve_device
from bertkit.tasks import check_length_fits
from bertkit.training import distributed as D
from bertkit.training.log import say

CONFIG = EmbeddingTrainArgs


def check_dims(cfg: EmbeddingTrainArgs) -> None:
    """``--matryoshka-dims`` past the model's embedding size (its hidden size: no Dense module changes it) is refused
    before anything is written; the loss found it only at the first step, with OUTPUT made (issue 54, item 7)."""
    dims = [int(x) for x in (cfg.matryoshka_dims or "").split(",") if x.strip()]  # checked as integers already
    model = Path(cfg.model)
    modules = (model / "modules.json").read_text(encoding="utf-8") if (model / "modules.json").is_file() else ""
    if not dims or "Dense" in modules or not (model / "config.json").is_file():
        return
    hidden = read_config_file(model / "config.json").get("hidden_size")
    if isinstance(hidden, int) and max(dims) > hidden:
        raise InputError(f"--matryoshka-dims {max(dims)}: larger than the model's embedding size {hidden}")


def run(cfg: EmbeddingTrainArgs) -> int:
    default = next(f.default for f in dataclasses.fields(cfg) if f.name == "max_seq_length")
    check_length_fits(cfg.max_seq_length, cfg.model, default)  # the default is cut to a shorter model's
    check_dims(cfg)
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
            with removed_if_refused(cfg.output, ctx.is_main):  # refused before its first checkpoint: nothing left
                summary = train_embeddings(cfg, rows, dev, ctx)
        except ValueError as e:
            raise InputError(str(e)) from None
    finally:
        D.cleanup(ctx)
    if ctx.is_main:
        print(json.dumps({"output": cfg.output, **summary}, sort_keys=True))
    return 0
