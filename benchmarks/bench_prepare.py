"""Corpus preparation throughput and memory: bertkit's preparation vs raw ``tokenizers`` on the same text.

The corpus is the 12 shared Gutenberg books repeated (each copy renamed) up to ``--sizes`` megabytes, generated into
a temporary directory and deleted afterwards: many files, or (``--layout both``) the same text as one file.

bertkit route: ``prepare_corpus`` (what ``bertkit prepare`` and ``bertkit pretrain`` run): reading, the default
regex sentence splitter, Google-exact WordPiece, shards on disk, with every core (worker processes). It runs in a
subprocess, which reports its own peak RSS and that of its largest worker; "peak memory" is main + workers x largest
worker (an upper bound of the sum).

tokenizers route: the raw ``tokenizers.BertWordPieceTokenizer`` (same vocabulary, uncased) ``encode_batch`` on the
same files' non-blank lines, batches of 10,000 lines, with its own thread pool on every core: no sentence splitting,
no shards. This is the ceiling the issue sets (preparation at >= 50% of it).

Rounds alternate between the routes; the medians of MB/s (text bytes over wall time) and their ratio are printed.

    .venv/bin/python benchmarks/bench_prepare.py --sizes 100 --rounds 2
    .venv/bin/python benchmarks/bench_prepare.py --sizes 100 1000 --rounds 1 --layout both
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/data")

_BERTKIT = """
import json, resource, sys, time
sys.path.insert(0, {src!r})
from bertkit.data.pretraining.prepare import prepare_corpus
files = {files!r}
t = time.perf_counter()
meta = prepare_corpus(files, {out!r}, {vocab!r}, workers={workers}, progress=False, use_cache=False)
elapsed = time.perf_counter() - t
print(json.dumps({{"seconds": elapsed, "tokens": sum(s["tokens"] for s in meta["shards"]),
                  "main_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "worker_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}}))
"""


def make_corpus(directory: Path, megabytes: float, one_file: bool) -> tuple[list[Path], int]:
    books = sorted((SHARED / "corpus" / "gutenberg").glob("*.txt"))
    if not books:
        raise SystemExit(f"no books under {SHARED / 'corpus' / 'gutenberg'}")
    texts = [b.read_bytes() for b in books]
    target = int(megabytes * 1e6)
    directory.mkdir(parents=True, exist_ok=True)
    files, total, copy = [], 0, 0
    out = open(directory / "corpus.txt", "wb") if one_file else None  # noqa: SIM115
    try:
        while total < target:
            for book, text in zip(books, texts):
                if total >= target:
                    break
                if out is not None:
                    out.write(text + b"\n\n")
                else:
                    p = directory / f"copy{copy:04d}-{book.stem}.txt"
                    p.write_bytes(text)
                    files.append(p)
                total += len(text)
            copy += 1
    finally:
        if out is not None:
            out.close()
            files = [directory / "corpus.txt"]
    return files, total


def run_bertkit(files: list[Path], out: Path, vocab: Path, workers: int | None) -> dict:
    script = _BERTKIT.format(
        src=str(ROOT / "src"), files=[str(f) for f in files], out=str(out), vocab=str(vocab), workers=workers
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_tokenizers(files: list[Path], vocab: Path) -> dict:
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(str(vocab), lowercase=True)
    t = time.perf_counter()
    tokens = 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            batch = []
            for line in fh:
                if line.strip():
                    batch.append(line)
                    if len(batch) == 10_000:
                        tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
                        batch = []
            if batch:
                tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
    return {"seconds": time.perf_counter() - t, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[100.0], help="corpus sizes in MB (default 100)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per route (default 2)")
    parser.add_argument(
        "--layout",
        choices=["files", "one-file", "both"],
        default="files",
        help="the corpus as many files (default), as one file, or both",
    )
    parser.add_argument("--workers", type=int, default=None, help="bertkit worker processes (default: every core)")
    parser.add_argument("--vocab", default=str(SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"))
    args = parser.parse_args()
    vocab = Path(args.vocab)
    from bertkit.data.pretraining.pipeline import default_workers

    workers = args.workers or default_workers()
    print(
        f"cores available: {default_workers()}, bertkit workers: {workers}, load average: "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    rows = []
    for size in args.sizes:
        for one_file in {"files": [False], "one-file": [True], "both": [False, True]}[args.layout]:
            tmp = Path(tempfile.mkdtemp(prefix="bench_prepare-"))
            try:
                files, total = make_corpus(tmp / "corpus", size, one_file)
                mb = total / 1e6
                ours, theirs, mem = [], [], []
                for r in range(args.rounds):
                    a = run_bertkit(files, tmp / "shards", vocab, workers)
                    b = run_tokenizers(files, vocab)
                    ours.append(mb / a["seconds"])
                    theirs.append(mb / b["seconds"])
                    mem.append(a["main_rss"] + workers * a["worker_rss"])
                    print(
                        f"  {size:g} MB {'one file' if one_file else f'{len(files)} files'} round {r + 1}: "
                        f"bertkit {mb / a['seconds']:.2f} MB/s ({a['tokens']:,} tokens), tokenizers "
                        f"{mb / b['seconds']:.2f} MB/s ({b['tokens']:,} tokens); bertkit main "
                        f"{a['main_rss'] / 2**20:.0f} MiB, largest worker {a['worker_rss'] / 2**20:.0f} MiB",
                        flush=True,
                    )
                row = (
                    f"{size:g} MB",
                    "1 file" if one_file else f"{len(files)} files",
                    statistics.median(ours),
                    statistics.median(theirs),
                    statistics.median(ours) / statistics.median(theirs),
                    max(mem),
                )
                rows.append(row)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\n{'corpus':>8} {'layout':>10} {'bertkit MB/s':>13} {'tokenizers MB/s':>16} {'ratio':>6} "
        f"{'bertkit peak MiB':>17}"
    )
    for size, layout, a, b, ratio, peak in rows:
        print(f"{size:>8} {layout:>10} {a:13.2f} {b:16.2f} {ratio:6.2f} {peak / 2**20:17.0f}")


if __name__ == "__main__":
    main()
