"""How the library's lines reach a terminal: ``logging.getLogger("bertkit...")`` as plain lines on stderr. The CLI
shows them so (:func:`show_on_stderr`), and so does each process ``pretrain --processes`` launches
(``training.distributed.launch``)."""

from __future__ import annotations

import logging
import sys


class StderrHandler(logging.StreamHandler):
    """The library's lines as plain lines on the current stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):  # looked up at each record: stderr may have been replaced since
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def show_on_stderr() -> None:
    """What the CLI shows: the library's warnings, and a training run's progress (``bertkit.run`` at INFO:
    ``bertkit.training.log``)."""
    log = logging.getLogger("bertkit")
    if not any(isinstance(h, StderrHandler) for h in log.handlers):
        log.addHandler(StderrHandler())
        log.setLevel(logging.WARNING)
        logging.getLogger("bertkit.run").setLevel(logging.INFO)
