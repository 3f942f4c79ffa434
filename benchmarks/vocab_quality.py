"""Vocabulary quality: train WordPiece vocabularies with bertkit.train_vocab on shared corpora, and report the [UNK]
rate and tokens per word on held-out text, next to Google's vocabularies on the same text.

    .venv/bin/python benchmarks/vocab_quality.py [--vocab-size 30522] [--korean-vocab-size 16000]

English: trained (uncased) on 10 Gutenberg books, held out: pg98 (A Tale of Two Cities) and pg5200 (Metamorphosis);
compared with bert-base-uncased. Korean: trained (cased: uncased would NFD-split Hangul into jamo) on the first
40,000 NSMC reviews, held out: the last 10,000; compared with bert-base-multilingual-cased.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def read(path: Path) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]


def report(name: str, tok, lines: list[str]) -> None:
    from bertkit.tokenization import vocab_stats

    s = vocab_stats(tok, lines)
    print(
        f"  {name:<40} vocab {tok.vocab_size:>6}  [UNK] {100 * s['unk_rate']:.3f}% of words ({s['unk']})  "
        f"{s['tokens_per_word']:.3f} tokens/word  ({s['words']} words)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--korean-vocab-size", type=int, default=16000)
    args = ap.parse_args()
    from bertkit.tokenization import BertTokenizer, train_vocab

    books = sorted((SHARED / "corpus" / "gutenberg").glob("*.txt"))
    held_names = {"pg98.txt", "pg5200.txt"}
    train = [p for p in books if p.name not in held_names]
    held = [line for p in books if p.name in held_names for line in read(p)]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        tok = train_vocab(train, vocab_size=args.vocab_size, output=Path(tmp) / "en", show_progress=False)
        print(
            f"English (Gutenberg, {len(train)} books, {time.perf_counter() - start:.1f} s to train); held out "
            f"{len(held)} lines:"
        )
        report("bertkit vocab (uncased, Gutenberg)", tok, held)
        report("bert-base-uncased", BertTokenizer.from_pretrained(SHARED / "vocab" / "bert-base-uncased"), held)

        reviews = [r.split("\t")[1] for r in read(SHARED / "korean" / "nsmc" / "ratings_test.txt")[1:] if "\t" in r]
        k_train, k_held = reviews[:40000], reviews[40000:]
        path = Path(tmp) / "nsmc_train.txt"
        path.write_text("\n".join(k_train), encoding="utf-8")
        start = time.perf_counter()
        ktok = train_vocab(
            path, vocab_size=args.korean_vocab_size, lowercase=False, output=Path(tmp) / "ko", show_progress=False
        )
        print(
            f"Korean (NSMC, {len(k_train)} reviews, {time.perf_counter() - start:.1f} s to train); held out "
            f"{len(k_held)} reviews:"
        )
        report("bertkit vocab (cased, NSMC)", ktok, k_held)
        report(
            "bert-base-multilingual-cased",
            BertTokenizer.from_pretrained(SHARED / "vocab" / "bert-base-multilingual-cased"),
            k_held,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
