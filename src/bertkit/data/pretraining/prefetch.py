"""The data feed's prefetcher: the next batches built while the model trains on this one."""

from __future__ import annotations


class Prefetcher:
    """Builds the next batches while the model trains on this one: in a background thread (``workers=0``), or in
    ``workers`` processes, ``2 * workers`` batches ahead. Processes keep a GPU fed: a bert-base step on a GPU is
    shorter than the Python that builds a batch of 128 while holding the interpreter lock the step's own launches
    need. Batches are pure functions of (epoch, index), so prefetching changes nothing but the wall clock."""

    def __init__(self, workers: int = 0):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

        if workers > 0:  # forkserver: the workers start clean, without the trainer's threads or CUDA state
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            self.pool, self.ahead = ProcessPoolExecutor(workers, mp_context=ctx), 2 * workers
        else:
            self.pool, self.ahead = ThreadPoolExecutor(1, thread_name_prefix="bertkit-data"), 1
        self.pending: dict[tuple[int, int], object] = {}  # (epoch, index) -> future, for self.data
        self.data = None

    def get(self, data, epoch: int, index: int) -> dict:
        if data is not self.data:  # a new stage (ramp, phase 2): what was built ahead is for the old one
            for f in self.pending.values():
                f.cancel()
            self.pending, self.data = {}, data
        f = self.pending.pop((epoch, index), None)
        batch = f.result() if f is not None else data.batch(epoch, index)
        e, i = epoch, index
        for _ in range(self.ahead):
            e, i = (e, i + 1) if i + 1 < data.num_batches(e) else (e + 1, 0)
            if (e, i) not in self.pending:
                self.pending[(e, i)] = self.pool.submit(data.batch, e, i)
        return batch

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
