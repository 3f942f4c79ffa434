"""The one batch planner and the one collate, for every forward pass over token sequences of different lengths.

    plan_batches(lengths, batch_size, max_tokens)   indices sorted by length, cut into batches
    collate(ids, type_ids, pad_id)                   (input_ids, token_type_ids, attention_mask), each [B, T]
    pad(seqs, value)                                 one [B, T] long tensor, right-padded

Used by the Encoder (embeddings, fill-mask and the server's batches), the task pipelines' inference loop and their
``collate`` (training batches too), the layer probe and the embedding-training loop. A leaf: it imports only torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def cut_batches(
    order: Sequence[int], lengths: Sequence[int], batch_size: int, max_tokens: int | None
) -> list[list[int]]:
    """``order`` cut, in order, into batches of at most ``batch_size`` inputs and at most ``max_tokens`` padded
    tokens (its size x its longest; None: no budget); an input over the budget gets a batch of its own."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current and (
            len(current) >= batch_size or (max_tokens and max(longest, lengths[i]) * (len(current) + 1) > max_tokens)
        ):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    if current:
        batches.append(current)
    return batches


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int | None = None, longest_first: bool = True
) -> list[list[int]]:
    """Indices sorted by length (longest first, or shortest first; ties keep their input order), cut into batches
    of at most ``batch_size`` inputs and at most ``max_tokens`` padded tokens (B x longest T; None: no budget), so
    that little padding is computed. A single input over the budget gets a batch of its own."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    order = sorted(range(len(lengths)), key=(lambda i: -lengths[i]) if longest_first else (lambda i: lengths[i]))
    return cut_batches(order, lengths, batch_size, max_tokens)


def _padded_length(longest: int, multiple_of: int) -> int:
    return -(-longest // multiple_of) * multiple_of if multiple_of > 1 else longest


def pad(seqs: Sequence[Sequence[int]], value: int = 0, multiple_of: int = 1) -> torch.Tensor:
    """[B, T] long tensor of ``seqs`` right-padded with ``value`` to the longest (rounded up to ``multiple_of``)."""
    longest = _padded_length(max((len(s) for s in seqs), default=0), multiple_of)
    out = torch.full((len(seqs), longest), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate(
    ids: Sequence[Sequence[int]],
    type_ids: Sequence[Sequence[int]] | None = None,
    pad_id: int = 0,
    multiple_of: int = 1,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, token_type_ids, attention_mask), each [B, T] long, padded to the longest input (rounded up to
    ``multiple_of``): ids with ``pad_id``, segment ids with 0 (all 0 when ``type_ids`` is None), the mask 1 on the
    real tokens. Moved to ``device`` when given."""
    input_ids = pad(ids, pad_id, multiple_of)
    token_type_ids = pad(type_ids, 0, multiple_of) if type_ids is not None else torch.zeros_like(input_ids)
    lengths = torch.tensor([len(s) for s in ids], dtype=torch.long)
    attention_mask = (torch.arange(input_ids.size(1)).unsqueeze(0) < lengths.unsqueeze(1)).long()
    if device is not None:
        input_ids, token_type_ids, attention_mask = (t.to(device) for t in (input_ids, token_type_ids, attention_mask))
    return input_ids, token_type_ids, attention_mask
