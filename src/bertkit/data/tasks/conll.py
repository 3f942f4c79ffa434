"""CoNLL-2003 column format: one token per line (``token [POS chunk] tag``), a blank line between sentences,
``-DOCSTART-`` lines ignored. Tags are BIO / IOB2 (``O``, ``B-TYPE``, ``I-TYPE``); IOB1 files read too.

Errors name the file and line: a wrong column count, a malformed tag, or (with ``labels``) a tag outside the
label set. With ``skip_bad_rows`` the sentence holding a bad line is dropped and counted.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from bertkit.data.tasks.readers import DataError, Examples, RowGuard, check_file, open_text

TAG_RE = re.compile(r"^(O|[BIES]-\S+)$")


@dataclass
class TaggedSentence:
    words: list[str]
    tags: list[str] | None  # None for unlabelled (prediction) input
    line: int = 0  # line of the first token


def read_conll(
    path: str | os.PathLike,
    labels: list[str] | None = None,
    tag_column: int = -1,
    skip_bad_rows: bool = False,
    require_tags: bool = True,
) -> Examples:
    """Read sentences of (word, tag). A one-column file (words only) is unlabelled: allowed when
    ``require_tags=False``. ``labels`` (e.g. a fine-tuned model's) makes any other tag an error."""
    path = check_file(path)
    guard = RowGuard(path, skip_bad_rows)
    out = Examples(path=path)
    n_cols: int | None = None
    words: list[str] = []
    tags: list[str] = []
    first_line, bad = 0, False
    label_set = set(labels) if labels is not None else None

    def flush() -> None:
        nonlocal words, tags, bad
        if words and not bad:
            out.append(TaggedSentence(words, tags if n_cols and n_cols > 1 else None, first_line))
        words, tags, bad = [], [], False

    with open_text(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                flush()
                continue
            if parts[0] == "-DOCSTART-":
                flush()
                continue
            if bad:
                continue
            if n_cols is None:
                n_cols = len(parts)
                if n_cols == 1 and require_tags:
                    raise DataError(path, n, "one column only (no tags); expected 'token ... tag' per line")
                if n_cols > 1 and not (0 < tag_column < n_cols or -n_cols < tag_column < 0):
                    raise DataError(
                        path,
                        n,
                        f"--tag-column {tag_column}: the file has {n_cols} columns (token first; -1 = the last)",
                    )
            if not words:
                first_line = n
            if len(parts) != n_cols:
                guard.bad(n, f"expected {n_cols} columns (as the file's first token line), got {len(parts)}")
                bad = True
                continue
            if n_cols > 1:
                tag = parts[tag_column]
                if not TAG_RE.match(tag):
                    guard.bad(n, f"malformed tag {tag!r} (expected O, B-TYPE or I-TYPE)")
                    bad = True
                    continue
                if label_set is not None and tag not in label_set:
                    guard.bad(n, f"unknown tag {tag!r} (the model knows {sorted(label_set)})")
                    bad = True
                    continue
                tags.append(tag)
            words.append(parts[0])
    flush()
    guard.report(len(out))
    out.skipped = guard.skipped
    return out


def label_list(sentences: list[TaggedSentence]) -> list[str]:
    """The sorted tag set of labelled sentences, ``O`` first (a stable order for id2label)."""
    found = {t for s in sentences for t in (s.tags or [])}
    return ["O"] + sorted(found - {"O"}, key=lambda t: (t[2:], t[:1]))
