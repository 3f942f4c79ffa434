"""Multi-node pre-training as torchrun runs it, simulated on localhost: two nodes of one process each (gloo, c10d
rendezvous), each preparing the corpus on its own "local disk" (``--prepare-on node``: a working directory per node),
train the same weights as one process with the same global batch; so do the processes ``--processes 2`` starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tinymodels import TINY_BERT_FLAGS

BIN = Path(sys.executable).parent
# no dropout (its draws differ per process), one masked position per instance (so each rank's mean MLM loss weighs
# its positions as the single process's mean does), fp32
TINY = [
    *TINY_BERT_FLAGS,
    "--config-override",
    "hidden_dropout_prob=0.0",
    "--config-override",
    "attention_probs_dropout_prob=0.0",
    "--seq-len",
    "32",
    "--max-predictions",
    "1",
    "--precision",
    "fp32",
    "--quiet",
    "--workers",
    "1",
    "--loader-workers",
    "0",
    "--max-steps",
    "3",
    "--log-every",
    "1",
    "--device",
    "cpu",
]


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def corpus(alice_corpus) -> tuple[Path, Path]:
    """(the first ~40 KB of the bundled Alice, a 600-token vocab.txt trained on it): conftest.py's."""
    return alice_corpus


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(150)
def test_two_nodes_train_the_weights_of_one_process_with_the_same_global_batch(corpus, tmp_path):
    path, vocab = corpus
    args = ["pretrain", "--corpus", str(path), "--vocab", str(vocab), "--output", "run", *TINY]
    port = _free_port()
    nodes = []
    for node in (0, 1):
        cwd = tmp_path / f"node{node}"  # the node's own disk: --prepare-on node prepares its shards there
        cwd.mkdir()
        cmd = [
            str(BIN / "torchrun"),
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            "bertkit-test",
            "--rdzv-conf",
            f"is_host={node == 0}",
            "--max-restarts",
            "0",
            "-m",
            "bertkit.cli",
            *args,
            "--batch-size",
            "4",
            "--prepare-on",
            "node",
        ]
        nodes.append(
            subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    single = tmp_path / "single"
    single.mkdir()
    one = subprocess.run(
        [str(BIN / "bertkit"), *args, "--batch-size", "8"],
        cwd=single,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    logs = [p.communicate(timeout=140)[0] for p in nodes]
    assert one.returncode == 0, one.stderr[-3000:]
    assert all(p.returncode == 0 for p in nodes), "\n".join(x[-3000:] for x in logs)
    # each node prepared its own shards; rank 0's node alone holds the trained model
    for node in (0, 1):
        assert (tmp_path / f"node{node}" / "run" / "data" / "shards" / "meta.json").is_file()
    runs = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]
    outputs = [d for d in runs if (d / "model.safetensors").is_file()]
    assert len(outputs) == 1
    two, ref = _weights(outputs[0]), _weights(single / "run")
    assert sorted(two) == sorted(ref)
    for k in ref:
        torch.testing.assert_close(two[k], ref[k], rtol=1e-4, atol=1e-5)
    # the same losses step by step (means over the ranks), and they moved: the steps trained
    records = [
        [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (outputs[0], single / "run")
    ]
    losses = [[r["loss"] for r in rs if "loss" in r] for rs in records]
    assert len(losses[1]) == 3 and losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert len(set(losses[1])) == 3
    # every log line shows the token rate and MFU (over this CPU's measured peak)
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] < 5 for rs in records for r in rs if "loss" in r)


@pytest.mark.timeout(150)
def test_processes_two_train_the_weights_of_one_process_and_a_refusal_reads_as_one(corpus, tmp_path):
    """``--processes 2``: bertkit's own launch (torch's elastic launcher, as ``torchrun --standalone``) trains the
    weights of one process with the same global batch; a refusal inside the processes prints one line, as one
    process's would."""
    import gzip

    from bertkit.commands.quickstart import bundled_corpus

    # the whole of Alice: text enough that its held-out 2% fills more than one process's batch
    path, vocab = tmp_path / "alice.txt", corpus[1]
    path.write_bytes(gzip.decompress(next(p for p in bundled_corpus() if "alice" in p.name).read_bytes()))
    args = ["pretrain", "--corpus", str(path), "--vocab", str(vocab), *TINY, "--threads", "1", "--eval-batches", "1"]
    run = lambda *more: subprocess.run(  # noqa: E731
        [str(BIN / "bertkit"), *args, *more], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=140
    )
    two = run("--output", "two", "--processes", "2", "--batch-size", "4")
    assert two.returncode == 0, two.stderr[-3000:]
    one = run("--output", "one", "--batch-size", "8")
    assert one.returncode == 0, one.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "run.json").read_text())["world_size"] == 2
    got, ref = _weights(tmp_path / "two"), _weights(tmp_path / "one")
    assert sorted(got) == sorted(ref)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    # the held-out meter scores the same text (the global batches' worth)
    held = [[json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in ("two", "one")]
    held = [[r for r in rs if "eval_mlm_acc" in r][-1] for rs in held]
    assert held[0]["eval_masked_tokens"] == held[1]["eval_masked_tokens"] > 0
    assert held[0]["eval_mlm_acc"] == pytest.approx(held[1]["eval_mlm_acc"], abs=1e-6)
    # a finished run resumed (refused inside the processes, where the run directory is opened): one line, its code
    bad = run("--output", "two", "--processes", "2", "--batch-size", "4", "--resume")
    lines = [x for x in bad.stderr.splitlines() if x.strip()]
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("bertkit pretrain: error: --resume: two holds a finished run")


@pytest.mark.timeout(120)
def test_processes_stop_on_sigterm_to_the_command_with_a_checkpoint(corpus, tmp_path):
    """SIGTERM sent to the command (not to its processes) reaches them: they save a checkpoint at the same step and
    stop, and the command exits 143 with the one line that says how to resume; what they print reaches its log as
    it is said (line-buffered, not held until exit)."""
    import signal
    import time

    path, vocab = corpus
    flags = [x for x in TINY if x != "--quiet"]
    flags[flags.index("--max-steps") + 1] = "100000"
    cmd = [str(BIN / "bertkit"), "pretrain", "--corpus", str(path), "--vocab", str(vocab), *flags, "--output", "run"]
    cmd += ["--processes", "2", "--threads", "1", "--batch-size", "4"]
    env = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}  # a log file's buffering, as a user's
    log = tmp_path / "log.txt"  # the run's lines (stderr), as a user's 2> log.txt
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=f, text=True)
        deadline = time.monotonic() + 90  # the third step's line in the log while the run goes on
        while "step 3/" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "step 3/" in log.read_text(), log.read_text()[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    err = log.read_text()
    assert proc.returncode == 143, err[-3000:]
    last = [x for x in err.splitlines() if x.strip()][-1]
    assert last.startswith("bertkit pretrain: error: stopped at step ") and "--resume" in last, err[-3000:]
    step = int(last.split("stopped at step ")[1].split()[0])
    assert (tmp_path / "run" / "checkpoints" / f"step-{step:08d}.pt").is_file()
    assert err.count("SIGTERM received") == 2  # each process, once
