"""``bertkit tokenize``: show how a vocabulary tokenizes text (wordpieces or a tokenizer.json's tokens, or ids)."""

from __future__ import annotations

import argparse

from bertkit.tokenization import load_tokenizer


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "vocab", help="vocab.txt or tokenizer.json, or a model directory with either (+ tokenizer_config.json)"
    )
    parser.add_argument("text", nargs="*", help="texts to tokenize (default: read lines from stdin)")
    parser.add_argument("--cased", action="store_true", default=None, help="force cased (default: config or guess)")
    parser.add_argument("--ids", action="store_true", help="print ids instead of tokens")


def run(args: argparse.Namespace) -> int:
    import sys

    tok = load_tokenizer(args.vocab, lowercase=None if args.cased is None else not args.cased)
    texts = args.text or (line.rstrip("\n") for line in sys.stdin)
    for text in texts:
        enc = tok.encode(text, truncation=False)
        print(" ".join(str(i) for i in enc.ids) if args.ids else " ".join(enc.tokens))
    return 0
