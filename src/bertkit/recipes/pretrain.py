"""Pre-training recipe: MLM + NSP from raw text, one explicit loop.

    corpus -> (vocabulary) -> memmap shards -> BertForPreTraining -> OUTPUT/ (model dir + checkpoints + metrics)

What the loop does, in order, per optimizer step: ``grad_accum`` micro-batches under autocast (DDP syncs gradients
only on the last), gradient clipping at ``clip``, AdamW step, linear warmup/decay step. Every ``log_every`` steps a
line goes to ``metrics.jsonl``; every ``eval_every`` steps the held-out MLM/NSP accuracy; every ``save_every`` steps
(and at the end) an atomic checkpoint. A run resumes from its latest checkpoint with ``resume=True`` and then ends
with the same weights as an uninterrupted run: the data position is (phase, epoch, index) and batches are pure
functions of the seed, and every RNG state is restored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import RunError

# settings that change what is computed: a resumed run must match them (others, like save_every, may change)
RUN_KEYS = ("corpus", "corpus_format", "encoding", "vocab", "vocab_size", "lowercase", "model_size", "seq_len",
            "batch_size", "grad_accum", "lr", "warmup_steps", "weight_decay", "clip", "max_steps", "seed", "nsp",
            "mask_prob", "max_predictions", "whole_word_mask", "masking", "dupe_factor", "short_seq_prob", "two_phase",
            "phase2_seq_len", "phase2_batch_size", "precision", "config_overrides", "init_from")


class PretrainError(RunError):
    """A run that cannot start or continue; the message says what to do."""


@dataclass
class PretrainConfig:
    corpus: list[str]
    output: str
    vocab: str | None = None
    vocab_size: int = 30522
    lowercase: bool | None = None  # None: uncased for a trained vocabulary, from the vocabulary's config otherwise
    corpus_format: str = "auto"
    encoding: str = "auto"  # "utf-8": a line that is not UTF-8 is an error (auto: read it as Windows-1252)
    model_size: str = "bert-mini"
    init_from: str | None = None  # continue pre-training this model directory (its config, weights, vocabulary)
    config_overrides: dict[str, Any] = field(default_factory=dict)
    seq_len: int = 128
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-4
    warmup_steps: int | None = None  # None: 5% of the steps
    weight_decay: float = 0.01
    clip: float = 1.0
    max_steps: int | None = None
    max_time: float | None = None  # seconds
    save_every: int = 1000
    keep_checkpoints: int = 2
    eval_every: int | None = None  # None: about 10 evaluations per run
    eval_batches: int = 10
    log_every: int = 10
    resume: bool = False
    overwrite: bool = False
    seed: int = 0
    nsp: bool = True
    mask_prob: float = 0.15
    max_predictions: int | None = None
    whole_word_mask: bool = False
    masking: str = "dynamic"
    dupe_factor: int = 5
    short_seq_prob: float = 0.1
    two_phase: bool = False  # the paper's schedule: seq_len for 90% of steps, then phase2_seq_len
    phase2_seq_len: int = 512
    phase2_batch_size: int | None = None
    precision: str = "auto"
    device: str | None = None
    workers: int | None = None
    threads: int | None = None  # torch intra-op threads (default: torch's choice)
    quiet: bool = False

    def __post_init__(self) -> None:
        if not self.corpus:
            raise PretrainError("give at least one --corpus file")
        if self.max_steps is None and self.max_time is None:
            raise PretrainError("give --max-steps or --max-time (or both)")
        for name in ("seq_len", "batch_size", "grad_accum", "save_every", "log_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise PretrainError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise PretrainError(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.max_time is not None and self.max_time <= 0:
            raise PretrainError(f"--max-time must be positive, got {self.max_time}")
        if not 0 < self.mask_prob < 1:
            raise PretrainError(f"--mask-prob must be in (0, 1), got {self.mask_prob}")
        if self.lr <= 0:
            raise PretrainError(f"--lr must be positive, got {self.lr}")
        if self.init_from is not None:
            init = Path(self.init_from)
            if not (init / "config.json").is_file() and not (init / "bert_config.json").is_file():
                raise PretrainError(f"--init-from {init}: not a model directory (no config.json)")
            if self.vocab is None:
                if not (init / "vocab.txt").is_file():
                    raise PretrainError(f"--init-from {init}: no vocab.txt there; pass --vocab")
                self.vocab = str(init)  # the model's own vocabulary (and tokenizer config)

    def run_record(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["corpus"] = [str(Path(p).resolve()) for p in self.corpus]
        for key in ("vocab", "init_from"):
            if d[key]:
                d[key] = str(Path(d[key]).resolve())
        return {k: d[k] for k in RUN_KEYS}


# --------------------------------------------------------------------------------------------- small helpers


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h``, ``1h30m`` -> seconds."""
    import re

    text = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", text)
    if not parts or "".join(f"{a}{b}" for a, b in parts) != text.replace(" ", ""):
        raise ValueError(f"cannot read duration {text!r}; write e.g. 90s, 10m, 1.5h or 1h30m")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(a) * scale[b] for a, b in parts)


