"""The text of task files as a pre-training corpus: task-adaptive pre-training (Gururangan et al., 2020, "Don't Stop
Pretraining"), ``bertkit pretrain --init-from MODEL --corpus train.tsv``.

Each example of a task file becomes one document: its text, or its two texts as two paragraphs (a sentence pair).
Labels are never read (nor checked: a corpus needs the text only).

- TSV files, GLUE's included: the text columns named by the header (below); CoLA's train/dev files, which have no
  header, by their fourth column. Split on tabs only, as ``data.tasks.glue`` does: GLUE's text holds unbalanced quotes.
- CSV / JSONL files (``data.tasks.readers.read_table``, the generic fine-tuning reader): the same columns.
- CoNLL files (``data.tasks.conll.read_conll``), recognised by a first line ``-DOCSTART-`` (or, with
  ``--corpus-format task``, any file not named .tsv, .csv or .jsonl): each sentence's words.

The text columns: ``--text-field`` when the header has it (a column other than ``text`` / ``sentence``); else the
first pair present of ``text``/``text_pair``, ``sentence1``/``sentence2``, ``question``/``sentence``,
``premise``/``hypothesis`` and the GLUE tasks' pairs (MRPC's ``#1 String``/``#2 String``, QQP's ``question1``/
``question2`` ...); else ``text`` or ``sentence``.

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

from bertkit.data.tasks.conll import read_conll
from bertkit.data.tasks.glue import GLUE_TASKS
from bertkit.data.tasks.readers import DataError, check_file, open_text, read_table

PAIRS = (
    ("text", "text_pair"),
    ("sentence1", "sentence2"),
    ("question", "sentence"),
    ("premise", "hypothesis"),
) + tuple((a, b) for spec in GLUE_TASKS.values() if spec.text_b for a, b in zip(spec.text_a, spec.text_b, strict=True))
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
    except (json.JSONDecodeError, RecursionError):  # not a task file: the JSONL reader names what is wrong
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
        return [c.strip() for c in next(csv.reader(f), [])]


def _tsv_examples(path: Path, text_field: str) -> list[tuple[str, str | None]]:
    """A TSV file's text columns by its header, split on tabs only; CoLA's headerless rows by their fourth column."""
    with open_text(path, newline="") as f:
        rows = [(n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(f, 1) if line.strip()]
    header = [c.strip() for c in rows[0][1]]
    if len(header) == 4 and header[1] in ("0", "1") and not set(header) & {c for p in PAIRS for c in p}:
        a, b = 3, None  # CoLA train/dev: source, label, original mark, sentence
    else:
        rows = rows[1:]
        names = _columns(path, header, text_field)
        a, b = header.index(names[0]), header.index(names[1]) if names[1] else None
    out = []
    for n, row in rows:
        if len(row) <= max(a, b or 0):
            raise DataError(path, n, f"expected {len(header)} tab-separated columns, got {len(row)}")
        out.append((row[a], row[b] if b is not None else None))
    return out


def task_examples(path: str | os.PathLike, text_field: str = "text") -> list[tuple[str, str | None]]:
    """(text, pair text or None) per example of a task file, in file order."""
    path = check_file(path)
    fmt = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix.lower(), "conll")
    if fmt == "conll" or _first_line(path).startswith("-DOCSTART-"):
        return [(" ".join(s.words), None) for s in read_conll(path, require_tags=False)]
    if fmt == "tsv":
        return _tsv_examples(path, text_field)
    text, pair = _columns(path, _header(path, fmt), text_field)
    examples = read_table(path, text, pair, label_column=None, fmt=fmt, require_label=False)
    return [(e.text_a, e.text_b) for e in examples]


def task_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[str]:
    """Each example of a task file as a document: its text, or its pair as two paragraphs."""
    for a, b in task_examples(path, text_field):
        text = a.strip() if not b or not b.strip() else f"{a.strip()}\n\n{b.strip()}"
        if text:
            yield text
