"""Pieces of Google's reference pipeline that the tokenizer tests compare against."""

from __future__ import annotations

from collections.abc import Sequence


def google_pair(a: Sequence[int], b: Sequence[int], max_len: int, cls: int, sep: int) -> list[int]:
    """The reference's pair layout with Google's _truncate_seq_pair loop (the longer segment loses its last token)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_len - 3:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return [cls, *a, sep, *b, sep]
