"""Two ``bertkit evaluate --task blimp`` runs side by side (say bf16 against fp32): on the pairs both scored (by UID
and index), the share whose decision (good > bad) is the same, the overall accuracy of each on those pairs (the mean
over paradigms, as the command computes it), and how far the sentence scores moved.

    .venv/bin/python benchmarks/blimp_agreement.py /tmp/blimp-fp32 /tmp/blimp-bf16
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def read_pairs(output: Path) -> dict[tuple[str, int], dict]:
    with open(output / "pairs.jsonl", encoding="utf-8") as f:
        return {(r["UID"], r["pair"]): r for r in map(json.loads, f)}


def overall(rows: list[dict]) -> float:
    by_uid: dict[str, list[bool]] = {}
    for r in rows:
        by_uid.setdefault(r["UID"], []).append(r["right"])
    return float(np.mean([100.0 * np.mean(v) for v in by_uid.values()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="OUTPUT directory of the reference run (fp32)")
    parser.add_argument("other", type=Path, help="OUTPUT directory of the run compared with it (bf16)")
    args = parser.parse_args()
    ref, other = read_pairs(args.reference), read_pairs(args.other)
    keys = sorted(ref.keys() & other.keys())
    if not keys:
        raise SystemExit("no pair in common")
    same = sum(ref[k]["right"] == other[k]["right"] for k in keys)
    moved = np.array([abs(ref[k][s] - other[k][s]) for k in keys for s in ("good", "bad")])
    print(f"pairs in common: {len(keys)} ({len({k[0] for k in keys})} paradigms)")
    print(f"same decision: {same} ({100.0 * same / len(keys):.2f}%)")
    a, b = overall([ref[k] for k in keys]), overall([other[k] for k in keys])
    print(f"overall on them: reference {a:.2f}, other {b:.2f}")
    print(f"sentence PLL moved by: median {np.median(moved):.4f}, max {moved.max():.4f} nats")


if __name__ == "__main__":
    main()
