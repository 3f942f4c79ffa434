"""The state of a training run, saved and restored whole: model, optimizer, schedule, loss scaler, step, data
position, elapsed seconds and every process's RNG states (:mod:`bertkit.training.checkpointing` writes the file).

Every recipe (pretrain, finetune, the embedding tasks) builds one ``TrainState`` after its model, and resumes through
it; so a resumed run continues bit for bit in each of them the same way::

    state = TrainState(model, optimizer, scheduler, grad_scaler(precision, device))
X
    if saved is not None:
        state.load(saved, ctx)                 # weights, optimizer, schedule, scaler, RNGs, step, position
    ...
    state.save(run.checkpoints, ctx, keep=1, best=best, history=history)   # extras ride along
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.precision import MasterWeights
from bertkit.training.checkpointing import rng_state, save_checkpoint, set_rng_state
from bertkit.training.distributed import DistContext

# what TrainState.state_dict() holds itself; other keys of a checkpoint are the recipe's extras
OWN_KEYS = ("model", "optimizer", "scheduler", "scaler", "step", "position", "elapsed", "rank_rng", "rng")


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's RNGs: the weights of a new head, the data order and dropout follow it."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def seed_dropout(seed: int, ctx: DistContext) -> None:
    """Reseed torch per process once the model is built: dropout then differs between processes while the weights
    (rank 0's, broadcast by DDP) are the same. One process reseeds to ``seed`` itself."""
    torch.manual_seed(seed + 1000 * ctx.rank)


@dataclass
class TrainState:
    """What a checkpoint restores. ``position`` is the recipe's data position (e.g. ``{"epoch": 2, "batch": 17}``),
    a dict of plain numbers."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    step: int = 0
    position: dict[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0
    masters: MasterWeights | None = None  # a pure-bf16 model's fp32 master weights (what the optimizer steps)
    unchecked: tuple | None = None  # a GPU step's deferred finiteness check (training.step.check_finite), not saved

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.masters.state_dict() if self.masters is not None else self.model.state_dict(),  # fp32
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "position": dict(self.position),
            "elapsed": self.elapsed,
        }

    def save(self, directory: str | Path, ctx: DistContext, keep: int = 2, **extra: Any) -> Path | None:
        """Write a checkpoint of this state plus ``extra`` (rank 0 writes; every rank's RNG state goes in, so each
        process continues its own dropout stream). Returns the path on rank 0, None elsewhere. Every rank must
        call it."""
        rngs = [rng_state()]
        if ctx.distributed:
            rngs = [None] * ctx.world_size
            torch.distributed.all_gather_object(rngs, rng_state())
        if not ctx.is_main:
            return None
        return save_checkpoint(directory, self.step, {**self.state_dict(), **extra, "rank_rng": rngs}, keep=keep)

    def load(self, saved: dict[str, Any], ctx: DistContext) -> None:
        """Restore from a checkpoint read by ``load_checkpoint`` (also an older one with a single ``rng``)."""
        if self.masters is not None:
            self.masters.load_state_dict(saved["model"])
        else:
            self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.scaler.load_state_dict(saved.get("scaler") or {})
        self.step = int(saved["step"])
        self.position = dict(saved.get("position") or {})
        self.elapsed = float(saved.get("elapsed", 0.0))
        rngs = saved.get("rank_rng")
        set_rng_state(rngs[ctx.rank] if rngs and ctx.rank < len(rngs) else saved["rng"])


@contextlib.contextmanager
def rng_preserved():
    """Python's, NumPy's and torch's CPU generators as they were before the block (a throwaway computation inside
    leaves a run's random stream untouched)."""
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
