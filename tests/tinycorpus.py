"""Small corpora for the preparation tests, built in a temporary directory (no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TOKENIZER_VOCAB = Path(__file__).resolve().parent / "fixtures" / "tokenizer" / "vocab.txt"


def google_format(docs: list[list[str]]) -> str:
    """Google's pre-training format: a sentence per line, a blank line after each document."""
    return "".join("\n".join(d) + "\n\n" for d in docs)


def mixed_corpus(tmp_path: Path, n_docs: int = 60) -> Path:
    """``tmp_path/corpus``: three files, three formats: prose books, Google-format documents and JSONL records
    (random sentences of a 17-word vocabulary, seeded)."""
    rng = np.random.default_rng(0)
    words = "the cat dog sat ran on a mat home it was happy and then there went to".split()

    def sentence() -> str:
        return " ".join(rng.choice(words, int(rng.integers(3, 12)))).capitalize() + rng.choice([".", "!", "?"])

    d = tmp_path / "corpus"
    d.mkdir()
    (d / "book.txt").write_text(
        "\n\n".join(" ".join(sentence() for _ in range(5)) for _ in range(80)), encoding="utf-8"
    )
    (d / "google.txt").write_text(
        google_format([[sentence() for _ in range(int(rng.integers(1, 9)))] for _ in range(n_docs)]), encoding="utf-8"
    )
    (d / "records.jsonl").write_text(
        "".join(json.dumps({"text": " ".join(sentence() for _ in range(4))}) + "\n" for _ in range(n_docs)),
        encoding="utf-8",
    )
    return d
