"""recipes/pretrain/once.py: the waiting ranks of a preparation done once per run or per node (an in-process store
stands in
for torchrun's rendezvous store)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from bertkit.errors import RunError
from bertkit.recipes.pretrain import once as once_mod


def _ctx(rank: int, local_rank: int = 0) -> SimpleNamespace:
    return SimpleNamespace(rank=rank, local_rank=local_rank, distributed=True)


@pytest.fixture
def store(monkeypatch):
    s = dist.HashStore()
    monkeypatch.setattr(once_mod, "_store", lambda: s)
    return s


def test_preparer_runs_and_waiters_wait_for_it(store, monkeypatch):
    monkeypatch.setenv("GROUP_RANK", "1")
    ran = []
    waited = []

    def waiter():
        waited.append(
            once_mod.once(_ctx(3, local_rank=1), "node", lambda: ran.append("waiter"), "preparing", 10, poll=0.01)
        )

    t = threading.Thread(target=waiter)
    t.start()
    assert once_mod.once(_ctx(2, local_rank=0), "node", lambda: ran.append("node 1") or 7, "preparing", 10) == 7
    t.join(5)
    assert ran == ["node 1"] and waited == [None]
    assert store.get("bertkit/once/preparing/1") == b"ok"


def test_a_failed_preparation_stops_the_waiters_with_its_message(store):
    def broken():
        raise ValueError("corpus.txt: no text")

    with pytest.raises(ValueError, match="no text"):
        once_mod.once(_ctx(0), "global", broken, "preparing the corpus", 10)
    with pytest.raises(
        RunError,
        match=r"rank 0 failed preparing the corpus, so rank 1 stops too: ValueError: "
        r"corpus.txt: no text",
    ):
        once_mod.once(_ctx(1), "global", lambda: None, "preparing the corpus", 10, poll=0.01)


def test_waiting_past_the_timeout_is_a_clear_error(store):
    with pytest.raises(RunError, match=r"rank 5 waited 0 s for rank 0 to finish preparing.*--prepare-timeout"):
        once_mod.once(_ctx(5), "global", lambda: None, "preparing", 0.05, poll=0.01)


def test_one_process_just_runs_it_and_bad_scope_is_refused():
    ctx = SimpleNamespace(rank=0, local_rank=0, distributed=False)
    assert once_mod.once(ctx, "global", lambda: 3, "x") == 3
    with pytest.raises(RunError, match="--prepare-on"):
        once_mod.once(ctx, "cluster", lambda: 3, "x")


def test_node_preparers_refuse_a_directory_the_nodes_share(store, monkeypatch, tmp_path):
    """Two nodes' preparers (threads here) pointed at one directory: both refuse, before writing anything."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    errors, wrote = {}, []

    def preparer(node: int, directory):
        ctx = SimpleNamespace(rank=node, local_rank=0, distributed=True, world_size=2)
        monkeypatch.setattr(once_mod, "node_rank", lambda c: c.rank)
        try:
            once_mod.once(ctx, "node", lambda: wrote.append(node), "preparing", 10, poll=0.01, directory=directory)
        except RunError as e:
            errors[node] = str(e)

    threads = [threading.Thread(target=preparer, args=(n, tmp_path / "shared")) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert wrote == [] and sorted(errors) == [0, 1] and "shared with other nodes" in errors[0]
    # on separate disks (directories) both prepare
    errors.clear()
    fresh = dist.HashStore()  # a new run's rendezvous
    monkeypatch.setattr(once_mod, "_store", lambda: fresh)
    threads = [threading.Thread(target=preparer, args=(n, tmp_path / f"local{n}")) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(wrote) == [0, 1] and errors == {}
    assert not list(tmp_path.rglob(".prepare-node-*"))