def _say(cfg: PretrainConfig, ctx, message: str) -> None:
    if ctx.is_main and not cfg.quiet:
        print(message, flush=True)


def _prepare_output(cfg: PretrainConfig, ctx) -> None:
    """Refuse to silently overwrite a different run; with --overwrite, clear what a run writes."""
    out = Path(cfg.output)
    record_path = out / "run.json"
    record = cfg.run_record()
    if out.exists() and not out.is_dir():
        raise PretrainError(f"{out} exists and is not a directory; choose another --output")
    if cfg.resume:
        if not record_path.is_file():
            raise PretrainError(f"--resume: {out} holds no pre-training run (no run.json); drop --resume to start one")
        old = json.loads(record_path.read_text(encoding="utf-8"))["config"]
        diff = [k for k in RUN_KEYS if k in old and old[k] != record[k]]
        if diff:
            raise PretrainError(f"--resume: these settings differ from the run in {out}: "
                                + ", ".join(f"{k} (was {old[k]!r}, now {record[k]!r})" for k in diff)
                                + "; use the run's settings, or start a new run with another --output")
        return
    if out.is_dir() and any(out.iterdir()):
        if not cfg.overwrite:
            if record_path.is_file():
                old = json.loads(record_path.read_text(encoding="utf-8"))["config"]
                diff = [k for k in RUN_KEYS if old.get(k) != record[k]]
                what = ("a run with the same settings" if not diff else
                        "a different run (differs in " + ", ".join(diff[:6]) + ")")
                raise PretrainError(f"{out} already holds {what}. Pass --resume to continue it, --overwrite to "
                                    "replace it, or choose another --output")
            raise PretrainError(f"{out} exists and is not empty (and is not a bertkit pre-training run); choose "
                                "another --output, or pass --overwrite to write into it")
        if ctx.is_main:
            for name in ("checkpoints", "metrics.jsonl", "run.json", "model.safetensors", "config.json",
                         "data/sentences.txt"):
                p = out / name
                if p.is_dir():
                    shutil.rmtree(p)
                elif p.exists():
                    p.unlink()


