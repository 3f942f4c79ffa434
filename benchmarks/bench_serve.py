"""Embedding server under concurrent load: ``bertkit serve`` (dynamic batching) vs a plain transformers server.

Both servers run as separate processes on 127.0.0.1 with the same random bert-base-shaped model (last layer, masked
mean) and get the same load: ``--clients`` threads, each sending one SST-2 sentence per request to ``POST /embed``
(TEI format) until ``--n`` sentences are done. Reported per server: sentences/s and the p50 / p99 request latency.
Runs alternate (bertkit, transformers, bertkit, ...); medians over ``--repeats`` are printed with the ratio.

    baseline ("what a transformers user would write"): FastAPI, BertTokenizerFast + BertModel, one request = one
    forward pass, serialised by a lock, torch.no_grad, fp32.

    .venv/bin/python benchmarks/bench_serve.py --n 128 --clients 16 --repeats 2

RSS mode (``--rss N``): N varied ``/embed`` requests (1-16 SST-2 sentences each, some repeated up to 4 times to
vary the length) from 4 clients, against ``bertkit serve`` with and without its idle ``malloc_trim``
(``--malloc-trim-interval 0``) and with ``MALLOC_ARENA_MAX=2`` as well; prints the server's RSS every N/10
requests and once more after a few idle seconds:

    .venv/bin/python benchmarks/bench_serve.py --rss 5000 --layers 2 --hidden 128 --heads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_features import DATA, build_model_dir, load_sentences  # noqa: E402


def baseline_server(model_dir: str, port: int) -> None:
    import torch
    import transformers
    import uvicorn
    from fastapi import FastAPI

    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    lock = threading.Lock()
    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/embed")
    def embed(body: dict):
        texts = body["inputs"] if isinstance(body["inputs"], list) else [body["inputs"]]
        with lock, torch.no_grad():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            return ((hidden * mask).sum(1) / mask.sum(1)).tolist()

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server at {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"server at {url} not healthy after {timeout} s")


def load(url: str, sentences: list[str], clients: int) -> tuple[float, list[float], int]:
    """Every sentence once, one per request, from ``clients`` threads. Returns (wall s, latencies, failures)."""
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    it = iter(sentences)

    def worker():
        nonlocal failures
        while True:
            with lock:
                text = next(it, None)
            if text is None:
                return
            body = json.dumps({"inputs": [text], "normalize": False}).encode()
            req = urllib.request.Request(url + "/embed", data=body, headers={"Content-Type": "application/json"})
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    r.read()
                    ok = r.status == 200
            except OSError:
                ok = False
            with lock:
                latencies.append(time.perf_counter() - start)
                failures += not ok

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, latencies, failures


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_run(url: str, pid: int, sentences: list[str], n: int, clients: int = 4, seed: int = 0) -> list[tuple]:
    """``n`` varied /embed requests; returns [(requests done, RSS MB)] sampled every n/10 requests."""
    import random

    rng = random.Random(seed)
    bodies = []
    for _ in range(n):
        k = rng.choice([1, 2, 4, 8, 16])
        texts = [" ".join([rng.choice(sentences)] * rng.choice([1, 1, 2, 4])) for _ in range(k)]
        bodies.append(json.dumps({"inputs": texts, "truncate": True}).encode())
    samples = [(0, rss_mb(pid))]
    lock = threading.Lock()
    done = [0]
    it = iter(bodies)
    step = max(1, n // 10)

    def worker():
        while True:
            with lock:
                body = next(it, None)
            if body is None:
                return
            req = urllib.request.Request(url + "/embed", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()
            with lock:
                done[0] += 1
                if done[0] % step == 0:
                    samples.append((done[0], rss_mb(pid)))

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(6)  # one trim interval of idleness
    samples.append((n, rss_mb(pid)))
    return samples


def rss_main(args: argparse.Namespace) -> None:
    sentences = load_sentences(args.data, 20000)
    bertkit_bin = str(Path(sys.executable).with_name("bertkit"))
    print(
        f"RSS of bertkit serve over {args.rss} varied /embed requests (1-16 SST-2 sentences each); model "
        f"{args.layers}x{args.hidden} (random)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        build_model_dir(Path(tmp), args.vocab, args.layers, args.hidden, args.heads, seed=0)
        configs = {
            "trim": ("malloc_trim at most every 5 s (default)", "5", {}),
            "notrim": ("no malloc_trim", "0", {}),
            "arena2": ("malloc_trim + MALLOC_ARENA_MAX=2", "5", {"MALLOC_ARENA_MAX": "2"}),
        }
        for key in args.rss_configs.split(","):
            label, interval, extra_env = configs[key]
            url = f"http://127.0.0.1:{args.port}"
            proc = subprocess.Popen(
                [
                    bertkit_bin,
                    "serve",
                    "--model",
                    tmp,
                    "--port",
                    str(args.port),
                    "--log-level",
                    "warning",
                    "--malloc-trim-interval",
                    interval,
                ],
                env={**os.environ, "PYTHONUNBUFFERED": "1", **extra_env},
                stdout=subprocess.DEVNULL,
            )
            try:
                wait_healthy(url, proc)
                samples = rss_run(url, proc.pid, sentences, args.rss)
            finally:
                proc.terminate()
                proc.wait(15)
            print(f"  {label}: " + "  ".join(f"{k}:{mb:.0f}" for k, mb in samples) + " (requests:MB)")
            after_warmup = [mb for k, mb in samples if k >= args.rss // 10]
            print(
                f"    after the first {args.rss // 10} requests: min {min(after_warmup):.0f} MB, "
                f"max {max(after_warmup):.0f} MB, end {samples[-1][1]:.0f} MB"
            )


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-server", nargs=2, metavar=("MODEL_DIR", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=DATA / "glue" / "SST-2" / "train.tsv")
    parser.add_argument("--vocab", type=Path, default=DATA / "vocab" / "bert-base-uncased" / "vocab.txt")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--port", type=int, default=18230)
    parser.add_argument("--rss", type=int, default=0, metavar="N", help="RSS mode: N varied requests")
    parser.add_argument("--rss-configs", default="trim,notrim,arena2", help="RSS mode: which server settings")
    args = parser.parse_args()
    if args.rss:
        rss_main(args)
        return
    if args.baseline_server:
        baseline_server(args.baseline_server[0], int(args.baseline_server[1]))
        return

    sentences = load_sentences(args.data, args.n)
    bertkit_bin = str(Path(sys.executable).with_name("bertkit"))
    with tempfile.TemporaryDirectory() as tmp:
        build_model_dir(Path(tmp), args.vocab, args.layers, args.hidden, args.heads, seed=0)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        servers = {
            "bertkit": (
                f"http://127.0.0.1:{args.port}",
                [
                    bertkit_bin,
                    "serve",
                    "--model",
                    tmp,
                    "--port",
                    str(args.port),
                    "--layers",
                    "-1",
                    "--log-level",
                    "warning",
                ],
            ),
            "transformers": (
                f"http://127.0.0.1:{args.port + 1}",
                [sys.executable, __file__, "--baseline-server", tmp, str(args.port + 1)],
            ),
        }
        procs = {name: subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL) for name, (_, cmd) in servers.items()}
        try:
            for name, (url, _) in servers.items():
                wait_healthy(url, procs[name])
            print(
                f"{len(sentences)} SST-2 sentences, one per request, {args.clients} concurrent clients; model "
                f"{args.layers}x{args.hidden} (random), last layer, masked mean"
            )
            for url, _ in servers.values():  # warm-up
                load(url, sentences[: args.clients], args.clients)
            results: dict[str, list[tuple[float, float, float, int]]] = {"bertkit": [], "transformers": []}
            for r in range(args.repeats):
                for name, (url, _) in servers.items():
                    wall, lat, failures = load(url, sentences, args.clients)
                    results[name].append((len(sentences) / wall, pct(lat, 0.5), pct(lat, 0.99), failures))
                    tput, p50, p99, f = results[name][-1]
                    print(
                        f"  run {r + 1} {name:12s} {tput:7.1f} sentences/s  p50 {p50 * 1000:7.0f} ms  "
                        f"p99 {p99 * 1000:7.0f} ms  failures {f}"
                    )
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    for name, (tput, p50, p99) in med.items():
        print(
            f"{name:12s} median {tput:7.1f} sentences/s  p50 {p50 * 1000:7.0f} ms  p99 {p99 * 1000:7.0f} ms  "
            f"failures {sum(x[3] for x in results[name])}"
        )
    print(
        f"ratio bertkit / transformers: {med['bertkit'][0] / med['transformers'][0]:.2f}x sentences/s, "
        f"p99 latency {med['transformers'][2] / med['bertkit'][2]:.2f}x lower"
    )


if __name__ == "__main__":
    main()
