"""`bertkit pretrain` killed while it prepares its corpus, then run again with --resume: the preparation continues
from its last saved shard (not from the start), the shards equal an uninterrupted preparation's, and training goes
on to a loadable model."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from tinymodels import TINY_PRETRAIN

from bertkit.data.pretraining import corpus as corpus_module
from bertkit.data.pretraining import prepare as prepare_module
from bertkit.data.pretraining.prepare import prepare_corpus

TINY = [*TINY_PRETRAIN, "--max-steps", "2", "--threads", "1"]
SHARD_TOKENS = 1500


class Killed(BaseException):
    """What a kill looks like to the code under test: nothing after it runs (not an Exception a handler catches)."""


@pytest.fixture()
def book(tmp_path) -> tuple[Path, Path]:
    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    text = gzip.decompress(alice.read_bytes()).decode("utf-8")[:60_000]
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(10):  # ten documents: shards end at document boundaries
        (folder / f"part{i}.txt").write_text(text[i * 6000 : (i + 1) * 6000], encoding="utf-8")
    train_vocab(sorted(folder.iterdir()), vocab_size=600, output=tmp_path / "vocab", show_progress=False)
    return folder, tmp_path / "vocab" / "vocab.txt"


def _shards(directory: Path) -> dict[str, bytes]:
    return {p.name: np.load(p).tobytes() for p in sorted(directory.glob("*.npy"))}


def test_pretrain_killed_while_preparing_resumes_the_preparation(book, tmp_path, monkeypatch, caplog):
    from bertkit.cli import main

    corpus, vocab = book
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))  # nothing reused from a cache
    monkeypatch.setattr(corpus_module, "BLOCK_CHARS", 1000)  # shards end at blocks: several small ones
    ref = prepare_corpus(
        [corpus], tmp_path / "ref", vocab, workers=1, progress=False, use_cache=False, shard_tokens=SHARD_TOKENS
    )
    assert len(ref["shards"]) >= 4

    saved: list[dict] = []

    def kill_after_two(record):
        saved.append(record)
        if len(saved) == 2:
            raise Killed

    # pretrain prepares through data.pretraining.prepare.prepare_corpus: small shards, and a kill after two of them
    monkeypatch.setattr(
        prepare_module,
        "prepare_corpus",
        functools.partial(prepare_corpus, shard_tokens=SHARD_TOKENS, on_checkpoint=kill_after_two),
    )
    out = tmp_path / "run"
    args = ["pretrain", "--corpus", str(corpus), "--vocab", str(vocab), "--output", str(out), *TINY]
    with pytest.raises(Killed):
        main(args)
    shards = out / "data" / "shards"
    assert (shards / "progress.json").is_file() and not (shards / "meta.json").exists()
    assert not (out / "model.safetensors").exists()

    monkeypatch.setattr(prepare_module, "prepare_corpus", functools.partial(prepare_corpus, shard_tokens=SHARD_TOKENS))
    caplog.set_level("INFO")
    assert main([*args, "--resume"]) == 0
    said = caplog.text
    assert "resuming the preparation" in said and "after 2 shard(s)" in said, said[-3000:]
    meta = json.loads((shards / "meta.json").read_text())
    assert meta["shards"] == ref["shards"] and meta["eval"] == ref["eval"]
    assert _shards(shards) == _shards(tmp_path / "ref")
    assert not (shards / "progress.json").exists()
    assert (out / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 2
