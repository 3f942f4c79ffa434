"""``bertkit similarity``: cosine distances between texts, or between one word's vectors in different sentences.

    bertkit similarity --model runs/my-bert "a cat sat on the mat" "a dog lay on the rug" "stocks fell sharply"
    bertkit similarity --model runs/my-bert --word bank \\
        "she sat on the bank of the river" "he deposited cash at the bank" "the bank raised interest rates"

The second form is the "dynamic embedding" demonstration: the same word gets a different vector in each context.
A word's vector is the mean of its wordpieces' vectors at ``--layers``; at layer 0 (the embedding output, before
any attention) only the position differs, so its distances show how much of the change comes from context.
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from bertkit.errors import InputError
from bertkit.options import ExactComputeArgs, add_options


def configure(parser: argparse.ArgumentParser) -> None:
    # "--layers -1,-2,-3,-4" parses: cli.main joins a negative list to its flag (argparse takes it for an option)
    parser.add_argument("--model", required=True, help="model directory: config.json, weights, vocab.txt")
    parser.add_argument("texts", nargs="+", help="two or more texts (sentences containing --word, with --word)")
    parser.add_argument("--word", default=None, help="compare this word's contextual vectors across the texts")
    parser.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers, concatenated (default: the model's saved setting, else -2)",
    )
    parser.add_argument(
        "--pooling", default=None, help="pooling for whole texts (default: the model's saved pooling, else mean)"
    )
    add_options(parser, ExactComputeArgs)  # --device, --precision (fp32 unless asked)


def word_vectors(encoder, texts: list[str], word: str, layers) -> list:
    """The mean of ``word``'s wordpiece vectors (its first whole-word occurrence) in each text."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
    vectors = encoder.encode(texts, layers=layers, pooling="none")
    encodings = encoder.tokenize(texts)
    out = []
    for n, (text, enc, vec) in enumerate(zip(texts, encodings, vectors), 1):
        match = pattern.search(text)
        if match is None:
            raise InputError(f"text {n} ({text!r}) does not contain the word {word!r}")
        rows = [
            i
            for i, ((b, e), special) in enumerate(zip(enc.offsets, enc.special_tokens_mask))
            if not special and b >= match.start() and e <= match.end() and e > b
        ]
        if not rows:
            raise InputError(f"text {n}: the word {word!r} was cut off by truncation")
        out.append(np.asarray(vec)[rows].mean(0))
    return out


def cosine_distances(vectors):
    m = np.stack(vectors).astype(np.float64)
    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    return np.clip(1.0 - m @ m.T, 0.0, 2.0)


def print_matrix(labels: list[str], d) -> None:
    short = [(t if len(t) <= 50 else t[:47] + "...") for t in labels]
    for i, t in enumerate(short, 1):
        print(f"[{i}] {t}")
    print("cosine distance (1 - cosine similarity):")
    print("      " + "".join(f"{f'[{j}]':>9}" for j in range(1, len(labels) + 1)))
    for i in range(len(labels)):
        print(f"{f'[{i + 1}]':>5} " + "".join(f"{d[i, j]:9.4f}" for j in range(len(labels))))


def run(args: argparse.Namespace) -> int:
    from bertkit.features import Encoder, flag_spec  # torch: kept out of `bertkit similarity -h`
    from bertkit.precision import resolve_device

    if len(args.texts) < 2:
        raise InputError(f"give at least two texts, got {len(args.texts)}")
    encoder = Encoder.from_pretrained(args.model, device=resolve_device(args.device), precision=args.precision)
    # unnamed: the model's own (a sentence-embedding model's pooling; default layers fitted to its depth)
    spec = flag_spec(encoder, args.layers, args.pooling)
    layers = list(spec.layers)  # indices from the bottom (0: the embedding output)
    args.layers = args.layers if args.layers is not None else ",".join(map(str, encoder.default_layers()))
    args.pooling = spec.pooling
    if args.word:
        contextual = cosine_distances(word_vectors(encoder, args.texts, args.word, layers))
        print(f"the word {args.word!r} at layers {args.layers}:")
        print_matrix(args.texts, contextual)
        static = cosine_distances(word_vectors(encoder, args.texts, args.word, [0]))
        off_diagonal = ~np.eye(len(args.texts), dtype=bool)
        print(
            f"\nfor contrast, at layer 0 (embedding output: only the position differs), mean distance "
            f"{static[off_diagonal].mean():.4f} vs {contextual[off_diagonal].mean():.4f} at layers {args.layers}"
        )
    else:
        vectors = encoder.encode(args.texts, layers=layers, pooling=args.pooling)
        print(f"texts at layers {args.layers}, pooling {args.pooling}:")
        print_matrix(args.texts, cosine_distances(list(vectors)))
    return 0
