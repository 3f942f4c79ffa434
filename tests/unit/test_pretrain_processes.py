"""``--processes``: when ``bertkit pretrain`` runs as several processes on one CPU (DDP, its own launch), the
budget recipe's batch split between them, and what a launched process hands back."""

from __future__ import annotations

import json
import pickle
import signal

import pytest
import torch

from bertkit.errors import PretrainError
from bertkit.options import parse_processes
from bertkit.recipes.pretrain import PretrainConfig, resolve, tables
from bertkit.training.interrupt import Interrupted


@pytest.fixture
def two_cores_fp32(monkeypatch):
    """A 2-core CPU without bf16 units, no torchrun around, whatever runs this."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(tables, "cpu_fp32", lambda cfg: cfg.precision != "bf16")
    monkeypatch.setattr(tables, "on_gpu", lambda device: False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _cfg(**kw) -> PretrainConfig:
    return PretrainConfig(corpus=["x"], **{"output": "o", "max_time": 1800, **kw})


def test_auto_launches_two_processes_only_for_the_budget_in_fp32_over_minutes(two_cores_fp32, monkeypatch, tmp_path):
    assert tables.processes(_cfg()) == tables.CPU_PROCESSES == 2
    assert tables.processes(_cfg(max_time=tables.PROCESSES_FROM)) == 2
    # one process: bf16 units, a short budget, the paper recipe, another objective, a GPU, one core, or what the
    # user set for one process (threads, batch sizes)
    for kw in (
        {"precision": "bf16"},
        {"max_time": tables.PROCESSES_FROM - 1},
        {"recipe": "paper"},
        {"objective": "electra"},
        {"threads": 2},
        {"batch_size": 32},
        {"batch_ramp": "128:0.7"},
    ):
        assert tables.processes(_cfg(**kw)) == 1, kw
    assert tables.processes(_cfg(max_time=None, max_steps=10)) == 1
    assert tables.processes(_cfg(processes=3, precision="bf16")) == 3  # a count given is the count
    monkeypatch.setattr(tables, "on_gpu", lambda device: True)  # where CUDA is available
    assert tables.processes(_cfg()) == 1
    with pytest.raises(PretrainError, match="--processes is for a CPU; for GPUs run under torchrun"):
        tables.processes(_cfg(processes=2))
    monkeypatch.setattr(tables, "on_gpu", lambda device: False)
    # a run resumed keeps the processes it ran as (its batches were theirs), whatever auto would choose now
    for world in (1, 2):
        (tmp_path / "run.json").write_text(json.dumps({"world_size": world}))
        assert tables.processes(_cfg(output=str(tmp_path), resume=True)) == world
    assert tables.processes(_cfg(output=str(tmp_path / "none"), resume=True)) == 2  # nothing recorded: auto's
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert tables.processes(_cfg()) == 1
    # inside a launched (or torchrun) process: no further launch; a count given there is refused
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert tables.processes(_cfg()) == tables.processes(_cfg(processes=1)) == 1
    with pytest.raises(PretrainError, match="under torchrun the processes are torchrun's"):
        tables.processes(_cfg(processes=2))


def test_the_budget_batch_is_split_between_the_processes_and_said(two_cores_fp32, monkeypatch):
    from bertkit.recipes.pretrain import sizing

    monkeypatch.setattr(sizing, "tokens_per_second", lambda *a: 1000.0)
    one, two = resolve(_cfg(threads=2)), resolve(_cfg())
    assert (one.processes, one.threads, one.batch_size, one.batch_ramp) == (None, 2, 32, "128:0.7")
    assert (two.processes, two.threads, two.batch_size, two.batch_ramp) == (2, 1, 16, "64:0.7")
    assert two.chosen.endswith("; 2 processes of 1 thread(s), the recipe's batch split between them (DDP)")
    assert two.model_size == one.model_size  # sized for the machine as one run
    # a count given with the paper recipe: its batch is each process's, as under torchrun
    paper = resolve(_cfg(processes=2, recipe="paper", batch_size=8))
    assert (paper.batch_size, paper.threads) == (8, 1) and paper.chosen.endswith("--batch-size each (DDP)")
    # each process's part rounded up: the global batch at least the recipe's
    table = {"batch_size": 32, "batch_ramp": "8:0.05,17:0.15"}
    assert tables.split_batches(table, 3) == {"batch_size": 11, "batch_ramp": "3:0.05,6:0.15"}
    assert tables.split_batches({"batch_size": 5, "batch_ramp": "off"}, 2)["batch_ramp"] == "off"


def test_parse_processes_and_unused_parameters(capsys):
    from bertkit.cli import main

    assert parse_processes("auto") is None and parse_processes("3") == 3
    for bad, said in (("two", "a count or auto, got 'two'"), ("0", "must be"), ("1.5", "a count or auto, got '1.5'")):
        assert main(["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1", "--processes", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error: --processes " in err and said in err, err
    # DDP looks for parameters the loss never reaches only where there are some: BERT's NSP head without NSP
    unused = lambda **kw: tables.unused_parameters(_cfg(max_steps=1, **kw))  # noqa: E731
    assert not unused(arch="modernbert", nsp=False) and unused(arch="bert", nsp=False)
    assert not unused(arch="bert", nsp=True) and unused(arch="modernbert", objective="electra", nsp=False)


def test_an_interrupt_handed_back_from_a_process_keeps_its_signal():
    again = pickle.loads(pickle.dumps(Interrupted("saved; --resume continues", signal.SIGINT)))
    assert (type(again), str(again), again.exit_code) == (Interrupted, "saved; --resume continues", 130)
