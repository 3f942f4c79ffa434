"""Work done once per run or once per node of a torchrun job (corpus preparation), while the other ranks wait.

``--prepare-on global`` (the default): rank 0 prepares, into an output directory every node sees (a shared file
system). ``--prepare-on node``: each node's local rank 0 prepares on its own disk (the output path is then local to
each node) and the other ranks of that node wait for it. The waiting goes through torchrun's rendezvous store (a
key per node, set to "ok" or to the preparer's error), not a collective: a waiting rank says every minute what it
waits for, stops with a clear message after ``timeout`` seconds, and stops at once, with the preparer's own message,
when the preparation failed, instead of hanging in a barrier.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bertkit.data.pretraining.shards import file_sha256, read_meta
from bertkit.errors import RunError
from bertkit.training.distributed import all_reduce_mean, broadcast_object

logger = logging.getLogger(__name__)
T = TypeVar("T")
SCOPES = ("global", "node")


def node_rank(ctx) -> int:
    """This process's node under torchrun (GROUP_RANK), else derived from the local world size."""
    if "GROUP_RANK" in os.environ:
        return int(os.environ["GROUP_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) or 1
    return ctx.rank // local_world


def _store():
    import torch.distributed as dist

    return dist.distributed_c10d._get_default_store()


def _refuse_shared(ctx, store, directory: Path, what: str, timeout: float, poll: float) -> None:
    """--prepare-on node with a directory every node sees would have several preparers write the same files: each
    node's preparer leaves a marker in ``directory``, waits for every node's, and refuses if it sees another's."""
    nodes = ctx.world_size // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    node = node_rank(ctx)
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / f".prepare-node-{node}"
    marker.write_text(f"{socket.gethostname()}\n", encoding="utf-8")
    deadline = time.monotonic() + timeout
    others: list[str] = []
    for phase in ("written", "looked"):  # every marker is written before anyone looks, and kept until all looked
        if phase == "looked":
            others = [p.name for p in directory.glob(".prepare-node-*") if p != marker]
        keys = [f"bertkit/once/{what}/{phase}/{n}" for n in range(nodes)]
        store.set(keys[node], b"1")
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(poll)
    marker.unlink(missing_ok=True)
    if others:
        raise RunError(
            f"--prepare-on node: {directory} is shared with other nodes ({', '.join(sorted(others))} "
            "seen there), so their preparations would overwrite each other; use --prepare-on global for "
            "an output on a shared file system, or an --output on each node's local disk"
        )


def once(
    ctx,
    scope: str,
    work: Callable[[], T],
    what: str,
    timeout: float = 7200.0,
    say: Callable[[str], None] = logger.info,
    poll: float = 0.5,
    directory: Path | None = None,
) -> T | None:
    """Run ``work`` on one process per ``scope`` ("global": rank 0; "node": local rank 0 of each node); the others
    wait until it has finished. Returns ``work``'s result on the process that ran it, None elsewhere. A failure of
    ``work`` is re-raised where it happened and reported, with its message, on every waiting rank. With scope "node",
    ``directory`` (where ``work`` writes) must not be one the nodes share."""
    if scope not in SCOPES:
        raise RunError(f"--prepare-on must be one of {', '.join(SCOPES)}, got {scope!r}")
    if not ctx.distributed:
        return work()
    node = node_rank(ctx) if scope == "node" else 0
    mine = ctx.local_rank == 0 if scope == "node" else ctx.rank == 0
    key = f"bertkit/once/{what}/{node}"
    store = _store()
    if mine:
        try:
            if scope == "node" and directory is not None:
                _refuse_shared(ctx, store, Path(directory), what, timeout, poll)
            result = work()
        except BaseException as e:
            store.set(key, f"error: {type(e).__name__}: {e}".encode())
            raise
        store.set(key, b"ok")
        return result
    preparer = f"node {node}'s local rank 0" if scope == "node" else "rank 0"
    start = last_said = time.monotonic()
    while not store.check([key]):
        now = time.monotonic()
        if now - start > timeout:
            raise RunError(
                f"rank {ctx.rank} waited {timeout:.0f} s for {preparer} to finish {what}, and it has not "
                "(still running, or its process died): raise --prepare-timeout for a corpus that takes "
                "longer, or prepare it first with one process"
            )
        if now - last_said >= 60:
            say(f"rank {ctx.rank}: waiting for {preparer} to finish {what} ({now - start:.0f} s so far)")
            last_said = now
        time.sleep(poll)
    status = store.get(key).decode()
    if status != "ok":
        raise RunError(f"{preparer} failed {what}, so rank {ctx.rank} stops too: {status.removeprefix('error: ')}")
    return None


def _fingerprint(vocab: os.PathLike, shard_dir: os.PathLike) -> dict:

    meta = read_meta(shard_dir) or {}
    return {
        "vocab": file_sha256(vocab) if os.path.isfile(vocab) else None,
        "shards": [(s["name"], s["tokens"]) for s in meta.get("shards", [])],
        "eval": (meta.get("eval") or {}).get("tokens"),
    }


def check_same_shards(ctx, vocab: os.PathLike, shard_dir: os.PathLike) -> None:
    """Every rank reads the vocabulary and shards rank 0 reads (node-local preparations must agree); a clear error
    on the ranks that differ."""
    if not ctx.distributed:
        return

    mine = _fingerprint(vocab, shard_dir)
    ref = broadcast_object(ctx, mine)
    same = mine == ref
    if all_reduce_mean(ctx, [float(same)])[0] < 1.0:
        raise RunError(
            f"rank {ctx.rank}'s prepared corpus in {shard_dir} "
            + (
                "matches rank 0's, but another rank's does not"
                if same
                else (
                    "differs from rank 0's (another vocabulary or other shards): each node must prepare the same "
                    "corpus files with the same vocabulary (pass --vocab to share one), or use --prepare-on global "
                    "on a shared file system"
                )
            )
        )
