"""Readers for every GLUE task in its original TSV layout, and each task's labels and official metrics.

Columns are found by the header's names (CoLA's train/dev files have no header: fixed positions), so the
train, dev and test layouts of a task all read with one spec; test files (no label column) give ``label=None``.
Rows are split on tabs only: GLUE's text holds unbalanced quotes, so no CSV quoting is applied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bertkit.data.tasks.readers import (
    ClassificationExample,
    DataError,
    Examples,
    RowGuard,
    blank_text,
    check_file,
    finite_number,
    open_text,
)


@dataclass(frozen=True)
class GlueTask:
    name: str
    text_a: tuple[str, ...]  # header names that may hold the first text (first found wins)
    text_b: tuple[str, ...] | None
    label: tuple[str, ...]
    labels: tuple[str, ...] | None  # None: regression
    metrics: tuple[str, ...]  # the first is the one the best checkpoint is chosen by

    @property
    def is_regression(self) -> bool:
        return self.labels is None


_BINARY = ("0", "1")
_NLI3 = ("contradiction", "entailment", "neutral")
_NLI2 = ("entailment", "not_entailment")

GLUE_TASKS: dict[str, GlueTask] = {
    "cola": GlueTask("cola", ("sentence",), None, ("label",), _BINARY, ("mcc", "accuracy")),
    "sst2": GlueTask("sst2", ("sentence",), None, ("label",), _BINARY, ("accuracy",)),
    "mrpc": GlueTask("mrpc", ("#1 String",), ("#2 String",), ("Quality",), _BINARY, ("f1", "accuracy")),
    "stsb": GlueTask("stsb", ("sentence1",), ("sentence2",), ("score",), None, ("pearson", "spearman")),
    "qqp": GlueTask("qqp", ("question1",), ("question2",), ("is_duplicate",), _BINARY, ("f1", "accuracy")),
    "mnli": GlueTask("mnli", ("sentence1",), ("sentence2",), ("gold_label",), _NLI3, ("accuracy",)),
    "mnli-mm": GlueTask("mnli-mm", ("sentence1",), ("sentence2",), ("gold_label",), _NLI3, ("accuracy",)),
    "qnli": GlueTask("qnli", ("question",), ("sentence",), ("label",), _NLI2, ("accuracy",)),
    "rte": GlueTask("rte", ("sentence1",), ("sentence2",), ("label",), _NLI2, ("accuracy",)),
    "wnli": GlueTask("wnli", ("sentence1",), ("sentence2",), ("label",), _BINARY, ("accuracy",)),
    # the diagnostic set: diagnostic.tsv (index, sentence1, sentence2) or diagnostic-full.tsv (Premise, ...)
    "ax": GlueTask("ax", ("sentence1", "Premise"), ("sentence2", "Hypothesis"), ("label", "Label"), _NLI3, ("mcc",)),
}
GLUE_TASKS["diagnostic"] = GLUE_TASKS["ax"]

# CoLA train/dev: no header; source, label, original mark, sentence
_COLA_COLUMNS = ["source", "label", "mark", "sentence"]


def _pick(names: tuple[str, ...] | None, header: list[str]) -> str | None:
    if names is None:
        return None
    for n in names:
        if n in header:
            return n
    return None


def read_glue(path: str | os.PathLike, task: str, skip_bad_rows: bool = False, require_label: bool = False) -> Examples:
    """Read a GLUE TSV file (train, dev or test) of ``task``.

    Errors name the file and line: a wrong column count, an unknown label, a non-numeric STS-B score.
    ``require_label=True`` (training / evaluation) also rejects a file with no label column.
    """
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {sorted(GLUE_TASKS)}")
    spec = GLUE_TASKS[task]
    path = check_file(path)
    guard = RowGuard(path, skip_bad_rows)
    out = Examples(path=path)
    with open_text(path, newline="") as f:
        lines = [line.rstrip("\r\n") for line in f]
    start = 0
    first = lines[0].split("\t") if lines else []
    if task == "cola" and first and first[0] not in ("index", "id"):
        header = _COLA_COLUMNS  # train/dev layout: no header
    else:
        header = [c.strip() for c in first]
        start = 1
    col_a, col_b, col_label = _pick(spec.text_a, header), _pick(spec.text_b, header), _pick(spec.label, header)
    if col_a is None or (spec.text_b is not None and col_b is None):
        raise DataError(path, 1, f"header {header} lacks the {task} text columns {spec.text_a} / {spec.text_b}")
    if col_label is None and require_label:
        raise DataError(path, 1, f"header {header} has no label column {spec.label}")
    index = {name: i for i, name in enumerate(header)}
    for n, line in enumerate(lines[start:], start + 1):
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) != len(header):
            guard.bad(n, f"expected {len(header)} tab-separated columns, got {len(row)}")
            continue
        label: str | float | None = None
        if col_label is not None:
            raw = row[index[col_label]].strip()
            if spec.is_regression:
                label = finite_number(raw)
                if label is None:
                    guard.bad(n, f"label {raw!r} is not a finite number")
                    continue
            elif raw not in spec.labels:
                guard.bad(n, f"unknown label {raw!r} for {task} (expected one of {list(spec.labels)})")
                continue
            else:
                label = raw
        guid = row[index["index"]] if "index" in index else row[index["id"]] if "id" in index else str(n - start - 1)
        out.append(
            ClassificationExample(
                guid=guid.strip(),
                text_a=row[index[col_a]],
                text_b=row[index[col_b]] if col_b is not None else None,
                label=label,
                line=n,
            )
        )
        if blank_text(out[-1], guard, n, (col_a, col_b)):
            out.pop()
    guard.report(len(out))
    out.skipped = guard.skipped
    return out
