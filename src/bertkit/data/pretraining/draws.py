"""Counter-based random draws and token masking of a whole batch at once (the loader's fast path).

A draw is a hash of its coordinates, ``splitmix64`` chained over (seed, stream, layout key, instance id, position),
so a batch's echoes and masks are computed for all its rows in a few array passes instead of one seeded generator
per instance (about 100 microseconds each: a batch of 1,024 x 32 tokens took 100 ms on one core, under what a
graphed GPU step reads). The draws are still pure functions of (seed, epoch or copy, instance): a batch is the same
whatever builds it, in whichever process, and a resumed run reads what the uninterrupted one read.

:func:`mask_rows` is ``--mask-strategy token`` (Devlin et al.'s) on padded rows: each row predicts
:func:`~bertkit.data.pretraining.masking.budget` of its non-special positions, chosen uniformly without replacement
(the positions with the smallest random keys), then the mix: one uniform draw per chosen position, [MASK] below
``mix[0]``, a random ordinary token at or above ``mix[0] + mix[2]``, else unchanged (the paper's order).
"""

from __future__ import annotations

import numpy as np

from bertkit.data.pretraining.masking import NO_LABEL, VocabInfo, budget

# streams: what a draw is for (a stream never reuses another's numbers)
S_PICK, S_MIX, S_ECHO, S_RANDOM, S_KEPT, S_FORCED = 11, 12, 13, 14, 15, 16

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele et al., 2014) on uint64 arrays: a bijection whose outputs look independent."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hashes(seed: int, stream: int, key: int, ids: np.ndarray, width: int | None = None) -> np.ndarray:
    """uint64 draws of instances ``ids`` [B]: one each, or ``width`` each ([B, width], one per position)."""
    h = np.zeros(1, dtype=np.uint64)
    for c in (seed, stream, key):
        h = splitmix(h ^ np.uint64(int(c) & 0xFFFFFFFFFFFFFFFF))
    h = splitmix(h ^ np.asarray(ids, dtype=np.int64).astype(np.uint64))  # [B]
    if width is None:
        return h
    return splitmix(h[:, None] ^ np.arange(width, dtype=np.uint64)[None, :])  # [B, width]


def uniforms(seed: int, stream: int, key: int, ids: np.ndarray, width: int | None = None) -> np.ndarray:
    """Floats in [0, 1) with 53 random bits, shaped as :func:`hashes`'."""
    return (hashes(seed, stream, key, ids, width) >> np.uint64(11)).astype(np.float64) * (2.0**-53)


def mask_rows(
    ids: np.ndarray,
    special: np.ndarray,
    lengths: np.ndarray,
    vocab: VocabInfo,
    mask_prob: float,
    max_predictions: int,
    mix: tuple[float, float, float],
    draw: tuple[int, int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Token masking of padded rows: ``ids`` [B, T], ``special`` [B, T] bool ([CLS]/[SEP]), ``lengths`` [B] real
    tokens; ``draw`` = (seed, layout key, instance ids [B]) -> (inputs [B, T], labels [B, T]: the original id at
    each chosen position, -100 elsewhere). The same rule as ``mask_instance(..., "token")``, other random numbers."""
    seed, key, instances = draw
    B, T = ids.shape
    cols = np.arange(T)[None, :]
    candidates = (cols < lengths[:, None]) & ~special
    num = np.minimum(budget(lengths, mask_prob, max_predictions), candidates.sum(1))
    keys = np.where(candidates, uniforms(seed, S_PICK, key, instances, T), 2.0)
    threshold = np.take_along_axis(np.sort(keys, axis=1), np.maximum(num - 1, 0)[:, None], axis=1)
    picked = (keys <= threshold) & (num[:, None] > 0)  # the num smallest keys: uniform, without replacement
    r = uniforms(seed, S_MIX, key, instances, T)
    inputs = ids.copy()
    inputs[picked & (r < mix[0])] = vocab.mask_id
    to_random = picked & (r >= mix[0] + mix[2])
    pool = vocab.random_pool
    replacement = pool[(hashes(seed, S_RANDOM, key, instances, T) % np.uint64(len(pool))).astype(np.int64)]
    inputs[to_random] = replacement[to_random]
    return inputs, np.where(picked, ids, NO_LABEL)


def couple_twins(
    inputs: np.ndarray, labels: np.ndarray, ids: np.ndarray, twins: np.ndarray, mask_id: int, mode: str
) -> None:
    """``--echo-mask``, in place on masked rows (``labels`` [B, T] hold the chosen tokens' ids; ``twins`` [B, T]: at
    each of an echo's A' columns its twin's column in A, else -1). ``coupled``: wherever a token of A is chosen, its
    twin is chosen too and shown as [MASK], so no prediction of A can be copied from A'; A''s own choices whose twin
    is not chosen stay (the copy). ``apart``: where both twins are chosen, A''s is not (its token shown as it is),
    so every prediction that has a twin can be copied from it."""
    r, col = np.nonzero(twins >= 0)
    hit = labels[r, twins[r, col]] != NO_LABEL
    if mode == "apart":
        hit &= labels[r, col] != NO_LABEL
    r, col = r[hit], col[hit]
    inputs[r, col] = mask_id if mode == "coupled" else ids[r, col]
    labels[r, col] = ids[r, col] if mode == "coupled" else NO_LABEL
