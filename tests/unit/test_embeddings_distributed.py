"""Negatives across ranks: with 2 gloo processes, each holding half the batch, the gathered loss and the averaged
parameter gradients equal one process's on the whole batch (plain and GradCache steps)."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
from test_embeddings_gradcache import _column, _embed, _grads, _model  # noqa: E402

from bertkit.embeddings.gradcache import Column, average_gradients, cached_step, plain_step  # noqa: E402
from bertkit.embeddings.losses import MultipleNegativesRankingLoss  # noqa: E402


def _half(c: Column, rank: int) -> Column:
    rows = slice(rank * 4, rank * 4 + 4)
    return Column(c.ids[rows], c.types[rows], c.mask[rows])


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for mini in (0, 3):  # plain, then GradCache
            model = _model(0.0)
            columns = [_half(_column(s), rank) for s in range(3)]
            loss_fn = MultipleNegativesRankingLoss(symmetric=True)
            if mini:
                loss = cached_step(_embed(model), columns, None, loss_fn, mini)
            else:
                loss = plain_step(_embed(model), columns, None, loss_fn)
            average_gradients(model)
            torch.save({"loss": loss, "grads": _grads(model)}, os.path.join(out_dir, f"rank{rank}-{mini}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_two_ranks_equal_one_process_on_the_global_batch(tmp_path):
    mp.start_processes(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    model = _model(0.0)
    loss = plain_step(_embed(model), [_column(s) for s in range(3)], None, MultipleNegativesRankingLoss(symmetric=True))
    want = _grads(model)
    for name_ in [f"rank{rank}-{mini}.pt" for rank in range(2) for mini in (0, 3)]:
        got = torch.load(tmp_path / name_, weights_only=True)
        assert got["loss"].item() == pytest.approx(loss.item(), rel=1e-5)
        for name in want:
            torch.testing.assert_close(got["grads"][name], want[name], rtol=1e-4, atol=1e-6, msg=name)
    # each rank alone (its 4 rows, no gathering) would have had another loss: the gather is what makes them equal
    alone = MultipleNegativesRankingLoss(symmetric=True)(
        [_embed(model)(*vars(_half(_column(s), 0)).values()) for s in range(3)]
    )
    assert alone.item() != pytest.approx(loss.item(), rel=1e-3)
