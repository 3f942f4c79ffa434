"""Each embedding loss against a hand-written reference on a tiny batch (plain Python loops over the formula)."""

from __future__ import annotations

import math

import pytest
import torch

from bertkit.embeddings.losses import CoSENTLoss, MatryoshkaLoss, MultipleNegativesRankingLoss, build_loss


def _cos(u, v):
    dot = sum(a * b for a, b in zip(u, v))
    return dot / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))


def _ce(logits, target):
    m = max(logits)
    return -(logits[target] - m - math.log(sum(math.exp(x - m) for x in logits)))


def _batch(seed=0, b=4, d=6, k=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, d, generator=g, dtype=torch.float64) for _ in range(2 + k)]


def ref_mnrl(cols, scale, symmetric=False):
    a, rest = cols[0].tolist(), [c.tolist() for c in cols[1:]]
    cands = [row for col in rest for row in col]  # positives first, then each negative column
    b = len(a)
    fwd = sum(_ce([scale * _cos(a[i], c) for c in cands], i) for i in range(b)) / b
    if not symmetric:
        return fwd
    pos = rest[0]
    bwd = sum(_ce([scale * _cos(pos[i], a[j]) for j in range(b)], i) for i in range(b)) / b
    return (fwd + bwd) / 2


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("symmetric", [False, True])
def test_mnrl_matches_reference(k, symmetric):
    cols = _batch(seed=k, k=k)
    got = MultipleNegativesRankingLoss(scale=20.0, symmetric=symmetric)(cols)
    assert got.item() == pytest.approx(ref_mnrl(cols, 20.0, symmetric), rel=1e-6)


def test_simcse_is_infonce_with_temperature():
    cols = _batch(seed=3)
    got = build_loss("simcse", temperature=0.05)(cols)
    # InfoNCE: -log exp(cos(z_i, z'_i)/t) / sum_j exp(cos(z_i, z'_j)/t)
    a, b = cols[0].tolist(), cols[1].tolist()
    ref = 0.0
    for i in range(len(a)):
        num = math.exp(_cos(a[i], b[i]) / 0.05)
        den = sum(math.exp(_cos(a[i], b[j]) / 0.05) for j in range(len(b)))
        ref += -math.log(num / den)
    assert got.item() == pytest.approx(ref / len(a), rel=1e-6)
    # a different temperature gives a different loss
    assert build_loss("simcse", temperature=0.1)(cols).item() != pytest.approx(got.item(), rel=1e-3)


def test_mnrl_low_when_positives_match():
    a = _batch(seed=5, d=64)[0]
    good = MultipleNegativesRankingLoss()([a, a + 0.01 * torch.randn_like(a)])
    bad = MultipleNegativesRankingLoss()([a, torch.roll(a, 1, 0)])
    assert good.item() < 0.1 < bad.item()


def ref_cosent(cols, labels, scale):
    a, b = cols[0].tolist(), cols[1].tolist()
    cos = [scale * _cos(x, y) for x, y in zip(a, b)]
    total = 1.0
    for i in range(len(cos)):
        for j in range(len(cos)):
            if labels[i] > labels[j]:
                total += math.exp(cos[j] - cos[i])
    return math.log(total)


def test_cosent_matches_reference_and_ignores_label_scale():
    cols = _batch(seed=7, b=5)
    labels = torch.tensor([0.0, 2.5, 5.0, 2.5, 1.0], dtype=torch.float64)
    loss = CoSENTLoss(scale=20.0)
    got = loss(cols, labels)
    assert got.item() == pytest.approx(ref_cosent(cols, labels.tolist(), 20.0), rel=1e-6)
    # scores are read as they are: only their order counts (0..5 and 0..1 give the same loss)
    assert loss(cols, labels / 5).item() == pytest.approx(got.item(), rel=1e-9)
    # ties contribute nothing; reversing the order changes the loss
    assert loss(cols, -labels).item() != pytest.approx(got.item(), rel=1e-3)


def test_matryoshka_sums_over_prefixes():
    cols = _batch(seed=9, d=8, k=1)
    inner = MultipleNegativesRankingLoss()
    got = MatryoshkaLoss(inner, [8, 4, 2])(cols)
    ref = sum(ref_mnrl([c[:, :d] for c in cols], 20.0) for d in (8, 4, 2))
    assert got.item() == pytest.approx(ref, rel=1e-6)
    with pytest.raises(ValueError, match="larger than the embedding size"):
        MatryoshkaLoss(inner, [16])(cols)


def test_gradients_flow_to_every_column():
    cols = [c.clone().requires_grad_(True) for c in _batch(seed=11, k=1)]
    MultipleNegativesRankingLoss(symmetric=True)(cols).backward()
    assert all(c.grad is not None and c.grad.abs().sum() > 0 for c in cols)
