"""The data feed's prefetcher: the next batches built while the model trains on this one."""

from __future__ import annotations

from collections.abc import Callable


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

    def get(self, data, epoch: int, index: int, ahead: Callable[[int], dict] | None = None, **options) -> dict:
        """``data.batch(epoch, index, **options)``, built ahead when it was asked for; then the next batches are
        submitted, the k-th after this one with ``ahead(k)``'s options (default: these). The options are the
        batch's (a scheduled mask rate, ``raw``): part of what is built, so part of the key."""
        if data is not self.data:  # a new stage (ramp, phase 2): what was built ahead is for the old one
            for f in self.pending.values():
                f.cancel()
            self.pending, self.data = {}, data
        f = self.pending.pop((epoch, index, tuple(sorted(options.items()))), None)
        batch = f.result() if f is not None else data.batch(epoch, index, **options)
        e, i = epoch, index
        for k in range(1, self.ahead + 1):
            e, i = (e, i + 1) if i + 1 < data.num_batches(e) else (e + 1, 0)
            kw = ahead(k) if ahead is not None else options
            key = (e, i, tuple(sorted(kw.items())))
            if key not in self.pending:
                self.pending[key] = self.pool.submit(data.batch, e, i, **kw)
        for key in [key for key in self.pending if key[:2] < (epoch, index + 1)]:  # passed, or asked otherwise
            self.pending.pop(key).cancel()
        return batch

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
