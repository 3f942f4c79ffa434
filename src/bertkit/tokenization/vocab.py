"""Reading and writing ``vocab.txt``: one token per line, the line number (from 0) is the id."""

from __future__ import annotations

from pathlib import Path

from bertkit.files import write_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def load_vocab(path: str | Path, required: tuple[str, ...] = ("[UNK]",)) -> dict[str, int]:
    """Read a ``vocab.txt`` into a dict token -> id, checking it.

    Lines are split on ``\\n`` only (``\\r\\n`` is read as ``\\n``), like Google's ``load_vocab``; a final newline does
    not add an empty token.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if a token appears twice (naming both lines), a required token such as [UNK] is missing, or the
            file is empty.
    """
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError(f"{path}: the vocabulary file is empty")
    vocab: dict[str, int] = {}
    for i, token in enumerate(lines):
        if token in vocab:
            raise ValueError(
                f"{path}:{i + 1}: duplicate token {token!r} (first seen on line {vocab[token] + 1}); "
                "ids would be ambiguous"
            )
        vocab[token] = i
    for token in required:
        if token not in vocab:
            raise ValueError(f"{path}: the vocabulary has no {token} token (needed for words it cannot cover)")
    return vocab


def save_vocab(vocab: dict[str, int], path: str | Path) -> Path:
    """Write ``vocab`` (token -> id, ids 0..n-1 with no gaps) as ``vocab.txt``; return the path."""
    path = Path(path)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    for expected, (token, idx) in enumerate(by_id):
        if idx != expected:
            raise ValueError(f"vocabulary ids must be 0..{len(vocab) - 1} without gaps; id {expected} is missing")
        if "\n" in token or "\r" in token:
            raise ValueError(f"token {token!r} (id {idx}) holds a line break and cannot be written to vocab.txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(token + "\n" for token, _ in by_id))
    return path
