"""Sentence-embedding training: the explicit loop, on one screen.

    rows = read(--train)                                   # (text,) | (anchor, positive[, negative]) | (a, b, score)
    token ids of every text, once
    for step:
        columns = the batch's rows, column by column, padded   # simcse: the same texts twice (dropout differs)
        loss, grads = plain_step | cached_step(--mini-batch-size)   # embeddings gathered across ranks
                      (plain: every column in one pass over the real tokens only, attention in groups of rows of
                      similar length; cached: mini-batches of similar lengths)
        average grads over ranks; apply_update (bertkit.training.step): fp16 loss scaling, clip to --clip, AdamW
            step, linear warmup/decay step
        SIGTERM / SIGINT: finish the step, write a checkpoint, exit (``--resume`` continues exactly)
        every --eval-every steps (or epoch): Spearman on --dev; keep the best checkpoint
    OUTPUT: config.json + model.safetensors + vocab.txt + sentence-transformers files (pooling, Normalize)

The loss sees the global batch (``batch_size`` x world size rows): see ``gradcache`` for why the gradient is then
exactly that of the global-batch loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import models
from bertkit import options as opts
from bertkit.embeddings.data import TextRows, column
from bertkit.embeddings.evaluate import sts_metrics
from bertkit.embeddings.gradcache import average_gradients, cached_step, packed_embed, plain_step
from bertkit.embeddings.losses import build_loss
from bertkit.errors import InputError
from bertkit.features import EncodeDefaults, Encoder
from bertkit.files import write_json
from bertkit.options import option
from bertkit.precision import grad_scaler, resolve_precision
from bertkit.st_format import (
    TO_ST_POOLING,
    read_sentence_transformers,
    write_sentence_transformers,
)
from bertkit.tokenization import BertTokenizer, FastTokenizer, load_tokenizer
from bertkit.training.interrupt import GracefulStop
from bertkit.training.log import say
from bertkit.training.optim import build_optimizer, linear_schedule
from bertkit.training.run import Run
from bertkit.training.state import TrainState, seed_dropout, seed_everything
from bertkit.training.step import apply_update

TRAIN_CONFIG_NAME = "embedding_config.json"
# settings that change what is computed: a resumed run must use the same


def _dims(text: str, size: int | None = None) -> list[int]:
    """--matryoshka-dims: positive integers, none above the embedding ``size`` (when known)."""
    try:
        dims = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        dims = [0]
    if any(d < 1 for d in dims):
        raise InputError(f"--matryoshka-dims must be comma-separated positive integers, got {text!r}")
    if size is not None and dims and max(dims) > size:
        raise InputError(f"--matryoshka-dims {max(dims)}: larger than the model's embedding size {size}")
    return dims


ONLY_FOR = {"temperature": ("simcse",), "scale": ("pairs", "sts")}  # the loss settings only some tasks read


@dataclass(frozen=True)
class EmbeddingTrainArgs:
    """The flags of ``bertkit finetune --task simcse|pairs|sts`` (one definition each; see ``bertkit.options``)."""

    task: str = option(
        None,
        choices=("simcse", "pairs", "sts"),
        required=True,
        help="simcse: unsupervised (text per line); pairs: (anchor, positive[, negative]) with "
        "MultipleNegativesRankingLoss; sts: (text, text, score) with CoSENT",
    )
    train: str = opts.run_key(option(None, required=True, help="training file (text, TSV, CSV, JSONL, SQuAD JSON)"))
    model: str = opts.run_key(opts.model_option("bertkit, Hugging Face or sentence-transformers model directory"))
    output: str = opts.output_option(help="output directory (loads in Encoder, sentence-transformers, transformers)")
    dev: str | None = option(
        None,
        help="STS dev file (sentence1, sentence2, score): evaluated every --eval-every "
        "steps or epoch; the best checkpoint by Spearman is kept",
    )
    pooling: str | None = opts.run_key(
        option(
            None,
            choices=tuple(TO_ST_POOLING),
            help="pooling of the last layer, saved with "
            "the model (default: a sentence-transformers model's own, else mean)",
            group="model",
        )
    )
    normalize: bool = option(True, help="do not L2-normalise the saved model's vectors", group="model")
    max_seq_length: int = opts.run_key(option(128, help="tokens per text, specials included", group="model"))
    text_column: str | None = option(
        None, help="text / anchor / first-sentence column (default text, anchor, sentence1; NLI: premise)", group="data"
    )
    pair_column: str | None = option(
        None, help="positive / second-sentence column (default positive, sentence2; NLI: hypothesis)", group="data"
    )
    negative_column: str | None = option(
        None, help="hard-negative column(s), comma-separated (default: 'negative' when the file has it)", group="data"
    )
    label_column: str | None = option(None, help="score column for sts (default score; NLI: label)", group="data")
    data_format: str | None = option(
        None,
        flag="--format",
        choices=("text", "csv", "tsv", "jsonl"),
        help="file format (default: from the extension; other extensions: text)",
        group="data",
    )
    nli: bool = option(
        False,
        help="pairs from an NLI file: entailments are positives, the same premise's contradictions hard negatives",
        group="data",
    )
    squad_pairs: str | None = option(
        None,
        choices=("sentence", "paragraph"),
        help="pairs from a SQuAD JSON file: (question, answer sentence) or (question, paragraph)",
        group="data",
    )
    skip_bad_rows: bool = option(False, help="skip and count malformed rows instead of stopping", group="data")
    max_train_examples: int = opts.run_key(option(0, help="use only the first N training rows (0 = all)", group="data"))
    epochs: float = opts.run_key(option(1.0, group="training"))
    max_steps: int | None = opts.run_key(opts.max_steps_option())
    max_time: float | None = opts.max_time_option(opts.MAX_TIME_HELP)
    lr: float = opts.run_key(opts.lr_option(5e-5))
    batch_size: int = opts.run_key(
        option(64, help="rows per step per process: the in-batch negatives", group="training")
    )
    mini_batch_size: int = opts.run_key(
        option(
            0,
            help="GradCache: embed the batch in mini-batches of N (memory of N, negatives of --batch-size; 0 = off)",
            group="training",
        )
    )
    warmup_fraction: float = opts.run_key(opts.warmup_option(0.1))
    weight_decay: float = opts.run_key(option(0.01, group="training"))
    clip: float = opts.run_key(opts.clip_option(1.0))
    temperature: float = opts.run_key(option(0.05, help="simcse: InfoNCE temperature", group="loss"))
    scale: float = opts.run_key(option(20.0, help="pairs / sts: cosine scale (1 / temperature)", group="loss"))
    symmetric: bool = opts.run_key(
        option(False, help="pairs: also rank anchors for each positive (two-way loss)", group="loss")
    )
    matryoshka_dims: str | None = opts.run_key(
        option(None, help="e.g. 768,256,64: sum the loss over these prefixes", group="loss")
    )
    seed: int = opts.run_key(opts.seed_option(42))
    precision: str = opts.run_key(opts.precision_option(group="training"))
    device: str | None = opts.device_option(group="training")
    threads: int | None = opts.threads_option()
    eval_every: int = opts.run_key(
        option(0, help="evaluate --dev every N steps (default: each epoch)", group="training")
    )
    eval_batch_size: int = option(64, group="training")
    quiet: bool = opts.quiet_option("no progress lines", group="training")
    save_every: int = option(
        0,
        help="also write a resumable checkpoint every N steps (0 = only when stopped by SIGTERM / SIGINT)",
        group="checkpoints",
    )
    resume: bool = option(
        False,
        help="continue the interrupted run in OUTPUT from its checkpoint (same flags): the "
        "result equals an uninterrupted run's",
        group="checkpoints",
    )
    overwrite: bool = opts.overwrite_option("replace the finished run in OUTPUT", group="checkpoints")

    def __post_init__(self) -> None:
        opts.check_bounds(self, InputError)  # the ranges the flags are parsed with (--batch-size >= 1...)
        opts.check_run_flags(self.resume, self.overwrite)
        if self.mini_batch_size < 0 or (self.max_steps or 0) < 0 or self.epochs <= 0:
            raise InputError("--mini-batch-size and --max-steps must be >= 0, --epochs > 0")
        if self.task != "pairs" and (self.nli or self.squad_pairs or self.symmetric or self.negative_column):
            raise InputError("--nli, --squad-pairs, --symmetric and --negative-column apply to --task pairs")
        if self.nli and self.squad_pairs:
            raise InputError("--nli and --squad-pairs are two different input formats: choose one")
        _dims(self.matryoshka_dims or "")
        for name, tasks in ONLY_FOR.items():  # given to a task that does not read it: refused, not ignored
            if getattr(self, name) != type(self).__dataclass_fields__[name].default and self.task not in tasks:
                raise InputError(
                    f"--{name}: --task {self.task} does not use it (only {', '.join(tasks)}); leave it out"
                )


# the settings that change what is computed (fields marked run): a resumed run must use the same
RESUME_KEYS = opts.run_keys(EmbeddingTrainArgs)


def train_embeddings(args: EmbeddingTrainArgs, rows: TextRows, dev: TextRows | None, ctx) -> dict[str, Any]:
    """Train a sentence-embedding model on ``rows``; write it to ``args.output`` (the best dev checkpoint when
    ``dev`` is given, else the last). Returns a summary (steps, loss, dev metrics, seconds). On SIGTERM / SIGINT a
    checkpoint is written (and every ``save_every`` steps); ``args.resume`` continues from it bit for bit."""
    torch.set_num_threads(args.threads or torch.get_num_threads())
    seed_everything(args.seed)
    device = ctx.device
    precision = resolve_precision(args.precision, device)
    model, tokenizer, pooling, max_len = _load_model(args, device)
    seed_dropout(args.seed, ctx)  # dropout differs per process; the weights are the same
    loss_fn = build_loss(
        args.task,
        temperature=args.temperature,
        scale=args.scale,
        symmetric=args.symmetric,
        matryoshka_dims=_dims(args.matryoshka_dims or "", model.config.hidden_size) or None,
    )
    table = rows.token_ids(tokenizer, max_len)  # [N][width] -> ids
    labels_all = torch.tensor(rows.scores, dtype=torch.float32) if rows.scores is not None else None
    n, global_batch = len(table), args.batch_size * ctx.world_size
    batches_per_epoch = n // global_batch  # whole global batches: every rank the same count, no tiny last batch
    if batches_per_epoch == 0:
        raise InputError(
            f"--batch-size {args.batch_size}: {n} training rows make no full batch of it x {ctx.world_size} "
            "process(es); lower it"
        )
    total_steps = min(max(1, math.ceil(batches_per_epoch * args.epochs)), args.max_steps or 1 << 62)
    optimizer = build_optimizer(model, lr=args.lr, weight_decay=args.weight_decay)
    scheduler = linear_schedule(optimizer, int(args.warmup_fraction * total_steps), total_steps)
    # fp16 (--precision auto on a GPU without bf16) scales the loss, so small gradients survive
    state = TrainState(model, optimizer, scheduler, grad_scaler(precision, device), position={"epoch": 0, "batch": 0})
    keys = {
        "task": args.task,
        "args": {k: getattr(args, k) for k in RESUME_KEYS},
        "train_rows": n,
        "world_size": ctx.world_size,
    }
    run = Run(
        args.output,
        ctx,
        keys,
        main_metric="dev_spearman",
        quiet=args.quiet,
        steps_per_epoch=batches_per_epoch,
        precision=precision,
        desc="embeddings",
        save_every=args.save_every,
        max_time=args.max_time,
    )
    saved = run.start(state, resume=args.resume, overwrite=args.overwrite, total_steps=total_steps)
    if saved is not None:
        say(f"resuming {run.path} at step {state.step} of {total_steps}", ctx, args.quiet)
    out = _Output(args, run, tokenizer, pooling, max_len)
    embed = packed_embed(model, pooling, precision, device)
    dev_metrics = (lambda: out.evaluate(dev)) if dev is not None else None

    def plan(epoch: int) -> list[list[int]]:
        """This process's share of each global batch of the epoch's shuffle."""
        order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch)).tolist()
        starts = [b * global_batch + ctx.rank * args.batch_size for b in range(batches_per_epoch)]
        return [order[start : start + args.batch_size] for start in starts]

    # ---- the loop: one optimizer step per global batch
    with GracefulStop() as stop:
        if run.eval_pending:  # the evaluation a stop pre-empted in the run resumed from
            run.evaluate(dev_metrics, out.save)
        for (idx,) in run.groups(plan):
            t0 = time.perf_counter()
            columns = [column([table[i][k] for i in idx], tokenizer.pad_token_id, device) for k in range(rows.width)]
            if args.task == "simcse":
                columns = [columns[0], columns[0]]  # the same texts twice: dropout is the augmentation
            labels = labels_all[idx].to(device) if labels_all is not None else None
            if args.mini_batch_size and args.mini_batch_size < args.batch_size:
                loss = cached_step(embed, columns, labels, loss_fn, args.mini_batch_size, scale=state.scaler.scale)
            else:  # one pass per step
                loss = plain_step(embed, columns, labels, loss_fn, joint=True, scale=state.scaler.scale)
            average_gradients(model)
            apply_update(state, args.clip, ctx=ctx)
            value = loss.item()
            run.count(value, global_batch)
            run.stepped(value, t0)
            if run.due(50):
                run.log_progress()
            if run.after_step(stop, run.eval_due(args.eval_every)):  # checkpoint cadence; the agreed stop
                run.evaluate(dev_metrics, out.save)
        run.close()
        run.end(stop, checkpoint=False, on_stop=out.on_stop)  # a signal: the checkpoint, then Interrupted
    return out.finish(n, global_batch)


def _load_model(args: EmbeddingTrainArgs, device) -> tuple[Any, BertTokenizer | FastTokenizer, str, int]:
    """(model on ``device`` in training mode, tokenizer, pooling, max tokens) of --model: a bertkit, Hugging Face
    or sentence-transformers directory (whose pooling is the default); the bare encoder of the architecture its
    config.json names (``BertModel``, ``ModernBertModel``)."""
    source = read_sentence_transformers(args.model)
    model_dir = source.model_dir if source is not None else Path(args.model)
    pooling = args.pooling or (source.pooling if source is not None else "mean")
    tokenizer = load_tokenizer(model_dir)
    model = models.of_directory(model_dir).model_class("base").from_pretrained(model_dir).to(device).train()
    if len(tokenizer) > model.config.vocab_size:
        raise InputError(
            f"--model {args.model}: the vocabulary has {len(tokenizer)} tokens but the model only "
            f"{model.config.vocab_size} embeddings"
        )
    return model, tokenizer, pooling, min(args.max_seq_length, model.config.max_position_embeddings)


class _Output:
    """What an embedding run writes and measures: the model saved with its sentence-transformers files, Spearman /
    Pearson on the STS dev set, and the summary."""

    def __init__(self, args: EmbeddingTrainArgs, run: Run, tokenizer, pooling: str, max_len: int):
        self.args, self.run, self.tokenizer, self.pooling, self.max_len = args, run, tokenizer, pooling, max_len

    def save(self, record: dict | None) -> None:
        model, output, args = self.run.state.model, self.run.path, self.args
        model.save_pretrained(output)
        self.tokenizer.save_pretrained(output)
        write_sentence_transformers(
            output,
            pooling=self.pooling,
            normalize=args.normalize,
            dim=model.config.hidden_size,
            max_seq_length=self.max_len,
        )
        write_json(output / TRAIN_CONFIG_NAME, {"args": asdict(args), "best": record})

    def evaluate(self, dev: TextRows) -> dict:
        run, args = self.run, self.args
        encoder = Encoder(run.state.model, self.tokenizer, device=str(run.ctx.device), precision=run.precision)
        encoder.defaults = EncodeDefaults((-1,), self.pooling, args.normalize, self.max_len)
        metrics = sts_metrics(encoder, dev, batch_size=args.eval_batch_size)
        return {"dev_spearman": metrics["spearman"], "dev_pearson": metrics["pearson"]}

    def on_stop(self) -> str:
        self.run.save_if_no_best(self.save)
        return f"; {self.args.output} holds the {'best dev' if self.run.best is not None else 'current'} model"

    def finish(self, n: int, global_batch: int) -> dict[str, Any]:
        """The last model when there is no dev set, train_log.json, the checkpoints removed: the summary."""
        run = self.run
        run.save_if_no_best(self.save)
        summary = {**run.totals(), "train_rows": n, "global_batch": global_batch}
        if run.best is not None:
            summary.update({k: v for k, v in run.best.items() if k.startswith("dev_")}, best_step=run.best["step"])
        run.finish(asdict(self.args), summary=summary)
        return summary
