"""Generic CSV / TSV / JSONL classification files, with the text, pair and label columns chosen by name.

Also the pieces every task reader shares: ``DataError`` (names the file and line), ``Examples`` (a list that
counts the bad rows skipped with ``skip_bad_rows=True``), ``ClassificationExample`` and ``open_text`` /
``read_text``: task files are UTF-8 (a BOM allowed); a byte that is not is a ``DataError`` naming the file, line
and column, never a ``UnicodeDecodeError`` traceback. (Prose corpora differ:
``data.pretraining.corpus.read_lines`` falls back to Windows-1252 with a warning, since a stray character in a book
is harmless, while in a task file it may sit in a label or an id.)
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from bertkit.errors import InputError
from bertkit.files import unreadable_reason

logger = logging.getLogger(__name__)
# A field may be as long as a line may: csv's default limit (131,072 characters) stopped a long document in a CSV or
# TSV cell with a traceback (_csv.Error), where the same text on a line of its own is read. Every task reader's csv
# goes through this module (readers, swag, embeddings.data, pretraining.task_text import it).
csv.field_size_limit(2**31 - 1)


class DataError(InputError):
    """A malformed input file: the message names the file and the line (or the record) at fault."""

    def __init__(self, path: str | os.PathLike, line: int | str | None, message: str):
        where = f"{path}" if line is None else f"{path}:{line}" if isinstance(line, int) else f"{path} ({line})"
        super().__init__(f"{where}: {message}")
        self.path, self.line = str(path), line


class Examples(list):
    """A list of examples read from ``path``; ``skipped`` counts the bad rows left out (``skip_bad_rows``)."""

    def __init__(self, items=(), path: str | os.PathLike = "", skipped: int = 0):
        super().__init__(items)
        self.path = str(path)
        self.skipped = skipped


class RowGuard:
    """Raise a DataError for a bad row, or (with ``skip_bad_rows``) count it and go on."""

    def __init__(self, path: str | os.PathLike, skip_bad_rows: bool):
        self.path, self.skip, self.skipped, self.first_error = path, skip_bad_rows, 0, None

    def bad(self, line: int | str | None, message: str) -> None:
        error = DataError(self.path, line, message)
        if not self.skip:
            raise error
        self.skipped += 1
        self.first_error = self.first_error or str(error)

    def report(self, n_read: int) -> None:
        if self.skipped:
            logger.warning(
                f"bertkit: skipped {self.skipped} bad rows of {self.path} (kept {n_read}); first: {self.first_error}"
            )
        if n_read == 0:
            raise DataError(
                self.path, None, "no usable rows" + (f" ({self.skipped} bad rows skipped)" if self.skipped else "")
            )


def jsonl_records(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, object) for each non-blank JSONL line, or (line number, what is wrong) for a line that is not
    a JSON object: every JSONL reader's first step."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield n, f"not valid JSON ({e.msg})"
            continue
        except RecursionError:
            yield n, "JSON nested too deeply to read"
            continue
        yield n, obj if isinstance(obj, dict) else f"expected a JSON object, got {type(obj).__name__}"


def not_utf8(path: str | os.PathLike) -> DataError:
    """The error for a file that does not decode as UTF-8: it names the first bad line, column and byte."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):  # a UTF-8 sequence never holds the byte 0x0a, so lines split safely
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataError(
                    path,
                    n,
                    f"byte 0x{raw[e.start]:02x} at column {e.start + 1} is not UTF-8 "
                    f"({e.reason}); task files must be UTF-8: convert it, e.g. with "
                    f"'iconv -f windows-1252 -t utf-8'",
                )
    return DataError(path, None, "the file is not valid UTF-8")


class open_text:
    """``open(path, encoding="utf-8-sig")`` whose decoding errors are a ``DataError`` naming the file and line; a path
    that is no regular file (a pipe, a device, a link loop: ``files.unreadable_reason``) is one before it is opened.

    It offers what the readers use of a text file: iteration (csv.reader, line loops), ``read`` and ``readline``.
    """

    def __init__(self, path: str | os.PathLike, newline: str | None = None):
        self.path = path
        if (why := unreadable_reason(path)) is not None:  # a pipe or /dev/zero: a read that never ends
            raise DataError(path, None, why)
        self._f = open(path, encoding="utf-8-sig", newline=newline)  # noqa: SIM115 (closed by __exit__/close)
        self._lines = 0  # lines read so far (a NUL byte is named by its line)

    def _call(self, fn, *args):
        try:
            text = fn(*args)
        except UnicodeDecodeError:
            raise not_utf8(self.path) from None
        if "\x00" in text:  # text editors and every tokenizer stop at it: a binary file, or a broken export
            line = self._lines + text.count("\n", 0, text.index("\x00")) + 1
            raise DataError(self.path, line, "a NUL byte: task files are text; this one is binary or corrupt")
        self._lines += text.count("\n")
        return text

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> str:
        return self._call(self._f.__next__)

    def read(self, size: int = -1) -> str:
        return self._call(self._f.read, size)

    def readline(self, size: int = -1) -> str:
        return self._call(self._f.readline, size)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def read_text(path: str | os.PathLike) -> str:
    """The whole of a UTF-8 task file (a BOM dropped), or a ``DataError`` naming the first line that is not UTF-8."""
    with open_text(path) as f:
        return f.read()


