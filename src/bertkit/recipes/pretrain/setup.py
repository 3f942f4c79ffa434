"""Pre-training's setup: the run and its output directory (refusing to overwrite another run, clearing one with
--overwrite: ``training.rundir``'s one protocol), the steps and the train state, the vocabulary and shards, the
model, and the data feed (what a batch holds; ``data.pretraining.feed`` keeps the ramps' stages and the position in
them). The loop is in :mod:`bertkit.recipes.pretrain.recipe`."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit import models
from bertkit.config import ConfigError
from bertkit.data.pretraining import prepare as preparation  # a module: tests replace its prepare_corpus
from bertkit.data.pretraining.cooccurrence import ppmi_embeddings
from bertkit.data.pretraining.corpus import expand_corpus, write_sentences
from bertkit.data.pretraining.echoes import ECHO_KEEP, echo_stage
from bertkit.data.pretraining.feed import Feed
from bertkit.data.pretraining.instances import DataOptions, VocabInfo, parse_mask_mix, token_counts, unigram_log_probs
from bertkit.data.pretraining.masking import parse_mask_prob
from bertkit.data.pretraining.ramps import parse_ramp
from bertkit.errors import InputError, allocation_failure
from bertkit.precision import grad_scaler, resolve_precision
from bertkit.recipes.pretrain import objectives
from bertkit.recipes.pretrain.config import RUN_KEYS, PretrainError  # noqa: F401 (public here too)
from bertkit.recipes.pretrain.once import check_same_shards, once
from bertkit.recipes.pretrain.tables import has_nsp_head
from bertkit.tokenization import BertTokenizer, train_vocab
from bertkit.training.interrupt import Interrupted
from bertkit.training.log import say
from bertkit.training.optim import build_optimizer, lr_schedule
from bertkit.training.run import Run
from bertkit.training.rundir import RUN_JSON, RunDir
from bertkit.training.state import TrainState, seed_dropout

if TYPE_CHECKING:
    from bertkit.recipes.pretrain.config import PretrainConfig

# what a run writes into OUTPUT (and --overwrite removes); a directory holding only these is a run's beginnings
RUN_FILES = (
    "checkpoints",
    "metrics.jsonl",
    "tensorboard",
    "run.json",
    "model.safetensors",
    "config.json",
    "data",
    "vocab.txt",
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "generator",  # --objective electra
    "rtd_head.safetensors",
)


def say_run(cfg: PretrainConfig, ctx, message: str) -> None:
    """A run's message on the one channel (``bertkit.run``), rank 0 only, unless --quiet."""
    say(message, ctx, cfg.quiet)


def remove_stale(out: Path) -> None:
    """Temp files that killed processes left in the run's directories (ours and safetensors')."""
    RunDir(out).remove_stale("data", "data/shards")


def open_run(cfg: PretrainConfig, ctx) -> Run:
    """The run's books (``training.Run``: ``--max-time``'s budget, the checkpoint cadence, run.json) and its
    directory opened by the one resume protocol: a different run is not silently overwritten, nor a finished one
    resumed; --overwrite clears what a run writes; --resume before a run.json (killed while preparing) starts
    afresh, keeping its prepared data."""
    record, precision = cfg.run_record(), resolve_precision(cfg.precision, ctx.device)
    run = Run(
        cfg.output,
        ctx,
        {"config": {k: record[k] for k in RUN_KEYS}},  # what a resumed run must share
        record={"config": record, "precision": precision},
        quiet=cfg.quiet,
        precision=precision,
        keep=cfg.keep_checkpoints,
        save_every=cfg.save_every,
        max_time=cfg.max_time,
        desc="pre-training",
    )
    run.open(cfg.resume, cfg.overwrite, RUN_FILES, prepared=("data",))
    if cfg.resume:  # a killed preparation's temp files in the data kept (the run directory's went in run.open)
        run.dir.remove_stale("data", "data/shards")
    return run


