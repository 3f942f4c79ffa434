"""Run one ``bertkit`` command (pretrain, finetune, evaluate, predict) as a child process, for the studies.

A child process, not an in-process call, so that a study can (1) bound a run's wall-clock time, (2) abandon the
run in flight when the study itself is asked to stop (SIGTERM / SIGINT via ``GracefulStop``), and (3) drive the
commands exactly as a user types them, whatever their internals become.

The child's output goes to a log file, written atomically when the child ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit import models
from bertkit.errors import InputError
from bertkit.files import atomic_write, remove_stale_temp_files, write_json
from bertkit.options import add_options
from bertkit.tokenization import load_tokenizer


@dataclass
class ChildResult:
    """How a child run ended: ``code`` (0 = success), whether it ran out of ``max_time`` or was abandoned because
    the study was asked to stop, and its wall-clock seconds."""

    code: int
    timed_out: bool
    stopped: bool
    seconds: float
    log: Path | None


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGKILL when the study process dies (even by SIGKILL), so a killed
    study leaves no run writing into a cell that its resumed self will redo. Not SIGTERM: a run takes that as a
    request to finish its step and save, and a suite resumed meanwhile found the dying run's run.json in the cell
    it had just cleared ("already holds a run"); a resumed cell restarts, or resumes from its last checkpoint."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def bertkit_argv(args: Sequence[str]) -> list[str]:
    """The command line that runs ``bertkit ARGS`` with this interpreter (and this process's PYTHONPATH)."""
    return [sys.executable, "-m", "bertkit.cli", *[str(a) for a in args]]


def run_bertkit(
    args: Sequence[str],
    log: Path | None = None,
    max_time: float | None = None,
    stop=None,
    poll: float = 0.2,
    grace: float = 60.0,
) -> ChildResult:
    """Run ``bertkit ARGS`` to its end; return how it ended.

    Args:
        args: the command and its flags, e.g. ``["finetune", "--task", "sst2", ...]``.
        log: where the child's stdout + stderr go (atomically, at the end); None = discarded.
        max_time: seconds; past it the child gets SIGTERM (a run that saves on SIGTERM keeps its work), then
            SIGKILL after ``grace`` seconds.
        stop: a ``GracefulStop`` (or anything with ``.requested``); when set, the child gets SIGTERM likewise.
    """
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # the tree this bertkit came from, for the child
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryFile(mode="w+b") as out:
        t0 = time.perf_counter()
        # own process group: a Ctrl-C at the terminal reaches the study first, which then stops the child itself
        child = subprocess.Popen(
            bertkit_argv(args),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        timed_out = stopped = False
        term_sent: float | None = None
        try:
            while True:
                try:
                    code = child.wait(timeout=poll)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.perf_counter()
                if term_sent is None:
                    if stop is not None and getattr(stop, "requested", False):
                        stopped = True
                    elif max_time is not None and now - t0 > max_time:
                        timed_out = True
                    if stopped or timed_out:
                        child.send_signal(signal.SIGTERM)
                        term_sent = now
                elif now - term_sent > grace:
                    child.kill()
        except BaseException:
            child.kill()
            child.wait()
            raise
        seconds = time.perf_counter() - t0
        if log is not None:
            out.seek(0)
            data = out.read()
            log.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(log, lambda p: p.write_bytes(data))
    return ChildResult(code=code, timed_out=timed_out, stopped=stopped, seconds=seconds, log=log)


def check_stop(stop, what: str, output: Path) -> None:
    """After a child run: when a stop was asked for (SIGTERM / SIGINT, ``training.interrupt.GracefulStop``), end the
    study (``stop.raise_``) saying that ``what`` stopped and that rerunning the command resumes from ``output``."""
    if stop is not None and stop.requested:
        stop.raise_(f"{what} stopped; finished work is kept in {output}: run the same command again to resume")


def log_tail(result: ChildResult, lines: int = 8) -> str:
    """The last lines of a child's log, for an error message."""
    if result.log is None or not result.log.is_file():
        return ""
    text = result.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[-lines:])


def open_study(out: Path, settings_name: str, record: dict, what: str, hint: str) -> None:
    """Create (or reopen, to resume) a study directory: remove dead processes' temp files, and record its settings
    in ``settings_name`` — or, when resuming, refuse settings that differ from the recorded ones, naming them."""
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(out)
    settings = out / settings_name
    if not settings.is_file():
        write_json(settings, record)
        return
    saved = json.loads(settings.read_text(encoding="utf-8"))
    if saved != record:
        diff = sorted(k for k in set(saved) | set(record) if saved.get(k) != record.get(k))
        raise InputError(f"{out} holds {what} with other settings ({', '.join(diff)}): use another --output, or {hint}")


# the finetune flags a study sets for each of its cells: a study's --finetune-args may not give them
CELL_FLAGS = ("--output", "--model", "--train", "--dev", "--seed", "--lr", "--task", "--resume")


def finetune_options() -> list[type]:
    """The config of ``bertkit finetune`` (a study's pass-through flags: new finetune flags pass too)."""
    # torch (the finetune recipe's module): `bertkit downstream -h` and `bertkit ablate -h` stay light
    from bertkit.recipes.finetune import FinetuneConfig

    return [FinetuneConfig]


def configure_finetune(parser) -> None:
    """``bertkit finetune``'s flags for its GLUE and NER tasks on ``parser`` (what the studies run and what their
    ``--finetune-args`` are checked against): ``--task`` and the option dataclasses, as the command builds them."""
    for cls in finetune_options():
        add_options(parser, cls)


def check_model_dir(model: str | os.PathLike, flag: str = "--model") -> None:
    """Refuse, before a study makes its directory, a ``model`` its runs could not load: not a directory, no
    readable config (``config.json`` / ``bert_config.json``), no tokenizer (``vocab.txt`` / ``tokenizer.json``).
    One line naming the file, as each run would have said it (in every cell's log)."""
    path = Path(model)
    if not path.is_dir():
        raise InputError(f"{flag} {model}: not a directory")
    models.of_directory(path).config_class().from_pretrained(path)
    load_tokenizer(path)
