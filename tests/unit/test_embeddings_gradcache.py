"""GradCache: the cached step's loss AND parameter gradients equal the plain batch's; dropout masks are replayed."""

from __future__ import annotations

import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import BertConfig, BertModel
from bertkit.embeddings.gradcache import Column, cached_step, plain_step
from bertkit.embeddings.losses import CoSENTLoss, MultipleNegativesRankingLoss
from bertkit.features import pool


def _model(dropout: float) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=32, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    return BertModel(config, add_pooling_layer=False)


def _column(seed: int, b: int = 8, longest: int = 12) -> Column:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, longest + 1, (b,), generator=g)
    ids = torch.zeros(b, longest, dtype=torch.long)
    mask = torch.zeros(b, longest, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(5, 50, (n,), generator=g)
        mask[i, :n] = 1
    return Column(ids, torch.zeros_like(ids), mask)


def _embed(model):
    def embed(ids, types, mask):
        return pool(model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state, mask, "mean")
    return embed


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_fn,k,labels", [
    (MultipleNegativesRankingLoss(symmetric=True), 3, None),
    (CoSENTLoss(), 2, torch.tensor([0.1, 4.0, 2.0, 3.0, 5.0, 0.0, 1.5, 2.5])),
])
@pytest.mark.parametrize("mini", [1, 3, 8])
def test_cached_equals_plain_batch(loss_fn, k, labels, mini):
    model = _model(0.0)
    columns = [_column(s) for s in range(k)]
    plain = plain_step(_embed(model), columns, labels, loss_fn)
    want = _grads(model)
    model.zero_grad(set_to_none=True)
    cached = cached_step(_embed(model), columns, labels, loss_fn, mini)
    got = _grads(model)
    assert cached.item() == pytest.approx(plain.item(), rel=1e-5)
    assert want.keys() == got.keys() and len(got) > 10
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


def test_cached_step_replays_dropout_masks():
    """With dropout on, the re-run mini-batches must see the masks of the no-graph pass: the gradients then equal
    a graph-keeping run of the same mini-batches from the same seed (and differ from one with other masks)."""
    model = _model(0.3).train()
    loss_fn = MultipleNegativesRankingLoss()
    columns = [_column(10), _column(11)]
    embed = _embed(model)

    torch.manual_seed(123)
    reps = [torch.cat([embed(c.ids, c.types, c.mask) for c in col.chunks(3)]) for col in columns]
    ref_loss = loss_fn(reps, None)
    ref_loss.backward()
    want = _grads(model)
    model.zero_grad(set_to_none=True)

    torch.manual_seed(123)
    loss = cached_step(embed, columns, None, loss_fn, 3)
    got = _grads(model)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)

    model.zero_grad(set_to_none=True)
    torch.manual_seed(124)  # other masks: other gradients (the comparison above can fail)
    cached_step(embed, columns, None, loss_fn, 3)
    other = _grads(model)
    assert not torch.allclose(other["encoder.layer.0.output.dense.weight"], want["encoder.layer.0.output.dense.weight"])
