"""SIGTERM / SIGINT as a request to stop cleanly, not a kill.

SLURM, Kubernetes and ``docker stop`` send SIGTERM before SIGKILL; Ctrl-C sends SIGINT. Inside
``GracefulStop()``, either signal only sets ``stop.requested``; the training loop checks it after each optimizer
step, writes a checkpoint atomically, and raises ``Interrupted`` (exit code 128 + signal number), whose message
says how to resume. A second signal while the checkpoint is being written is remembered, not acted on: the save
finishes first. Outside the main thread (where handlers cannot be installed) it does nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from bertkit.errors import RunError
from bertkit.training.distributed import DistContext, all_reduce_mean


class Interrupted(RunError):
    """The run stopped on a signal after saving a checkpoint."""

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum

    def __reduce__(self):  # handed back from a launched process (distributed.launch) with its signal
        return type(self), (str(self), self.signum)


class GracefulStop:
    """Context manager: ``with GracefulStop() as stop: ... if stop.requested: save(); stop.raise_(msg)``."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, object] = {}
        self._owner = os.getpid()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame) -> None:  # noqa: ARG002
        if os.getpid() != self._owner:
            # a forked worker (e.g. a corpus-reading pool) inherited this handler. SIGTERM must kill it, or
            # ``pool.terminate()`` could never stop it; Ctrl-C's SIGINT (sent to the whole process group) is the
            # parent's to handle, so the worker ignores it, as pool workers conventionally do, and no task is lost
            if signum == signal.SIGTERM:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        self.count += 1
        if self.signum is None:
            self.signum = signum
            name = signal.Signals(signum).name
            print(
                f"\nbertkit: {name} received: finishing this step and saving a checkpoint "
                f"(a second signal waits for the save)",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> GracefulStop:
        self._owner = os.getpid()
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def agreed(self, ctx: DistContext, spent: bool = False) -> str | None:
        """The stop every process agrees on after a step, the one agreement of every run: ``"signal"`` when any
        process was signalled, ``"time"`` when any says its time budget is ``spent``, else None."""
        spent_any, signalled_any = all_reduce_mean(ctx, [float(spent), float(self.requested)])
        return "signal" if signalled_any else ("time" if spent_any else None)

    def raise_(self, message: str) -> None:
        """Raise ``Interrupted`` for the signal received, with ``message`` (say how to resume)."""
        raise Interrupted(message, self.signum or signal.SIGTERM)
