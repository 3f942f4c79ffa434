"""Training checkpoints: model, optimizer, scheduler, step, data position, every RNG state and the run's config.

Each checkpoint is one file ``checkpoints/step-NNNNNNNN.pt`` written atomically (temp file, fsync, rename), then a
``checkpoints/latest`` pointer is replaced atomically. A kill at any moment leaves either the previous checkpoint or
the new one as latest, never a torn file. Files are read back with ``torch.load(weights_only=True)``: everything
stored is tensors, numbers, strings, lists and dicts (the numpy RNG state is stored as a tensor).
"""

from __future__ import annotations

import errno
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.errors import InputError, RunError
from bertkit.files import atomic_write

_NAME = re.compile(r"^step-(\d{8,})\.pt$")
LATEST = "latest"


def rng_state() -> dict[str, Any]:
    """Every RNG state a training step can touch: python, numpy, torch CPU and CUDA."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": _python_state_to_lists(random.getstate()),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_python_state_from_lists(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _python_state_to_lists(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _python_state_from_lists(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def checkpoint_dir(output: str | os.PathLike) -> Path:
    return Path(output) / "checkpoints"


def list_checkpoints(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of complete checkpoint files, oldest first (temp files are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def save_checkpoint(directory: str | os.PathLike, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` (plus RNG states) as ``step-NNNNNNNN.pt`` atomically, point ``latest`` at it, and delete all
    but the newest ``keep`` checkpoints. Returns the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = dict(state, step=step, rng=rng_state())
    path = directory / f"step-{step:08d}.pt"
    try:
        atomic_write(path, lambda p: torch.save(state, p))
        atomic_write(directory / LATEST, lambda p: p.write_text(path.name + "\n", encoding="utf-8"))
    except (OSError, RuntimeError) as e:
        if not _disk_full(e):
            raise
        previous = latest_checkpoint(directory)
        raise DiskFullError(
            f"{path}: disk full while saving the checkpoint; "
            + (f"the previous checkpoint {previous} is intact" if previous else "no checkpoint yet")
            + ". Free space, then continue with --resume"
        ) from None
    for _, old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        if old != path:
            old.unlink(missing_ok=True)
    return path


class DiskFullError(RunError):
    """The disk filled up while a checkpoint was written (the previous one is intact)."""


def _disk_full(e: BaseException) -> bool:
    """ENOSPC/EDQUOT, or torch.save's zip writer failing mid-file (``inline_container.cc ... unexpected pos``)."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    text = str(e)
    return "unexpected pos" in text or "No space left" in text or "file write failed" in text


# what a checkpoint a run resumes from holds (TrainState.save), besides the RNG states (``rank_rng``, or ``rng``)
TRAINING_KEYS = ("model", "optimizer", "scheduler", "step")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; an unreadable file, or one without a model and a step, is an
    ``InputError`` naming it."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  (a torn or foreign file, whatever the unpickler raises: say which)
        raise InputError(f"{path}: not a readable bertkit checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise InputError(f"{path}: not a bertkit training checkpoint (no model/step)")
    return state


def check_resumable(path: Path, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (read by :func:`load_checkpoint`) when it holds what a run resumes from, else an ``InputError``
    naming ``path`` and what it lacks."""
    lacks = [k for k in TRAINING_KEYS if k not in state] + ([] if "rank_rng" in state or "rng" in state else ["RNG"])
    if lacks:
        raise InputError(f"{path}: not a bertkit training checkpoint (no {'/'.join(lacks)})")
    return state


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest`` points at; else the newest complete file; None when there is none."""
    directory = Path(directory)
    pointer = directory / LATEST
    if pointer.is_file():
        target = directory / pointer.read_text(encoding="utf-8").strip()
        if target.is_file():
            return target
    found = list_checkpoints(directory)
    return found[-1][1] if found else None
