"""Reading and writing ``vocab.txt``: one token per line, the line number (from 0) is the id."""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import InputError
from bertkit.files import write_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Why each special token is needed: the reason a vocabulary without it is refused.
SPECIAL_TOKEN_ROLES = {
    "[PAD]": "needed to pad batches to one length",
    "[UNK]": "needed for words it cannot cover",
    "[CLS]": "needed to start every input",
    "[SEP]": "needed to end every segment",
    "[MASK]": "needed for masked-language-model inputs",
}


class VocabError(InputError):
    """A vocabulary file (or ``tokenizer.json``) that cannot be used; the message names the file."""


class VocabNotFoundError(VocabError, FileNotFoundError):
    """No vocabulary where one was expected (also a ``FileNotFoundError``)."""


def read_vocab_text(path: Path) -> str:
    """The text of a vocabulary file, or a one-line :class:`VocabError` naming it (unreadable, not UTF-8, binary)."""
    if not path.exists():
        raise VocabNotFoundError(f"{path}: no such vocabulary file")
    if path.is_dir():
        raise VocabError(f"{path}: is a directory, not a vocabulary file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise VocabError(f"{path}: cannot read the vocabulary file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabError(f"{path}: not a UTF-8 text vocabulary (undecodable byte at offset {e.start})") from None
    if "\x00" in text:
        raise VocabError(f"{path}: holds NUL bytes; a binary file, not a text vocabulary (one token per line)")
    return text


def load_vocab(path: str | Path, required: tuple[str, ...] = ("[UNK]",)) -> dict[str, int]:
    """Read a ``vocab.txt`` into a dict token -> id, checking it.

    Lines are split on ``\\n`` only (``\\r\\n`` is read as ``\\n``), like Google's ``load_vocab``; a final newline does
    not add an empty token.

    Raises:
        VocabNotFoundError: (a ``FileNotFoundError``) if the file does not exist.
        VocabError: (a ``ValueError``) if the file cannot be read, is not UTF-8 text, a token appears twice (naming
            both lines), a required token such as [UNK] is missing, or the file is empty.
    """
    path = Path(path)
    text = read_vocab_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise VocabError(f"{path}: the vocabulary file is empty")
    vocab: dict[str, int] = {}
    for i, token in enumerate(lines):
        if token in vocab:
            raise VocabError(
                f"{path}:{i + 1}: duplicate token {token!r} (first seen on line {vocab[token] + 1}); "
                "ids would be ambiguous"
            )
        vocab[token] = i
    check_special_tokens(vocab, required, str(path))
    return vocab


def check_special_tokens(vocab: dict[str, int], required: tuple[str, ...], where: str) -> None:
    """Raise :class:`VocabError` naming ``where`` and the first missing token of ``required``, with its role."""
    for token in required:
        if token not in vocab:
            role = SPECIAL_TOKEN_ROLES.get(token, "required")
            raise VocabError(f"{where}: the vocabulary has no {token} token ({role})")


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
