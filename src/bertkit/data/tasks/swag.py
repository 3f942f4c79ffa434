"""SWAG-format CSV (``video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3, label``).

Each example is a context (``sent1``) and N endings (``sent2 + " " + endingK``, as the paper and Hugging Face
build them); the model encodes each as ``[CLS] context [SEP] ending [SEP]``. A file without ``label`` reads with
``label=None`` (prediction input) when ``require_label=False``.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass

from bertkit.data.tasks.readers import DataError, Examples, RowGuard, check_file, open_text


@dataclass
class MultipleChoiceExample:
    guid: str
    context: str
    endings: list[str]
    label: int | None
    line: int = 0


def read_swag(path: str | os.PathLike, skip_bad_rows: bool = False, require_label: bool = True) -> Examples:
    path = check_file(path)
    guard = RowGuard(path, skip_bad_rows)
    out = Examples(path=path)
    with open_text(path, newline="") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader)]
        endings = sorted((c for c in header if c.startswith("ending") and c[6:].isdigit()), key=lambda c: int(c[6:]))
        for needed in ("sent1", "sent2"):
            if needed not in header:
                raise DataError(path, 1, f"no {needed!r} column in the header {header}")
        if len(endings) < 2:
            raise DataError(path, 1, f"need at least two ending0..endingN columns, header is {header}")
        if require_label and "label" not in header:
            raise DataError(path, 1, f"no 'label' column in the header {header}")
        col = {c: i for i, c in enumerate(header)}
        for row in reader:
            n = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                guard.bad(n, f"expected {len(header)} columns (as the header), got {len(row)}")
                continue
            label = None
            if "label" in col and row[col["label"]].strip() != "":
                raw = row[col["label"]].strip()
                if not raw.isdigit() or int(raw) >= len(endings):
                    guard.bad(n, f"label {raw!r} is not an ending index 0..{len(endings) - 1}")
                    continue
                label = int(raw)
            elif require_label:
                guard.bad(n, "empty label")
                continue
            blank = [c for c in ("sent1", *endings) if not row[col[c]].strip()]
            if blank:  # an empty context or ending: [CLS] [SEP] alone, as blank_text refuses for classification
                guard.bad(n, f"empty text in column {blank[0]!r}")
                continue
            sent2 = row[col["sent2"]].strip()
            out.append(
                MultipleChoiceExample(
                    guid=row[col["fold-ind"]] if "fold-ind" in col else str(n - 1),
                    context=row[col["sent1"]],
                    endings=[f"{sent2} {row[col[e]]}".strip() for e in endings],
                    label=label,
                    line=n,
                )
            )
    guard.report(len(out))
    out.skipped = guard.skipped
    return out
