"""Corpus preparation end to end: ``bertkit prepare`` on the command line (its cache, reused by pretrain; a missing
vocabulary refused), and the streaming pipeline's memory measured in a child process (flat in the corpus size; a
1.2 GB gzip stream never held whole). The library-level preparation tests are in tests/unit/test_prepare.py."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tinycorpus import TOKENIZER_VOCAB as VOCAB
from tinycorpus import mixed_corpus

from bertkit.data.pretraining.prepare import prepare_corpus

SRC = Path(__file__).resolve().parents[2] / "src"


# --------------------------------------------------------------------------------------------- bertkit prepare


def test_bertkit_prepare_then_pretrain_reuses_the_cache(tmp_path, monkeypatch, capsys):
    from bertkit.cli import main
    from bertkit.tokenization import BertTokenizer

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    corpus = mixed_corpus(tmp_path)
    assert main(["prepare", "--corpus", str(corpus), "--vocab", str(VOCAB), "--workers", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    (cached,) = (tmp_path / "cache" / "prepared").iterdir()
    assert str(cached) in printed and (cached / "meta.json").is_file()
    # pretrain copies the vocabulary into its run and prepares from there: the same tokens, so the same key
    run = tmp_path / "run"
    BertTokenizer.from_pretrained(str(VOCAB)).save_pretrained(run)
    log: list[str] = []
    meta = prepare_corpus(
        [str(corpus)], run / "data" / "shards", run / "vocab.txt", workers=1, progress=False, log=log.append
    )
    assert any("reusing the corpus prepared in" in m for m in log), log
    first = meta["shards"][0]["name"] + ".tokens.npy"
    assert os.stat(run / "data" / "shards" / first).st_ino == os.stat(cached / first).st_ino  # linked, not copied
    # a changed file is a different corpus: tokenized again
    with open(corpus / "google.txt", "a", encoding="utf-8") as f:
        f.write("A new sentence.\n")
    log.clear()
    prepare_corpus([str(corpus)], tmp_path / "again", run / "vocab.txt", workers=1, progress=False, log=log.append)
    assert any("tokenizing 3 file(s)" in m for m in log), log


def test_bertkit_prepare_refuses_a_missing_vocabulary(tmp_path, capsys):
    from bertkit.cli import main

    corpus = mixed_corpus(tmp_path)
    assert main(["prepare", "--corpus", str(corpus), "--vocab", str(tmp_path / "nope.txt")]) != 0
    assert "nope.txt: no such file or directory" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- memory

_MEMORY_SCRIPT = """
import json, resource, sys, tracemalloc
sys.path.insert(0, {src!r})
from bertkit.data.pretraining import corpus
corpus.BLOCK_CHARS = 1 << 14
from bertkit.data.pretraining.prepare import HeldOut, prepare_corpus
HeldOut.SEGMENT = 1024  # the bounds (a block, a held-out stretch, a shard, the held-out cap) are small here: the
                        # inputs are larger than all of them

class Stop(Exception):
    pass

def stop(record):
    if {stop_after} and len(record["shards"]) >= {stop_after}:
        raise Stop

tracemalloc.start()
try:
    meta = prepare_corpus([{path!r}], {out!r}, {vocab!r}, workers=2, progress=False, use_cache=False,
                          shard_tokens={shard_tokens}, max_eval_tokens=1 << 12,
                          on_checkpoint=stop)
    tokens = sum(s["tokens"] for s in meta["shards"])
except Stop:
    tokens = -1
# VmHWM: this process image's peak resident memory (ru_maxrss would carry over the parent's peak across fork and
# exec, so inside a large test run it reported pytest's 2 GB)
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")]
rss = hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"peak": tracemalloc.get_traced_memory()[1], "tokens": tokens, "rss": rss}}))
"""


def _measure(path: Path, out: Path, shard_tokens: int = 1 << 13, stop_after: int = 0) -> dict:
    script = _MEMORY_SCRIPT.format(
        src=str(SRC), path=str(path), out=str(out), vocab=str(VOCAB), shard_tokens=shard_tokens, stop_after=stop_after
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _write_prose(path: Path, megabytes: float, paragraphs: bool = True) -> None:
    rng = np.random.default_rng(1)
    words = np.array("the cat dog sat ran on a mat home it was happy and then there went to over".split())
    sentences = [" ".join(rng.choice(words, 8)).capitalize() + "." for _ in range(2000)]
    chunk = ("\n\n" if paragraphs else "\n").join(" ".join(sentences[i : i + 5]) for i in range(0, 2000, 5)) + "\n\n"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(int(megabytes * 1e6 / len(chunk)) + 1):
            f.write(chunk)


@pytest.mark.timeout(600)
def test_memory_does_not_grow_with_the_corpus(tmp_path):
    """The main process's peak traced memory (reading, routing, writing) on 0.5 MB and on 2 MB of prose in one file:
    equal within 20% (a pipeline that held the file, a document or its tokens would need 4x)."""
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    _write_prose(small, 0.5)
    _write_prose(big, 2)
    a = _measure(small, tmp_path / "a")
    b = _measure(big, tmp_path / "b")
    assert b["tokens"] > 3.5 * a["tokens"] > 0
    assert b["peak"] <= 1.2 * a["peak"], (a, b)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("layout", ["paragraphs", "one-line"])
def test_prose_is_not_held_whole(tmp_path, layout):
    """Issue 24, probe 2: a 1.2 GB gzip of repeated prose (here a few MB on disk) used to be read whole before any
    tokenizing (`list(read_lines())`, 1.48 GB and growing). Now the first shards are written within a bounded
    memory: the run is stopped after 3 shards and the whole process stayed under 400 MB."""
    unit = ("The same words come back again and again. " * 24 + ("\n\n" if layout == "paragraphs" else " ")) * 1000
    member = gzip.compress(unit.encode(), compresslevel=9)
    path = tmp_path / "repeated.txt.gz"
    with open(path, "wb") as f:
        for _ in range(int(1.2e9 / len(unit))):
            f.write(member)  # gzip members concatenate into one stream of 1.2 GB
    assert path.stat().st_size < 20e6
    result = _measure(path, tmp_path / "out", shard_tokens=1 << 16, stop_after=3)
    assert result["tokens"] == -1 and result["rss"] < 400e6, result
