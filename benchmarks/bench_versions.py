"""Two versions of bertkit side by side on the same jobs: end to end, each job a fresh ``bertkit`` process.

Each version is a source tree (``--before`` and ``--after``: a checkout's ``src``), run by the same Python with
``PYTHONPATH`` at that tree. Rounds alternate the order of the two versions; each job's wall time is the median over
rounds, and the ratio is before / after (above 1: the after version is faster). The jobs:

- ``pretrain``: ``bertkit pretrain`` of bert-mini for ``--steps`` steps on one bundled book (seq 64, batch 16,
  fp32 or bf16 as ``--precision`` says), the shards prepared once beforehand and reused, so the figure is the loop;
- ``finetune``: ``bertkit finetune --task sst2`` of that model for ``--finetune-steps`` steps on the first 2,000
  rows of SST-2's training set (``../shared/data``), dev on its first 500;
- ``encode``: ``Encoder.from_pretrained(model).encode`` of 2,000 SST-2 sentences (last four layers, mean pooling);
- ``serve``: ``bertkit serve`` of that model, 16 client threads sending the 2,000 sentences one per ``POST /embed``
  (TEI's route): the seconds from the first request to the last answer, the server started and healthy before.

    .venv/bin/python benchmarks/bench_versions.py --before ../old/src --after src --rounds 3

Timings include each process's start (importing torch), the same for both versions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BOOK = ROOT / "src" / "bertkit" / "resources" / "corpus" / "alice_in_wonderland.txt.gz"


def run(src: Path, argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{src}: {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return wall


def serve(src: Path, cli: list[str], model: Path, sentences: list[str], threads: int, port: int) -> float:
    """Seconds for 16 client threads to embed ``sentences`` one per request from a ``bertkit serve`` of ``model``."""
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    argv = [*cli, "serve", "--model", str(model), "--port", str(port), "--threads", str(threads)]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise SystemExit(f"{src}: the server did not start")

        def embed(text: str) -> None:
            body = json.dumps({"inputs": text}).encode()
            request = urllib.request.Request(f"{url}/embed", body, {"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=120).read()

        embed(sentences[0])  # warm
        t0 = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(embed, sentences))
        return time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the source tree of the version to compare against")
    ap.add_argument("--after", type=Path, default=ROOT / "src")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--finetune-steps", type=int, default=200)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jobs", default="pretrain,finetune,encode,serve")
    args = ap.parse_args()
    py = sys.executable
    cli = [py, "-c", "import sys; from bertkit.cli import main; sys.exit(main())"]
    vocab = DATA / "vocab" / "bert-base-uncased" / "vocab.txt"
    sst = DATA / "glue" / "SST-2"
    jobs = args.jobs.split(",")
    versions = {"before": args.before, "after": args.after}
    times: dict[str, dict[str, list[float]]] = {j: {v: [] for v in versions} for j in jobs}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "cache").mkdir()
        os.environ["BERTKIT_CACHE"] = str(work / "cache")
        train, dev = work / "train.tsv", work / "dev.tsv"
        train.write_text("".join((sst / "train.tsv").open(encoding="utf-8").readlines()[:2001]), encoding="utf-8")
        dev.write_text("".join((sst / "dev.tsv").open(encoding="utf-8").readlines()[:501]), encoding="utf-8")
        sentences = work / "sentences.txt"
        sentences.write_text("".join(line.split("\t")[0] + "\n" for line in train.read_text().splitlines()[1:]))
        common = ["--threads", str(args.threads), "--quiet"]
        pre = ["--corpus", str(BOOK), "--vocab", str(vocab), "--model-size", "bert-mini", "--seq-len", "64"]
        pre += ["--batch-size", "16", "--precision", args.precision, "--recipe", "paper", *common]
        # the shards, once (both versions read the cache the same way)
        run(args.after, [*cli, "prepare", "--corpus", str(BOOK), "--vocab", str(vocab), "--quiet"], work)
        model = work / "model"
        run(args.after, [*cli, "pretrain", *pre, "--max-steps", "20", "--output", str(model)], work)
        for r in range(args.rounds):
            order = list(versions.items()) if r % 2 == 0 else list(reversed(versions.items()))
            for job in jobs:
                for name, src in order:
                    out = work / f"{job}-{name}-{r}"
                    if job == "pretrain":
                        argv = [*cli, "pretrain", *pre, "--max-steps", str(args.steps), "--output", str(out)]
                    elif job == "serve":
                        lines = sentences.read_text().splitlines()
                        times[job][name].append(serve(src, cli, model, lines, args.threads, 8765 + r))
                        continue
                    elif job == "finetune":
                        argv = [*cli, "finetune", "--task", "sst2", "--train", str(train), "--dev", str(dev)]
                        argv += ["--model", str(model), "--output", str(out), "--max-steps", str(args.finetune_steps)]
                        argv += ["--batch-size", "32", "--max-seq-length", "64", *common]
                    else:
                        code = (
                            "import sys, torch; torch.set_num_threads(int(sys.argv[3])); from bertkit import Encoder; "
                            "s = open(sys.argv[2]).read().splitlines(); "
                            "Encoder.from_pretrained(sys.argv[1]).encode(s, layers=[-1, -2, -3, -4])"
                        )
                        argv = [py, "-c", code, str(model), str(sentences), str(args.threads)]
                    times[job][name].append(run(src, argv, work))
                    shutil.rmtree(out, ignore_errors=True)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{j} {times[j]['before'][-1]:.1f}/{times[j]['after'][-1]:.1f}s" for j in jobs)
            )
    print(f"median wall seconds over {args.rounds} rounds, before ({args.before}) / after ({args.after}):")
    for job in jobs:
        b, a = statistics.median(times[job]["before"]), statistics.median(times[job]["after"])
        print(f"  {job:<9} before {b:7.1f}s   after {a:7.1f}s   ratio {b / a:.2f}x")


if __name__ == "__main__":
    main()
