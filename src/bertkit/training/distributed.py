"""torchrun / DistributedDataParallel setup: gloo on CPU, nccl on GPU; only rank 0 writes.

Under ``torchrun --nproc_per_node N`` (single or multi-node) the environment carries ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``; without it, :func:`setup` returns a one-process context and nothing is initialised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertkit.errors import RunError
from bertkit.precision import resolve_device


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # noqa: RUF009  (immutable)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def local(device: str | None = None) -> DistContext:
    """One process on ``device`` (default: cuda where a GPU is available, else cpu), no process group: what a
    recipe called from Python without a context runs in."""

    return DistContext(device=torch.device(resolve_device(device)))


def setup(device: str | None = None) -> DistContext:
    """Initialise the process group when launched by torchrun; pick the device (``cuda:LOCAL_RANK`` or cpu)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", local if dev.index is None else dev.index)
        count = torch.cuda.device_count()
        if dev.index >= count:
            raise RunError(
                f"process {rank} (LOCAL_RANK {local}) wants GPU {dev.index}, but this machine has {count}: "
                f"launch at most {count} process(es) per node (torchrun --nproc_per_node {count}), or "
                "pass --device cpu"
            )
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)
    return DistContext(rank, world, local, dev)


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def broadcast_object(ctx: DistContext, obj):
    """Rank 0's ``obj`` on every rank."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(ctx: DistContext, fn, error: type[Exception] = RunError):
    """``fn()`` on rank 0, its result (or its ``error``, raised again) on every rank."""
    result, message = None, None
    if ctx.is_main:
        try:
            result = fn()
        except error as e:
            message = str(e)
    result, message = broadcast_object(ctx, (result, message))
    if message:
        raise error(message)
    return result


def all_reduce_mean(ctx: DistContext, values: list[float]) -> list[float]:
    """Mean over ranks of a few floats (metrics)."""
    if not ctx.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device if ctx.device.type == "cuda" else "cpu")
    dist.all_reduce(t)
    return (t / ctx.world_size).tolist()


def wrap(model: torch.nn.Module, ctx: DistContext, find_unused_parameters: bool = False) -> torch.nn.Module:
    if not ctx.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused_parameters)


def cleanup(ctx: DistContext) -> None:
    """Shut the process group down, after what still holds it (a DDP wrapper left in a reference cycle) is
    collected: the group's last reference then goes inside ``destroy_process_group``, not in a destructor run later
    or at interpreter exit, where gloo's teardown can abort the process ("terminate called without an active
    exception")."""
    if ctx.distributed and dist.is_initialized():
        import gc

        gc.collect()
        dist.destroy_process_group()
