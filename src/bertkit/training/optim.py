"""AdamW with BERT's parameter groups, and the linear warmup / linear decay schedule."""

from __future__ import annotations

import math
import re

import torch
from torch import nn

from bertkit.errors import InputError
from bertkit.models import LAYER_KEY
from bertkit.training.lamb import Lamb

OPTIMIZERS = ("adamw", "lamb")
_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")


def layer_depths(model: nn.Module) -> dict[str, int]:
    """Each parameter's depth for layer-wise lr decay: the embeddings 0, encoder layer ``i`` ``i + 1``, everything
    above the last layer (final norm, pooler, task head) ``L + 1`` for an encoder of ``L`` layers."""
    layer = {name: LAYER_KEY.search(name) for name, _ in model.named_parameters()}
    top = max((int(m.group(1)) for m in layer.values() if m), default=-1) + 2
    return {name: int(m.group(1)) + 1 if m else 0 if _EMBEDDINGS.search(name) else top for name, m in layer.items()}


def parameter_groups(
    model: nn.Module, weight_decay: float, lr: float | None = None, layer_decay: float = 1.0
) -> list[dict]:
    """Decoupled weight decay on weight matrices; none on biases and LayerNorm (as Google's optimization.py; their
    groups say ``no_decay``, which LAMB also keeps out of its trust ratio). Tied parameters appear once.

    ``layer_decay`` < 1 (with ``lr``): layer-wise lr decay, as ELECTRA fine-tunes (Clark et al., 2020, appendix A:
    0.8 for Small and Base). A parameter at depth ``d`` of ``L + 1`` (:func:`layer_depths`) trains at
    ``lr * layer_decay ** (L + 1 - d)``: the task head at ``lr``, the top layer at ``lr * layer_decay``, the
    embeddings at ``lr * layer_decay ** (L + 1)``. Each group carries its own ``lr``, which the schedules scale."""
    depths = layer_depths(model) if layer_decay != 1.0 else {}
    top = max(depths.values(), default=0)
    groups: dict[tuple[bool, int], list] = {}
    seen = set()
    for name, param in model.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        no_decay = param.ndim < 2 or "LayerNorm" in name or name.endswith(".bias")
        groups.setdefault((no_decay, depths.get(name, top)), []).append(param)
    if layer_decay == 1.0:
        return [
            {"params": groups.get((False, 0), []), "weight_decay": weight_decay, "no_decay": False},
            {"params": groups.get((True, 0), []), "weight_decay": 0.0, "no_decay": True},
        ]
    if lr is None:
        raise InputError("--layer-decay needs the peak --lr")
    return [
        {
            "params": params,
            "weight_decay": 0.0 if no_decay else weight_decay,
            "no_decay": no_decay,
            "lr": lr * layer_decay ** (top - depth),
        }
        for (no_decay, depth), params in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


def build_optimizer(
    model: nn.Module,
    lr: float = 1e-4,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
    layer_decay: float = 1.0,
    optimizer: str = "adamw",
) -> torch.optim.Optimizer:
    """AdamW (decoupled decay 0.01, betas (0.9, 0.999), eps 1e-6): the paper's and Google's defaults; or, with
    ``optimizer="lamb"``, LAMB on the same groups and settings (``training/lamb.py``).

    ``fused=None`` picks the fused kernel (one pass over all parameters) where this PyTorch has it for the
    parameters' device; it computes the same update as the for-each implementation. ``layer_decay``: layer-wise
    lr decay (:func:`parameter_groups`; 1 = off)."""
    groups = parameter_groups(model, weight_decay, lr, layer_decay)
    if optimizer == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if optimizer != "adamw":
        raise InputError(f"--optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if fused is None:
        fused = True
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def linear_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over ``warmup_steps``, then linear decay to 0 at ``total_steps``."""
    warmup_steps = max(0, int(warmup_steps))
    total_steps = max(1, int(total_steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1) if warmup_steps else 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


SCHEDULES = ("linear", "trapezoid", "onecycle")


def lr_factor(kind: str, step: int, warmup_steps: int, total_steps: int, cooldown: float = 0.5) -> float:
    """The lr multiplier at ``step`` (0-based) of ``total_steps``:

    - ``linear``: warmup from 0 over ``warmup_steps``, then linear decay to 0 at ``total_steps`` (the paper's);
    - ``trapezoid``: the same warmup, then flat at the peak, then linear decay to 0 over the last ``cooldown``
      fraction of the steps (more steps at the peak lr; cramming and "warmup-stable-decay" schedules);
    - ``onecycle``: cosine up to the peak over ``warmup_steps``, then cosine down to 0 (Smith's one-cycle shape).
    """
    warmup_steps, total_steps = max(0, int(warmup_steps)), max(1, int(total_steps))
    if kind == "linear":
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    if kind == "trapezoid":
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        decay_from = max(warmup_steps, int(total_steps * (1 - cooldown)))
        return 1.0 if step < decay_from else max(0.0, (total_steps - step) / max(1, total_steps - decay_from))
    if kind == "onecycle":
        if step < warmup_steps:
            return 0.5 * (1 - math.cos(math.pi * (step + 1) / (warmup_steps + 1)))
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1 + math.cos(math.pi * progress))
    raise InputError(f"--schedule must be one of {SCHEDULES}, got {kind!r}")


def lr_schedule(
    optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` following :func:`lr_factor` (``linear`` is :func:`linear_schedule` exactly)."""
    if kind not in SCHEDULES:
        raise InputError(f"--schedule must be one of {SCHEDULES}, got {kind!r}")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(kind, s, warmup_steps, total_steps))
