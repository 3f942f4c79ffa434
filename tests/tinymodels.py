"""Helpers shared by the feature and serving tests: a tiny model directory, and one torch thread per module."""

from __future__ import annotations

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
