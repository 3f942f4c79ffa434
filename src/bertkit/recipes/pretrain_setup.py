"""Pre-training's setup: the run directory (refusing to overwrite another run, clearing one with --overwrite),
the vocabulary and shards, the model, and the data feed (the ramps' stages and the position in them). The loop is
in :mod:`bertkit.recipes.pretrain`."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import RunError
from bertkit.recipes.pretrain_config import PretrainError, parse_mask_mix  # noqa: F401 (public here too)
from bertkit.training.log import say

if TYPE_CHECKING:
    from bertkit.recipes.pretrain_config import PretrainConfig

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


def run_keys(cfg: PretrainConfig) -> tuple[str, ...]:
    """The fields that change what is computed (marked ``run``): a resumed run must match them."""
    return tuple(f.name for f in dataclasses.fields(cfg) if f.metadata.get("run"))


def read_record(path: Path) -> dict[str, Any]:
    """A run.json; a torn or foreign one is an error naming it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record["config"], dict):
            raise TypeError("not an object with a 'config'")
        return record
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise PretrainError(
            f"{path}: not a readable run record ({type(e).__name__}: {e}); start the run again with "
            "--overwrite, or choose another --output"
        ) from None


def clear_run(out: Path, keep: tuple[str, ...] = ()) -> None:
    for name in RUN_FILES:
        if name in keep:
            continue
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def remove_stale(out: Path) -> None:
    """Temp files that killed processes left in the run's directories (ours and safetensors')."""
    from bertkit.training.rundir import RunDir

    RunDir(out).remove_stale("data", "data/shards")


def prepare_output(cfg: PretrainConfig) -> PretrainConfig:
    """Refuse to silently overwrite a different run; with --overwrite, clear what a run writes. With --resume and no
    run.json yet (killed while preparing), start afresh: returns ``cfg`` with ``resume`` off then."""
    out = Path(cfg.output)
    record_path, record = out / "run.json", cfg.run_record()
    if out.exists() and not out.is_dir():
        raise PretrainError(f"{out} exists and is not a directory; choose another --output")
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")} if out.is_dir() else set()
    if cfg.resume and not record_path.is_file():
        if names - set(RUN_FILES):
            raise PretrainError(f"--resume: {out} holds no pre-training run (no run.json); drop --resume to start one")
        # a run killed before it began training: nothing to resume, start it afresh; an interrupted preparation
        # of its shards (data/) resumes, or starts afresh if its files or settings changed (data/pretraining/prepare.py)
        clear_run(out, keep=("data",))
        remove_stale(out)
        return dataclasses.replace(cfg, resume=False)
    if cfg.resume:
        old = read_record(record_path)["config"]
        diff = [k for k in run_keys(cfg) if k in old and old[k] != record[k]]
        if diff:
            raise PretrainError(
                f"--resume: these settings differ from the run in {out}: "
                + ", ".join(f"{k} (was {old[k]!r}, now {record[k]!r})" for k in diff)
                + "; use the run's settings, or start a new run with another --output"
            )
        remove_stale(out)
        return cfg
    if names and not cfg.overwrite:
        if record_path.is_file():
            old = read_record(record_path)["config"]
            diff = [k for k in run_keys(cfg) if old.get(k) != record[k]]
            what = "a run with the same settings" if not diff else f"a different run (differs in {', '.join(diff[:6])})"
            raise PretrainError(
                f"{out} already holds {what}. Pass --resume to continue it, --overwrite to replace "
                "it, or choose another --output"
            )
        raise PretrainError(
            f"{out} exists and is not empty (and is not a bertkit pre-training run); choose another "
            "--output, or pass --overwrite to write into it"
        )
    if names:
        clear_run(out)
    return cfg