def check_file(path: str | os.PathLike) -> Path:
    """The path, or a clear error if it is missing, not a regular file (a pipe, a device, a link loop), or empty."""
    path = Path(path)
    if (why := unreadable_reason(path)) is not None:
        raise DataError(path, None, why)
    with open(path, "rb") as f:
        head = f.read(65536)
    if not head.strip().lstrip(b"\xef\xbb\xbf").strip():
        raise DataError(path, None, "the file is empty")
    return path


@dataclass
class ClassificationExample:
    """One sentence (or sentence pair) with its label: a class name (str), a float (regression) or None."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    line: int = 0


def finite_number(raw: Any) -> float | None:
    """A regression label or a similarity score as a float; None for what is not a finite number (``nan`` and
    ``inf`` parse as floats but would train on a NaN loss)."""
    if isinstance(raw, bool | list | dict):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def json_type(value: Any) -> str:
    """How a JSON value is named in a message: null, a list, an object..."""
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", bool: "a boolean"}.get(type(value), f"a {type(value).__name__}")


def blank_text(example: ClassificationExample, guard: RowGuard, line: int, columns: tuple) -> bool:
    """Whether the example's text (or its pair) holds nothing but spaces: a bad row (``guard``), naming its column,
    where it would otherwise train on an input of [CLS] [SEP] alone."""
    for text, column in ((example.text_a, columns[0]), (example.text_b, columns[1])):
        if text is not None and not text.strip():
            guard.bad(line, f"empty text in column {column!r}")
            return True
    return False


def _delimiter(path: Path, fmt: str | None) -> str:
    fmt = fmt or {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix.lower(), "")
    if fmt not in ("csv", "tsv", "jsonl"):
        raise DataError(path, None, "cannot tell the format from the extension; pass --format csv|tsv|jsonl")
    return fmt


def read_table(
    path: str | os.PathLike,
    text_column: str,
    pair_column: str | None = None,
    label_column: str | None = "label",
    regression: bool = False,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
    require_label: bool = True,
) -> Examples:
    """Read a CSV / TSV (header row) or JSONL file (one object per line) into ClassificationExamples.

    Columns are chosen by name. A missing label column is allowed only with ``require_label=False``
    (prediction input). ``regression=True`` parses labels as floats and rejects non-numeric ones.
    """
    path = check_file(path)
    fmt = _delimiter(path, fmt)
    guard = RowGuard(path, skip_bad_rows)
    rows: list[tuple[int, dict[str, Any] | str]] = []  # (line, row or what is wrong with it)
    with open_text(path, newline="") as f:
        if fmt == "jsonl":
            rows.extend(jsonl_records(f))
            columns = None
        else:
            reader = csv.reader(f, delimiter="\t" if fmt == "tsv" else ",")
            try:
                header = next(reader)
            except StopIteration:
                raise DataError(path, None, "the file is empty") from None
            columns = [c.strip() for c in header]
            for row in reader:
                n = reader.line_num
                if not row or not any(c.strip() for c in row):
                    continue
                if len(row) != len(columns):
                    rows.append((n, f"expected {len(columns)} columns (as the header), got {len(row)}"))
                    continue
                rows.append((n, dict(zip(columns, row))))
    wanted = [c for c in (text_column, pair_column) if c]
    if columns is not None:
        for c in wanted:
            if c not in columns:
                raise DataError(path, 1, f"no column {c!r} in the header {columns}")
        if require_label and label_column and label_column not in columns:
            raise DataError(path, 1, f"no label column {label_column!r} in the header {columns}")
    out = Examples(path=path)
    for n, row in rows:
        if isinstance(row, str):
            guard.bad(n, row)
            continue
        missing = [c for c in wanted if c not in row]
        if missing:
            guard.bad(n, f"missing field {missing[0]!r}")
            continue
        not_text = [c for c in wanted if row[c] is None or isinstance(row[c], bool | list | dict)]  # JSONL's
        if not_text:
            guard.bad(n, f"field {not_text[0]!r} is {json_type(row[not_text[0]])}, not a text")
            continue
        label: str | float | None = None
        if label_column and label_column in row and row[label_column] is not None:
            raw = row[label_column]
            if regression:
                label = finite_number(raw)
                if label is None:
                    guard.bad(n, f"label {raw!r} in column {label_column!r} is not a finite number")
                    continue
            elif isinstance(raw, list | dict):
                guard.bad(n, f"label in column {label_column!r} is {json_type(raw)}, not one class name")
                continue
            else:
                label = str(raw).strip()
                if not label:
                    guard.bad(n, f"empty label in column {label_column!r}")
                    continue
        elif require_label and label_column:
            guard.bad(n, f"missing label field {label_column!r}")
            continue
        out.append(
            ClassificationExample(
                guid=str(row.get("id", row.get("index", n))),
                text_a=str(row[text_column]),
                text_b=str(row[pair_column]) if pair_column else None,
                label=label,
                line=n,
            )
        )
        if blank_text(out[-1], guard, n, (text_column, pair_column)):
            out.pop()
    guard.report(len(out))
    out.skipped = guard.skipped
    return out
