"""A run's output directory: its resume keys (``run.json``), its checkpoints, its metrics log and the temp files a
killed process left behind. The three recipes use it the same way::

    run = RunDir(output, ctx)
    run.check_writable()                             # before any work: an unwritable output fails now, not after it
    opened = run.open(keys, resume, overwrite)       # the one resume protocol: refuses what must not be overwritten
    run.write_keys(keys)                             # opened.checkpoint: the state to continue from (None: step 0)
    run.truncate_metrics(step)                       # lines a killed run wrote after its checkpoint go
    run.append_metrics({"step": ..., "loss": ...})

``keys`` are the settings that change what is computed: a resumed run must have the same ones (others, like how
often to save, may change between the two halves). Every recipe opens its directory this one way (through
``training.run.Run``), pre-training included, whose data preparation may be killed before its ``run.json``.
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
from typing import Any, NamedTuple

from bertkit.errors import BertkitError, InputError, RunError, RunRefused
from bertkit.files import remove_stale_temp_files, write_json, write_text
from bertkit.training import distributed
from bertkit.training.checkpointing import check_resumable, checkpoint_dir, list_checkpoints, load_checkpoint
from bertkit.training.distributed import DistContext

logger = logging.getLogger(__name__)

RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
# safetensors (Rust's tempfile crate) writes ``.tmpXXXXXX`` beside the file it saves and renames it; a kill in
# between leaves it (mode 0600, as large as the model). It names no process: in a run's own directory, at the start
# of the run that owns it, it can only be a killed writer's
_SAFETENSORS_TMP = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


class Opened(NamedTuple):
    """What :meth:`RunDir.open` found: whether the run resumes, and the checkpoint it continues from (None: from
    step 0)."""

    resumed: bool
    path: Path | None
    checkpoint: dict[str, Any] | None


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
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            record = f"{type(e).__name__}: {e}"
        if not isinstance(record, dict):
            why = record if isinstance(record, str) else "not a JSON object"
            raise InputError(f"{path}: not a readable run record ({why}); remove it, or choose another --output")
        return record

    def write_keys(self, keys: dict[str, Any]) -> None:
        if self.ctx.is_main:
            self.path.mkdir(parents=True, exist_ok=True)
            write_json(self.path / RUN_JSON, keys, sort_keys=False)

    @staticmethod
    def differences(
        saved: dict[str, Any], now: dict[str, Any], prefix: str = "", names_only: bool = False
    ) -> list[str]:
        """``--flag NOW (the run used THEN)`` (or the key's name alone) for each key of ``now`` that differs in
        ``saved``; nested dicts: their keys are flags, and one the saved run does not record (a setting newer than
        the run) is not a difference."""
        out = []
        for key, value in now.items():
            old = saved.get(key)
            if isinstance(value, dict) and isinstance(old, dict):
                out += RunDir.differences(old, value, "--", names_only)
            elif prefix and key not in saved:
                continue
            elif old != value:
                name = prefix + key.replace("_", "-") if prefix else key
                out.append(key if names_only else f"{name} {value} (the run used {old})")
        return out

    def latest_intact_checkpoint(self, resumable: bool = True) -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that reads back (with ``resumable``: whole, ``check_resumable``), with its state; a
        newer one that does not (a torn or corrupted file) is skipped with a warning naming it. None when there is
        no checkpoint; an error when none is readable."""
        found = [p for _, p in list_checkpoints(self.checkpoints)]
        errors = []
        for path in reversed(found):
            try:
                state = load_checkpoint(path)
                if resumable:
                    check_resumable(path, state)
            except InputError as e:
                errors.append(str(e))
                continue
            for error in errors:  # said when there is one to fall back to (else the error says it all)
                logger.warning("%s; falling back to the previous checkpoint", error)
            return path, state
        if errors:
            raise InputError("--resume: no readable checkpoint: " + "; ".join(errors))
        return None

    def open(
        self,
        keys: dict[str, Any],
        resume: bool,
        overwrite: bool,
        files: Iterable[str] | None = None,
        prepared: Iterable[str] = (),
    ) -> Opened:
        """The one resume protocol of every run. ``keys``: the settings a resumed run must share with the one in
        the directory (``run.json``, else its newest checkpoint's ``run``; nested dicts compare the keys given);
        ``files``: the names a run writes (a directory holding others is no run's; ``--overwrite`` removes them);
        ``prepared``: those of ``files`` a run prepares before its ``run.json`` (pre-training's data).

        Without ``resume``: a directory holding a run (an interrupted, finished or begun one) is refused unless
        ``overwrite``, which clears it. With ``resume``: a finished run is refused (nothing to resume), and so are
        keys that differ; a run killed before its first checkpoint resumes from step 0 (with its recorded
        ``run.json``), one killed before its ``run.json`` starts afresh, keeping what it ``prepared``. Rank 0
        decides (and clears); every rank reads the checkpoint it continues from."""
        err: BertkitError | None = None
        resumed, found = False, None
        if self.ctx.is_main:
            try:
                resumed, found = self._decide(keys, resume, overwrite, tuple(files or ()), tuple(prepared))
            except BertkitError as e:
                err = e
        resumed, err = distributed.broadcast_object(self.ctx, (resumed, err))
        if err is not None:
            raise err
        if resumed and found is None:  # read once: rank 0's decision may have read it (a run without run.json)
            found = self.latest_intact_checkpoint()
        elif found is not None:  # read for its keys (which the user is told of first): now, is it a whole one?
            check_resumable(*found)
        return Opened(resumed, found[0] if found else None, found[1] if found else None)

    def finished(self, record: dict[str, Any] | None) -> bool:
        """Whether the run in the directory ended: its run.json says so (or, from before that field, a recorded
        ``config``: pre-training's) and what the end writes is there: ``train_log.json`` (fine-tuning, embeddings;
        alone from before the field too) or the model (pre-training; a run whose model was removed resumes)."""
        ended = (self.path / "train_log.json").is_file()
        if record is None or "finished" not in record and "config" not in record:
            return ended
        return bool(record.get("finished", True)) and (ended or (self.path / "model.safetensors").is_file())

    def _decide(
        self, keys: dict[str, Any], resume: bool, overwrite: bool, files: tuple[str, ...], prepared: tuple[str, ...]
    ) -> tuple[bool, tuple[Path, dict[str, Any]] | None]:
        """:meth:`open`'s decision on rank 0: whether to resume (raises what is refused), and the newest intact
        checkpoint when the decision read it (None when it did not)."""
        out = self.path
        if out.exists() and not out.is_dir():
            raise RunRefused(f"{out} exists and is not a directory; choose another --output")
        names = {p.name for p in out.iterdir() if not p.name.startswith(".")} if out.is_dir() else set()
        record, have = self.read_keys(), bool(list_checkpoints(self.checkpoints))
        done = self.finished(record)
        if resume:
            if done:
                raise InputError(
                    f"--resume: {out} holds a finished run (its model is written): nothing to resume; run again with "
                    "--overwrite in place of --resume to replace it, or choose another --output"
                )
            if record is None and not have:
                if names - set(files):  # files of its own (with no ``files`` given: any file): no run of ours
                    raise RunRefused(f"--resume: {out} holds no run (no run.json); drop --resume to start one")
                logger.warning("--resume: no checkpoint in %s; starting from step 0", self.checkpoints)
                self.clear(files, keep=prepared)  # an interrupted preparation resumes
                return False, None
            found = None if record is not None else self.latest_intact_checkpoint(resumable=False)  # its keys
            saved = record if found is None else found[1].get("run") or {}
            differ = self.differences(saved, keys)
            if differ:
                raise InputError(f"--resume: these differ from the interrupted run in {out}: " + "; ".join(differ))
            if not have:
                logger.warning("--resume: no checkpoint in %s; starting from step 0", self.checkpoints)
            return True, found
        if not overwrite and (have or record is not None or done):
            differ = self.differences(record, keys, names_only=True) if record is not None else []
            interrupted = f"an interrupted run ({self.checkpoints})" if have and not done else ""
            what = interrupted or ("a finished run" if done else "a run with the same settings")
            if differ:
                what = f"a different run (differs in {', '.join(differ[:6])})" + (
                    f", {interrupted}" * bool(interrupted)
                )
            raise InputError(
                f"{out} already holds {what}: pass --resume to continue it, --overwrite to replace it, or choose "
                "another --output"
            )
        if not overwrite and files and names:
            raise RunRefused(
                f"{out} exists and is not empty (and is not a bertkit run); choose another --output, or pass "
                "--overwrite to write into it"
            )
        self.clear((*files, RUN_JSON, "checkpoints") if overwrite else files)
        return False, None

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
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            if isinstance(record, dict) and isinstance(record.get("step", 0), int):
                out.append(record)  # not another program's line (a run writes one object per line)
        return out

    def truncate_metrics(self, step: int, pending: str | None = None) -> None:
        """On resume, drop the lines written after the checkpoint being resumed (they will be written again), and
        at its step the lines holding ``pending`` (an evaluation the checkpoint records as still to do)."""
        if not self.ctx.is_main or not (self.path / METRICS).is_file():
            return
        keep = [
            r
            for r in self.read_metrics()
            if r.get("step", 0) < step or r.get("step", 0) == step and (pending is None or pending not in r)
        ]
        write_text(self.path / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


def read_record(path: Path) -> dict[str, Any]:
    """A run.json that records a ``config``; a torn or foreign one is an error naming it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        record = f"{type(e).__name__}: {e}"
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        why = record if isinstance(record, str) else "not an object with a 'config'"
        raise RunRefused(
            f"{path}: not a readable run record ({why}); start the run again with --overwrite, or choose another "
            "--output"
        )
    return record


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