def schedule(cfg: PretrainConfig, run: Run, model, feed: Feed):
    """(TrainState, total steps, lr schedule over n steps): the optimizer, the steps (the resumed run's, fitted to
    --max-time by timing a few steps of each shape on a throwaway copy of the model, or --max-steps), the schedule
    over them, and the feed placed at the data position of the checkpoint resumed from (``run.begin`` restores the
    state from it)."""
    ctx, saved = run.ctx, run.opened.checkpoint
    optimizer = build_optimizer(model, lr=cfg.lr, weight_decay=cfg.weight_decay, optimizer=cfg.optimizer)
    if saved is not None:
        say_run(cfg, ctx, f"resuming from {run.opened.path} (step {saved['step']} of {saved['total_steps']})")
        total_steps = int(saved["total_steps"])
    elif run.opened.resumed:  # killed after run.json, before the first checkpoint: the steps it scheduled
        total_steps = run.recorded_steps() or int(cfg.max_steps)
    elif cfg.max_time:
        make = lambda m: build_optimizer(m, lr=cfg.lr, weight_decay=cfg.weight_decay, optimizer=cfg.optimizer)  # noqa: E731
        total_steps = run.fit(feed, model, make, grad_accum=cfg.grad_accum, clip=cfg.clip, max_steps=cfg.max_steps)
    else:
        total_steps = int(cfg.max_steps)
    warmup = max(1, int(cfg.warmup_fraction * total_steps)) if cfg.warmup_steps is None else cfg.warmup_steps
    run.record["warmup_steps"] = warmup

    def reschedule(steps: int):
        return lr_schedule(optimizer, cfg.schedule, warmup, steps)

    state = TrainState(model, optimizer, reschedule(total_steps), grad_scaler(run.precision, ctx.device))
    if saved is None:
        seed_dropout(cfg.seed, ctx)  # dropout differs per rank; weights are rank 0's (DDP)
    feed.start(total_steps, (saved.get("position") or saved.get("data")) if saved else None)
    for seq_len, batch_size in dict.fromkeys((s.seq_len, s.batch_size) for s in feed.stages[feed.stage + 1 :]):
        feed.make(
            seq_len, batch_size
        )  # a later stage (a ramp's end, --two-phase's) the corpus cannot fill: refused now
    return state, total_steps, reschedule


@contextlib.contextmanager
def removed_if_refused(cfg: PretrainConfig, ctx):
    """A fresh run refused before it began training (a flag whose fault shows only on the prepared data, e.g. a
    batch larger than the corpus) leaves no half-made OUTPUT: what it wrote there goes, so that the corrected
    command runs (issue 54, item 7). A resumed run, an interrupted one and one that began training keep theirs."""
    out = Path(cfg.output)
    ours = not out.exists() or (out.is_dir() and not any(out.iterdir()))
    try:
        yield
    except Exception as e:  # any failure but a signal's stop (it saved what --resume continues from)
        if isinstance(e, Interrupted):
            raise
        if ours and not cfg.resume and ctx.is_main and out.is_dir() and not (out / RUN_JSON).is_file():
            RunDir(out).clear(RUN_FILES)
            if not any(out.iterdir()):
                out.rmdir()
        raise


def check_batches(cfg: PretrainConfig) -> None:
    """Every stage's sequences and batches as the feed will make them (the ramps', --two-phase's), checked before
    anything is written: an ``InputError`` naming the flag."""

    stages = [("--seq-len", cfg.seq_len, cfg.batch_size)]
    stages += [("--seq-ramp", n, cfg.batch_size) for n, _ in parse_ramp(cfg.seq_ramp, "--seq-ramp")]
    stages += [("--batch-ramp", cfg.seq_len, b) for b, _ in parse_ramp(cfg.batch_ramp, "--batch-ramp")]
    if cfg.two_phase:
        stages.append(("--phase2-seq-len", cfg.phase2_seq_len, cfg.phase2_batch_size or cfg.batch_size))
    for flag, seq_len, batch_size in stages:
        try:
            data_options(cfg, seq_len, batch_size)
        except ValueError as e:
            raise InputError(f"{flag}: {e}") from None


