"""The checks on one input, each a refusal (:class:`~bertkit.serve.core.errors.ApiError`) naming the field and the
limit (the flag that sets it). :class:`~bertkit.serve.core.service.Service` runs them with the field named by role."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from bertkit.serve.core.errors import ApiError


def check_count(items: Sequence[Any], name: str, max_inputs: int, flag: str = "--max-inputs") -> None:
    """400 Empty for no inputs, 422 past ``max_inputs`` (the limit ``flag`` sets)."""
    if not items:
        raise ApiError(None, f"'{name}' cannot be empty: send at least one input", "Empty", name)
    if len(items) > max_inputs:
        raise ApiError(
            None,
            f"'{name}' has {len(items)} inputs, over the limit of {max_inputs} per request ({flag}): split it",
            param=name,
        )


def check_text(text: str, name: str, max_chars: int, truncate: bool | None) -> str:
    """One text: 400 Empty when blank (:func:`is_blank`); past ``max_chars``, cut when ``truncate`` else 422 (with a
    hint to set ``truncate`` when the route takes it: ``truncate`` is False; None means the route cannot truncate)."""
    if is_blank(text):
        raise ApiError(None, f"'{name}' is empty", "Empty", name)
    if len(text) > max_chars:
        if truncate:
            return text[:max_chars]
        hint = '; shorten it or set "truncate": true' if truncate is False else ": shorten it"
        raise ApiError(
            None,
            f"'{name}' has {len(text)} characters, over the limit of {max_chars} (--max-input-chars)" + hint,
            param=name,
        )
    return text


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing a BERT tokenizer keeps: only whitespace, control, format (zero-width) or
    unassigned characters, which the normalizer drops (Google's ``_clean_text``)."""
    return not any(not c.isspace() and not unicodedata.category(c).startswith("C") and c != "\ufffd" for c in text)


def check_ids(ids: Sequence[int], name: str, vocab_size: int) -> list[int]:
    """Token-id input: non-empty, each id in the model's vocabulary."""
    if not ids:
        raise ApiError(None, f"'{name}' is an empty token list", "Empty", name)
    for j, i in enumerate(ids):
        if not 0 <= i < vocab_size:
            raise ApiError(
                None,
                f"'{name}[{j}]' is token id {i}, outside the model's vocabulary (0..{vocab_size - 1})",
                param=f"{name}[{j}]",
            )
    return list(ids)


def check_output_size(values: int, limit: int, what: str) -> None:
    """Refuse (422, naming the limit) an answer of more than ``limit`` numbers before it is computed."""
    if values > limit:
        raise ApiError(
            None,
            f"the answer would hold {values:,} values ({what}), over the limit of {limit:,} "
            "(--max-output-values): send fewer or shorter inputs, or a pooled output",
            param=None,
        )
