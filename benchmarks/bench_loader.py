"""The pre-training loader alone, on one core: tokens a second that one batch-building worker gives a step.

Three routes build the same batch shapes in one process, rounds alternating, medians printed:

- **bertkit, arrays**: ``PretrainingData.batch`` with the budget recipe's data options (one segment, no NSP, 30%
  token masking; ``--echo-share 0.25`` for its echoes too): the batch laid out, echoed and masked by array passes over
  all its rows (``PretrainingData.vectorised``, ``draws.py``);
- **bertkit, one by one**: the same options with ``vectorised`` off, so that each instance is laid out and masked
  alone with its own seeded generator (the route every batch took before, and the route NSP and sentence pairs
  still take; it builds no echoes, hence ``--echo-share`` 0 by default: the same work on both routes);
- **transformers**: ``DataCollatorForLanguageModeling(mlm_probability=0.3, return_tensors="np")`` on the same
  instances' token ids, what a transformers user's Trainer runs per batch (it neither lays instances out nor builds
  echoes, so it does less than either bertkit route).

A loader keeps a step fed when its tokens a second, times its workers, exceed the step's: the graphed
modernbert-small step on an H200 read 2.1 M tokens/s at 1,024 x 32 (BENCHMARKS.md, "One H200").

    .venv/bin/python benchmarks/bench_loader.py                                  # the bundled books
    .venv/bin/python benchmarks/bench_loader.py --shards P/data/shards --vocab P/vocab.txt --shapes 1024x32 256x128
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def timed(build, n: int) -> tuple[float, int]:
    """Seconds a batch (median of ``n``) and the real tokens of the last."""
    times, tokens = [], 0
    for i in range(n):
        t = time.perf_counter()
        batch = build(i)
        times.append(time.perf_counter() - t)
        tokens = int(np.asarray(batch["attention_mask"]).sum())
    return statistics.median(times), tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=Path, help="a prepared shard directory (default: the bundled books)")
    ap.add_argument("--vocab", type=Path, help="its vocab.txt")
    ap.add_argument("--shapes", nargs="+", default=["1024x32", "256x128"], help="BATCHxSEQ")
    ap.add_argument("--batches", type=int, default=5, help="batches a round a route")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--echo-share", type=float, default=0.0, help="the arrays route's echoes (default 0)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo

    class OneByOne(PretrainingData):
        """The same data built instance by instance, each with its own generators."""

        vectorised = False

    with tempfile.TemporaryDirectory() as tmp:
        shards, vocab = args.shards, args.vocab
        if shards is None:  # the bundled books, prepared as bench_pretrain prepares them
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from bench_pretrain import SHARED_VOCAB, make_batches

            make_batches(32, 1, 1, Path(tmp), nsp=False)
            shards = Path(tmp) / "shards"
            vocab = SHARED_VOCAB if SHARED_VOCAB.is_file() else Path(tmp) / "vocab" / "vocab.txt"
        info = VocabInfo.from_tokens(vocab.read_text(encoding="utf-8").splitlines())
        collator = DataCollatorForLanguageModeling(
            BertTokenizerFast(vocab_file=str(vocab)), mlm_probability=0.3, return_tensors="np"
        )
        print(f"{'batch':>10} | {'arrays':>22} | {'one by one':>22} | {'transformers':>22} | arrays over the others")
        for shape in args.shapes:
            rows, seq = (int(x) for x in shape.lower().split("x"))
            options = DataOptions(
                max_seq_length=seq, batch_size=rows, nsp=False, mask_prob=0.3, short_seq_prob=0.0,
                echo_share=args.echo_share,
            )  # fmt: skip
            data = PretrainingData(shards, info, options)
            alone = OneByOne(shards, info, options)
            n = data.num_batches(0)
            if n == 0:
                raise SystemExit(f"{shards}: fewer than {rows} instances of {seq} tokens")
            plain = [alone.instance_tokens(0, int(i), echoes=False)[0].tolist() for i in data.order(0)[:rows]]
            routes = {
                "arrays": lambda i, d=data, n=n: d.batch(0, i % n),
                "one by one": lambda i, d=alone, n=n: d.batch(0, i % n),
                "transformers": lambda i, rows=plain: collator([{"input_ids": ids} for ids in rows]),
            }
            seconds: dict[str, list[float]] = {k: [] for k in routes}
            tokens: dict[str, int] = {}
            for _ in range(args.rounds):
                for name, build in routes.items():
                    s, tokens[name] = timed(build, args.batches)
                    seconds[name].append(s)
            rate = {k: tokens[k] / statistics.median(v) for k, v in seconds.items()}
            cells = [f"{rate[k]:>10,.0f} tok/s {statistics.median(seconds[k]) * 1e3:>6.1f} ms" for k in routes]
            ratios = f"{rate['arrays'] / rate['one by one']:.1f}x, {rate['arrays'] / rate['transformers']:.1f}x"
            print(f"{shape:>10} | " + " | ".join(cells) + f" | {ratios}")


if __name__ == "__main__":
    main()
