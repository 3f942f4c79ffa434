"""Tables of a study's numbers: CSV text and GitHub-flavoured Markdown, from lists of row dicts."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any


def columns_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every key of ``rows``, in first-seen order."""
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    return columns


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as CSV (a header of every key; a missing or None value is an empty cell)."""
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns_of(rows), lineterminator="\n")
    w.writeheader()
    w.writerows([{k: ("" if v is None else v) for k, v in r.items()} for r in rows])
    return buf.getvalue()


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, digits: int = 1) -> str:
    """Rows as a Markdown table (numbers right-aligned, floats with ``digits`` decimals)."""
    columns = list(columns or columns_of(rows))
    numeric = [all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c), digits) for c in columns) + " |")
    return "\n".join(lines) + "\n"
