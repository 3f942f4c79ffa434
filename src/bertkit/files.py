"""Writing files so that a crash never leaves a half-written one: the one leaf module every writer uses.

Every file a run writes goes through ``atomic_write``: the content goes to a temp file in the same directory, is
fsynced, and is renamed over the target. Temp files are named ``.NAME.tmp-PID`` so that a later run can tell
which ones a dead process left (``remove_stale_temp_files``).
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_TMP_RE = re.compile(r"^\..+\.tmp-(\d+)$")


def resolved(path: str | os.PathLike) -> Path:
    """``path`` absolute, its links resolved (``Path.resolve()``), except that a link loop (``l1 -> l2 -> l1``) is
    resolved as far as it goes instead of raising (Python 3.11's ``RuntimeError: Symlink loop``)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def is_link_loop(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a symbolic link that never reaches a file (a loop of links)."""
    try:
        Path(path).resolve(strict=True)
    except RuntimeError:  # Python 3.11's Symlink loop
        return True
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def unreadable_reason(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a file of data, or None when it can (a regular file, or a link to one): a pipe,
    socket or device (reading it may never end, or never stop: ``/dev/zero``), a link loop, a directory, nothing.
    Every reader of a corpus, task or BLiMP file asks this before it opens one."""
    path = Path(path)
    if path.is_file():
        return None
    if is_link_loop(path):
        return "a symbolic link loop (it never reaches a file)"
    if path.is_dir():
        return "is a directory, not a file"
    if path.exists():
        return "not a regular file (a pipe, socket or device)"
    return "no such file"


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