def tokenizer_and_shards(cfg: PretrainConfig, ctx):
    """The vocabulary (trained on the sentence-split corpus unless given) and the tokenized shards, built by rank 0."""
    from bertkit.data.pretraining.corpus import expand_corpus, write_sentences
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.tokenization import BertTokenizer, train_vocab
    from bertkit.training.once import check_same_shards, once

    out, progress = Path(cfg.output), not cfg.quiet and sys.stderr.isatty()
    data_dir, sentences = out / "data", out / "data" / "sentences.txt"

    def prepare() -> None:  # once per run (--prepare-on global) or per node (node); the other ranks wait
        data_dir.mkdir(parents=True, exist_ok=True)
        have_vocab = (out / "vocab.txt").is_file() and cfg.resume
        corpus, fmt = [str(p) for p in expand_corpus(cfg.corpus, cfg.follow_symlinks)], cfg.corpus_format
        if not have_vocab and cfg.vocab is None:
            say_run(cfg, ctx, f"reading {len(corpus)} corpus file(s) and splitting sentences ...")
            n_docs = write_sentences(corpus, sentences, fmt, cfg.workers, cfg.encoding, progress)
            say_run(cfg, ctx, f"training a {cfg.vocab_size}-token WordPiece vocabulary on {n_docs} document(s) ...")
            train_vocab(
                [sentences],
                vocab_size=cfg.vocab_size,
                lowercase=True if cfg.lowercase is None else cfg.lowercase,
                show_progress=progress,
            ).save_pretrained(out)
        elif not have_vocab:
            BertTokenizer.from_pretrained(cfg.vocab, lowercase=cfg.lowercase).save_pretrained(out)
        if cfg.vocab is None and sentences.is_file():  # written above, or by the run resumed
            corpus, fmt = [str(sentences)], "google"
        prepare_corpus(
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

    from bertkit.data.pretraining.instances import VocabInfo, token_counts, unigram_log_probs

    v = VocabInfo.from_tokenizer(tokenizer)
    bias = unigram_log_probs(token_counts(shard_dir, vocab_size), exclude=(v.cls_id, v.sep_id, v.mask_id, v.pad_id))
    return torch.from_numpy(bias)


def build_model(cfg: PretrainConfig, tokenizer, shard_dir: Path, max_len: int, device):
    """A fresh BertForPreTraining of ``model_size`` (MLM output bias from the corpus's unigram frequencies with
    ``output_bias=unigram``), or the ``init_from`` model; dropout set to ``cfg.dropout`` for training."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.modeling import BertForPreTraining

    torch.manual_seed(cfg.seed)
    if cfg.init_from:  # continued pre-training (e.g. on a domain's text): the model's config and weights
        config, model = load_init_from(cfg, BertConfig, BertForPreTraining, tokenizer, max_len, PretrainError)
    else:
        config = BertConfig.from_preset(
            cfg.model_size, vocab_size=len(tokenizer), max_position_embeddings=max(512, max_len), **cfg.config_overrides
        )
        model = BertForPreTraining(config)
        if cfg.output_bias == "unigram":  # the unigram plateau becomes where training starts, not where it stalls
            with torch.no_grad():
                model.cls.predictions.bias.copy_(unigram_bias(shard_dir, config.vocab_size, tokenizer))
    if cfg.position_init == "sinusoidal" and not cfg.init_from:
        with torch.no_grad():
            table = model.bert.embeddings.position_embeddings.weight
            table.copy_(sinusoids(*table.shape) * config.initializer_range / 0.7071)  # std = initializer_range
    if cfg.dropout is not None:
        saved = (config.hidden_dropout_prob, config.attention_probs_dropout_prob)
        model.set_dropout(cfg.dropout)
        model.config.hidden_dropout_prob, model.config.attention_probs_dropout_prob = saved  # for config.json
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


class Feed:
    """The run's batches: one PretrainingData per stage of the ramps (built when reached) and the position in it,
    (stage, epoch, index). Entering a stage keeps the position: the same instance with the same sequence length,
    the same fraction of the epoch otherwise."""

    def __init__(self, cfg: PretrainConfig, shard_dir: Path, vocab, ctx):
        from bertkit.training.ramps import parse_ramp

        self.cfg, self.shard_dir, self.vocab, self.ctx = cfg, shard_dir, vocab, ctx
        self.seq_ramp, self.batch_ramp = (
            parse_ramp(cfg.seq_ramp, "--seq-ramp"),
            parse_ramp(cfg.batch_ramp, "--batch-ramp"),
        )
        self.phase2 = (cfg.phase2_seq_len, cfg.phase2_batch_size or cfg.batch_size) if cfg.two_phase else None
        self.max_len = max([cfg.seq_len, *(v for v, _ in self.seq_ramp), *(self.phase2 or (0,))[:1]])
        self.stage, self.epoch, self.index = 0, 0, 0
        self.stages, self.data = [], None

    def plan(self, total_steps: int):
        from bertkit.training.ramps import plan_stages

        c = self.cfg
        return plan_stages(total_steps, c.seq_len, c.batch_size, self.seq_ramp, self.batch_ramp, self.phase2)

    def make(self, seq_len: int, batch_size: int, split: str = "train"):
        from bertkit.data.pretraining.instances import DataOptions, PretrainingData

        c = self.cfg
        opts = DataOptions(
            max_seq_length=seq_len,
            batch_size=batch_size,
            nsp=c.nsp,
            mask_prob=c.mask_prob,
            max_predictions=c.max_predictions,
            whole_word=c.whole_word_mask,
            short_seq_prob=c.short_seq_prob,
            masking=c.masking,
            dupe_factor=c.dupe_factor,
            seed=c.seed,
            mask_mix=parse_mask_mix(c.mask_mix or "80/10/10"),
        )
        rank, world = (0, 1) if split == "eval" else (self.ctx.rank, self.ctx.world_size)
        data = PretrainingData(self.shard_dir, self.vocab, opts, rank, world, split=split)
        if split == "train" and data.num_batches(0) == 0:
            raise PretrainError(
                f"the corpus gives fewer than {batch_size * world} instances of {seq_len} tokens: "
                "add text or lower --batch-size"
            )
        return data

    def start(self, total_steps: int, position: dict | None) -> None:
        """Plan the stages; place the feed at a checkpoint's position (or at the start)."""
        self.stages = self.plan(total_steps)
        if position:
            self.stage, self.epoch, self.index = (int(position[k]) for k in ("phase", "epoch", "index"))
        s = self.stages[min(self.stage, len(self.stages) - 1)]
        self.data = self.make(s.seq_len, s.batch_size)

    def advance(self, step: int, total_steps: int) -> str | None:
        """Enter the stage that holds ``step`` of ``total_steps`` (stages only move forward); a message if entered."""
        from bertkit.training.ramps import stage_at

        self.stages = self.plan(total_steps)
        target = stage_at(self.stages, step)
        if target <= self.stage:
            return None
        new, old = self.stages[target], self.data.options
        old_n = max(1, self.data.num_batches(self.epoch))
        self.data = self.make(new.seq_len, new.batch_size)
        if old.max_seq_length == new.seq_len:
            self.index = -(-self.index * old.batch_size // new.batch_size)
        else:
            self.index = -(-self.index * self.data.num_batches(self.epoch) // old_n)
        self.stage = target
        return f"step {step}: sequence length {new.seq_len}, batch size {new.batch_size}"

    def next(self, loader) -> dict:
        if self.index >= self.data.num_batches(self.epoch):
            self.epoch, self.index = self.epoch + 1, 0
        batch = loader.get(self.data, self.epoch, self.index)
        self.index += 1
        return batch

    def position(self) -> dict[str, int]:
        return {"phase": self.stage, "epoch": self.epoch, "index": self.index}

    def step_costs(self, timer) -> dict[tuple[int, int], float]:
        """Seconds per step of every (sequence length, batch size) the run will use, timed by ``timer(data)``."""
        return {p: timer(self.make(*p)) for p in sorted({(s.seq_len, s.batch_size) for s in self.plan(10**6)})}

    def cost(self, per_step: dict[tuple[int, int], float]):
        """cost(first, total): predicted seconds of steps [first, total) of a run of ``total`` steps."""

        def cost(first: int, total: int) -> float:
            stages = self.plan(total)
            ends = [s.start for s in stages[1:]] + [total]
            return sum(
                max(0, end - max(first, s.start)) * per_step[(s.seq_len, s.batch_size)] for s, end in zip(stages, ends)
            )

        return cost


@contextlib.contextmanager
def os_errors(out: Path):
    """An unwritable output or a full disk as one line, not a traceback."""
    try:
        yield
    except OSError as e:
        where = e.filename or out
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise RunError(
                f"{where}: disk full ({e.strerror}); free space, then run again with --resume (the "
                "previous checkpoint is intact)"
            ) from None
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise PretrainError(f"{where}: cannot write ({e.strerror}); choose a writable --output") from None
        raise
