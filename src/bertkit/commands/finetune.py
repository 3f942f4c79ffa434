"""``bertkit finetune``: fine-tune a bertkit or Hugging Face BERT directory on a task; keep the best dev checkpoint.

Its files' flags and the loaders ``evaluate``, ``predict`` and ``distill`` share live in ``bertkit.tasks.options``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertkit.embeddings import ROUTE_HELP
from bertkit.errors import InputError, allocation_failure
from bertkit.modeldir import ModelDir
from bertkit.options import add_options, from_args, option_flags
from bertkit.outputs import MODEL_FILES, check_output, removed_if_refused
from bertkit.recipes.finetune import FinetuneArgs, FinetuneConfig, finetune, run_in_context, set_seed
from bertkit.tasks import check_task_flags
from bertkit.tasks.options import FinetuneFiles, TaskOptions, load_model, task_for_model, task_options

EPILOG = ROUTE_HELP["finetune"]


CONFIG = FinetuneConfig


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags (``CONFIG``'s), for a caller that builds its own parser."""
    add_options(parser, CONFIG)


def run(args: FinetuneConfig) -> int:
    """One process, or one of ``torchrun --nproc_per_node N -m bertkit.cli finetune ...`` (DistributedDataParallel:
    gloo on CPU, nccl on GPU)."""
    return run_in_context(args, _run)


def _run(args: FinetuneConfig, ctx) -> int:
    files: FinetuneFiles = from_args(FinetuneFiles, args)
    train_args: FinetuneArgs = from_args(FinetuneArgs, args, device=str(ctx.device))  # checked when made
    if files.dropout is not None and not 0.0 <= files.dropout < 1.0:
        raise InputError(f"--dropout must be in [0, 1), got {files.dropout}")
    inputs = {"--model": files.model, "--train": files.train, "--dev": files.dev}
    check_output(files.output, inputs, overwrite=None, writes=MODEL_FILES)
    check_task_flags(args.task, from_args(TaskOptions, args).given(), option_flags(TaskOptions))
    model_dir = ModelDir.open(files.model)  # --model read once: config.json, weights, tokenizer
    task = task_for_model(args.task, task_options(args), model_dir)  # --max-seq-length fits the model
    train, dev = files.read(task, train_args.skip_bad_rows)
    task.fit_labels(train)
    tokenizer = model_dir.tokenizer()
    set_seed(train_args.seed)  # the new head's initialisation follows --seed too
    try:
        model = load_model(task, model_dir, finetuned=False)
    except (MemoryError, RuntimeError) as e:  # a head or tagger sized by a flag (--tagger-hidden 1e9)
        if (asked := allocation_failure(e)) is None:
            raise
        raise InputError(f"{files.model}: the model with its task head does not fit in memory ({asked})") from None
    if files.dropout is not None:
        if not hasattr(model, "set_dropout"):
            raise InputError("--dropout applies to fine-tuned BERT, not to the frozen feature-based tagger")
        model.set_dropout(files.dropout)
    if len(tokenizer) > model.config.vocab_size:
        raise InputError(
            f"{files.model}: the tokenizer has {len(tokenizer)} tokens but the model only "
            f"{model.config.vocab_size} embeddings"
        )
    # what else a resumed run must share: the model it started from, its dropout and the task's settings (a
    # different --max-seq-length or --model was resumed silently); as JSON, the form run.json keeps them in
    settings = {"model": str(Path(files.model).resolve()), "dropout": files.dropout, **(task.task_config() or {})}
    resume_keys = {"settings": json.loads(json.dumps(settings))}
    with removed_if_refused(files.output, ctx.is_main):  # a run refused before its first checkpoint leaves nothing
        summary = finetune(task, model, tokenizer, train, dev, files.output, train_args, ctx, resume_keys)
    if ctx.is_main:
        print(json.dumps({"output": str(files.output), **summary}, sort_keys=True))
    return 0