def _tokenizer_and_shards(cfg: PretrainConfig, ctx):
    from bertkit.data.corpus import iter_documents
    from bertkit.data.pretraining import prepare_corpus
    from bertkit.tokenization import BertTokenizer, train_vocab
    from bertkit.training.distributed import barrier

    out = Path(cfg.output)
    data_dir = out / "data"
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        data_dir.mkdir(exist_ok=True)
        have = (out / "vocab.txt").is_file() and cfg.resume
        corpus, fmt = [str(p) for p in cfg.corpus], cfg.corpus_format
        if not have and cfg.vocab is None:
            # sentence-split once into Google's format: the vocabulary trainer and the tokenizer both read it
            sentences = data_dir / "sentences.txt"
            _say(cfg, ctx, f"reading {len(corpus)} corpus file(s) and splitting sentences ...")
            tmp = data_dir / ".sentences.txt.tmp"
            n_docs = 0
            with open(tmp, "w", encoding="utf-8") as f:
                for doc in iter_documents(corpus, fmt, workers=cfg.workers, encoding=cfg.encoding):
                    f.write("\n".join(doc) + "\n\n")
                    n_docs += 1
            os.replace(tmp, sentences)
            lowercase = True if cfg.lowercase is None else cfg.lowercase
            _say(cfg, ctx, f"training a {cfg.vocab_size}-token WordPiece vocabulary on {n_docs} document(s) ...")
            tok = train_vocab([sentences], vocab_size=cfg.vocab_size, lowercase=lowercase,
                              show_progress=not cfg.quiet and sys.stderr.isatty())
            tok.save_pretrained(out)
        elif not have:
            tok = BertTokenizer.from_pretrained(cfg.vocab, lowercase=cfg.lowercase)
            tok.save_pretrained(out)
        if cfg.vocab is None and (data_dir / "sentences.txt").is_file():  # written above, or by the run resumed
            corpus, fmt = [str(data_dir / "sentences.txt")], "google"
        prepare_corpus(corpus, data_dir / "shards", out / "vocab.txt", corpus_format=fmt, workers=cfg.workers,
                       encoding=cfg.encoding,
                       progress=not cfg.quiet and sys.stderr.isatty(), log=lambda m: _say(cfg, ctx, m))
    barrier(ctx)
    return BertTokenizer.from_pretrained(out), data_dir / "shards"


@contextlib.contextmanager
def _rng_preserved():
    import random

    import numpy as np
    import torch

    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])


def _to_device(batch: dict, device) -> dict:
    import torch

    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}


