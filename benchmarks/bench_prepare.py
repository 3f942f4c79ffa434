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

With ``--corpus PATH ...`` the corpus is those files and directories as they are (the shared books and Wikipedia:
``.txt.zst`` prose and ``.jsonl.zst`` records), read in place and never deleted; ``--sizes`` and ``--layout`` do not
apply. The tokenizers route then reads the same files as the files say: decompressed (gzip, zstd), and a JSONL
record's ``text`` field (``--text-field``), its non-blank lines; the text bytes are counted as it reads them.

Rounds alternate between the routes; the medians of MB/s (text bytes over wall time) and their ratio are printed.

    .venv/bin/python benchmarks/bench_prepare.py --sizes 100 --rounds 2
    .venv/bin/python benchmarks/bench_prepare.py --sizes 100 1000 --rounds 1 --layout both
    .venv/bin/python benchmarks/bench_prepare.py --corpus ../shared/data/corpus/books ../shared/data/corpus/wiki
"""

from __future__ import annotations

import argparse
import gzip
import io
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
held = meta["eval"]["tokens"] if meta.get("eval") else 0
print(json.dumps({{"seconds": elapsed, "tokens": sum(s["tokens"] for s in meta["shards"]) + held,
                  "shards": len(meta["shards"]), "files": len(meta["fingerprint"]["files"]),
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
    """``prepare_corpus`` on ``files`` (files or directories) in a child process; its JSON report (tokens: training
    and held out)."""
    script = _BERTKIT.format(
        src=str(ROOT / "src"), files=[str(f) for f in files], out=str(out), vocab=str(vocab), workers=workers
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def file_lines(f: Path, text_field: str = "text"):
    """A file's lines as text, the plainest way: decompressed by its first bytes (gzip, zstd), and for a JSONL file
    (``.jsonl`` under any compression suffix) each record's ``text_field`` cut after its line breaks."""
    raw = open(f, "rb")  # noqa: SIM115 (closed by the text wrapper)
    head = raw.read(4)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        raw = gzip.GzipFile(fileobj=raw)
    elif head.startswith(b"\x28\xb5\x2f\xfd"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as fh:
        if ".jsonl" in f.name:
            for record in fh:
                if record.strip():
                    yield from json.loads(record)[text_field].splitlines(keepends=True)
        else:
            yield from fh


def run_tokenizers(files: list[Path], vocab: Path) -> dict:
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(str(vocab), lowercase=True)
    t = time.perf_counter()
    tokens = text_bytes = 0
    for f in files:
        batch = []
        for line in file_lines(f):
            text_bytes += len(line.encode("utf-8"))
            if line.strip():
                batch.append(line)
                if len(batch) == 10_000:
                    tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
                    batch = []
        if batch:
            tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
    return {"seconds": time.perf_counter() - t, "tokens": tokens, "bytes": text_bytes}


def compare(label: str, paths: list[Path], files: list[Path], mb: float | None, tmp: Path, args, workers) -> tuple:
    """``args.rounds`` alternating rounds of the two routes on the same files; the table's row. ``mb``: the text's
    megabytes, or None to take the tokenizers route's count of the text it read."""
    ours, theirs, mem = [], [], []
    for r in range(args.rounds):
        a = run_bertkit(paths, tmp / "shards", Path(args.vocab), workers)
        b = run_tokenizers(files, Path(args.vocab))
        mb = mb or b["bytes"] / 1e6
        ours.append(mb / a["seconds"])
        theirs.append(mb / b["seconds"])
        mem.append(a["main_rss"] + workers * a["worker_rss"])
        print(
            f"  {label} round {r + 1}: bertkit {mb / a['seconds']:.2f} MB/s ({a['seconds']:.0f} s, {a['files']} "
            f"files, {a['tokens']:,} tokens, {a['shards']} shards, {a['tokens'] / a['seconds']:,.0f} tokens/s), "
            f"tokenizers {mb / b['seconds']:.2f} MB/s ({b['seconds']:.0f} s, {b['tokens']:,} tokens, "
            f"{b['tokens'] / b['seconds']:,.0f} tokens/s); bertkit main {a['main_rss'] / 2**20:.0f} MiB, largest "
            f"worker {a['worker_rss'] / 2**20:.0f} MiB; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    median = statistics.median
    return label, median(ours), median(theirs), median(ours) / median(theirs), max(mem)


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
    parser.add_argument(
        "--corpus", nargs="+", default=None, help="files or directories to read in place (no generated corpus)"
    )
    args = parser.parse_args()
    from bertkit.data.pretraining.pipeline import default_workers

    workers = args.workers or default_workers()
    print(
        f"cores available: {default_workers()}, bertkit workers: {workers}, load average: "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    rows = []
    if args.corpus:
        from bertkit.data.pretraining.corpus_files import expand_corpus

        paths = [Path(p) for p in args.corpus]
        files = expand_corpus(paths)
        tmp = Path(tempfile.mkdtemp(prefix="bench_prepare-"))
        try:
            rows.append(compare(f"{len(files)} files", paths, files, None, tmp, args, workers))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for size in [] if args.corpus else args.sizes:
        for one_file in {"files": [False], "one-file": [True], "both": [False, True]}[args.layout]:
            tmp = Path(tempfile.mkdtemp(prefix="bench_prepare-"))
            try:
                files, total = make_corpus(tmp / "corpus", size, one_file)
                label = f"{size:g} MB {'1 file' if one_file else f'{len(files)} files'}"
                rows.append(compare(label, files, files, total / 1e6, tmp, args, workers))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{'corpus':>16} {'bertkit MB/s':>13} {'tokenizers MB/s':>16} {'ratio':>6} {'bertkit peak MiB':>17}")
    for label, a, b, ratio, peak in rows:
        print(f"{label:>16} {a:13.2f} {b:16.2f} {ratio:6.2f} {peak / 2**20:17.0f}")


if __name__ == "__main__":
    main()
