"""The one family of errors a user is meant to read: ``cli.main`` prints their message and exits with their code.

Each subclass also derives from the built-in error it refines (``ValueError`` for bad input, ``RuntimeError``
for a failed run), so library callers can keep catching those.
"""

from __future__ import annotations

import re


class BertkitError(Exception):
    """An error with a message meant for the user: it names the file, line, field or flag at fault."""

    exit_code = 2


class InputError(BertkitError, ValueError):
    """A file, flag or value given by the user is wrong (names it)."""


class RunError(BertkitError, RuntimeError):
    """A run cannot go on (disk full, interrupted, incompatible resume...)."""

    exit_code = 1


class RunRefused(RunError):
    """A run that cannot start or continue as asked (its output holds another run, a resume that differs, an
    unreadable run record); the message says what to do (exit code 2, as a refused command)."""

    exit_code = 2


class PretrainError(RunRefused):
    """A pre-training run that cannot start or continue; the message says what to do."""


class MissingFileError(InputError, FileNotFoundError):
    """A file or directory the user named (or one a model directory must hold) does not exist (names it)."""


class LossNotFinite(RunError, FloatingPointError):
    """A training loss or gradient norm stopped being finite; the message names the last good checkpoint."""

    exit_code = 3


def allocation_failure(error: BaseException) -> str | None:
    """What a failed allocation asked for (``"a table of 11.9 GiB"``), or None when ``error`` is something else:
    torch's CPU allocator raises a ``RuntimeError`` naming the bytes, Python a ``MemoryError``. A command that builds
    a model from the user's sizes turns it into a one-line refusal naming those flags, never a traceback."""
    if isinstance(error, MemoryError):
        return "more memory than there is"
    if not isinstance(error, RuntimeError) or "allocate" not in str(error):
        return None
    asked = re.search(r"allocate (\d+) bytes", str(error))
    return f"a table of {int(asked[1]) / 2**30:.1f} GiB" if asked else "more memory than there is"