def tokenizer_and_shards(cfg: PretrainConfig, ctx, resume: bool):
    """The vocabulary (trained on the sentence-split corpus unless given) and the tokenized shards, built by rank 0."""

    out, progress = Path(cfg.output), not cfg.quiet and sys.stderr.isatty()
    data_dir, sentences = out / "data", out / "data" / "sentences.txt"

    def prepare() -> None:  # once per run (--prepare-on global) or per node (node); the other ranks wait
        data_dir.mkdir(parents=True, exist_ok=True)
        have_vocab = (out / "vocab.txt").is_file() and resume
        corpus, fmt = [str(p) for p in expand_corpus(cfg.corpus, cfg.follow_symlinks)], cfg.corpus_format
        if not have_vocab and cfg.vocab is None:
            say_run(cfg, ctx, f"reading {len(corpus)} corpus file(s) and splitting sentences ...")
            n_docs = write_sentences(corpus, sentences, fmt, cfg.workers, cfg.encoding, progress)
            texts, k = preparation.sentence_sample(sentences)  # a large corpus: every k-th sentence
            of = f"1 in {k} sentences of " if k > 1 else ""
            say_run(cfg, ctx, f"training a {cfg.vocab_size}-token WordPiece vocabulary on {of}{n_docs} document(s) ...")
            train_vocab(
                texts=texts,
                vocab_size=cfg.vocab_size,
                lowercase=True if cfg.lowercase is None else cfg.lowercase,
                show_progress=progress,
            ).save_pretrained(out)
        elif not have_vocab:
            BertTokenizer.from_pretrained(cfg.vocab, lowercase=cfg.lowercase).save_pretrained(out)
        if cfg.vocab is None and sentences.is_file():  # written above, or by the run resumed
            corpus, fmt = [str(sentences)], "google"
        preparation.prepare_corpus(
            corpus,
            data_dir / "shards",
            out / "vocab.txt",
            corpus_format=fmt,
            workers=cfg.workers,
            encoding=cfg.encoding,
            progress=progress,
            log=lambda m: say_run(cfg, ctx, m),
        )

    once(
        ctx,
        cfg.prepare_on,
        prepare,
        "preparing the corpus",
        cfg.prepare_timeout,
        lambda m: say(m, None, cfg.quiet),
        directory=data_dir,
    )
    check_same_shards(ctx, out / "vocab.txt", data_dir / "shards")
    return BertTokenizer.from_pretrained(out), data_dir / "shards"


def load_init_from(cfg, config_class, model_class, tokenizer, max_len: int, error: type[Exception]):
    """(config, model) of ``--init-from`` (continued pre-training, e.g. on a domain's text), for either
    architecture: the model's config with the run's config overrides, and its weights. A model with fewer
    embeddings or positions than the run needs is refused with ``error``."""
    config = config_class.from_pretrained(cfg.init_from)
    if cfg.config_overrides:
        config = dataclasses.replace(config, **cfg.config_overrides)
    if config.vocab_size < len(tokenizer) or config.max_position_embeddings < max_len:
        raise error(
            f"--init-from {cfg.init_from}: the model has {config.vocab_size} embeddings and "
            f"{config.max_position_embeddings} positions; the run needs {len(tokenizer)} tokens and "
            f"{max_len} positions"
        )
    return config, model_class.from_pretrained(cfg.init_from, config=config)


def unigram_bias(shard_dir: Path, vocab_size: int, tokenizer):
    """``--output-bias unigram``'s MLM decoder bias: the corpus's unigram log-probabilities (a tensor), the special
    tokens left out."""
    import torch

    v = VocabInfo.from_tokenizer(tokenizer)
    bias = unigram_log_probs(token_counts(shard_dir, vocab_size), exclude=(v.cls_id, v.sep_id, v.mask_id, v.pad_id))
    return torch.from_numpy(bias)


def init_embeddings(cfg, weight, shard_dir: Path) -> None:
    """``--embedding-init cooccurrence``: the token embedding rows (tied to the MLM decoder) start as the corpus's
    PPMI-SVD vectors at the table's own scale (``data/pretraining/cooccurrence.py``); rows of tokens the shards
    never hold keep theirs. ``normal`` (or unset) leaves the model's initialisation. For a fresh model only (an
    ``--init-from`` model keeps its own rows)."""
    if cfg.embedding_init != "cooccurrence":
        return
    import torch

    with torch.no_grad():
        table, seen = ppmi_embeddings(shard_dir, weight.shape[0], weight.shape[1], float(weight.std()), cfg.seed)
        weight[seen] = table[seen].to(weight.dtype)