class _Prefetcher:
    """Builds the next batch in a background thread while the model trains on this one. Batches are pure functions
    of (epoch, index), so prefetching changes nothing but the wall clock."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(1, thread_name_prefix="bertkit-data")
        self.pending = None  # (data, epoch, index, future)

    def get(self, data, epoch: int, index: int) -> dict:
        p = self.pending
        batch = p[3].result() if p and p[0] is data and p[1:3] == (epoch, index) else data.batch(epoch, index)
        nxt = (epoch, index + 1) if index + 1 < data.num_batches(epoch) else (epoch + 1, 0)
        self.pending = (data, *nxt, self.pool.submit(data.batch, *nxt))
        return batch

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


_PACE_FROM = 3  # --max-time re-fit: steps left out of the pace (the first ones run cold)


def refit_steps(total_steps: int, eval_every: int) -> tuple[int, int] | None:
    """(step the pace is timed from, step the --max-time schedule is re-fitted at), or None for very short runs.
    The re-fit comes just after the first held-out evaluation, so the measured pace carries its share of
    evaluation time (and at most a quarter of the way in)."""
    least = _PACE_FROM + 10
    at = min(max(least, eval_every + 1), max(least, total_steps // 4), total_steps - 1)
    return (_PACE_FROM, at) if at > _PACE_FROM else None


def _time_steps(model, make_optimizer, batches: list[dict], precision: str, device, grad_accum: int) -> float:
    """Median seconds per optimizer step of a throwaway copy of the model, the first (warm-up) step left out; the
    model, optimizer and RNG states are untouched."""
    import copy

    from bertkit.precision import autocast

    probe = copy.deepcopy(model)
    opt = make_optimizer(probe)
    times = []
    with _rng_preserved():
        for i, batch in enumerate(batches):
            t0 = time.perf_counter()
            for _ in range(grad_accum):
                with autocast(precision, device):
                    loss = probe(**batch).loss / grad_accum
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i:
                times.append(time.perf_counter() - t0)
    del probe, opt
    times.sort()
    return times[len(times) // 2]


def _evaluate(model, batches: list[dict], precision: str, device) -> dict[str, float]:
    """Held-out MLM accuracy (masked positions), NSP accuracy and loss, on fixed batches."""
    import torch

    from bertkit.precision import autocast

    model.eval()
    mlm_ok = mlm_n = nsp_ok = nsp_n = 0
    loss_sum = 0.0
    with torch.no_grad():
        for b in batches:
            batch = _to_device(b, device)
            with autocast(precision, device):
                out = model(**batch)
            loss_sum += float(out.loss)
            mlm_ok += int((out.masked_logits.max(-1).indices == out.masked_labels).sum())  # = argmax, 3x faster on CPU
            mlm_n += int(out.masked_labels.numel())
            if "next_sentence_label" in batch:
                nsp_ok += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
                nsp_n += len(batch["next_sentence_label"])
    model.train()
    result = {"eval_loss": loss_sum / max(1, len(batches)), "eval_mlm_acc": mlm_ok / max(1, mlm_n)}
    if nsp_n:
        result["eval_nsp_acc"] = nsp_ok / nsp_n
    return result


# --------------------------------------------------------------------------------------------- the recipe


def pretrain(cfg: PretrainConfig) -> Path:
    """Run (or resume) a pre-training run; returns OUTPUT, which ends as a loadable model directory.

    Raises PretrainError for a run that cannot start, and FloatingPointError when the loss stops being finite."""
    import torch

    from bertkit.config import BertConfig
    from bertkit.data.pretraining import DataOptions, PretrainingData, VocabInfo
    from bertkit.modeling import BertForPreTraining
    from bertkit.precision import autocast, resolve_precision
    from bertkit.training import distributed as D
    from bertkit.training.checkpointing import (
        checkpoint_dir,
        latest_checkpoint,
        load_checkpoint,
        save_checkpoint,
        set_rng_state,
    )
    from bertkit.training.optim import build_optimizer, linear_schedule

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ctx = D.setup(cfg.device)
    out = Path(cfg.output)
    try:
        # ---- output dir, vocabulary, shards
        error = None
        if ctx.is_main:
            try:
                _prepare_output(cfg, ctx)
            except PretrainError as e:
                error = str(e)
        error = D.broadcast_object(ctx, error)
        if error:
            raise PretrainError(error)
        tokenizer, shard_dir = _tokenizer_and_shards(cfg, ctx)
        vocab = VocabInfo.from_tokenizer(tokenizer)
        precision = resolve_precision(cfg.precision, ctx.device)

        # ---- data: one PretrainingData per phase (the paper's 128 -> 512 schedule is two phases)
        phases = [(cfg.seq_len, cfg.batch_size)]
        if cfg.two_phase:
            phases.append((cfg.phase2_seq_len, cfg.phase2_batch_size or cfg.batch_size))

        def make_data(phase: int, split: str = "train") -> PretrainingData:
            seq, bs = phases[phase]
            opts = DataOptions(max_seq_length=seq, batch_size=bs, nsp=cfg.nsp, mask_prob=cfg.mask_prob,
                               max_predictions=cfg.max_predictions, whole_word=cfg.whole_word_mask,
                               short_seq_prob=cfg.short_seq_prob, masking=cfg.masking, dupe_factor=cfg.dupe_factor,
                               seed=cfg.seed)
            if split == "eval":
                return PretrainingData(shard_dir, vocab, opts, 0, 1, split="eval")
            return PretrainingData(shard_dir, vocab, opts, ctx.rank, ctx.world_size)

        data = make_data(0)
        if data.num_batches(0) == 0:
            raise PretrainError(f"the corpus gives fewer than {cfg.batch_size * ctx.world_size} instances of "
                                f"{cfg.seq_len} tokens: add text or lower --batch-size")
        eval_data = make_data(0, "eval")
        eval_batches = eval_data.eval_batches(cfg.eval_batches) if eval_data.shards else []

        # ---- model, optimizer, schedule
        max_len = max(s for s, _ in phases)
        torch.manual_seed(cfg.seed)
        if cfg.init_from:  # continued pre-training (e.g. on a domain's text): the model's config and weights
            config = BertConfig.from_pretrained(cfg.init_from)
            if cfg.config_overrides:
                config = dataclasses.replace(config, **cfg.config_overrides)
            if config.vocab_size < len(tokenizer) or config.max_position_embeddings < max_len:
                raise PretrainError(f"--init-from {cfg.init_from}: the model has {config.vocab_size} embeddings and "
                                    f"{config.max_position_embeddings} positions; the run needs {len(tokenizer)} "
                                    f"tokens and {max_len} positions")
            model = BertForPreTraining.from_pretrained(cfg.init_from, config=config).to(ctx.device)
        else:
            config = BertConfig.from_preset(cfg.model_size, vocab_size=len(tokenizer),
                                            max_position_embeddings=max(512, max_len), **cfg.config_overrides)
            model = BertForPreTraining(config).to(ctx.device)
        model.train()

        def make_optimizer(m):
            return build_optimizer(m, lr=cfg.lr, weight_decay=cfg.weight_decay)

        ckpt_path = latest_checkpoint(checkpoint_dir(out)) if cfg.resume else None
        refit: tuple[int, int] | None = None  # (step the pace is timed from, step the schedule is re-fitted at)
        state = load_checkpoint(ckpt_path) if ckpt_path else None
        if state is not None:
            total_steps = int(state["total_steps"])
        elif cfg.resume and (out / "run.json").is_file():
            total_steps = int(json.loads((out / "run.json").read_text(encoding="utf-8"))["total_steps"])
        elif cfg.max_time is not None:
            # fit the schedule to the wall-clock budget: time a few steps of a throwaway copy, per phase
            probes = []
            for p in range(len(phases)):
                d = data if p == 0 else make_data(p)
                probes.append(_time_steps(model, make_optimizer, [_to_device(d.batch(0, i % d.num_batches(0)),
                                                                              ctx.device) for i in range(4)],
                                          precision, ctx.device, cfg.grad_accum))
            per_step = probes[0] if len(probes) == 1 else 0.9 * probes[0] + 0.1 * probes[1]
            budget = cfg.max_time * 0.95 - 2.0
            total_steps = max(1, int(budget / (per_step * 1.06)))  # ~6% for logging, evaluation, checkpoints
            total_steps = int(D.broadcast_object(ctx, total_steps))
            if cfg.max_steps is not None:
                total_steps = min(total_steps, cfg.max_steps)
            else:  # the probe runs cold (allocator, kernels for new shapes): re-fit once to the measured pace
                refit = (0, 0)  # placed below, once the evaluation interval is known
            _say(cfg, ctx, f"--max-time {cfg.max_time:.0f}s at {per_step * 1000:.0f} ms/step: "
                           f"scheduling {total_steps} steps")
        else:
            total_steps = int(cfg.max_steps)
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else max(1, int(0.05 * total_steps))
        eval_every = cfg.eval_every or max(1, total_steps // 10)
        if refit is not None:
            refit = refit_steps(total_steps, eval_every)
        phase2_start = int(0.9 * total_steps) if cfg.two_phase else total_steps

        optimizer = make_optimizer(model)
        scheduler = linear_schedule(optimizer, warmup, total_steps)
        step, phase, epoch, index, elapsed = 0, 0, 0, 0, 0.0
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            step, elapsed = int(state["step"]), float(state["elapsed"])
            phase, epoch, index = (int(state["data"][k]) for k in ("phase", "epoch", "index"))
            set_rng_state(state["rng"])
            if phase:
                data = make_data(phase)
            _say(cfg, ctx, f"resuming from {ckpt_path} (step {step} of {total_steps})")
        else:
            torch.manual_seed(cfg.seed + 1000 * ctx.rank)  # dropout differs per rank; weights are rank 0's (DDP)
        ddp_model = D.wrap(model, ctx, find_unused_parameters=not cfg.nsp)

        metrics_path = out / "metrics.jsonl"
        if ctx.is_main:
            record = {"config": cfg.run_record(), "total_steps": total_steps, "warmup_steps": warmup,
                      "precision": precision, "world_size": ctx.world_size, "model_config": config.to_dict("hf")}
            (out / "run.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            _truncate_metrics(metrics_path, step)
            n_params = sum(p.numel() for p in model.parameters())
            _say(cfg, ctx, f"model {cfg.model_size}: {n_params / 1e6:.1f}M parameters, vocab {len(tokenizer)}, "
                           f"precision {precision}, {ctx.world_size} process(es) on {ctx.device.type}; "
                           f"{data.num_batches(epoch) * ctx.world_size * cfg.batch_size} instances per epoch")

        def checkpoint() -> None:
            if ctx.is_main:
                save_checkpoint(checkpoint_dir(out), step, {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "total_steps": total_steps, "elapsed": elapsed,
                    "data": {"phase": phase, "epoch": epoch, "index": index}, "config": cfg.run_record(),
                }, keep=cfg.keep_checkpoints)

        # ---- the loop
        from tqdm import tqdm

        bar = tqdm(total=total_steps, initial=step, desc="pre-training", unit="step", dynamic_ncols=True,
                   disable=cfg.quiet or not ctx.is_main or not sys.stderr.isatty(), mininterval=0.5)
        window = {"loss": 0.0, "mlm_loss": 0.0, "nsp_loss": 0.0, "mlm_ok": 0, "mlm_n": 0, "nsp_ok": 0, "nsp_n": 0,
                  "tokens": 0, "steps": 0, "time": 0.0}
        deadline = None if cfg.max_time is None else cfg.max_time - elapsed
        loader = _Prefetcher()
        started = time.perf_counter()
        stopped_early = False
        while step < total_steps:
            if phase == 0 and step >= phase2_start:
                phase, epoch, index = 1, 0, 0
                data = make_data(1)
                _say(cfg, ctx, f"phase 2: sequence length {phases[1][0]}")
            t0 = time.perf_counter()
            step_loss = 0.0
            for micro in range(cfg.grad_accum):
                if index >= data.num_batches(epoch):
                    epoch, index = epoch + 1, 0
                batch = _to_device(loader.get(data, epoch, index), ctx.device)
                index += 1
                sync = micro == cfg.grad_accum - 1
                no_sync = ddp_model.no_sync() if (ctx.distributed and not sync) else contextlib.nullcontext()
                with no_sync:
                    with autocast(precision, ctx.device):
                        out_ = ddp_model(**batch)
                        loss = out_.loss / cfg.grad_accum
                    loss.backward()
                step_loss += float(loss.detach())
                window["mlm_loss"] += float(out_.mlm_loss.detach()) / cfg.grad_accum
                window["mlm_ok"] += int((out_.masked_logits.max(-1).indices == out_.masked_labels).sum())  # = argmax, faster
                window["mlm_n"] += int(out_.masked_labels.numel())
                if cfg.nsp:
                    window["nsp_loss"] += float(out_.nsp_loss.detach()) / cfg.grad_accum
                    window["nsp_ok"] += int((out_.seq_relationship_logits.argmax(-1)
                                             == batch["next_sentence_label"]).sum())
                    window["nsp_n"] += int(batch["next_sentence_label"].numel())
                window["tokens"] += int(batch["attention_mask"].sum())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            check = D.all_reduce_mean(ctx, [step_loss, float(grad_norm)])
            if not all(math.isfinite(v) for v in check):
                last = latest_checkpoint(checkpoint_dir(out))
                raise FloatingPointError(
                    f"the loss became {check[0]} (gradient norm {check[1]}) at step {step + 1}; stopping. "
                    + (f"The last good checkpoint is {last}: resume with --resume, perhaps with a lower --lr."
                       if last else "No checkpoint was saved yet: restart with a lower --lr or --precision fp32."))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            dt = time.perf_counter() - t0
            elapsed += dt
            window["loss"] += step_loss
            window["steps"] += 1
            window["time"] += dt
            bar.update(1)
            if refit is not None and step == refit[0]:
                pace_start = time.perf_counter()
            if refit is not None and step == refit[1]:
                pace = (time.perf_counter() - pace_start) / (refit[1] - refit[0])
                remaining = deadline - (time.perf_counter() - started)
                fitted = int(D.broadcast_object(ctx, step + max(1, int(remaining / (pace * 1.04)))))
                refit = None
                if abs(fitted - total_steps) > 0.03 * total_steps:
                    _say(cfg, ctx, f"--max-time: {pace * 1000:.0f} ms/step measured, re-scheduling "
                                   f"{total_steps} -> {fitted} steps")
                    total_steps = fitted
                    scheduler = linear_schedule(optimizer, warmup, total_steps)
                    scheduler.last_epoch = step - 1
                    scheduler.step()  # the lr of this step on the new schedule
                    eval_every = cfg.eval_every or max(1, total_steps // 10)
                    if phase == 0:
                        phase2_start = int(0.9 * total_steps) if cfg.two_phase else total_steps
                    bar.total = total_steps
                    bar.refresh()
                    if ctx.is_main:
                        record["total_steps"] = total_steps
                        (out / "run.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

            if step % cfg.log_every == 0 or step == total_steps:
                w = window
                vals = D.all_reduce_mean(ctx, [w["loss"] / w["steps"], w["mlm_loss"] / w["steps"],
                                               w["nsp_loss"] / w["steps"], w["mlm_ok"] / max(1, w["mlm_n"]),
                                               w["nsp_ok"] / max(1, w["nsp_n"]), w["tokens"] / max(w["time"], 1e-9)])
                line = {"step": step, "loss": vals[0], "mlm_loss": vals[1], "mlm_acc": vals[3],
                        "lr": scheduler.get_last_lr()[0], "tokens_per_s": vals[5] * ctx.world_size,
                        "elapsed_s": round(elapsed, 2), "epoch": epoch}
                if cfg.nsp:
                    line.update(nsp_loss=vals[2], nsp_acc=vals[4])
                if ctx.is_main:
                    with open(metrics_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(line) + "\n")
                    bar.set_postfix(loss=f"{vals[0]:.3f}", mlm=f"{vals[3]:.3f}",
                                    **({"nsp": f"{vals[4]:.3f}"} if cfg.nsp else {}),
                                    tok_s=f"{line['tokens_per_s']:.0f}", refresh=False)
                    if bar.disable and not cfg.quiet:
                        print(f"step {step}/{total_steps}  loss {vals[0]:.3f}  mlm acc {vals[3]:.3f}"
                              + (f"  nsp acc {vals[4]:.3f}" if cfg.nsp else "")
                              + f"  {line['tokens_per_s']:.0f} tokens/s", flush=True)
                window = dict.fromkeys(window, 0)
                window["loss"] = window["mlm_loss"] = window["nsp_loss"] = window["time"] = 0.0
            if eval_batches and ctx.is_main and (step % eval_every == 0 or step == total_steps):
                t_eval = time.perf_counter()
                result = _evaluate(model, eval_batches, precision, ctx.device)
                elapsed += time.perf_counter() - t_eval
                with open(metrics_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"step": step, **result}) + "\n")
                _say(cfg, ctx, f"  held-out at step {step}: MLM acc {result['eval_mlm_acc']:.3f}"
                     + (f", NSP acc {result['eval_nsp_acc']:.3f}" if "eval_nsp_acc" in result else "")
                     + f", loss {result['eval_loss']:.3f}")
            if step % cfg.save_every == 0 and step < total_steps:
                t_save = time.perf_counter()
                checkpoint()
                elapsed += time.perf_counter() - t_save
            if deadline is not None and step < total_steps:
                over = time.perf_counter() - started >= deadline
                if D.all_reduce_mean(ctx, [float(over)])[0] > 0:
                    stopped_early = True
                    break
        bar.close()
        loader.close()

        # ---- the end: checkpoint + model directory (config.json, model.safetensors, vocab.txt, tokenizer config)
        checkpoint()
        if ctx.is_main:
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            if stopped_early:
                _say(cfg, ctx, f"--max-time reached at step {step} of {total_steps}")
            _say(cfg, ctx, f"done: {step} steps in {elapsed:.0f}s; model saved to {out}")
        D.barrier(ctx)
        return out
    finally:
        D.cleanup(ctx)


def _truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop metric lines written after the checkpoint being resumed (they will be written again)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill
    path.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
