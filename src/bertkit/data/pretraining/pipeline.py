"""A plain pipeline of worker processes, fed in order with a bounded window: the shape of corpus preparation.

:func:`ordered_map` runs ``fn`` on a stream of tasks in ``workers`` processes and yields the results in the tasks'
order, with at most ``2 x workers`` tasks in flight, so memory stays bounded however long the stream (a plain
``Pool.imap`` reads its whole input ahead). This process reads the input and writes the output; the workers only
compute.

The workers are fresh interpreters (``python -m bertkit.data.pretraining.pipeline``) talking over their stdin/stdout
pipes, task ``k`` to worker ``k mod n``: nothing is forked from a process whose threads may have started, no pool thread
feeds another pool, the caller's ``__main__`` is never re-imported (no ``if __name__ == "__main__"`` needed), and a
worker that dies is an error naming it, not a pool that waits for ever or respawns it in a loop. Each worker drains
its stdin on a thread of its own, so this process's writes never wait on a worker that is writing a result.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import bertkit
from bertkit.errors import BertkitError

_HEADER = struct.Struct("<Q")


class PipelineError(BertkitError):
    """A worker process of the preparation pipeline failed."""


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def _send(stream, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _recv(stream) -> bytes | None:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    return data if len(data) == n else None


class _Worker:
    def __init__(self, index: int, setup: bytes):
        env = dict(os.environ)
        env["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: the workers already use every core
        root = str(Path(bertkit.__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.index = index
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bertkit.data.pretraining.pipeline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        _send(self.proc.stdin, setup)

    def send(self, arg: Any) -> None:
        try:
            _send(self.proc.stdin, pickle.dumps(arg, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError):
            self._died()

    def receive(self) -> Any:
        data = _recv(self.proc.stdout)
        if data is None:
            self._died()
        ok, value = pickle.loads(data)
        if not ok:
            if isinstance(value, BaseException):
                raise value
            raise PipelineError(f"preparation worker {self.index} failed:\n{value}")
        return value

    def _died(self):
        code = self.proc.wait(timeout=30)
        raise PipelineError(
            f"preparation worker {self.index} (pid {self.proc.pid}) exited with code {code}; its "
            "error, if any, is printed above"
        )

    def close(self, kill: bool) -> None:
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


@contextlib.contextmanager
def ordered_map(
    fn: Callable,
    tasks: Iterable[tuple[Any, Any]],
    workers: int | None = None,
    initializer: Callable | None = None,
    initargs: tuple = (),
    window: int | None = None,
) -> Iterator[Iterator[tuple[Any, Any]]]:
    """``(tag, fn(arg))`` for each ``(tag, arg)`` of ``tasks``, in order. ``workers`` processes (default: every core;
    0 or 1: in this process, same results). ``fn`` and ``initializer`` must be module-level functions;
    ``initializer(*initargs)`` runs once per worker (here when in process). Tags stay in this process. The workers
    are stopped on leaving the block, killed on an error."""
    workers = default_workers() if workers is None else workers
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield ((tag, fn(arg)) for tag, arg in tasks)
        return
    setup = pickle.dumps((fn, initializer, initargs), protocol=pickle.HIGHEST_PROTOCOL)
    pool = [_Worker(i, setup) for i in range(workers)]
    window = window or 2 * workers
    failed = True

    def run() -> Iterator[tuple[Any, Any]]:
        pending: deque = deque()  # (tag, worker) in task order
        k = 0
        for tag, arg in tasks:
            if len(pending) >= window:
                tag0, w = pending.popleft()
                yield tag0, w.receive()
            w = pool[k % workers]
            w.send(arg)
            pending.append((tag, w))
            k += 1
        while pending:
            tag0, w = pending.popleft()
            yield tag0, w.receive()

    try:
        yield run()
        failed = False
    finally:
        for w in pool:
            w.close(kill=failed)


def _serve() -> None:
    """A worker: read (fn, initializer, initargs), then tasks; answer each with (ok, result or error)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to stderr, never into the result stream
    tasks: queue.Queue = queue.Queue()

    def reader() -> None:
        while True:
            data = _recv(inp)
            tasks.put(data)
            if data is None:
                return

    threading.Thread(target=reader, daemon=True).start()
    setup = tasks.get()
    if setup is None:
        return
    fn, initializer, initargs = pickle.loads(setup)
    if initializer is not None:
        initializer(*initargs)
    while True:
        data = tasks.get()
        if data is None:
            return
        try:
            result = (True, fn(pickle.loads(data)))
        except BertkitError as e:
            result = (False, e)
        except Exception:  # noqa: BLE001 (sent back whole, raised in the main process)
            import traceback

            result = (False, traceback.format_exc())
        _send(out, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


class progress_bar:
    """A tqdm bar over the corpus files' bytes on disk (compressed bytes for compressed files), with the text MB/s
    in its postfix and an ETA; silent when ``enabled`` is false."""

    def __init__(self, files: list[Path], desc: str, enabled: bool, done_bytes: int = 0):
        self.bar = None
        self.sizes = [Path(f).stat().st_size for f in files]
        self.total = sum(self.sizes)
        self.base, self.file = 0, -1  # bytes of the files before the current one
        self.chars, self.t0 = 0, time.perf_counter()
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=done_bytes,
                desc=desc,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                mininterval=1.0,
                dynamic_ncols=True,
                smoothing=0.1,
            )

    def advance(self, block) -> None:
        if self.bar is None:
            return
        i, _ = block.where
        if i != self.file:
            self.base, self.file = sum(self.sizes[:i]), i
        self.chars += block.chars
        done = min(self.base + block.read_bytes, self.total)
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)
        elapsed = time.perf_counter() - self.t0
        self.bar.set_postfix_str(f"text {self.chars / max(elapsed, 1e-9) / 1e6:.2f} MB/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


if __name__ == "__main__":
    _serve()