def build_model(cfg: PretrainConfig, tokenizer, shard_dir: Path, max_len: int, device):
    """(model, config): a fresh pre-training model of ``--arch`` and ``--model-size`` (the registry's
    ``build_for_pretraining``: BERT's ``BertForPreTraining``, ModernBERT's ``ModernBertForMaskedLM``), its MLM
    output bias from the corpus's unigram frequencies with ``output_bias=unigram``, its embedding and position
    tables as ``--embedding-init`` / ``--position-init`` say; or the ``--init-from`` model. Dropout is set to
    ``cfg.dropout`` for training; config.json keeps the model's."""
    import torch

    arch = models.get(cfg.arch)
    if cfg.nsp and not has_nsp_head(arch) and not objectives.get(cfg.objective).adds_nsp_head:
        raise InputError(
            f"--nsp: {arch.model_type} has no next-sentence head; pre-train it with masked LM only (--no-nsp)"
        )
    if cfg.position_init == "sinusoidal" and not arch.absolute_positions:
        raise InputError(
            f"--position-init sinusoidal: {arch.model_type} has no position embeddings (its positions are rotary); "
            "leave the flag out"
        )
    torch.manual_seed(cfg.seed)
    if cfg.init_from:  # continued pre-training (e.g. on a domain's text): the model's config and weights
        model_class = arch.model_class(arch.pretraining_role)
        config, model = load_init_from(cfg, arch.config_class(), model_class, tokenizer, max_len, PretrainError)
    else:
        try:
            model = arch.build_for_pretraining(cfg.model_size, tokenizer, max_len, **cfg.config_overrides)
        except ConfigError as e:  # an override the vocabulary refutes (vocab_size below its tokens)
            raise InputError(f"--config-override: {e}") from None
        except (MemoryError, RuntimeError) as e:
            if (asked := allocation_failure(e)) is None:
                raise
            sizes = "".join(f" --config-override {k}={v}" for k, v in cfg.config_overrides.items())
            raise InputError(
                f"--model-size {cfg.model_size}{sizes}: the model does not fit in memory ({asked})"
            ) from None
        config = model.config
        bias = arch.mlm_bias(model)
        if cfg.output_bias == "unigram" and bias is not None:  # the unigram plateau is where training starts
            with torch.no_grad():
                bias.copy_(unigram_bias(shard_dir, config.vocab_size, tokenizer))
        init_embeddings(cfg, arch.word_embeddings(model), shard_dir)
        if cfg.position_init == "sinusoidal":
            with torch.no_grad():
                table = arch.encoder_of(model).get_parameter("embeddings.position_embeddings.weight")
                table.copy_(sinusoids(*table.shape) * config.initializer_range / 0.7071)  # std = initializer_range
    if cfg.dropout is not None:
        saved = {k: v for k, v in dataclasses.asdict(config).items() if "dropout" in k}
        model.set_dropout(cfg.dropout)
        for key, value in saved.items():  # for config.json: the model's own
            setattr(model.config, key, value)
    return model.to(device).train(), config


def sinusoids(positions: int, width: int):
    """The Transformer's position encodings [positions, width]: sin and cos of position / 10000^(2i / width)."""
    import torch

    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : width // 2]
    return table


def data_options(cfg: PretrainConfig, seq_len: int, batch_size: int):
    """What a batch of ``seq_len`` tokens and ``batch_size`` sequences holds: the run's masking, NSP and seed. A
    ``--mask-prob START:END`` run's data masks at START unless the feed passes a batch its rate
    (``data.pretraining.feed``); its ``max_predictions`` default follows the larger end. ``--echo-stage last``: echoes
    only at the final ``seq_len``."""

    start, end = parse_mask_prob(cfg.mask_prob)
    return DataOptions(
        max_seq_length=seq_len,
        batch_size=batch_size,
        nsp=cfg.nsp,
        mask_prob=start,
        max_predictions=cfg.max_predictions or math.ceil(seq_len * max(start, end)),
        mask_strategy=cfg.mask_strategy,
        short_seq_prob=cfg.short_seq_prob,
        masking=cfg.masking,
        dupe_factor=cfg.dupe_factor,
        seed=cfg.seed,
        mask_mix=parse_mask_mix(cfg.mask_mix or "80/10/10"),
        segments=cfg.segments,
        echo_share=(cfg.echo_share or 0.0) if echo_stage(cfg.echo_stage, seq_len >= (cfg.seq_len or 128)) else 0.0,
        echo_keep=cfg.echo_keep or ECHO_KEEP,
        echo_mask=cfg.echo_mask,
    )


def make_feed(cfg: PretrainConfig, shard_dir: Path, vocab, ctx) -> Feed:
    """The run's batches: instances of the shards masked as ``cfg`` says, over its ramps' stages."""
    from functools import partial

    return Feed(cfg, shard_dir, vocab, ctx, partial(data_options, cfg))
