"""The small-data recipe's screen (issue 62): each lever against today's default at equal minutes, side by side.

A round is two ``bertkit pretrain`` runs started together with ``--threads 1`` each on a 2-core machine: today's
default (no flag but the budget) and one candidate (the default plus the candidate's flags). Both read the same
prepared corpus (one vocabulary trained once, the shards prepared once into bertkit's cache) for the same
``--minutes``; then both are scored the same way, again side by side:

- **held-out MLM**: ``recipes/pretrain/evaluate.held_out_accuracy`` (text never trained on, the paper's 15% of
  tokens chosen, every one of them [MASK], whatever rate the run trained with: no kept token counts);
- **BLiMP**: ``bertkit evaluate --task blimp --pairs-per-paradigm N`` (the first N pairs of each paradigm; the mean of
  the 67 paradigms; a tie counts as wrong).

``--base-flags`` go to both runs of every round: the default's setting on another machine where this CPU's own
differs (``--echo-stage first``: what the budget builds on a CPU that trains in fp32, run here in bf16 at one
thread each, which reads about what two AVX2 cores read in fp32).

The default runs again in every round, so drift between rounds (the machine's load, its CPU) shows beside each
candidate. Finished rounds are kept (``OUT/rounds/NAME/result.json``), and a round whose two runs ended is scored
again without training again: run the script again to go on after a stop; every finished row is in
``OUT/screen.csv`` and printed as a markdown table for BENCHMARKS.md.

    .venv/bin/python benchmarks/screen_recipe.py --out runs/screen --minutes 10 \\
        --corpus ../shared/data/corpus/books ../shared/data/corpus/wiki --blimp ../shared/data/blimp \\
        --round "span=--mask-strategy span" --round "decay=--mask-prob 0.4:0.15" --round "lamb=--optimizer lamb"
    # a check that it works, on the bundled books (seconds)
    .venv/bin/python benchmarks/screen_recipe.py --out /tmp/screen --minutes 0.3 --pairs 2 \\
        --corpus src/bertkit/resources/corpus --blimp ../shared/data/blimp --round "wwm=--whole-word-mask"
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BERTKIT = [str(Path(sys.executable).parent / "bertkit")]  # the venv's command
FIELDS = (
    "round",
    "flags",
    "cpu",
    "minutes",
    "vocab",
    "steps",
    "tokens_read",
    "heldout_mlm",
    "blimp",
    "default_steps",
    "default_tokens_read",
    "default_heldout_mlm",
    "default_blimp",
)


def cpu_kind() -> str:
    """The CPU's kind as BENCHMARKS.md names it: its bf16 units (AMX, AVX512-BF16) or AVX2 only."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return platform.processor() or "unknown"
    kind = "AMX" if "amx_bf16" in flags else "AVX512-BF16" if "avx512_bf16" in flags else "AVX2"
    return f"{kind}, {os.cpu_count()} cores"


def sh(cmd: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$ " + shlex.join(cmd), flush=True)
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)


def wait_all(procs: list[subprocess.Popen], what: str) -> None:
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"screen: {what} failed (exit codes {codes}); see the logs in its run directories")


def prepare(out: Path, corpus: list[str]) -> tuple[Path, Path]:
    """(sentences, vocabulary directory): the corpus split into sentences and a vocabulary trained on it, by a
    one-step run of the budget recipe (``--recipe budget``: the 8,000-token vocabulary every ``--max-time`` run
    trains; a bare one-step run is the paper recipe's, 30,522 tokens: the first rounds' vocabulary, the ``vocab``
    column); then the shards of those sentences prepared once into bertkit's cache, where every round's runs find
    them."""
    prep = out / "prep"
    if not (prep / "done").is_file():
        wait_all([sh([*BERTKIT, "pretrain", "--corpus", *corpus, "--output", str(prep), "--max-steps", "1",
                      "--recipe", "budget", "--overwrite", "--quiet"], out / "logs" / "prep.log")],
                 "the one-step run")  # fmt: skip
        sentences = prep / "data" / "sentences.txt"
        wait_all([sh([*BERTKIT, "prepare", "--corpus", str(sentences), "--vocab", str(prep), "--corpus-format",
                      "google", "--quiet"], out / "logs" / "prepare.log")], "bertkit prepare")  # fmt: skip
        (prep / "done").write_text("")
    return prep / "data" / "sentences.txt", prep


def train(run: Path, flags: list[str], minutes: float, sentences: Path, vocab: Path, seed: int) -> subprocess.Popen:
    cmd = [*BERTKIT, "pretrain", "--corpus", str(sentences), "--corpus-format", "google", "--vocab", str(vocab),
           "--output", str(run), "--max-time", f"{minutes * 60:.0f}s", "--threads", "1", "--quiet", "--overwrite",
           "--seed", str(seed), *flags]  # fmt: skip
    return sh(cmd, run.parent / f"{run.name}.train.log")


