"""Writing files so that a crash never leaves a half-written one: the one leaf module every writer uses.

Every file a run writes goes through ``atomic_write``: the content goes to a temp file in the same directory, is
fsynced, and is renamed over the target. Temp files are named ``.NAME.tmp-PID`` so that a later run can tell
which ones a dead process left (``remove_stale_temp_files``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_TMP_RE = re.compile(r"^\..+\.tmp-(\d+)$")


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path``, fsync it, and rename it to ``path``.

    The new file gets the process umask's permissions (like any file ``open`` creates), whatever the writer
    (``safetensors`` and ``torch.save`` included) chose for the temp file.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, data: Any, *, sort_keys: bool = True) -> None:
    """``data`` as indented JSON, atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys) + "\n")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temp_files(directory: str | os.PathLike) -> list[Path]:
    """Remove the ``.NAME.tmp-PID`` files in ``directory`` whose process is gone. Returns what was removed."""
    directory = Path(directory)
    removed = []
    if not directory.is_dir():
        return removed
    for p in directory.iterdir():
        m = _TMP_RE.match(p.name)
        if m and not _pid_alive(int(m.group(1))) and p.is_file():
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed
