"""GradCache: the cached step's loss AND parameter gradients equal the plain batch's; dropout masks are replayed.
Packing (the training step on the real tokens only) and length-sorted chunks: the same loss and gradients again."""

from __future__ import annotations

import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import BertConfig, BertModel
from bertkit.embeddings.gradcache import Column, cached_step, concat_columns, length_chunks, plain_step
from bertkit.embeddings.losses import CoSENTLoss, MultipleNegativesRankingLoss
from bertkit.features import pool
from bertkit.modeling import Packing


def _model(dropout: float) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
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


@pytest.mark.parametrize(
    "loss_fn,k,labels",
    [
        (MultipleNegativesRankingLoss(symmetric=True), 3, None),
        (CoSENTLoss(), 2, torch.tensor([0.1, 4.0, 2.0, 3.0, 5.0, 0.0, 1.5, 2.5])),
    ],
)
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
    reps = []
    for col in columns:  # the cached step's mini-batches: length-sorted chunks of at most 3 rows
        pieces = col.length_chunks(3)
        out = torch.cat([embed(c.ids, c.types, c.mask) for _, c in pieces])
        reps.append(out[torch.argsort(torch.cat([index for index, _ in pieces]))])
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


@pytest.mark.parametrize(
    "lengths,max_rows",
    [
        ([5, 3, 9, 3, 12, 7, 7, 2], None),
        ([5, 3, 9, 3, 12, 7, 7, 2], 3),
        ([4] * 6, None),
        ([4] * 6, 4),
        ([1], None),
    ],
)
@pytest.mark.parametrize("overhead", [0, 6, 1000])
def test_length_chunks_is_the_cheapest_sorted_partition(lengths, max_rows, overhead):
    import itertools

    chunks = length_chunks(lengths, max_rows, overhead)
    assert sorted(i for c in chunks for i in c) == list(range(len(lengths)))  # every row once
    flat = [lengths[i] for c in chunks for i in c]
    assert flat == sorted(flat) and all(len(c) <= (max_rows or len(lengths)) for c in chunks)
    cost = sum(len(c) * max(lengths[i] for i in c) + overhead for c in chunks)
    sl, n, best = sorted(lengths), len(lengths), float("inf")  # brute force over every cut of the sorted rows
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            bounds = [0, *cuts, n]
            if max_rows and any(b - a > max_rows for a, b in itertools.pairwise(bounds)):
                continue
            best = min(best, sum((b - a) * sl[b - 1] + overhead for a, b in itertools.pairwise(bounds)))
    assert cost == best
    if overhead == 1000 and not max_rows:
        assert len(chunks) == 1


def _embed_packed(model, overhead):
    def embed(ids, types, mask):
        packing = Packing(mask, length_chunks(mask.sum(1).tolist(), overhead=overhead))
        out = model(ids, attention_mask=mask, token_type_ids=types, packing=packing)
        return pool(out.last_hidden_state, mask, "mean")

    return embed


@pytest.mark.parametrize("overhead", [0, 10**6])
def test_packed_joint_step_gives_the_plain_batch_loss_and_gradients(overhead):
    """The training recipe's step: every column in one pass over the real tokens only (attention in length-sorted
    groups of rows; overhead 0 cuts many groups, 10**6 one) gives the loss and parameter gradients of the plain
    step, which pads each column to its own longest."""
    model = _model(0.0)
    loss_fn = MultipleNegativesRankingLoss(symmetric=True)
    columns = [_column(s, b=12, longest=16) for s in (20, 21, 22)]
    ref = plain_step(_embed(model), columns, None, loss_fn)
    want = _grads(model)
    model.zero_grad(set_to_none=True)

    whole = concat_columns(columns)
    groups = length_chunks(whole.mask.sum(1).tolist(), overhead=overhead)
    assert len(groups) == 1 if overhead else len(groups) > 5  # one per distinct length
    loss = plain_step(_embed_packed(model, overhead), columns, None, loss_fn, joint=True)
    got = _grads(model)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert want.keys() == got.keys() and len(got) > 10
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("training", [True, False])
def test_packing_gives_the_padded_outputs(training):
    """BertModel(packing=...) = the padded forward at every real token (zeros at padding), every layer."""
    model = _model(0.0).train(training)
    column = _column(5, b=9, longest=14)
    mask = column.mask
    plain = model(column.ids, attention_mask=mask, output_hidden_states=True)
    groups = [[8, 0, 3], [1, 2], [4, 5, 6, 7]]
    packed = model(column.ids, attention_mask=mask, output_hidden_states=True, packing=Packing(mask, groups))
    keep = mask[..., None].bool()
    for a, b in zip(plain.hidden_states, packed.hidden_states):
        torch.testing.assert_close(b, a.masked_fill(~keep, 0.0), rtol=1e-5, atol=1e-6)
        assert bool((b.masked_select(~keep) == 0).all())
    with pytest.raises(ValueError, match="every row"):
        Packing(mask, [[0, 1], [2]])
    with pytest.raises(ValueError, match="output_attentions"):
        model(column.ids, attention_mask=mask, output_attentions=True, packing=Packing(mask))
