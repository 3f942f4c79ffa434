"""One optimizer step, the same in every recipe: micro-batches (DDP syncs gradients only on the last), autocast,
loss scaling (fp16), unscale, clipping, a finiteness check, the optimizer step (skipped by the scaler when a
gradient overflowed), the schedule step and zero_grad.

    result = optimizer_step(state, micro_batches, forward, clip=1.0, ctx=ctx, ddp_model=ddp_model)

``forward(model, micro_batch)`` returns the micro-batch's loss (or an output with a ``.loss``), computed with
``model``; the step divides it by the number of micro-batches, scales and back-propagates it. A recipe whose
backward is its own (GradCache in the embedding tasks) back-propagates ``state.scaler.scale(loss)`` itself and
calls :func:`apply_update`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.errors import LossNotFinite
from bertkit.precision import MasterWeights, autocast, grad_scaler
from bertkit.training import distributed
from bertkit.training.distributed import DistContext
from bertkit.training.optim import linear_schedule
from bertkit.training.state import TrainState, rng_preserved

__all__ = ["LossNotFinite", "StepResult", "apply_update", "optimizer_step", "to_device"]


def to_device(batch: dict, device) -> dict:
    """A numpy batch as tensors on ``device``."""
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}


@dataclass
class StepResult:
    loss: float  # the step's loss: the mean over its micro-batches (this process's)
    grad_norm: float  # the gradient norm before clipping (unscaled)


def apply_update(
    state: TrainState,
    clip: float,
    *,
    ctx: DistContext | None = None,
    loss: float = 0.0,
    on_not_finite: Callable[[float, float], Any] | None = None,
) -> float:
    """Unscale the gradients, clip their norm to ``clip`` (0: no clipping), step the optimizer, the loss scaler and
    the schedule, zero the gradients. With ``on_not_finite``, a loss or (without loss scaling) a gradient norm that
    is not finite on any process calls it with the (loss, norm) means over the processes before anything changes
    (it is expected to raise). Returns the gradient norm."""
    scaler, optimizer, masters = state.scaler, state.optimizer, state.masters
    if masters is not None:  # a pure-bf16 model: its gradients to the fp32 masters, which the optimizer steps
        masters.grads_to_masters()
    scaler.unscale_(optimizer)  # clip the true gradients
    params = masters.params if masters is not None else [p for p in state.model.parameters() if p.requires_grad]
    # max_norm inf computes the norm and multiplies by 1.0: the same gradients as no clipping
    norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf))
    if on_not_finite is not None:
        mean_loss, mean_norm = distributed.all_reduce_mean(ctx or DistContext(), [loss, norm])
        if not math.isfinite(mean_loss) or not (scaler.is_enabled() or math.isfinite(mean_norm)):
            on_not_finite(mean_loss, mean_norm)
    scaler.step(optimizer)  # with fp16: skipped when a gradient overflowed, and the scale lowered
    scaler.update()
    if masters is not None:
        masters.masters_to_model()  # and the model's gradients cleared
    state.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    state.step += 1
    return norm


def optimizer_step(
    state: TrainState,
    micro_batches: Sequence[Any],
    forward: Callable[[torch.nn.Module, Any], Any],
    *,
    clip: float,
    precision: str,
    device: torch.device | str,
    ctx: DistContext | None = None,
    ddp_model: torch.nn.Module | None = None,
    after_backward: Callable[[Any, Any], None] | None = None,
    on_not_finite: Callable[[float, float], Any] | None = None,
) -> StepResult:
    """Forward and backward of every micro-batch (under autocast; DDP's gradient all-reduce only on the last), then
    :func:`apply_update`. ``after_backward(micro_batch, output)`` sees each micro-batch's output (metrics)."""
    ctx = ctx or DistContext()
    model = ddp_model if ddp_model is not None else state.model
    n, loss_sum = len(micro_batches), 0.0
    for i, micro in enumerate(micro_batches):
        sync = i == n - 1
        with model.no_sync() if ctx.distributed and not sync else contextlib.nullcontext():
            with autocast(precision, device):
                output = forward(model, micro)
                loss = (output if isinstance(output, torch.Tensor) else output.loss) / n
            state.scaler.scale(loss).backward()
        loss_sum += float(loss.detach())
        if after_backward is not None:
            after_backward(micro, output)
    norm = apply_update(state, clip, ctx=ctx, loss=loss_sum, on_not_finite=on_not_finite)
    return StepResult(loss_sum, norm)


def time_steps(
    model: torch.nn.Module,
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer],
    batches: Sequence[dict],
    *,
    precision: str,
    device: torch.device | str,
    grad_accum: int = 1,
    clip: float = 1.0,
) -> float:
    """Median seconds per optimizer step (:func:`optimizer_step`, the very step a run takes) of a throwaway copy of
    the model on ``batches``, the first (warm-up) step left out; the model, its optimizer and the RNG states are
    untouched. What ``--max-time`` fits its schedule with."""
    import copy
    import time

    probe = copy.deepcopy(model)
    # a bf16 model trains over fp32 masters (MasterWeights): the probe too, so that it times the run's step
    masters = MasterWeights(probe) if any(p.dtype == torch.bfloat16 for p in probe.parameters()) else None
    optimizer = make_optimizer(probe)
    if masters is not None:
        masters.adopt(optimizer)
    scheduler = linear_schedule(optimizer, 0, 1 << 30)
    state = TrainState(probe, optimizer, scheduler, grad_scaler(precision, device), masters=masters)
    times = []
    with rng_preserved():
        for i, batch in enumerate(batches):
            t0 = time.perf_counter()
            optimizer_step(
                state, range(grad_accum), lambda m, _, b=batch: m(**b), clip=clip, precision=precision, device=device
            )
            if i:
                times.append(time.perf_counter() - t0)
    del probe, optimizer, state
    times.sort()
    return times[len(times) // 2]