def blimp(run: Path, data: str, pairs: int) -> subprocess.Popen:
    cmd = [*BERTKIT, "evaluate", "--task", "blimp", "--model", str(run), "--data", data, "--pairs-per-paradigm",
           str(pairs), "--threads", "1", "--quiet", "--overwrite",
           "--output", str(run.parent / f"{run.name}-blimp")]  # fmt: skip
    return sh(cmd, run.parent / f"{run.name}.blimp.log")


def figures(run: Path) -> dict:
    """Steps, tokens read (the log windows' tokens), held-out MLM (15%, every position [MASK]) and BLiMP."""
    from bertkit.recipes.pretrain.evaluate import held_out_accuracy

    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [x for x in lines if "loss" in x and "tokens_per_s" in x]
    steps = max((x["step"] for x in lines), default=0)
    if train and "tokens" in train[0]:
        tokens = sum(x["tokens"] for x in train)
    else:  # older runs: the windows' rates times their spans of wall clock (evaluations included: an upper bound)
        tokens, last = 0.0, 0.0
        for x in train:
            tokens += x["tokens_per_s"] * (x["elapsed_s"] - last)
            last = x["elapsed_s"]
    held = held_out_accuracy(run)
    metrics = json.loads((run.parent / f"{run.name}-blimp" / "metrics.json").read_text())
    return {"steps": steps, "tokens_read": int(tokens), "heldout_mlm": round(held["mlm_acc"], 4),
            "blimp": round(metrics["overall"], 2)}  # fmt: skip


def run_round(out: Path, name: str, flags: str, args, sentences: Path, vocab: Path) -> dict:
    where = out / "rounds" / name
    done = where / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    runs = {"default": where / "default", "candidate": where / "candidate"}
    trained = where / "trained"  # both runs ended: a stop while scoring goes on at the scoring (its BLiMP rewritten)
    if not trained.is_file():
        shared = shlex.split(args.base_flags)
        wait_all([train(runs["default"], shared, args.minutes, sentences, vocab, args.seed),
                  train(runs["candidate"], shared + shlex.split(flags), args.minutes, sentences, vocab, args.seed)],
                 f"round {name}'s training")  # fmt: skip
        trained.write_text("")
    wait_all([blimp(r, args.blimp, args.pairs) for r in runs.values()], f"round {name}'s BLiMP")
    base, cand = figures(runs["default"]), figures(runs["candidate"])
    vocab_size = sum(1 for line in (runs["candidate"] / "vocab.txt").open() if line.strip())
    every = " ".join(x for x in (args.base_flags, flags) if x)
    row = {"round": name, "flags": every, "cpu": cpu_kind(), "minutes": args.minutes, "vocab": vocab_size, **cand,
           **{f"default_{k}": v for k, v in base.items()}, "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    done.write_text(json.dumps(row, indent=1))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--corpus", nargs="+", required=True)
    p.add_argument("--blimp", required=True, help="BLiMP's directory")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--pairs", type=int, default=100, help="BLiMP pairs per paradigm (100: 6,700 pairs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--base-flags",
        default="",
        help="flags of both runs of every round (the default's setting where this "
        "CPU's own differs: --echo-stage first mimics a CPU that trains in fp32)",
    )
    p.add_argument("--round", action="append", default=[], metavar="NAME=FLAGS", help="a candidate: its name and flags")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sentences, vocab = prepare(args.out, args.corpus)
    rows = []
    for spec in args.round:
        name, _, flags = spec.partition("=")
        rows.append(run_round(args.out, name, flags, args, sentences, vocab))
        print(json.dumps(rows[-1]), flush=True)
    table = args.out / "screen.csv"
    old = list(csv.DictReader(table.open())) if table.is_file() else []
    keep = [r for r in old if r["round"] not in {x["round"] for x in rows}]
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, [*FIELDS, "date"], extrasaction="ignore")
        w.writeheader()
        w.writerows(keep + rows)
    print("| flags | CPU | min | steps | tokens read | held-out MLM | BLiMP | default's BLiMP (same round) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in keep + rows:
        mlm, bl, base = float(r["heldout_mlm"]), float(r["blimp"]), float(r["default_blimp"])
        tokens = f"{int(r['tokens_read']) / 1e6:.1f} M"
        cells = [f"`{r['flags']}`", r["cpu"], r["minutes"], r["steps"], tokens]
        cells += [f"{mlm:.1%}", f"{bl:.2f}", f"{base:.2f}"]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
