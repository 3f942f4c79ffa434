"""The text of task files as a pre-training corpus: task-adaptive pre-training (Gururangan et al., 2020, "Don't Stop
Pretraining"), ``bertkit pretrain --init-from MODEL --corpus train.tsv``.

A task file is read with the reader fine-tuning uses for it, and each example becomes one document: its text, or
its two texts as two paragraphs (a sentence pair). Labels are not read.

- GLUE TSV files (``data.glue``): the text columns of the first GLUE task whose names the header holds (SST-2's
  ``sentence``, MRPC's ``#1 String`` / ``#2 String``, ...); CoLA's train/dev files, which have no header, by their
  four columns. Split on tabs only, as GLUE's text holds unbalanced quotes.
- Other CSV / TSV / JSONL files (``data.readers.read_table``): the ``text_field`` column when there is one, else
  the first known pair of columns (``text``/``text_pair``, ``sentence1``/``sentence2``, ``question``/``sentence``,
  ``premise``/``hypothesis``), else ``text`` or ``sentence``.
- CoNLL files (``data.conll``), recognised by a first line ``-DOCSTART-`` (or, with ``--corpus-format task``, any
  file not named .tsv, .csv or .jsonl): each sentence's words.

:func:`sniff` tells the corpus reader which files are task files (``--corpus-format auto``): ``.tsv`` and ``.csv``
files, JSONL files whose first record has no ``text`` field but task columns (or a ``text_pair``), and CoNLL files.
A task file is read whole (task files are small next to a pre-training corpus); its errors name the file and line.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path

from bertkit.data.conll import read_conll
from bertkit.data.glue import GLUE_TASKS, read_glue
from bertkit.data.readers import DataError, check_file, open_text, read_table

PAIRS = (("text", "text_pair"), ("sentence1", "sentence2"), ("question", "sentence"), ("premise", "hypothesis"))
SINGLES = ("text", "sentence")
_SNIFF_CHARS = 1 << 16


def _first_line(path: Path) -> str:
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        while line := f.readline(_SNIFF_CHARS):  # a bounded read: a corpus file may be one huge line
            if line.strip():
                return line.rstrip("\r\n")
    return ""


def _jsonl_keys(path: Path) -> list[str]:
    try:
        record = json.loads(_first_line(path) or "null")
    except json.JSONDecodeError:
        return []
    return list(record) if isinstance(record, dict) else []


def sniff(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a task file by its name and first line (see the module docstring)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        return True
    if suffix in (".jsonl", ".json"):
        keys = _jsonl_keys(path)
        return "text_pair" in keys or ("text" not in keys and any(c in keys for pair in PAIRS for c in pair))
    return _first_line(path).startswith("-DOCSTART-")


def _glue_task(header: list[str]) -> str | None:
    """The first GLUE task whose text columns ``header`` holds; ``cola`` for CoLA's headerless train/dev rows."""
    for name, spec in GLUE_TASKS.items():
        if name == "cola":  # read_glue takes a CoLA file for headerless unless it starts "index": as SST-2 instead
            continue
        if any(c in header for c in spec.text_a) and (spec.text_b is None or any(c in header for c in spec.text_b)):
            return name
    if len(header) == 4 and header[1] in ("0", "1"):
        return "cola"
    return None


def _columns(path: Path, header: list[str], text_field: str) -> tuple[str, str | None]:
    if text_field in header and text_field not in SINGLES:
        return text_field, None
    for a, b in PAIRS:
        if a in header and b in header:
            return a, b
    for a in SINGLES:
        if a in header:
            return a, None
    raise DataError(path, 1, f"no text column in {header}: name it with --text-field (or use text, sentence1 ...)")


def _header(path: Path, fmt: str) -> list[str]:
    if fmt == "jsonl":
        return _jsonl_keys(path)
    with open_text(path, newline="") as f:
        row = next(csv.reader(f, delimiter="\t" if fmt == "tsv" else ","), [])
    return [c.strip() for c in row]


def task_examples(path: str | os.PathLike, text_field: str = "text") -> list[tuple[str, str | None]]:
    """(text, pair text or None) per example of a task file, in file order."""
    path = check_file(path)
    fmt = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix.lower(), "conll")
    if fmt == "conll" or _first_line(path).startswith("-DOCSTART-"):
        return [(" ".join(s.words), None) for s in read_conll(path, require_tags=False)]
    header = [c.strip() for c in _first_line(path).split("\t")] if fmt == "tsv" else _header(path, fmt)
    task = _glue_task(header) if fmt == "tsv" else None
    if task is not None:
        examples = read_glue(path, task)
    else:
        text, pair = _columns(path, _header(path, fmt), text_field)
        examples = read_table(path, text, pair, label_column=None, fmt=fmt, require_label=False)
    return [(e.text_a, e.text_b) for e in examples]


def task_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[str]:
    """Each example of a task file as a document: its text, or its pair as two paragraphs."""
    for a, b in task_examples(path, text_field):
        text = a.strip() if not b or not b.strip() else f"{a.strip()}\n\n{b.strip()}"
        if text:
            yield text
