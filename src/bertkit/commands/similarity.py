"""``bertkit similarity``: cosine distances between texts, or between one word's vectors in different sentences.

    bertkit similarity --model runs/my-bert "a cat sat on the mat" "a dog lay on the rug" "stocks fell sharply"
    bertkit similarity --model runs/my-bert --word bank \\
        "she sat on the bank of the river" "he deposited cash at the bank" "the bank raised interest rates"

The second form is the "dynamic embedding" demonstration: the same word gets a different vector in each context.
A word's vector is the mean of its wordpieces' vectors at ``--layers``; at layer 0 (the embedding output, before
any attention) only the position differs, so its distances show how much of the change comes from context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from bertkit.errors import InputError
from bertkit.options import device_option, layers_option, model_option, option, pooling_option, precision_option


@dataclass(frozen=True, kw_only=True)
class SimilarityConfig:
    """What ``bertkit similarity`` compares, and how."""

    model: str = model_option("model directory: config.json, weights, vocab.txt")
    texts: list[str] = option(
        flag="texts",
        nargs="+",
        default_factory=list,
        help="two or more texts (sentences containing --word, with --word)",
    )
    word: str | None = option(None, help="compare this word's contextual vectors across the texts")
    layers: str | None = layers_option(
        "comma-separated layers, concatenated (default: the model's saved setting, else -2)"
    )
    pooling: str | None = pooling_option("pooling for whole texts (default: the model's saved pooling, else mean)")
    device: str | None = device_option()
    precision: str = precision_option("fp32")  # the distances as the model computes them

    def __post_init__(self) -> None:
        if len(self.texts) < 2:
            raise InputError(f"give at least two texts, got {len(self.texts)}")


CONFIG = SimilarityConfig


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


def run(cfg: SimilarityConfig) -> int:
    from bertkit.features import Encoder, flag_spec  # torch: kept out of `bertkit similarity -h`
    from bertkit.precision import resolve_device

    encoder = Encoder.from_pretrained(cfg.model, device=resolve_device(cfg.device), precision=cfg.precision)
    # unnamed: the model's own (a sentence-embedding model's pooling; default layers fitted to its depth)
    spec = flag_spec(encoder, cfg.layers, cfg.pooling)
    layers = list(spec.layers)  # indices from the bottom (0: the embedding output)
    shown = cfg.layers if cfg.layers is not None else ",".join(map(str, encoder.default_layers()))
    pooling = spec.pooling
    if cfg.word:
        contextual = cosine_distances(word_vectors(encoder, cfg.texts, cfg.word, layers))
        print(f"the word {cfg.word!r} at layers {shown}:")
        print_matrix(cfg.texts, contextual)
        static = cosine_distances(word_vectors(encoder, cfg.texts, cfg.word, [0]))
        off_diagonal = ~np.eye(len(cfg.texts), dtype=bool)
        print(
            f"\nfor contrast, at layer 0 (embedding output: only the position differs), mean distance "
            f"{static[off_diagonal].mean():.4f} vs {contextual[off_diagonal].mean():.4f} at layers {shown}"
        )
    else:
        vectors = encoder.encode(cfg.texts, layers=layers, pooling=pooling)
        print(f"texts at layers {shown}, pooling {pooling}:")
        print_matrix(cfg.texts, cosine_distances(list(vectors)))
    return 0
