"""One rule for what a command writes: an output that is one of its inputs is refused, and so is an existing output
unless ``--overwrite``; a failed command leaves no output directory it made.

The commands that write a model directory (``finetune`` and its sentence-embedding tasks, ``distill``, ``vocab``,
``vocab extend``, ``convert``; ``downstream`` for its study directory) call :func:`check_output` before they read
anything heavy; those that make their output in one go (``vocab``, ``vocab extend``, ``convert``, ``embed``,
``export``, which writes graph files beside a model and refuses an existing graph unless ``--overwrite``) write under
:func:`removed_on_failure`. A training run's directory
keeps its checkpoints when it fails (``--resume`` continues it); a new one refused before its first checkpoint goes
(:func:`removed_if_refused`). The writes themselves stay atomic
(:mod:`bertkit.files`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from bertkit.errors import InputError, RunError
from bertkit.files import resolved as _resolved

PathLike = str | os.PathLike
# what every model directory a command writes holds: an input of one of these names inside --output would be replaced
MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json")


def _named_inputs(inputs: Mapping[str, PathLike | Iterable[PathLike] | None]) -> Iterator[tuple[str, Path]]:
    for flag, value in inputs.items():
        if value is None:
            continue
        values = [value] if isinstance(value, str | os.PathLike) else list(value)
        for v in values:
            yield flag, Path(v).expanduser()


def check_output(
    output: PathLike,
    inputs: Mapping[str, PathLike | Iterable[PathLike] | None] | None = None,
    *,
    overwrite: bool | None = False,
    flag: str = "--output",
    writes: Iterable[str] = (),
    whole: bool = True,
    figures: bool = False,
) -> Path:
    """Refuse ``output`` (a directory to write) before anything is written, with one line naming ``flag``:

    - it exists and is not a directory;
    - it is one of ``inputs`` (flag -> path, or paths; the same file or directory after resolving links), or it
      would replace one: an input that is a file named in ``writes`` inside it;
    - it lies inside an input directory (a corpus or data directory would read back what it wrote; a model
      directory would hold another model), or, when the command owns it ``whole`` (a run or study directory it
      fills and ``--overwrite`` clears), an input lies inside it;
    - it exists and holds files (``whole=False``: one of ``writes``), unless ``overwrite`` (None: the command's run
      directory judges an existing output itself, as ``finetune``'s ``--resume`` does).

    ``whole=False``: the command writes only the files named in ``writes`` into ``output`` (``vocab -o
    DIR/vocab.txt``), so inputs and other files beside them are no concern. ``figures``: the command writes an
    evaluation's figures (metrics.json and predictions), which never go into a model directory (one that holds a
    config.json: a fine-tuned model's own metrics.json would be replaced). Returns ``output`` as a Path."""
    out = Path(output).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(f"{flag} {out}: exists and is not a directory; choose another {flag}")
    resolved, writes = _resolved(out), set(writes)  # a link loop resolves as far as it goes, not a traceback
    for name, path in _named_inputs(inputs or {}):
        target = _resolved(path)
        if target == resolved:
            raise InputError(f"{flag} {out}: is also {name}; write to a new directory, never over an input")
        if target.parent == resolved and target.name in writes:
            raise InputError(f"{flag} {out}: would replace {name} {path}; choose another {flag}")
        if target in resolved.parents and target.is_dir():
            raise InputError(f"{flag} {out}: is inside {name} {path}; write outside every input")
        if whole and resolved in target.parents and target.exists():
            raise InputError(f"{flag} {out}: holds {name} {path}; write to a directory that holds no input")
    if figures and (out / "config.json").is_file():
        raise InputError(
            f"{flag} {out}: holds a model (config.json); an evaluation's figures go to a directory of their own"
        )
    if overwrite is False and not whole and out.is_dir():
        for name in sorted(writes):
            if (out / name).exists():
                raise InputError(
                    f"{flag} {out}: would replace its {name}; pass --overwrite to replace it, or choose another {flag}"
                )
    elif overwrite is False and out.is_dir() and any(out.iterdir()):
        raise InputError(
            f"{flag} {out}: already exists and is not empty; pass --overwrite to replace what it holds, or choose "
            f"another {flag}"
        )
    return out


def check_output_file(
    output: PathLike, inputs: Mapping[str, PathLike | Iterable[PathLike] | None], flag: str = "--output"
) -> Path:
    """Refuse, in one line naming ``flag``, an output *file* that is one of ``inputs`` (flag -> path or paths; the same
    file after resolving links) or an existing directory: what ``embed --output`` would write over. Returns it."""
    out = Path(output).expanduser()
    if out.is_dir():
        raise InputError(f"{flag} {out}: is a directory; name the file to write")
    for name, path in _named_inputs(inputs):
        if _resolved(path) == _resolved(out):
            raise InputError(f"{flag} {out}: is also {name}; write to a new file, never over an input")
    return out


@contextlib.contextmanager
def removed_on_failure(
    directory: PathLike, only: type[BaseException] | tuple[type[BaseException], ...] = BaseException
) -> Iterator[Path]:
    """Run the body; when it raises (or is interrupted), remove ``directory`` if it did not exist before (and the
    parents above it that did not: the first missing one), so that a failed command leaves nothing that blocks the
    corrected one. A directory that existed is left as it is. ``only``: the failures that remove it (``prepare``
    keeps an interrupted preparation, which resumes, and removes a refused one)."""
    directory = Path(directory)
    top = directory
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    existed = directory.exists()
    try:
        yield directory
    except only:
        if not existed and top.is_dir():
            shutil.rmtree(top, ignore_errors=True)
        raise


@contextlib.contextmanager
def removed_if_refused(directory: PathLike, is_main: bool = True) -> Iterator[Path]:
    """A training run's :func:`removed_on_failure`: when the body fails with a refusal or an unforeseen error, and
    ``directory`` was new (or empty) and holds no checkpoint, what the run made there is removed, so that the
    corrected command runs (issue 54, item 7: a half-made run directory refused it as 'a different run'). A run that
    stopped on a signal or whose loss diverged (a ``RunError``) keeps what it wrote, for ``--resume`` and for reading;
    so does a run resumed into an existing directory. Rank 0 alone removes (``is_main``)."""
    directory = Path(directory)
    existed = directory.exists()
    fresh = not existed or (directory.is_dir() and not any(directory.iterdir()))
    try:
        yield directory
    except Exception as e:
        checkpoints = directory / "checkpoints"
        saved = checkpoints.is_dir() and any(checkpoints.iterdir())
        if fresh and is_main and not isinstance(e, RunError) and directory.is_dir() and not saved:
            for child in directory.iterdir() if existed else ():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            if not existed:
                shutil.rmtree(directory, ignore_errors=True)
        raise
