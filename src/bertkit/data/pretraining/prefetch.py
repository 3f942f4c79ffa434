"""The data feed's prefetcher: the next batches built while the model trains on this one."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def _built(data, epoch: int, index: int, **options) -> tuple[dict, float, int]:
    """``data.batch(...)`` with the seconds it took to build and its real tokens (the loader's own rate)."""
    t = time.perf_counter()
    batch = data.batch(epoch, index, **options)
    return batch, time.perf_counter() - t, int(batch["attention_mask"].sum())


def default_workers(device_type: str) -> int:
    """``--loader-workers``' default: on a GPU a third of this process's share of the cores (2 to 8), since a
    compiled step reads faster than two workers build (their rate is in the log); on a CPU none (a thread), the
    cores being the step's."""
    if device_type != "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, max(2, cores // (3 * int(os.environ.get("LOCAL_WORLD_SIZE", "1")))))


class Prefetcher:
    """Builds the next batches while the model trains on this one: in a background thread (``workers=0``), or in
    ``workers`` processes, ``2 * workers`` batches ahead. Processes keep a GPU fed: a bert-base step on a GPU is
    shorter than the Python that builds a batch of 128 while holding the interpreter lock the step's own launches
    need. Batches are pure functions of (epoch, index) and their options, so prefetching changes nothing but the wall
    clock."""

    def __init__(self, workers: int = 0):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

        if workers > 0:  # forkserver: the workers start clean, without the trainer's threads or CUDA state
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            self.pool, self.ahead = ProcessPoolExecutor(workers, mp_context=ctx), 2 * workers
        else:
            self.pool, self.ahead = ThreadPoolExecutor(1, thread_name_prefix="bertkit-data"), 1
        self.pending: dict[tuple, object] = {}  # (epoch, index, options) -> future, for self.data
        self.data = None
        self.workers = max(1, workers)
        self.build_s = self.wait_s = 0.0  # seconds building batches (all workers), and the trainer waiting on one
        self.tokens = 0  # the real tokens of the batches handed over

    def rates(self) -> dict[str, float]:
        """Since the last call: ``loader_tokens_per_s``, what the loader alone builds in a second with its workers
        (tokens over build seconds, times the workers), and ``loader_wait_s``, seconds the trainer waited for a
        batch. A loader that keeps ahead builds faster than the step reads and is waited on for ~0 seconds."""
        rates = {"loader_wait_s": round(self.wait_s, 3)}
        if self.build_s > 0:
            rates["loader_tokens_per_s"] = self.tokens / self.build_s * self.workers
        self.build_s = self.wait_s = 0.0
        self.tokens = 0
        return rates

    def get(self, data, epoch: int, index: int, ahead: Callable[[int], dict] | None = None, **options) -> dict:
        """``data.batch(epoch, index, **options)``, built ahead when it was asked for; then the next batches are
        submitted, the k-th after this one with ``ahead(k)``'s options (default: these). The options are the
        batch's (a scheduled mask rate, ``raw``): part of what is built, so part of the key."""
        if data is not self.data:  # a new stage (ramp, phase 2): what was built ahead is for the old one
            for f in self.pending.values():
                f.cancel()
            self.pending, self.data = {}, data
        f = self.pending.pop((epoch, index, tuple(sorted(options.items()))), None)
        t = time.perf_counter()
        batch, seconds, tokens = f.result() if f is not None else _built(data, epoch, index, **options)
        self.wait_s += time.perf_counter() - t  # built ahead: only what the trainer had to wait for
        self.build_s, self.tokens = self.build_s + seconds, self.tokens + tokens
        e, i = epoch, index
        for k in range(1, self.ahead + 1):
            e, i = (e, i + 1) if i + 1 < data.num_batches(e) else (e + 1, 0)
            kw = ahead(k) if ahead is not None else options
            key = (e, i, tuple(sorted(kw.items())))
            if key not in self.pending:
                self.pending[key] = self.pool.submit(_built, data, e, i, **kw)
        for key in [key for key in self.pending if key[:2] < (epoch, index + 1)]:  # passed, or asked otherwise
            self.pending.pop(key).cancel()
        return batch

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
