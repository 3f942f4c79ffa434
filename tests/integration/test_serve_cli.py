"""`bertkit serve` as users run it: a subprocess on 127.0.0.1 (the default host), answering, then stopped cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertForPreTraining

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_binds_localhost_answers_and_stops(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    BertForPreTraining(config).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    port = free_port()
    bertkit = Path(sys.executable).with_name("bertkit")
    cmd = [
        str(bertkit),
        "serve",
        "--model",
        str(tmp_path),
        "--port",
        str(port),
        "--threads",
        "1",
        "--layers",
        "-1,0",
        "--pooling",
        "REDUCE_MAX",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "BERTKIT_API_KEY": ""}
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    assert json.loads(r.read()) == {"status": "ok"}
                    break
            except OSError:
                assert time.monotonic() < deadline, "server did not come up within 60 s"
                time.sleep(0.2)
        if Path("/proc/net/tcp").exists():  # the default host: this machine only
            assert _listening_sockets(port) == ["127.0.0.1"]
        with urllib.request.urlopen(url + "/info", timeout=10) as r:
            info = json.loads(r.read())
        assert info["default_pooling_layer"] == [-1, 0] and info["default_pooling_strategy"] == "max"
        assert info["embedding_dim"] == 64 and info["auth"] is False
        req = urllib.request.Request(
            url + "/embed",
            data=json.dumps({"inputs": "the cat"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert len(json.loads(r.read())[0]) == 64
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("bertkit serve did not stop on SIGINT within 20 s")
    assert proc.returncode in (0, 130)


def _listening_sockets(port: int) -> list[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp; empty where unavailable)."""
    try:
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for row in rows:
        local, state = row.split()[1], row.split()[3]
        ip_hex, port_hex = local.split(":")
        if int(port_hex, 16) == port and state == "0A":  # LISTEN
            out.append(".".join(str(int(ip_hex[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return out
