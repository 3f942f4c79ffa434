"""Dynamic batching: one worker thread owns the model; requests' inputs are pooled into batches under a token budget.

A request submits its tokenized inputs with one :class:`~bertkit.features.PoolSpec` and gets a
``concurrent.futures.Future``. The worker takes everything pending (first come, first served, up to a few budgets'
worth), sorts it by length, cuts it into batches of at most ``max_batch_size`` inputs and ``max_batch_tokens`` padded
tokens, runs each batch once up to the deepest layer any of its inputs needs, and pools each row with its own
request's spec. Each result is written to ``results[index]`` of the request that owns the row, so results never mix.

Failure isolation: if a batch fails, each request in it is retried on its own, so only the request that breaks the
model fails (its future gets the exception); the worker keeps running. Cancelled requests (a client that timed out)
are dropped before they cost any compute. A bounded queue refuses new work with :class:`QueueFull` instead of
growing without end.

Memory: glibc keeps memory that a batch freed (activations, token lists) in its arenas, so a long-running server's
RSS creeps up with varied request sizes. The worker calls ``malloc_trim(0)`` (glibc only, through ctypes), which hands
that memory back to the OS: at most once per ``trim_interval_s``, when it goes idle or between batches under steady
load, and only after work.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import InputError
from bertkit.features import Encoder, PoolSpec


def _load_malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None on other C libraries and platforms)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


MALLOC_TRIM = _load_malloc_trim()


class QueueFull(RuntimeError):
    """The server has more pending inputs than ``max_pending``: try again later (HTTP 503)."""


@dataclass(eq=False)
class _Request:
    spec: PoolSpec
    results: list[Any]
    remaining: int
    future: concurrent.futures.Future
    failed: bool = False


@dataclass(eq=False)
class _Item:
    request: _Request
    index: int
    encoding: Any  # has .ids and .type_ids
    length: int = field(init=False)

    def __post_init__(self) -> None:
        self.length = len(self.encoding.ids)


@dataclass(eq=False)
class _Call:
    fn: Callable[[Encoder], Any]
    future: concurrent.futures.Future


class Stats:
    """Counters the worker updates (read by /metrics). Plain ints under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.batch_inputs = 0
        self.batch_tokens = 0  # real tokens computed
        self.padded_tokens = 0  # B x T actually run
        self.forward_seconds = 0.0
        self.failed_batches = 0
        self.trims = 0  # malloc_trim calls
        self.batch_size_buckets = collections.Counter()  # upper bound -> count

    BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

    def record(self, n: int, tokens: int, padded: int, seconds: float) -> None:
        with self.lock:
            self.batches += 1
            self.batch_inputs += n
            self.batch_tokens += tokens
            self.padded_tokens += padded
            self.forward_seconds += seconds
            bucket = next((b for b in self.BUCKETS if n <= b), float("inf"))
            self.batch_size_buckets[bucket] += 1


