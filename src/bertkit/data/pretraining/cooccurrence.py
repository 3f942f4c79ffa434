"""Token embeddings from the corpus's co-occurrence statistics (``bertkit pretrain --embedding-init
cooccurrence``): the truncated SVD of the positive pointwise mutual information (PPMI) matrix of token pairs within
a window, Levy, Goldberg and Dagan's (2015) recipe for word vectors (symmetric window weighted 1/distance, context
counts smoothed by the power 0.75, rows ``U sqrt(S)``). It takes seconds on the shards, and gives a model's first
step what minutes of masked LM would teach its embeddings: tokens used alike start alike.

The counts stay sparse (a pair that never co-occurs has PPMI 0), so the cost is the pairs seen, not the vocabulary
squared."""

from __future__ import annotations

import os

import numpy as np

from bertkit.data.pretraining.instances import first_tokens

WINDOW = 5  # tokens either side, weighted 1 / distance
SMOOTHING = 0.75  # context counts to this power (word2vec's negative-sampling distribution)
MAX_TOKENS = 1 << 22  # the first 4M tokens of the shards: enough for 8,000-30,000 rows, bounded in memory


def shard_tokens(directory: str | os.PathLike, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """The first ``max_tokens`` token ids of the training shards, in order (document ends are not marked: a pair
    across two documents is a little noise in millions)."""
    parts = list(first_tokens(directory, max_tokens))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def ppmi_pairs(tokens: np.ndarray, vocab_size: int, window: int = WINDOW, smoothing: float = SMOOTHING):
    """(rows, cols, values) of the PPMI matrix's nonzero entries: pairs (i, j) within ``window`` tokens either way,
    each occurrence weighted 1 / distance; PMI = log p(i, j) / (p(i) p_s(j)) with p_s the smoothed context
    distribution; only positive values are kept."""
    codes, weights = [], []
    for d in range(1, window + 1):  # each distance's pairs counted on their own: a tenth of the memory at once
        if len(tokens) <= d:
            break
        pairs, counts = np.unique(tokens[:-d] * vocab_size + tokens[d:], return_counts=True)
        codes.append(pairs)
        weights.append(counts / d)
    if not codes:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    forward, weights = np.concatenate(codes), np.concatenate(weights)
    backward = (forward % vocab_size) * vocab_size + forward // vocab_size  # the window looks both ways
    pairs, inverse = np.unique(np.concatenate([forward, backward]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([weights, weights]))
    rows, cols = pairs // vocab_size, pairs % vocab_size
    total = counts.sum()
    row_sum = np.bincount(rows, weights=counts, minlength=vocab_size)
    context = np.bincount(cols, weights=counts, minlength=vocab_size) ** smoothing
    context /= context.sum()
    pmi = np.log(counts / total) - np.log(row_sum[rows] / total) - np.log(context[cols])
    keep = pmi > 0
    return rows[keep], cols[keep], pmi[keep].astype(np.float32)


def ppmi_embeddings(
    directory: str | os.PathLike,
    vocab_size: int,
    width: int,
    std: float,
    seed: int = 0,
    max_tokens: int = MAX_TOKENS,
):
    """:func:`ppmi_vectors` of the first ``max_tokens`` tokens of the training shards in ``directory``."""
    return ppmi_vectors(shard_tokens(directory, max_tokens), vocab_size, width, std, seed)


def ppmi_vectors(tokens: np.ndarray, vocab_size: int, width: int, std: float, seed: int = 0):
    """(``[vocab_size, width]`` float32 tensor, ``[vocab_size]`` bool tensor): the PPMI-SVD rows ``U sqrt(S)`` of
    the token stream, centred and scaled to standard deviation ``std``, and which rows they fill (tokens seen in the
    stream; a row never seen, such as ``[MASK]``, has no statistics and keeps the model's own initialisation)."""
    import torch

    rows, cols, values = ppmi_pairs(tokens, vocab_size)
    seen = torch.zeros(vocab_size, dtype=torch.bool)
    table = torch.zeros(vocab_size, width)
    if len(values) == 0:
        return table, seen
    seen[torch.from_numpy(np.unique(tokens))] = True
    matrix = torch.sparse_coo_tensor(
        torch.from_numpy(np.stack([rows, cols])),
        torch.from_numpy(values),
        (vocab_size, vocab_size),
        check_invariants=True,
    ).coalesce()
    rank = min(width, vocab_size)
    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(seed)  # svd_lowrank's random projection: the same rows for the same text and seed
        u, s, _ = torch.svd_lowrank(matrix, q=min(rank + 10, vocab_size), niter=4)
    rank = min(rank, len(s))
    vectors = u[:, :rank] * s[:rank].sqrt()
    vectors = vectors[seen] - vectors[seen].mean(0)  # the direction every token shares carries nothing
    table[seen, :rank] = vectors * (std / vectors.std().clamp_min(1e-12))
    return table, seen
