"""One CPU, one process or several: ``bertkit pretrain``'s tokens a second as one process of all the cores against
``--processes N`` (DDP over gloo, each process on its share of the cores, the same global batch split between them).

Each round runs both routes end to end as a user runs them (the command, its data, its loop), alternating which goes
first: the budget recipe's model (ModernBERT-tiny at 6 layers, the 8,000-token vocabulary trained on the bundled books
once, before the rounds) at one fixed shape, ``--max-steps`` steps, a log line every 10 steps. A route's rate is the
median of its log lines' ``tokens_per_s`` (every rank's tokens), the first two windows left out (warm-up); the
median over the rounds is printed, with the ratio. The CPU is the machine's, or what ``ATEN_CPU_CAPABILITY``,
``ONEDNN_MAX_CPU_ISA`` and ``MKL_ENABLE_INSTRUCTIONS`` in the environment cap it to (they reach the runs).

    .venv/bin/python benchmarks/bench_processes.py                         # 32 tokens x 128, the ramp's first stage
    .venv/bin/python benchmarks/bench_processes.py --seq-len 128 --batch-size 32   # its last
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        .venv/bin/python benchmarks/bench_processes.py --precision fp32    # an AVX2 CPU, emulated
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent


def rate(output: Path) -> float:
    lines = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
    rates = [x["tokens_per_s"] for x in lines if "tokens_per_s" in x][2:]
    if not rates:
        raise SystemExit(f"{output}: no log line past the warm-up; give more --steps")
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=128, help="the global batch (split between the processes)")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="auto")
    args = ap.parse_args()
    if args.batch_size % args.processes:
        raise SystemExit(f"--batch-size {args.batch_size}: not divisible by --processes {args.processes}")

    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        books = [str(p) for p in bundled_corpus()]
        text = tmp / "books.txt"
        text.write_text("".join(gzip.decompress(Path(p).read_bytes()).decode() for p in books), encoding="utf-8")
        train_vocab([text], vocab_size=8000, output=tmp / "vocab", show_progress=False)
        common = ["pretrain", "--corpus", *books, "--vocab", str(tmp / "vocab" / "vocab.txt"), "--recipe", "budget"]
        common += ["--model-size", "modernbert-tiny", "--config-override", "num_hidden_layers=6"]
        common += ["--seq-len", str(args.seq_len), "--seq-ramp", "off", "--batch-ramp", "off"]
        common += ["--max-steps", str(args.steps), "--log-every", "10", "--eval-every", str(10 * args.steps)]
        common += ["--precision", args.precision, "--quiet", "--loader-workers", "0"]
        routes = {
            "1 process": ["--processes", "1", "--threads", str(cores), "--batch-size", str(args.batch_size)],
            f"{args.processes} processes": [
                *("--processes", str(args.processes), "--threads", str(max(1, cores // args.processes))),
                *("--batch-size", str(args.batch_size // args.processes)),
            ],
        }
        rates: dict[str, list[float]] = {k: [] for k in routes}
        for r in range(args.rounds):
            for name, flags in routes.items() if r % 2 == 0 else reversed(list(routes.items())):
                out = tmp / f"run-{r}-{name.split()[0]}"
                done = subprocess.run(
                    [str(BIN / "bertkit"), *common, "--output", str(out), *flags], capture_output=True, text=True
                )
                if done.returncode:
                    raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
                rates[name].append(rate(out))
                print(f"  round {r + 1}: {name:<12} {rates[name][-1]:>9.0f} tokens/s", flush=True)
    import torch

    caps = [f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ]
    print(
        f"modernbert-tiny (6 layers, vocab 8000), global batch {args.batch_size} x seq {args.seq_len}, {cores} cores"
        f"{' (' + ', '.join(caps) + ')' if caps else ''}, precision {args.precision}, torch {torch.__version__}; "
        f"{args.rounds} rounds x {args.steps} steps per route"
    )
    med = {k: statistics.median(v) for k, v in rates.items()}
    for name, v in med.items():
        print(f"  {name:<12} {v:>9.0f} tokens/s (median; rounds: {', '.join(f'{x:.0f}' for x in rates[name])})")
    one, many = med.values()
    print(f"  ratio {args.processes} processes / 1 process: {many / one:.2f}x")


if __name__ == "__main__":
    main()
