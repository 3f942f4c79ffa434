"""A run's batches over its ramps: one ``PretrainingData`` per stage of the sequence-length and batch-size ramps
(built when reached) and the position in it, (stage, epoch, index), which a checkpoint saves. Entering a stage keeps
the position: the same instance with the same sequence length, the same fraction of the epoch otherwise. What a
batch holds (masking, NSP, seed) is the recipe's: ``options(seq_len, batch_size)`` returns its ``DataOptions``.

A ``--mask-prob START:END`` run: the Feed gives each batch its rate, ``masking.mask_prob_at`` of the step that trains
on it (the step ``advance`` was told, plus the micro-batches of ``grad_accum`` already served), so a batch is a pure
function of (stage, epoch, index, step) and a resumed run masks as the uninterrupted one did; the prefetcher builds
the next batches with the rates their steps will have. Held-out batches are masked at ``masking.EVAL_MASK_PROB``
by token, whatever the run trains with. ``--mask-strategy adaptive``: the loader builds its batches unmasked and
:meth:`Feed.next` masks each just before its step from :class:`~bertkit.data.pretraining.masking.HardTokens`,
which the recipe feeds each step's masked predictions (:meth:`Feed.learned`) and the position saves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.pretraining.instances import PretrainingData
from bertkit.data.pretraining.masking import EVAL_MASK_PROB, HardTokens, mask_prob_at, parse_mask_prob
from bertkit.data.pretraining.ramps import parse_ramp, plan_stages, stage_at
from bertkit.errors import PretrainError


class Feed:
    """The batches of a run whose settings ``cfg`` has (``seq_len``, ``batch_size``, ``seq_ramp``, ``batch_ramp``,
    ``two_phase``, ``phase2_seq_len``, ``phase2_batch_size``)."""

    def __init__(self, cfg: Any, shard_dir: Path, vocab, ctx, options: Callable[[int, int], Any]):
        self.cfg, self.shard_dir, self.vocab, self.ctx, self.options = cfg, shard_dir, vocab, ctx, options
        self.seq_ramp, self.batch_ramp = (
            parse_ramp(cfg.seq_ramp, "--seq-ramp"),
            parse_ramp(cfg.batch_ramp, "--batch-ramp"),
        )
        self.phase2 = (cfg.phase2_seq_len, cfg.phase2_batch_size or cfg.batch_size) if cfg.two_phase else None
        self.max_len = max([cfg.seq_len, *(v for v, _ in self.seq_ramp), *(self.phase2 or (0,))[:1]])
        self.stage, self.epoch, self.index = 0, 0, 0
        self.stages, self.data = [], None
        start, end = parse_mask_prob(getattr(cfg, "mask_prob", None))
        self.rates = (start, end) if start != end else None  # --mask-prob START:END
        self.grad_accum = getattr(cfg, "grad_accum", 1)
        self.step, self.total_steps, self.served = 0, 1, 0  # served: micro-batches of this step so far
        # --mask-strategy adaptive: masked here from the model's recent errors (masking.HardTokens says why)
        self.hard = HardTokens(vocab.vocab_size) if getattr(cfg, "mask_strategy", None) == "adaptive" else None

    def plan(self, total_steps: int):
        c = self.cfg
        return plan_stages(total_steps, c.seq_len, c.batch_size, self.seq_ramp, self.batch_ramp, self.phase2)

    def make(self, seq_len: int, batch_size: int, split: str = "train"):

        rank, world = (0, 1) if split == "eval" else (self.ctx.rank, self.ctx.world_size)
        options = self.options(seq_len, batch_size)
        if split == "eval":  # the held-out meter's masking, whatever the run trains with (runs compare)
            options = dataclasses.replace(options, mask_prob=EVAL_MASK_PROB, max_predictions=None)
            options = dataclasses.replace(options, mask_strategy="token")
        data = PretrainingData(self.shard_dir, self.vocab, options, rank, world, split=split)
        if split == "train" and data.num_batches(0) == 0:
            raise PretrainError(
                f"the corpus gives fewer than {batch_size * world} instances of {seq_len} tokens: "
                "add text or lower --batch-size"
            )
        return data

    def start(self, total_steps: int, position: dict | None) -> None:
        """Plan the stages; place the feed at a checkpoint's position (or at the start)."""
        self.stages, self.total_steps = self.plan(total_steps), total_steps
        if position:
            self.stage, self.epoch, self.index = (int(position[k]) for k in ("phase", "epoch", "index"))
            if self.hard is not None and "hard_tokens" in position:
                self.hard.load(position["hard_tokens"])
        s = self.stages[min(self.stage, len(self.stages) - 1)]
        self.data = self.make(s.seq_len, s.batch_size)

    def advance(self, step: int, total_steps: int) -> str | None:
        """Enter the stage that holds ``step`` of ``total_steps`` (stages only move forward); a message if entered.
        Called before each step's micro-batches: the step their masking rate is of."""
        self.stages, self.step, self.total_steps, self.served = self.plan(total_steps), step, total_steps, 0
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

    def batch_options(self, k: int = 0) -> dict:
        """What the k-th batch from now is built with (a scheduled rate: its step's), beyond the data's options."""
        if self.hard is not None:
            return {"raw": True}  # masked by next(), with the errors of the steps before its own
        return {} if self.rates is None else {"mask_prob": self.rate(k)}

    def rate(self, k: int = 0) -> float:
        """The mask rate of the k-th batch from now: its step's on a schedule, else the data's one rate."""
        if self.rates is None:
            return self.data.options.mask_prob
        return mask_prob_at(*self.rates, self.step + (self.served + k) // self.grad_accum, self.total_steps)

    def next(self, loader) -> dict:
        if self.index >= self.data.num_batches(self.epoch):
            self.epoch, self.index = self.epoch + 1, 0
        options = self.batch_options()
        if options:
            batch = loader.get(self.data, self.epoch, self.index, ahead=self.batch_options, **options)
        else:
            batch = loader.get(self.data, self.epoch, self.index)
        if self.hard is not None:
            o = self.data.options
            rng = np.random.default_rng([o.seed, 13, self.stage, self.epoch, self.index, self.ctx.rank])
            batch = self.hard.mask_batch(batch, self.vocab, self.rate(), o.max_predictions, o.mask_mix, rng)
        self.index, self.served = self.index + 1, self.served + 1
        return batch

    def learned(self, reduce=None) -> None:
        """After an optimizer step: adaptive masking's errors of it into its state (``reduce`` sums over ranks)."""
        if self.hard is not None:
            self.hard.update(reduce)

    def position(self) -> dict:
        """What a checkpoint saves: (stage, epoch, index), and adaptive masking's state."""
        hard = {"hard_tokens": self.hard.state()} if self.hard is not None else {}
        return {"phase": self.stage, "epoch": self.epoch, "index": self.index, **hard}

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
