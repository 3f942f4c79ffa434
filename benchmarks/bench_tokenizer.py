"""Tokenizer speed: bertkit.BertTokenizer vs transformers.BertTokenizerFast (same process, alternating), and the slow
Python reference (Google's BasicTokenizer + WordpieceTokenizer, as kept in transformers).

Every line of the shared corpora (Gutenberg, GLUE sentences, SQuAD contexts and questions, NSMC reviews) is encoded
in batches into padded torch tensors (input_ids, token_type_ids, attention_mask), truncated to 512.

    .venv/bin/python benchmarks/bench_tokenizer.py [--rounds 5] [--batch-size 256] [--vocab bert-base-uncased]

Prints per-round times, medians and the ratio (BertTokenizerFast time / bertkit time: >1 means bertkit is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def corpus_lines(root: Path) -> dict[str, list[str]]:
    def read(path: Path) -> list[str]:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f]

    out: dict[str, list[str]] = {}
    out["gutenberg"] = [x for p in sorted((root / "corpus" / "gutenberg").glob("*.txt")) for x in read(p) if x.strip()]
    glue: list[str] = []
    for split in ("train", "dev"):
        glue += [r.split("\t")[0] for r in read(root / "glue" / "SST-2" / f"{split}.tsv")[1:]]
        glue += [r.split("\t")[3] for r in read(root / "glue" / "CoLA" / f"{split}.tsv") if r.count("\t") >= 3]
    out["glue"] = glue
    squad = json.loads((root / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    out["squad"] = [
        x for a in squad for p in a["paragraphs"] for x in [p["context"]] + [q["question"] for q in p["qas"]]
    ]
    out["nsmc"] = [r.split("\t")[1] for r in read(root / "korean" / "nsmc" / "ratings_test.txt")[1:] if "\t" in r]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--vocab", default="bert-base-uncased")
    ap.add_argument("--reference-lines", type=int, default=20000, help="lines for the slow reference (subset)")
    args = ap.parse_args()

    import torch
    from transformers import BertTokenizerFast
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer, load_vocab

    from bertkit.tokenization import BertTokenizer

    vocab_dir = SHARED / "vocab" / args.vocab
    lines_by_corpus = corpus_lines(SHARED)
    lines = [x for v in lines_by_corpus.values() for x in v]
    print(
        f"{len(lines)} lines ({', '.join(f'{k} {len(v)}' for k, v in lines_by_corpus.items())}), "
        f"{sum(map(len, lines)) / 1e6:.1f} M chars, batch {args.batch_size}, torch threads {torch.get_num_threads()}"
    )
    ours = BertTokenizer.from_pretrained(vocab_dir)
    fast = BertTokenizerFast.from_pretrained(str(vocab_dir), do_lower_case=ours.lowercase)
    batches = [lines[i : i + args.batch_size] for i in range(0, len(lines), args.batch_size)]

    def run_ours() -> None:
        for b in batches:
            ours(b, padding="longest", truncation=True, max_length=512, return_tensors="pt")

    def run_fast() -> None:
        for b in batches:
            fast(b, padding="longest", truncation=True, max_length=512, return_tensors="pt")

    # same ids? (HF's WordPiece gives [UNK] for words of 101-200 chars where Google's does not: count those lines)
    differ = 0
    for b in batches[:: max(1, len(batches) // 50)]:
        x = ours(b, max_length=512)["input_ids"]
        y = fast(b, padding="longest", truncation=True, max_length=512, return_tensors="pt")["input_ids"]
        differ += int(x.shape != y.shape or not torch.equal(x, y))
    print(f"sampled batches whose ids differ from BertTokenizerFast: {differ}")

    run_ours(), run_fast()  # warm-up (memoised character checks, allocations)
    times: dict[str, list[float]] = {"bertkit": [], "BertTokenizerFast": []}
    for r in range(args.rounds):
        order = [("bertkit", run_ours), ("BertTokenizerFast", run_fast)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    n = len(lines)
    for k, v in med.items():
        print(f"median {k}: {v:.2f} s ({n / v:,.0f} lines/s)")
    print(
        f"ratio BertTokenizerFast / bertkit: {med['BertTokenizerFast'] / med['bertkit']:.2f}x "
        "(>1: bertkit faster; target >= 0.9)"
    )

    sub = lines[:: max(1, n // args.reference_lines)][: args.reference_lines]
    vocab = load_vocab(str(vocab_dir / "vocab.txt"))
    basic = BasicTokenizer(do_lower_case=ours.lowercase)
    wordpiece = WordpieceTokenizer(vocab, "[UNK]", max_input_chars_per_word=200)
    start = time.perf_counter()
    for x in sub:
        [vocab[p] for w in basic.tokenize(x) for p in wordpiece.tokenize(w)]
    t_ref = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(0, len(sub), args.batch_size):
        ours(sub[i : i + args.batch_size], max_length=512)
    t_sub = time.perf_counter() - start
    print(
        f"reference (pure Python, {len(sub)} lines spread over the corpora): {t_ref:.2f} s "
        f"({len(sub) / t_ref:,.0f} lines/s); bertkit on the same lines {t_sub:.2f} s: {t_ref / t_sub:.1f}x faster"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