class BatchQueue:
    """The model's only user: a worker thread running dynamically formed batches.

    Args:
        encoder: the :class:`~bertkit.features.Encoder` (its model is used by the worker thread only).
        max_batch_tokens: padded tokens (B x longest T) per forward pass.
        max_batch_size: inputs per forward pass.
        max_wait_ms: how long the worker lingers after the first pending input for more to arrive (0: never).
        max_pending: pending inputs beyond which :meth:`submit` raises :class:`QueueFull`.
        trim_interval_s: after work, hand freed memory back to the OS (``malloc_trim``), at most this often (0:
            never; no effect where glibc is absent).
        max_length: the longest input the server lets through (its ``--max-length``; default the model's
            ``max_position_embeddings``): ``max_batch_tokens`` must hold one of them.
    """

    def __init__(
        self,
        encoder: Encoder,
        max_batch_tokens: int = 8192,
        max_batch_size: int = 128,
        max_wait_ms: float = 2.0,
        max_pending: int = 20000,
        trim_interval_s: float = 5.0,
        max_length: int | None = None,
    ):
        longest = encoder.max_tokens(max_length)
        if max_batch_tokens < longest:
            raise InputError(
                f"--max-batch-tokens {max_batch_tokens}: must hold one input of the maximum length ({longest}: the "
                "model's max_position_embeddings, or --max-length): raise --max-batch-tokens or lower --max-length"
            )
        self.encoder = encoder
        self.max_batch_tokens = int(max_batch_tokens)
        self.max_batch_size = int(max_batch_size)
        self.max_wait = max_wait_ms / 1000.0
        self.max_pending = int(max_pending)
        self.stats = Stats()
        self.trim_interval = float(trim_interval_s) if MALLOC_TRIM is not None else 0.0
        self._dirty = False  # work done since the last trim
        self._last_trim = 0.0
        self._pending: collections.deque[_Item] = collections.deque()
        self._calls: collections.deque[_Call] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> BatchQueue:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="bertkit-batcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker; pending requests fail with RuntimeError (none is left waiting forever)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self._cond:
            leftovers = list(self._pending) + list(self._calls)
            self._pending.clear()
            self._calls.clear()
        for job in leftovers:
            fut = job.future if isinstance(job, _Call) else job.request.future
            _set_exception(fut, RuntimeError("the server is shutting down"))

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def depth(self) -> int:
        """Pending inputs (not yet in a batch)."""
        return len(self._pending)

    # ------------------------------------------------------------------ submitting work

    def submit(self, encodings: Sequence[Any], spec: PoolSpec) -> concurrent.futures.Future:
        """Queue one request's inputs. The future resolves to a list (input order) of numpy arrays: [D] each, or
        [T_i, D] for pooling ``none``. Raises :class:`QueueFull` when the queue is full."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = _Request(spec, [None] * len(encodings), len(encodings), future)
        if not encodings:
            future.set_result([])
            return future
        with self._cond:
            if self._stop or self._thread is None:
                raise RuntimeError("the batching worker is not running")
            if len(self._pending) + len(encodings) > self.max_pending:
                raise QueueFull(f"server busy: {len(self._pending)} inputs pending (limit {self.max_pending})")
            self._pending.extend(_Item(request, i, e) for i, e in enumerate(encodings))
            self._cond.notify()
        return future

    def call(self, fn: Callable[[Encoder], Any]) -> concurrent.futures.Future:
        """Run ``fn(encoder)`` on the worker thread, between batches (e.g. fill-mask). Returns a future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            if self._stop or self._thread is None:
                raise RuntimeError("the batching worker is not running")
            self._calls.append(_Call(fn, future))
            self._cond.notify()
        return future

    # ------------------------------------------------------------------ the worker

    def _run(self) -> None:
        import torch

        with torch.inference_mode(), self.encoder.autocast():  # one autocast: bf16 weight copies are cached
            while True:
                with self._cond:
                    while not self._pending and not self._calls and not self._stop:
                        wait = self._trim_wait()
                        if wait == 0.0:
                            self._cond.release()  # trimming can take milliseconds: let submitters in meanwhile
                            try:
                                self._trim()
                            finally:
                                self._cond.acquire()
                            continue
                        self._cond.wait(wait)
                    if self._stop:
                        return
                    if self._pending and not self._calls and self.max_wait > 0:
                        # linger briefly so concurrent requests share a batch (unless a full batch is waiting)
                        deadline = time.monotonic() + self.max_wait
                        while (
                            not self._stop
                            and sum(it.length for it in self._pending) < self.max_batch_tokens
                            and len(self._pending) < self.max_batch_size
                        ):
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            self._cond.wait(left)
                    calls = list(self._calls)
                    self._calls.clear()
                    items = self._take()
                for call in calls:
                    if call.future.set_running_or_notify_cancel():
                        try:
                            call.future.set_result(call.fn(self.encoder))
                        except BaseException as exc:  # noqa: BLE001 - reported to the caller, worker goes on
                            call.future.set_exception(exc)
                self._dirty = True
                if items:
                    try:
                        self._process(items)
                    except Exception as exc:  # noqa: BLE001 - a bug here must fail requests, not the worker
                        for it in items:
                            it.request.failed = True
                            _set_exception(it.request.future, exc)
                if self._trim_wait() == 0.0:  # under steady load the worker may never go idle
                    self._trim()

    def _trim_wait(self) -> float | None:
        """Seconds until a trim is due (0: now), or None when none is (nothing done since the last, or off)."""
        if not self._dirty or self.trim_interval <= 0:
            return None
        return max(0.0, self._last_trim + self.trim_interval - time.monotonic())

    def _trim(self) -> None:
        MALLOC_TRIM(0)
        self._dirty = False
        self._last_trim = time.monotonic()
        with self.stats.lock:
            self.stats.trims += 1

    def _take(self) -> list[_Item]:
        """Pending items in arrival order, up to four batches' worth of tokens (so none waits forever)."""
        items: list[_Item] = []
        tokens = 0
        while self._pending and tokens < 4 * self.max_batch_tokens:
            item = self._pending.popleft()
            if item.request.future.cancelled() or item.request.failed:
                continue
            items.append(item)
            tokens += item.length
        return items

    def _process(self, items: list[_Item]) -> None:
        plan = self.encoder.plan_batches([it.length for it in items], self.max_batch_size, self.max_batch_tokens)
        for batch_idx in plan:
            batch = [
                items[i] for i in batch_idx if not items[i].request.future.cancelled() and not items[i].request.failed
            ]
            if not batch:
                continue
            try:
                self._run_batch(batch)
            except Exception:  # noqa: BLE001 - isolate: retry each request's rows on their own
                with self.stats.lock:
                    self.stats.failed_batches += 1
                by_request: dict[int, list[_Item]] = {}
                for it in batch:
                    by_request.setdefault(id(it.request), []).append(it)
                for rows in by_request.values():
                    try:
                        self._run_batch(rows)
                    except Exception as exc:  # noqa: BLE001
                        rows[0].request.failed = True
                        _set_exception(rows[0].request.future, exc)

    def _run_batch(self, batch: list[_Item]) -> None:
        encoder = self.encoder
        start = time.perf_counter()
        ids, types, mask = encoder.collate([it.encoding for it in batch])
        specs = {it.request.spec for it in batch}
        depth = encoder.num_layers if any(s.depth < 0 for s in specs) else max(s.depth for s in specs)
        states, pooled = encoder.forward(ids, types, mask, depth, any(s.pooling == "cls_pooled" for s in specs))
        outputs: list[Any] = [None] * len(batch)
        for spec in specs:
            rows = [j for j, it in enumerate(batch) if it.request.spec == spec]
            sel = rows if len(rows) < len(batch) else slice(None)
            out = encoder.pool_batch(
                [s[sel] for s in states], pooled[sel] if pooled is not None else None, mask[sel], spec
            )
            arrays = [r.cpu().numpy() for r in out] if isinstance(out, list) else out.cpu().numpy()
            for k, j in enumerate(rows):
                outputs[j] = arrays[k]
        self.stats.record(len(batch), int(mask.sum()), mask.numel(), time.perf_counter() - start)
        # deliver only after the whole batch succeeded: a failure never leaves a request half-filled
        for it, vec in zip(batch, outputs):
            request = it.request
            request.results[it.index] = vec
            request.remaining -= 1
            if request.remaining == 0 and not request.failed:
                _set_result(request.future, request.results)


def _set_result(future: concurrent.futures.Future, value: Any) -> None:
    if future.set_running_or_notify_cancel():
        future.set_result(value)


def _set_exception(future: concurrent.futures.Future, exc: BaseException) -> None:
    try:
        if not future.done():
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)
    except (concurrent.futures.InvalidStateError, RuntimeError):
        pass
