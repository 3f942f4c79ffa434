"""``bertkit finetune``: fine-tune a bertkit or Hugging Face BERT directory on a task; keep the best dev checkpoint.

Also the helpers ``evaluate`` and ``predict`` share: resolving the device, loading a model directory with its
tokenizer and its fine-tuned head.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bertkit.embeddings import ROUTE_HELP, route
from bertkit.errors import InputError
from bertkit.options import add_options, from_args, option, output_option
from bertkit.outputs import MODEL_FILES, check_output
from bertkit.tasks.options import TaskOptions, add_task_flag, task_for_model, task_of_directory, task_options
from bertkit.tokenization import load_tokenizer

FILES = "files and data"


EPILOG = ROUTE_HELP["finetune"]


def delegate(argv: list[str]) -> str | None:
    """The module that runs ``bertkit finetune ARGV`` when its ``--task`` is a sentence-embedding task."""
    return route("finetune", argv)


@dataclass(kw_only=True)
class FinetuneFiles:
    """What ``bertkit finetune`` reads and writes."""

    train: str = option(required=True, group=FILES, help="training file")
    dev: str | None = option(None, group=FILES, help="dev file: evaluated each epoch; the best checkpoint is kept")
    model: str = option(
        required=True,
        group=FILES,
        help="bertkit or Hugging Face BERT or ModernBERT directory (config.json + "
        "model.safetensors or pytorch_model.bin + vocab.txt or tokenizer.json)",
    )
    output: str = output_option(group=FILES, help="output directory (model, vocab, metrics.json, predictions)")
    max_train_examples: int = option(0, group=FILES, help="use only the first N training examples (0 = all)")
    max_eval_examples: int = option(0, group=FILES, help="use only the first N dev examples (0 = all)")
    dropout: float | None = option(
        None, help="set every dropout probability (default: the model's config.json, 0.1 for Google's models)"
    )

    def read(self, task, skip_bad_rows: bool) -> tuple[list, list | None]:
        """(training examples, dev examples or None) read by ``task``, cut to --max-train/eval-examples."""
        train = task.read(self.train, labelled=True, skip_bad_rows=skip_bad_rows)
        dev = task.read(self.dev, labelled=True, skip_bad_rows=skip_bad_rows) if self.dev else None
        if self.max_train_examples:
            del train[self.max_train_examples :]
        if dev is not None and self.max_eval_examples:
            del dev[self.max_eval_examples :]
        return train, dev


def load_model(task, model_dir: str | Path, finetuned: bool):
    """``task.load_model``, with a missing directory or weights file reported as bad input naming it."""
    try:
        return task.load_model(model_dir, finetuned=finetuned)
    except FileNotFoundError as e:
        raise InputError(str(e)) from None


def load_finetuned(model_dir: str | Path, task_name: str | None, args: argparse.Namespace):
    """(task, model, tokenizer) of a fine-tuned OUTPUT directory."""
    model_dir = Path(model_dir)
    task = task_of_directory(model_dir, task_name, args)
    tokenizer = load_tokenizer(model_dir)
    model = load_model(task, model_dir, finetuned=True)
    return task, model, tokenizer


def configure(parser: argparse.ArgumentParser) -> None:
    from bertkit.recipes.finetune import FinetuneArgs

    add_task_flag(parser, required=True)
    add_options(parser, FinetuneFiles)
    add_options(parser, FinetuneArgs)
    add_options(parser, TaskOptions)


def run(args: argparse.Namespace) -> int:
    """One process, or one of ``torchrun --nproc_per_node N -m bertkit.cli finetune ...`` (DistributedDataParallel:
    gloo on CPU, nccl on GPU)."""
    return run_in_context(args, _run)


def run_in_context(args: argparse.Namespace, body) -> int:
    """``body(args, ctx)`` in this process's distributed context (one process, or one of torchrun's)."""
    from bertkit.precision import resolve_device
    from bertkit.training import distributed

    ctx = distributed.setup(resolve_device(args.device))
    try:
        return body(args, ctx)
    finally:
        distributed.cleanup(ctx)


def _run(args: argparse.Namespace, ctx) -> int:
    from bertkit.recipes.finetune import FinetuneArgs, finetune, set_seed

    files: FinetuneFiles = from_args(FinetuneFiles, args)
    train_args: FinetuneArgs = from_args(FinetuneArgs, args, device=str(ctx.device))
    if train_args.grad_accum < 1 or train_args.batch_size < 1:
        raise InputError(
            f"--batch-size and --grad-accum must be >= 1, got {train_args.batch_size} and {train_args.grad_accum}"
        )
    if files.dropout is not None and not 0.0 <= files.dropout < 1.0:
        raise InputError(f"--dropout must be in [0, 1), got {files.dropout}")
    inputs = {"--model": files.model, "--train": files.train, "--dev": files.dev}
    check_output(files.output, inputs, overwrite=None, writes=MODEL_FILES)
    task = task_for_model(args.task, task_options(args), files.model)  # --max-seq-length fits the model
    train, dev = files.read(task, train_args.skip_bad_rows)
    task.fit_labels(train)
    tokenizer = load_tokenizer(files.model)
    set_seed(train_args.seed)  # the new head's initialisation follows --seed too
    model = load_model(task, files.model, finetuned=False)
    if files.dropout is not None:
        if not hasattr(model, "set_dropout"):
            raise InputError("--dropout applies to fine-tuned BERT, not to the frozen feature-based tagger")
        model.set_dropout(files.dropout)
    if len(tokenizer) > model.config.vocab_size:
        raise InputError(
            f"{files.model}: the tokenizer has {len(tokenizer)} tokens but the model only "
            f"{model.config.vocab_size} embeddings"
        )
    summary = finetune(task, model, tokenizer, train, dev, files.output, train_args, ctx)
    if ctx.is_main:
        print(json.dumps({"output": str(files.output), **summary}, sort_keys=True))
    return 0
