"""torchrun / DistributedDataParallel setup: gloo on CPU, nccl on GPU; only rank 0 writes.

Under ``torchrun --nproc_per_node N`` (single or multi-node) the environment carries ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``; without it, :func:`setup` returns a one-process context and nothing is initialised.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertkit.console import StderrHandler
from bertkit.errors import BertkitError, RunError
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


def launch(fn, args: tuple, processes: int, threads: int):
    """``fn(*args)`` in ``processes`` processes on this machine, started as ``torchrun --standalone --nproc_per_node
    N`` starts them (torch's elastic launcher: a rendezvous on a free local port, RANK, WORLD_SIZE and LOCAL_RANK in
    each one's environment), each with ``threads`` torch threads; returns rank 0's result. A ``BertkitError`` that
    rank 0 raised is raised here again (one line, as a one-process run's); SIGTERM or SIGINT sent to this process
    is passed on to them (each stops as ``GracefulStop`` says), and their own answer to it (``Interrupted``, after
    the checkpoint) is raised here."""
    # torch's launcher loads when a run launches processes, not for every run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=processes,
        run_id=f"bertkit-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as --standalone
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
        signals_to_handle="SIGHUP,SIGQUIT",  # SIGTERM and SIGINT: passed on below, the processes answer them
    )

    def pass_on(signum, frame):  # noqa: ARG001  (Ctrl-C's SIGINT reaches them twice: a second one waits, harmless)
        for child in multiprocessing.active_children():
            os.kill(child.pid, signum)

    main = threading.current_thread() is threading.main_thread()  # only there can handlers be installed
    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    # the launcher's own lines (its agent's, its process handling's): a process's error is reported below
    quiet = [logging.getLogger(name) for name in ("torch.distributed.elastic", "torch.multiprocessing")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.CRITICAL)
    omp = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)  # what each process's OpenMP starts with (torchrun sets it too)
    # how the library's loggers are shown here (the CLI's plain lines on stderr), for each process to show them so
    said = {name: logging.getLogger(name).level for name in ("bertkit", "bertkit.run")}
    shown = bool(logging.getLogger("bertkit").handlers)
    try:
        results = elastic_launch(config, _launched)(fn, threads, args, said, shown)
    except ChildFailedError as e:  # a process that died unreported (killed, or a bug: its traceback is above)
        first = min(e.failures.values(), key=lambda f: f.timestamp)
        raise RunError(f"a training process failed ({first.signal_name() or f'exit code {first.exitcode}'})") from None
    finally:
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)
        for s, handler in previous.items():
            signal.signal(s, handler)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    errors = [results[rank][0] for rank in sorted(results) if results[rank][0] is not None]  # rank 0's first
    if errors:
        raise errors[0]
    return results[0][1]


def _launched(fn, threads: int, args: tuple, said: dict[str, int], shown: bool):
    """One launched process: ``fn(*args)`` on ``threads`` threads, as (error, result): a BertkitError is handed back
    to the launcher, which raises rank 0's (the others hold the same, or a consequence of it), else the first. The
    library's loggers at the launcher's levels, shown (``shown``) as the CLI shows them: plain lines on stderr, each
    as it is said."""
    for stream in (sys.stdout, sys.stderr):  # a line as it is said, also into a log file
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    for name, level in said.items():
        logging.getLogger(name).setLevel(level)
    if shown:  # the CLI's handler
        logging.getLogger("bertkit").addHandler(StderrHandler())
    torch.set_num_threads(threads)
    try:
        return None, fn(*args)
    except BertkitError as e:
        return e, None
