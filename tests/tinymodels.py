"""Helpers shared by the feature and serving tests: a tiny model directory, one torch thread per module, and a
JSON-over-HTTP call to a live server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertForPreTraining


def make_model_dir(path: Path, vocab: list[str], cls=BertForPreTraining, layers: int = 3, seed: int = 0,
                   max_position_embeddings: int = 64, **overrides) -> Path:
    """A random tiny BERT (hidden 32, 4 heads) saved with ``save_pretrained`` plus its ``vocab.txt``."""
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=max_position_embeddings, **overrides)
    cls(config).save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids ~10 ms of thread wake-up per op."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def http_json(url: str, path: str, body=None, method: str | None = None, timeout: float = 120):
    """``(status, parsed JSON answer or None)`` for ``body`` sent as JSON (GET without a body), errors included."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method or ("GET" if data is None else "POST"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
