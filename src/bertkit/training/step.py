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

__all__ = [
    "LossNotFinite",
    "StepResult",
    "apply_update",
    "check_finite",
    "optimizer_step",
    "syncs_lazily",
    "to_device",
]


def to_device(batch: dict, device) -> dict:
    """A numpy batch as tensors on ``device``; to a GPU through pinned memory, so that the copies queue behind the
    step's work instead of waiting for it."""
    pin = torch.device(device).type == "cuda"  # the host allocator keeps a pinned block until its copy is done
    tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
    return {k: (t.pin_memory() if pin else t).to(device, non_blocking=True) for k, t in tensors.items()}


@dataclass
class StepResult:
    """One optimizer step's figures. On a GPU they stay on the device (no host sync in the step): ``loss_sum``
    and ``norm`` are tensors there, ``loss`` and ``grad_norm`` read them (a sync); a meter adds ``loss_sum`` as it
    is. On a CPU they are the same numbers either way."""

    loss_sum: torch.Tensor | float  # the step's loss: the sum of its micro-batches' (each divided by their count)
    norm: torch.Tensor | float  # the gradient norm before clipping (unscaled)

    @property
    def loss(self) -> float:
        """The step's loss: the mean over its micro-batches (this process's)."""
        return float(self.loss_sum)

    @property
    def grad_norm(self) -> float:
        return float(self.norm)


def syncs_lazily(device: torch.device | str) -> bool:
    """True where the step's figures stay on the device (a GPU: reading one waits for the queued work); a CPU's
    are read at once (there is no queue to wait for)."""
    return torch.device(device).type == "cuda"


def apply_update(
    state: TrainState,
    clip: float,
    *,
    ctx: DistContext | None = None,
    loss: float | torch.Tensor = 0.0,
    on_not_finite: Callable[[float, float], Any] | None = None,
    defer: bool = False,
) -> float | torch.Tensor:
    """Unscale the gradients, clip their norm to ``clip`` (0: no clipping), step the optimizer, the loss scaler and
    the schedule, zero the gradients. With ``on_not_finite``, a loss or (without loss scaling) a gradient norm that
    is not finite on any process calls it with the (loss, norm) means over the processes before anything changes
    (it is expected to raise). Returns the gradient norm.

    ``defer`` (a GPU's step: :func:`syncs_lazily`): no host sync. The norm is returned as a device tensor, and the
    finiteness check is kept on the device: a fused optimizer skips a non-finite step there (its ``found_inf``, as
    fp16's loss scaler does), and :func:`check_finite`, at the recipe's log points and before its checkpoints,
    calls ``on_not_finite`` for it."""
    scaler, optimizer, masters = state.scaler, state.optimizer, state.masters
    if masters is not None:  # a pure-bf16 model: its gradients to the fp32 masters, which the optimizer steps
        masters.grads_to_masters()
    scaler.unscale_(optimizer)  # clip the true gradients
    params = masters.params if masters is not None else [p for p in state.model.parameters() if p.requires_grad]
    # max_norm inf computes the norm and multiplies by 1.0: the same gradients as no clipping
    norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else math.inf)
    skip = None
    if on_not_finite is not None and defer and not scaler.is_enabled():
        skip = _not_finite_on_device(state, ctx or DistContext(), loss, norm)
    elif on_not_finite is not None:
        norm = float(norm)
        mean_loss, mean_norm = distributed.all_reduce_mean(ctx or DistContext(), [float(loss), norm])
        if not math.isfinite(mean_loss) or not (scaler.is_enabled() or math.isfinite(mean_norm)):
            on_not_finite(mean_loss, mean_norm)
    elif not defer:
        norm = float(norm)
    if skip is not None:  # the fused kernel skips the update where found_inf is 1 (and leaves the step count)
        optimizer.found_inf, optimizer.grad_scale = skip, None
    try:
        scaler.step(optimizer)  # with fp16: skipped when a gradient overflowed, and the scale lowered
    finally:
        if skip is not None:
            del optimizer.found_inf, optimizer.grad_scale
    scaler.update()
    if masters is not None:
        masters.masters_to_model()  # and the model's gradients cleared
    state.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    state.step += 1
    return norm


def _not_finite_on_device(state: TrainState, ctx: DistContext, loss, norm: torch.Tensor) -> torch.Tensor | None:
    """The deferred finiteness check: whether this step's loss or norm is not finite on any process, as a device
    flag kept in ``state.unchecked`` (with the figures :func:`check_finite` reports); returns the ``found_inf``
    that makes a fused optimizer skip the step (None for one that cannot)."""
    loss = torch.as_tensor(loss, device=norm.device)
    bad = (~torch.isfinite(loss) | ~torch.isfinite(norm)).to(torch.float32)
    if ctx.distributed:
        torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)  # queued: no host sync
    if state.unchecked is None:
        state.unchecked = (bad, loss.detach().double(), norm.detach().double())
    else:  # the first non-finite step's figures are the ones reported
        was, first_loss, first_norm = state.unchecked
        keep = was > 0
        state.unchecked = (
            torch.maximum(was, bad),
            torch.where(keep, first_loss, loss.detach().double()),
            torch.where(keep, first_norm, norm.detach().double()),
        )
    return bad if state.optimizer.defaults.get("fused") else None


def check_finite(state: TrainState, on_not_finite: Callable[[float, float], Any]) -> None:
    """The deferred finiteness check's verdict (a host sync): ``on_not_finite(loss, norm)`` with the first
    non-finite step's figures where one was, since the last check."""
    if state.unchecked is None:
        return
    bad, loss, norm = state.unchecked
    state.unchecked = None
    if float(bad) > 0:
        on_not_finite(float(loss), float(norm))


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
    defer = syncs_lazily(device)
    n, loss_sum = len(micro_batches), 0.0
    for i, micro in enumerate(micro_batches):
        sync = i == n - 1
        with model.no_sync() if ctx.distributed and not sync else contextlib.nullcontext():
            with autocast(precision, device):
                output = forward(model, micro)
                loss = (output if isinstance(output, torch.Tensor) else output.loss) / n
            state.scaler.scale(loss).backward()
        # float64 on the device: the same sum as of the losses read one by one, without a host sync per micro-batch
        loss_sum = loss_sum + (loss.detach().double() if defer else float(loss.detach()))
        if after_backward is not None:
            after_backward(micro, output)
    norm = apply_update(state, clip, ctx=ctx, loss=loss_sum, on_not_finite=on_not_finite, defer=defer)
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
