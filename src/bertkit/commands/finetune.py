"""``bertkit finetune``: fine-tune a bertkit or Hugging Face BERT directory on a task; keep the best dev checkpoint.

Also the helpers ``evaluate`` and ``predict`` share: task flags, loading a model directory with its tokenizer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TASK_CHOICES = (
    "cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli-mm", "qnli", "rte", "wnli", "ax",
    "squad", "squad_v2", "conll2003", "swag", "classification", "tagging", "rerank",
)


def add_task_options(parser: argparse.ArgumentParser, task_required: bool) -> None:
    parser.add_argument("--task", choices=TASK_CHOICES, required=task_required,
                        help="task family / GLUE task" + ("" if task_required else " (default: the model's)"))
    parser.add_argument("--max-seq-length", type=int, default=None, help="tokens per input (default 128, SQuAD 384; "
                        "evaluate/predict: the fine-tuning value)")
    parser.add_argument("--skip-bad-rows", action="store_true", help="skip and count malformed rows instead of "
                        "stopping at the first")
    parser.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-evaluation lines")
    g = parser.add_argument_group("generic files (--task classification / tagging)")
    g.add_argument("--text-column", default=None, help="column (or JSONL field) with the text (default 'text')")
    g.add_argument("--pair-column", default=None, help="column with the second text of a pair")
    g.add_argument("--label-column", default=None, help="column with the label (default 'label')")
    g.add_argument("--regression", action="store_true", default=None, help="labels are numbers (MSE head)")
    g.add_argument("--format", dest="data_format", choices=("csv", "tsv", "jsonl"), default=None,
                   help="file format (default: from the extension)")
    g.add_argument("--tag-column", type=int, default=None, help="CoNLL column holding the tag (default -1)")
    q = parser.add_argument_group("SQuAD")
    q.add_argument("--doc-stride", type=int, default=None, help="tokens between window starts (default 128)")
    q.add_argument("--max-query-length", type=int, default=None, help="question tokens kept (default 64)")
    q.add_argument("--n-best-size", type=int, default=None, help="start/end candidates per window (default 20)")
    q.add_argument("--max-answer-length", type=int, default=None, help="longest answer in tokens (default 30)")
    q.add_argument("--null-score-diff-threshold", type=float, default=None,
                   help="v2.0: predict no answer when null score - best span score > this (default 0.0)")


def task_options(args: argparse.Namespace, saved: dict[str, Any] | None = None) -> dict[str, Any]:
    """Task flags given on the command line, over the ones saved with a fine-tuned model."""
    options: dict[str, Any] = dict(saved or {})
    options.pop("family", None)
    options.pop("task", None)
    for name in ("max_seq_length", "text_column", "pair_column", "label_column", "regression", "data_format",
                 "tag_column", "doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                 "null_score_diff_threshold", "feature_layers", "tagger", "tagger_hidden", "feature_based"):
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    return options


def resolve_device(name: str | None) -> str:
    import torch

    if name:
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(model_dir: str | Path):
    from bertkit.tokenization import BertTokenizer

    model_dir = Path(model_dir)
    if not (model_dir / "vocab.txt").is_file():
        raise FileNotFoundError(
            f"{model_dir}: no vocab.txt (a model directory needs config.json, weights and vocab.txt)"
        )
    return BertTokenizer.from_pretrained(model_dir)


def load_finetuned(model_dir: str | Path, task_name: str | None, args: argparse.Namespace):
    """(task, model, tokenizer) of a fine-tuned OUTPUT directory."""
    from bertkit.recipes.finetune import TASK_CONFIG_NAME
    from bertkit.tasks import get_task

    model_dir = Path(model_dir)
    saved: dict[str, Any] = {}
    if (model_dir / TASK_CONFIG_NAME).is_file():
        saved = json.loads((model_dir / TASK_CONFIG_NAME).read_text(encoding="utf-8"))
    name = task_name or saved.get("task")
    if not name:
        raise ValueError(f"{model_dir}: no {TASK_CONFIG_NAME}; pass --task")
    task = get_task(name, **task_options(args, saved))
    tokenizer = load_tokenizer(model_dir)
    model = task.load_model(model_dir, finetuned=True)
    return task, model, tokenizer


def configure(parser: argparse.ArgumentParser) -> None:
    add_task_options(parser, task_required=True)
    parser.add_argument("--train", required=True, help="training file")
    parser.add_argument("--dev", default=None, help="dev file: evaluated each epoch; the best checkpoint is kept")
    parser.add_argument("--model", required=True, help="bertkit or Hugging Face BERT directory "
                        "(config.json + model.safetensors or pytorch_model.bin + vocab.txt)")
    parser.add_argument("--output", required=True, help="output directory (model, vocab, metrics.json, predictions)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32, help="examples per micro-batch")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (the optimizer "
                        "batch is batch-size x grad-accum)")
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--warmup-proportion", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--dropout", type=float, default=None, help="set every dropout probability (default: the "
                        "model's config.json, 0.1 for Google's models)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (default: each epoch)")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after N optimizer steps (0 = no limit)")
    parser.add_argument("--max-train-examples", type=int, default=0, help="use only the first N training examples")
    parser.add_argument("--max-eval-examples", type=int, default=0, help="use only the first N dev examples")
    f = parser.add_argument_group("feature-based tagging (--task conll2003 / tagging)")
    f.add_argument("--feature-based", action="store_true", default=None,
                   help="freeze BERT; train a small tagger on the concatenation of --feature-layers")
    f.add_argument("--feature-layers", default=None, help="comma-separated layer indices (default -1,-2,-3,-4)")
    f.add_argument("--tagger", choices=("bilstm", "mlp"), default=None, help="tagger on the features (default bilstm)")
    f.add_argument("--tagger-hidden", type=int, default=None, help="tagger hidden size (default 256)")


def run(args: argparse.Namespace) -> int:
    """One process, or one of ``torchrun --nproc_per_node N -m bertkit.cli finetune ...`` (DistributedDataParallel:
    gloo on CPU, nccl on GPU)."""
    from bertkit.training import distributed as D

    ctx = D.setup(resolve_device(args.device))
    try:
        return _run(args, ctx)
    finally:
        D.cleanup(ctx)


def _run(args: argparse.Namespace, ctx) -> int:
    from bertkit.data.readers import DataError
    from bertkit.recipes.finetune import FinetuneArgs, finetune, set_seed
    from bertkit.tasks import get_task

    try:
        if args.grad_accum < 1 or args.batch_size < 1:
            raise ValueError(f"--batch-size and --grad-accum must be >= 1, got {args.batch_size} and {args.grad_accum}")
        task = get_task(args.task, **task_options(args))
        train = task.read(args.train, labelled=True, skip_bad_rows=args.skip_bad_rows)
        dev = task.read(args.dev, labelled=True, skip_bad_rows=args.skip_bad_rows) if args.dev else None
        if args.max_train_examples:
            del train[args.max_train_examples:]
        if dev is not None and args.max_eval_examples:
            del dev[args.max_eval_examples:]
        task.fit_labels(train)
        tokenizer = load_tokenizer(args.model)
        set_seed(args.seed)  # the new head's initialisation follows --seed too
        model = task.load_model(args.model, finetuned=False)
        if args.dropout is not None:
            if not hasattr(model, "set_dropout"):
                raise ValueError("--dropout applies to fine-tuned BERT, not to the frozen feature-based tagger")
            model.set_dropout(args.dropout)
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(f"{args.model}: vocab.txt has {len(tokenizer)} tokens but the model only "
                             f"{model.config.vocab_size} embeddings")
    except (DataError, FileNotFoundError, ValueError) as e:
        print(f"bertkit finetune: error: {e}", file=sys.stderr)
        return 2
    train_args = FinetuneArgs(
        epochs=args.epochs, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
        warmup_proportion=args.warmup_proportion, weight_decay=args.weight_decay, seed=args.seed, precision=args.precision,
        device=str(ctx.device), eval_batch_size=args.eval_batch_size, eval_every=args.eval_every,
        max_steps=args.max_steps, quiet=args.quiet,
    )
    try:
        summary = finetune(task, model, tokenizer, train, dev, args.output, train_args, ctx)
    except (DataError, ValueError) as e:
        print(f"bertkit finetune: error: {e}", file=sys.stderr)
        return 2
    if ctx.is_main:
        print(json.dumps({"output": str(args.output), **summary}, sort_keys=True))
    return 0
