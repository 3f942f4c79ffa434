"""Epoch start at corpus scale: how long a rank waits before its first pre-training batch, and its memory.

A synthetic shard set of ``--tokens`` tokens (default one billion) is written into a temporary directory with no text
behind it: each shard's token memmap is a sparse file (zeros, or random ids with ``--random-ids``), its sentences have
5-45 tokens and its documents 2-80 sentences, as
``build_shards_from_documents`` would lay them out. Then, in a fresh process each:

- **bertkit**: ``PretrainingData(...)``, ``num_batches(epoch)`` and the first batch (what a rank does at the start of
  every epoch), for epochs 0 and 1, with the peak resident memory of the process;
- **reference**: the per-sentence Python loop that built every epoch's instances before (kept verbatim in
  tests/unit/test_instance_layout.py) on ``--reference-shards`` shards, scaled to the whole set.

    .venv/bin/python benchmarks/bench_epoch_start.py                       # 1 B tokens, NSP, seq 128
    .venv/bin/python benchmarks/bench_epoch_start.py --tokens 100000000 --no-nsp
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def write_shards(out: Path, tokens: int, shard_tokens: int, random_ids: bool, seed: int = 0) -> dict:
    from bertkit.data.pretraining.instances import META_NAME, _save_npy

    rng = np.random.default_rng(seed)
    shards, left = [], tokens
    while left > 0:
        n_tok = min(shard_tokens, left)
        lengths = rng.integers(5, 46, n_tok // 20 + 16)
        ends = np.cumsum(lengths)
        lengths = lengths[: int(np.searchsorted(ends, n_tok)) + 1]
        lengths[-1] -= int(lengths.sum()) - n_tok
        lengths = lengths[lengths > 0]
        doc_sizes = rng.integers(2, 81, len(lengths) // 2 + 2)
        doc_ends = np.cumsum(doc_sizes)
        doc_ends = np.minimum(doc_ends[: int(np.searchsorted(doc_ends, len(lengths))) + 1], len(lengths))
        name = f"train-{len(shards):05d}"
        arr = np.lib.format.open_memmap(out / f"{name}.tokens.npy", mode="w+", dtype=np.uint16, shape=(n_tok,))
        if random_ids:
            for lo in range(0, n_tok, 1 << 24):
                arr[lo : lo + (1 << 24)] = rng.integers(1000, 30000, min(1 << 24, n_tok - lo), dtype=np.uint16)
        arr.flush()
        del arr
        _save_npy(out / f"{name}.sentences.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        _save_npy(out / f"{name}.documents.npy", np.concatenate([[0], doc_ends]).astype(np.int64))
        shards.append({"name": name, "tokens": n_tok, "sentences": len(lengths), "documents": len(doc_ends)})
        left -= n_tok
    meta = {"format": 1, "vocab_size": 30522, "dtype": "uint16", "shards": shards, "eval": None, "fingerprint": {}}
    (out / META_NAME).write_text(json.dumps(meta))
    return meta


def _vocab():
    from bertkit.data.pretraining.instances import VocabInfo

    return VocabInfo.from_tokens(
        ["[PAD]"]
        + [f"[unused{i}]" for i in range(99)]
        + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + [f"w{i}" for i in range(30522 - 104)]
    )


def run_bertkit(directory: str, seq: int, nsp: bool, batch_size: int) -> dict:
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData

    out = {}
    data = PretrainingData(
        directory, _vocab(), DataOptions(max_seq_length=seq, nsp=nsp, batch_size=batch_size), rank=0, world_size=8
    )
    for epoch in (0, 1):
        t = time.perf_counter()
        n = data.num_batches(epoch)
        batch = data.batch(epoch, 0)
        out[f"epoch{epoch}_s"] = time.perf_counter() - t
        out[f"epoch{epoch}_batches"] = n
        assert batch["input_ids"].shape[0] == batch_size
    t = time.perf_counter()
    for i in range(1, 21):
        data.batch(0, i * 997 % out["epoch0_batches"])
    out["batch_ms"] = (time.perf_counter() - t) / 20 * 1000
    out["instances"] = data.num_instances(0)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    status = Path("/proc/self/status")
    if status.is_file():  # resident memory of the process's own (anonymous) pages, not the shards' page cache
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        out["rss_anon_mb"] = int(fields.get("RssAnon", "0 kB").split()[0]) / 1024
    return out


def run_reference(directory: str, seq: int, nsp: bool, shards: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from test_instance_layout import _old_create_instances

    from bertkit.data.pretraining.instances import Shard, read_meta

    meta = read_meta(directory)
    t = time.perf_counter()
    n = 0
    for info in meta["shards"][:shards]:
        n += len(_old_create_instances(Shard.open(directory, info["name"]), seq, 0.1, nsp, random.Random(0)))
    per_shard = (time.perf_counter() - t) / shards
    return {
        "epoch_s": per_shard * len(meta["shards"]),
        "per_shard_s": per_shard,
        "table_mb": n / shards * len(meta["shards"]) * 6 * 8 / 2**20,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=1_000_000_000)
    p.add_argument("--shard-tokens", type=int, default=1 << 24)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--no-nsp", action="store_true")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--random-ids", action="store_true", help="fill the token memmaps (2 bytes a token on disk)")
    p.add_argument("--reference-shards", type=int, default=2)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    nsp = not args.no_nsp
    if args.child:
        what, directory = args.child
        res = (
            run_bertkit(directory, args.seq, nsp, args.batch_size)
            if what == "bertkit"
            else run_reference(directory, args.seq, nsp, args.reference_shards)
        )
        print(json.dumps(res))
        return
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        meta = write_shards(Path(tmp), args.tokens, args.shard_tokens, args.random_ids)
        sents = sum(s["sentences"] for s in meta["shards"])
        print(
            f"synthetic set: {args.tokens / 1e9:.2f} B tokens, {len(meta['shards'])} shards, {sents / 1e6:.1f} M "
            f"sentences, written in {time.perf_counter() - t:.0f} s; seq {args.seq}, nsp {nsp}, 8 ranks"
        )
        res = {}
        for what in ("bertkit", "reference"):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                what,
                tmp,
                "--seq",
                str(args.seq),
                "--batch-size",
                str(args.batch_size),
                "--reference-shards",
                str(args.reference_shards),
            ] + (["--no-nsp"] if args.no_nsp else [])
            res[what] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        b, r = res["bertkit"], res["reference"]
        print(
            f"bertkit:   epoch 0 starts in {b['epoch0_s']:.2f} s, epoch 1 in {b['epoch1_s']:.2f} s "
            f"({b['epoch0_batches']} batches of {args.batch_size} per rank, {b['instances'] / 1e6:.1f} M instances); "
            f"a later batch {b['batch_ms']:.0f} ms; peak RSS {b['peak_rss_mb']:.0f} MB (shard pages in), "
            f"anonymous memory at the end {b.get('rss_anon_mb', float('nan')):.0f} MB"
        )
        print(
            f"reference: an epoch's instance table takes {r['epoch_s']:.0f} s per rank "
            f"({r['per_shard_s']:.2f} s a shard, {args.reference_shards} timed) and holds {r['table_mb']:.0f} MB"
        )
        print(f"ratio (reference / bertkit epoch start): {r['epoch_s'] / b['epoch0_s']:.0f}x")


if __name__ == "__main__":
    main()
