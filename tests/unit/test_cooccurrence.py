"""``--embedding-init cooccurrence``'s vectors (bertkit.data.pretraining.cooccurrence): the sparse PPMI against a
dense computation written here from the definition, and what the SVD rows must show (tokens used alike start
alike; rows never seen are not filled; the table's scale is the one asked for). The run that uses them:
tests/integration/test_pretrain_recipes.py."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.pretraining.cooccurrence import ppmi_pairs, ppmi_vectors


def test_sparse_ppmi_equals_the_dense_definition():
    rng = np.random.default_rng(0)
    V, window = 12, 3
    tokens = rng.integers(1, V - 1, size=400)  # ids 0 and V-1 never occur
    rows, cols, values = ppmi_pairs(tokens, V, window=window, smoothing=0.75)
    counts = np.zeros((V, V))
    for i in range(len(tokens)):
        for d in range(1, window + 1):
            if i + d < len(tokens):
                counts[tokens[i], tokens[i + d]] += 1 / d
                counts[tokens[i + d], tokens[i]] += 1 / d
    context = counts.sum(0) ** 0.75
    with np.errstate(divide="ignore", invalid="ignore"):  # ids never seen: log 0 - log 0
        pmi = np.log(counts / counts.sum()) - np.log(counts.sum(1, keepdims=True) / counts.sum())
        pmi -= np.log(context / context.sum())[None, :]
    dense = np.zeros((V, V))
    dense[rows, cols] = values
    np.testing.assert_allclose(dense, np.where(pmi > 0, pmi, 0.0), rtol=1e-5, atol=1e-6)
    assert (values > 0).all() and ((pmi <= 0) & (counts > 0)).any()  # pairs seen with PMI <= 0 are dropped


def test_tokens_used_alike_start_alike_and_unseen_rows_stay_empty():
    """Two families of tokens: 2-5 only ever precede 10-12, 6-9 only 13-15. A token's nearest rows are its own
    family's; ids that never occur (0, 1, 16-19) are not filled."""
    rng = np.random.default_rng(1)
    heads = rng.integers(0, 2, size=6000)
    first = np.where(heads == 0, rng.integers(2, 6, size=6000), rng.integers(6, 10, size=6000))
    second = np.where(heads == 0, rng.integers(10, 13, size=6000), rng.integers(13, 16, size=6000))
    tokens = np.stack([first, second], 1).reshape(-1)
    table, seen = ppmi_vectors(tokens, 20, width=8, std=0.02)
    assert seen.tolist() == [False, False] + [True] * 14 + [False] * 4
    assert float(table[~seen].abs().max()) == 0.0
    assert float(table[seen].std()) == pytest.approx(0.02, rel=1e-4)
    unit = table / table.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = (unit @ unit.T).numpy()
    same = [cos[a, b] for fam in (range(2, 6), range(6, 10)) for a in fam for b in fam if a < b]
    across = [cos[a, b] for a in range(2, 6) for b in range(6, 10)]
    assert min(same) > max(across) + 0.5
    again, _ = ppmi_vectors(tokens, 20, width=8, std=0.02)
    assert (again == table).all()  # the SVD's random projection is seeded: the same text gives the same rows
