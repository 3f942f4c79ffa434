"""A run's output directory: its resume keys (``run.json``), its checkpoints, its metrics log and the temp files a
killed process left behind. The three recipes use it the same way::

    run = RunDir(output, ctx)
    run.check_writable()                             # before any work: an unwritable output fails now, not after it
    saved = run.resume_checkpoint(keys, resume)      # None: start afresh; refuses what must not be overwritten
    run.write_keys(keys)
    run.truncate_metrics(step)                       # lines a killed run wrote after its checkpoint go
    run.append_metrics({"step": ..., "loss": ...})

``keys`` are the settings that change what is computed: a resumed run must have the same ones (others, like how
often to save, may change between the two halves). A run whose ``run.json`` records its whole ``config`` (pre-training,
whose data preparation may be killed before the first checkpoint) claims its directory with :meth:`RunDir.claim`
instead of ``resume_checkpoint``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertkit.errors import InputError, RunError, RunRefused
from bertkit.files import remove_stale_temp_files, write_json, write_text
from bertkit.training.checkpointing import checkpoint_dir, list_checkpoints, load_checkpoint
from bertkit.training.distributed import DistContext

logger = logging.getLogger(__name__)

RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
# safetensors (Rust's tempfile crate) writes ``.tmpXXXXXX`` beside the file it saves and renames it; a kill in
# between leaves it (mode 0600, as large as the model). It names no process: in a run's own directory, at the start
# of the run that owns it, it can only be a killed writer's
_SAFETENSORS_TMP = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


class RunDir:
    """The directory a training run writes (``ctx``: only rank 0 writes)."""

    def __init__(self, path: str | os.PathLike, ctx: DistContext | None = None):
        self.path = Path(path)
        self.ctx = ctx or DistContext()

    @property
    def checkpoints(self) -> Path:
        return checkpoint_dir(self.path)

    # ------------------------------------------------------------------------------------------ before the work

    def check_writable(self, flag: str = "--output") -> None:
        """Create the directory and write a probe file in it: an unwritable output is a one-line error now, before
        the work, not a traceback after it."""
        check_writable(self.path, flag)

    def remove_stale(self, *subdirs: str) -> list[Path]:
        """Temp files killed processes left in the run's directory (and ``subdirs``): ours (``.NAME.tmp-PID`` of a
        dead PID) and safetensors' own ``.tmpXXXXXX``."""
        removed: list[Path] = []
        if not self.ctx.is_main:
            return removed
        for d in (self.path, self.checkpoints, *(self.path / s for s in subdirs)):
            removed += remove_stale_temp_files(d)
            if d.is_dir():
                for p in d.iterdir():
                    if _SAFETENSORS_TMP.match(p.name) and p.is_file():
                        p.unlink(missing_ok=True)
                        removed.append(p)
        return removed

    # ------------------------------------------------------------------------------------------ resume keys

    def read_keys(self) -> dict[str, Any] | None:
        path = self.path / RUN_JSON
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise TypeError("not a JSON object")
            return record
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as e:
            raise InputError(
                f"{path}: not a readable run record ({type(e).__name__}: {e}); remove it, or choose another --output"
            ) from None

    def write_keys(self, keys: dict[str, Any]) -> None:
        if self.ctx.is_main:
            self.path.mkdir(parents=True, exist_ok=True)
            write_json(self.path / RUN_JSON, keys, sort_keys=False)

    @staticmethod
    def differences(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
        """``--flag NOW (the run used THEN)`` for each key of ``now`` that differs in ``saved`` (nested dicts:
        their keys are flags)."""
        out = []
        for key, value in now.items():
            old = saved.get(key)
            if isinstance(value, dict) and isinstance(old, dict):
                out += RunDir.differences(old, value, "--")
            elif old != value:
                name = prefix + key.replace("_", "-") if prefix else key
                out.append(f"{name} {value} (the run used {old})")
        return out

    def latest_intact_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that reads back, with its state; a newer unreadable one (a torn or corrupted file)
        is skipped with a warning naming it. None when there is no checkpoint; an error when none is readable."""
        found = [p for _, p in list_checkpoints(self.checkpoints)]
        errors = []
        for path in reversed(found):
            try:
                state = load_checkpoint(path)
            except ValueError as e:
                errors.append(str(e))
                logger.warning("%s; falling back to the previous checkpoint", e)
                continue
            return path, state
        if errors:
            raise InputError("--resume: no readable checkpoint: " + "; ".join(errors))
        return None

    def resume_checkpoint(
        self, keys: dict[str, Any], resume: bool, finished: str | None = None, overwrite: bool = False
    ) -> dict[str, Any] | None:
        """The checkpoint ``--resume`` continues from; None to start afresh.

        Without ``resume``, a directory holding an interrupted run (a checkpoint) is refused rather than overwritten,
        and so is a finished run (the file ``finished`` exists) unless ``overwrite``. With it, a checkpoint whose run
        keys (``run.json``, else the checkpoint's own ``run``) differ from ``keys`` is refused, naming them."""
        have = bool(list_checkpoints(self.checkpoints))
        done = finished is not None and (self.path / finished).is_file()
        if not resume:
            if have:
                raise InputError(
                    f"{self.path} holds an interrupted run ({self.checkpoints}): pass --resume to "
                    f"continue it, or remove {self.checkpoints} to start afresh"
                )
            if done and not overwrite:
                raise InputError(
                    f"{self.path} already holds a finished run ({finished}): pass --overwrite to "
                    "replace it, or choose another --output"
                )
            return None
        if not have:
            if done:
                raise InputError(
                    f"--resume: {self.path} holds a finished run ({finished}) and no checkpoint: nothing to resume"
                )
            logger.warning("--resume: no checkpoint in %s; starting from step 0", self.checkpoints)
            return None
        _, state = self.latest_intact_checkpoint()
        saved = self.read_keys() or state.get("run") or {}
        differ = self.differences(saved, keys)
        if differ:
            raise InputError(f"--resume: these differ from the interrupted run in {self.path}: " + "; ".join(differ))
        return state

    # ------------------------------------------------------------------------------------------ a recorded run

    def claim(self, config: dict[str, Any], keys: Iterable[str], resume: bool, overwrite: bool, files: tuple) -> bool:
        """Pre-training's protocol, for a run whose ``run.json`` records its ``config`` (``keys``: the fields a
        resumed run must share; ``files``: what such a run writes, which ``overwrite`` removes). Refuse to silently
        overwrite a different run; with ``overwrite``, clear what a run writes. Returns whether to resume: with
        ``resume`` and no run.json yet (killed while preparing), the run starts afresh, keeping its ``data``."""
        out = self.path
        record_path, keys = out / RUN_JSON, tuple(keys)
        if out.exists() and not out.is_dir():
            raise RunRefused(f"{out} exists and is not a directory; choose another --output")
        names = {p.name for p in out.iterdir() if not p.name.startswith(".")} if out.is_dir() else set()
        if resume and not record_path.is_file():
            if names - set(files):
                raise RunRefused(f"--resume: {out} holds no pre-training run (no run.json); drop --resume to start one")
            # a run killed before it began training: nothing to resume, start it afresh; an interrupted preparation
            # of its shards (data/) resumes, or starts afresh if its files or settings changed
            # (data/pretraining/prepare.py)
            self.clear(files, keep=("data",))
            self.remove_stale("data", "data/shards")
            return False
        if resume:
            old = read_record(record_path)["config"]
            diff = [k for k in keys if k in old and old[k] != config[k]]
            if diff:
                raise RunRefused(
                    f"--resume: these settings differ from the run in {out}: "
                    + ", ".join(f"{k} (was {old[k]!r}, now {config[k]!r})" for k in diff)
                    + "; use the run's settings, or start a new run with another --output"
                )
            self.remove_stale("data", "data/shards")
            return True
        if names and not overwrite:
            if record_path.is_file():
                old = read_record(record_path)["config"]
                diff = [k for k in keys if old.get(k) != config[k]]
                what = (
                    "a run with the same settings"
                    if not diff
                    else f"a different run (differs in {', '.join(diff[:6])})"
                )
                raise RunRefused(
                    f"{out} already holds {what}. Pass --resume to continue it, --overwrite to replace "
                    "it, or choose another --output"
                )
            raise RunRefused(
                f"{out} exists and is not empty (and is not a bertkit pre-training run); choose another "
                "--output, or pass --overwrite to write into it"
            )
        if names:
            self.clear(files)
        return False

    def clear(self, files: Iterable[str], keep: tuple[str, ...] = ()) -> None:
        """Remove ``files`` (names of files or directories in the run's directory) but those in ``keep``."""
        for name in files:
            if name in keep:
                continue
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()

    # ------------------------------------------------------------------------------------------ metrics.jsonl

    def append_metrics(self, line: dict[str, Any]) -> None:
        """One JSON line, appended (a kill tears at most the last line, which :meth:`truncate_metrics` drops)."""
        if self.ctx.is_main:
            with open(self.path / METRICS, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.path / METRICS
        if not path.is_file():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a kill
        return out

    def truncate_metrics(self, step: int) -> None:
        """On resume, drop the lines written after the checkpoint being resumed (they will be written again)."""
        if not self.ctx.is_main or not (self.path / METRICS).is_file():
            return
        keep = [r for r in self.read_metrics() if r.get("step", 0) <= step]
        write_text(self.path / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


def read_record(path: Path) -> dict[str, Any]:
    """A run.json that records a ``config``; a torn or foreign one is an error naming it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record["config"], dict):
            raise TypeError("not an object with a 'config'")
        return record
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise RunRefused(
            f"{path}: not a readable run record ({type(e).__name__}: {e}); start the run again with "
            "--overwrite, or choose another --output"
        ) from None


@contextlib.contextmanager
def os_errors(out: Path):
    """An unwritable output or a full disk as one line, not a traceback."""
    try:
        yield
    except OSError as e:
        where = e.filename or out
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise RunError(
                f"{where}: disk full ({e.strerror}); free space, then run again with --resume (the "
                "previous checkpoint is intact)"
            ) from None
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RunRefused(f"{where}: cannot write ({e.strerror}); choose a writable --output") from None
        raise


def check_writable(directory: str | os.PathLike, flag: str = "--output") -> None:
    """Create ``directory`` (and parents) and write and remove a probe file in it; an ``InputError`` naming ``flag``
    and the reason when that fails (read-only, no permission, not a directory, disk full)."""
    directory = Path(directory)
    try:
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(directory))
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".bertkit-write-probe-"):
            pass
    except OSError as e:
        raise InputError(
            f"{flag} {directory}: cannot write there ({e.strerror or e}); choose a writable directory"
        ) from None


def run_record(precision: str, device: Any, backend: str = "pytorch") -> dict[str, str]:
    """What a metrics record says about how it was computed: precision, backend and device (type)."""
    import torch

    return {"precision": precision, "backend": backend, "device": torch.device(device).type}
