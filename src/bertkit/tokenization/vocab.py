"""Reading and writing ``vocab.txt``: one token per line, the line number (from 0) is the id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


MAX_VOCAB_BYTES = 64 * 2**20  # a WordPiece vocab.txt of a million tokens is ~15 MB


def read_vocab_text(path: Path) -> str:
    """The text of a vocabulary file, or a one-line :class:`VocabError` naming it (unreadable, not UTF-8, binary)."""
    if not path.exists():
        raise VocabNotFoundError(f"{path}: no such vocabulary file")
    if path.is_dir():
        raise VocabError(f"{path}: is a directory, not a vocabulary file")
    try:
        size = path.stat().st_size
        if size > MAX_VOCAB_BYTES:  # read whole, a 2 GB file took 4.4 GB of memory and 14 s before it was refused
            raise VocabError(f"{path}: {size:,} bytes, not a vocabulary file (at most {MAX_VOCAB_BYTES:,})")
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


def read_json_object(path: Path, what: str = "a JSON object file") -> dict[str, Any]:
    """A tokenizer's JSON object file (``tokenizer_config.json``, ``special_tokens_map.json``), or {} when the file
    is absent; :class:`VocabError` naming the file when it is unreadable or not an object."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabError(f"{path}: cannot read {what} ({e})") from None
    except RecursionError:
        raise VocabError(f"{path}: cannot read {what} (nested too deeply)") from None
    if not isinstance(value, dict):
        raise VocabError(f"{path}: not {what} (expected a JSON object)")
    return value


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


def load_tokenizer_json(path: str | Path) -> tuple[dict[str, int], dict[str, Any]]:
    """Read the WordPiece vocabulary and normaliser settings of a BERT ``tokenizer.json`` (Hugging Face ``tokenizers``).

    transformers 5 writes model directories with only ``tokenizer.json`` + ``tokenizer_config.json``, no
    ``vocab.txt``. Only BERT's pipeline is accepted: a ``WordPiece`` model with ``##`` continuations, a
    ``BertNormalizer`` (with ``clean_text``) and a ``BertPreTokenizer``; anything else would not tokenize as this
    tokenizer does, so it is refused rather than approximated.

    Returns:
        (vocab, settings): token -> id (ids 0..V-1, the five special tokens required), and the keyword arguments
        ``lowercase``, ``strip_accents``, ``tokenize_chinese_chars`` and ``max_input_chars_per_word`` it states.

    Raises:
        VocabError: naming the file and the field that is not BERT's (or the file is unreadable / not JSON).
    """
    path = Path(path)
    try:
        spec = json.loads(read_vocab_text(path))
    except json.JSONDecodeError as e:
        raise VocabError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise VocabError(f"{path}: not a tokenizer.json (nested too deeply)") from None
    if not isinstance(spec, dict):
        raise VocabError(f"{path}: not a tokenizer.json (expected a JSON object)")

    def refuse(field: str, value: Any, expected: str) -> VocabError:
        return VocabError(
            f"{path}: not a BERT WordPiece tokenizer: {field} is {json.dumps(value)[:80]}, expected {expected}"
        )

    model = spec.get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        raise refuse("model.type", model.get("type") if isinstance(model, dict) else model, '"WordPiece"')
    if model.get("continuing_subword_prefix", "##") != "##":
        raise refuse("model.continuing_subword_prefix", model.get("continuing_subword_prefix"), '"##"')
    if model.get("unk_token", "[UNK]") != "[UNK]":
        raise refuse("model.unk_token", model.get("unk_token"), '"[UNK]"')
    normalizer = spec.get("normalizer")
    if not isinstance(normalizer, dict) or normalizer.get("type") != "BertNormalizer":
        raise refuse(
            "normalizer.type",
            normalizer.get("type") if isinstance(normalizer, dict) else normalizer,
            '"BertNormalizer"',
        )
    if normalizer.get("clean_text", True) is not True:
        raise refuse("normalizer.clean_text", normalizer.get("clean_text"), "true")
    pre = spec.get("pre_tokenizer")
    if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
        raise refuse("pre_tokenizer.type", pre.get("type") if isinstance(pre, dict) else pre, '"BertPreTokenizer"')
    raw = model.get("vocab")
    if not isinstance(raw, dict) or not all(isinstance(k, str) and type(v) is int for k, v in raw.items()):
        raise refuse("model.vocab", "...", "an object token -> integer id")
    vocab = dict(raw)
    check_special_tokens(vocab, SPECIAL_TOKENS, str(path))
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise VocabError(f"{path}: model.vocab ids must be 0..{len(vocab) - 1}, each used once")
    for added in spec.get("added_tokens") or []:
        if isinstance(added, dict) and vocab.get(added.get("content")) != added.get("id"):
            raise VocabError(
                f"{path}: added token {added.get('content')!r} (id {added.get('id')}) is not in the WordPiece "
                "vocabulary with that id; added tokens are not supported"
            )
    lowercase = normalizer.get("lowercase", True)
    strip = normalizer.get("strip_accents")
    chinese = normalizer.get("handle_chinese_chars", True)
    for field, value in (("lowercase", lowercase), ("handle_chinese_chars", chinese)):
        if not isinstance(value, bool):
            raise refuse(f"normalizer.{field}", value, "true or false")
    if strip is not None and not isinstance(strip, bool):
        raise refuse("normalizer.strip_accents", strip, "true, false or null")
    settings: dict[str, Any] = {"lowercase": lowercase, "strip_accents": strip, "tokenize_chinese_chars": chinese}
    max_chars = model.get("max_input_chars_per_word")
    if max_chars is not None:
        if type(max_chars) is not int or max_chars < 1:
            raise refuse("model.max_input_chars_per_word", max_chars, "a positive integer")
        settings["max_input_chars_per_word"] = max_chars
    return vocab, settings
