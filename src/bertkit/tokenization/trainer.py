"""Training a WordPiece vocabulary (Google layout) on plain-text files, and measuring one on held-out text."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from bertkit.errors import InputError
from bertkit.tokenization.normalizer import (
    ExactNormalizer,
    distinct_chars,
    is_chinese_char,
    is_control,
    is_punctuation,
    is_whitespace,
)
from bertkit.tokenization.vocab import SPECIAL_TOKENS, save_vocab
from bertkit.tokenization.wordpiece import BertTokenizer

PathLike = str | os.PathLike


def _read_batches(
    texts: Iterable[str], normalizer: ExactNormalizer, batch_size: int, show_progress: bool
) -> Iterator[list[str]]:
    """Stream the corpus line by line (any size), normalised exactly as the tokenizer will, in batches."""
    from tqdm.auto import tqdm

    with tqdm(unit=" lines", desc="reading", disable=not show_progress) as bar:
        batch: list[str] = []
        for line in texts:
            bar.update(1)
            batch.append(normalizer.normalize_for_training(line))
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch


def _separates(ch: str, chinese: bool) -> bool:
    """Google's basic tokenizer never leaves ``ch`` inside a word: whitespace, control, punctuation and (when split
    off) CJK ideographs."""
    return is_whitespace(ch) or is_control(ch) or is_punctuation(ch) or (chinese and is_chinese_char(ord(ch)))


def _chunks(lines: Iterable[str], chars: int) -> Iterator[str]:
    """``lines`` joined by newlines into texts of about ``chars`` characters each."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line) + 1
        if size >= chars:
            yield "\n".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield "\n".join(chunk)


def continuation_tokens(
    texts: Iterable[str], normalizer: ExactNormalizer, limit_alphabet: int | None
) -> tuple[list[str], list[str] | None]:
    """(``##c`` for every normalised character c that continues a word somewhere in ``texts`` (the corpus's lines),
    in code-point order; with ``limit_alphabet``, the alphabet: its most frequent characters, ties by code point,
    which the trainer is given as its initial alphabet so that it keeps exactly those, and the ``##`` letters of
    those only).

    Given to Rust's trainer as special tokens, they take fixed ids. Left to it, it numbers them in hash-map order,
    and those ids break ties between equally frequent merges, so the same text gave another vocabulary on every run
    (huggingface/tokenizers #1794). One pass over the corpus, 4 MB at a time: a regex over the separators present
    finds every word's characters after its first (about 13 MB/s; the trainer itself is slower)."""
    chinese = normalizer.tokenize_chinese_chars
    inner: set[str] = set()
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for text in _chunks(texts, 1 << 22):
        present = distinct_chars(text)
        seen |= present
        sep = "".join(re.escape(c) for c in sorted(present) if _separates(c, chinese))
        inner.update("".join(re.findall(f"[^{sep}]([^{sep}]+)" if sep else r"\A.(.*)", text, re.S)))
        if limit_alphabet is not None:
            counts.update(text)
    kept = None
    if limit_alphabet is not None:  # the trainer's alphabet: the most frequent normalised characters
        chars: Counter[str] = Counter()
        for ch, n in counts.items():
            for c in normalizer.rust_normalizer.normalize_str(ch):
                chars[c] += n
        words = [c for c in chars if not (is_whitespace(c) or is_control(c))]  # what the trainer's words hold
        kept = sorted(sorted(words, key=lambda c: (-chars[c], c))[:limit_alphabet])
    # a character inside a word normalises to letters inside it; any character's letters after its first (a
    # syllable's jamo, say, when accents are stripped) are inside a word too
    norm = normalizer.rust_normalizer.normalize_str
    letters = {c for ch in inner for c in norm(ch)} | {c for ch in seen for c in norm(ch)[1:]}
    alphabet = set(kept or ())
    letters = {c for c in letters if not _separates(c, chinese) and (kept is None or c in alphabet)}
    return ["##" + c for c in sorted(letters)], kept


def google_layout(learned: dict[str, int], vocab_size: int, num_unused: int) -> dict[str, int]:
    """Lay out a vocabulary as Google does: [PAD], [unused0..N-1], [UNK], [CLS], [SEP], [MASK], then the tokens.

    ``learned`` is token -> rank (lower first); special tokens in it are skipped. The result has at most
    ``vocab_size`` tokens.
    """
    layout = ["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(layout)
    for token, _ in sorted(learned.items(), key=lambda kv: kv[1]):
        if len(layout) >= vocab_size:
            break
        if token not in seen:
            layout.append(token)
            seen.add(token)
    return {t: i for i, t in enumerate(layout)}


def train_vocab(
    files: PathLike | Sequence[PathLike] | None = None,
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    output: PathLike | None = None,
    num_unused: int = 99,
    strip_accents: bool | None = None,
    tokenize_chinese_chars: bool = True,
    limit_alphabet: int | None = None,
    show_progress: bool = True,
    batch_size: int = 1000,
    texts: Callable[[], Iterable[str]] | None = None,
) -> BertTokenizer:
    """Train a WordPiece vocabulary on plain-text files and return a :class:`BertTokenizer` using it.

    The text is normalised exactly as the tokenizer will normalise it (Google's rules), then Hugging Face's Rust
    ``WordPieceTrainer`` learns the pieces (files are streamed, so any size works). The vocabulary follows Google's
    layout: [PAD]=0, [unused0..num_unused-1], [UNK], [CLS], [SEP], [MASK], then learned tokens (with the default
    ``num_unused=99``: [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, as in Google's uncased vocabulary).

    Args:
        files: corpus files or directories, read as ``prepare`` reads them (compressed, JSONL, Parquet...: see
            ``bertkit.data.pretraining.corpus.corpus_texts``); each non-empty line is a text. A missing, binary or
            empty corpus is an ``InputError`` naming it. Not read when ``texts`` is given.
        vocab_size: total size including special and [unused] tokens (a small corpus may give fewer).
        lowercase: train an uncased vocabulary (lowercase + strip accents).
        min_frequency: a merge must occur at least this often.
        output: directory to write ``vocab.txt`` + ``tokenizer_config.json`` to, or a ``*.txt`` path for the
            vocabulary alone. Nothing is written when None.
        num_unused: number of [unusedN] slots after [PAD].
        limit_alphabet: keep at most this many initial characters (None keeps all; CJK text needs thousands).
        show_progress: show progress bars (lines read, and the trainer's own).
        texts: instead of ``files``, a function returning the corpus's lines afresh on each call (it is read twice:
            once for the ``##`` letters, once to train), e.g. ``lambda: corpus_texts(paths)`` from a caller in the
            corpus pipeline: then the tokenizer layer reads no file format itself.
    """
    from tokenizers import Tokenizer, models, trainers

    if texts is None:
        paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files or ()]
        if not paths:
            raise InputError("no training files given")
        # files= reads them with the corpus readers (compression, JSONL, Parquet), which belong to the corpus
        # pipeline above the tokenizer: a caller that has them passes texts= and this import is not made
        from bertkit.data.pretraining.corpus import corpus_texts

        def texts() -> Iterable[str]:
            return corpus_texts(paths)

    if num_unused < 0:
        raise InputError(f"--num-unused {num_unused}: must be >= 0")
    n_fixed = num_unused + len(SPECIAL_TOKENS)
    if vocab_size <= n_fixed:
        raise InputError(
            f"--vocab-size {vocab_size}: leaves no room beyond the {n_fixed} special and [unused] tokens "
            f"(--num-unused {num_unused}); give more than {n_fixed}"
        )
    normalizer = ExactNormalizer(lowercase, strip_accents, tokenize_chinese_chars)
    rust = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    rust.normalizer = normalizer.rust_normalizer
    rust.pre_tokenizer = normalizer.rust_pre_tokenizer
    continuations, alphabet = continuation_tokens(texts(), normalizer, limit_alphabet)
    # the trainer breaks ties at its alphabet's limit in hash-map order too: it is given the alphabet to keep
    kwargs = {} if alphabet is None else {"limit_alphabet": limit_alphabet, "initial_alphabet": alphabet}
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size - num_unused,
        min_frequency=min_frequency,
        show_progress=show_progress,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        continuing_subword_prefix="##",
        **kwargs,
    )
    rust.train_from_iterator(_read_batches(texts(), normalizer, batch_size, show_progress), trainer=trainer)
    # the ## letters, numbered as special tokens before the alphabet, go after it, where the trainer puts them on its
    # own: a vocabulary cut to size keeps its letters first
    learned = rust.get_vocab()
    ranked = sorted(learned, key=learned.__getitem__)
    cont = set(continuations)
    rest = [t for t in ranked if t not in cont]
    at = next((i for i, t in enumerate(rest) if len(t) > 1 and t not in SPECIAL_TOKENS), len(rest))
    order = [*rest[:at], *(t for t in ranked if t in cont), *rest[at:]]
    vocab = google_layout({t: i for i, t in enumerate(order)}, vocab_size, num_unused)
    tok = BertTokenizer(
        vocab, lowercase=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=tokenize_chinese_chars
    )
    if output is not None:
        out = Path(output)
        if out.suffix == ".txt":
            save_vocab(vocab, out)
        else:
            tok.save_pretrained(out)
    return tok


def vocab_stats(tokenizer: BertTokenizer, lines: Iterable[str], batch_size: int = 1000) -> dict[str, float]:
    """How well ``tokenizer``'s vocabulary covers ``lines``.

    Returns a dict with ``lines``, ``words`` (words after Google's basic tokenization), ``tokens`` (wordpieces),
    ``unk`` ([UNK] tokens; one per uncovered word), ``unk_rate`` (unk / words) and ``tokens_per_word``.
    """
    n_lines = n_words = n_tokens = n_unk = 0
    unk = tokenizer.unk_token_id
    batch: list[str] = []

    def flush() -> None:
        nonlocal n_words, n_tokens, n_unk
        for ids, _, _, words in tokenizer._segments(batch):
            n_tokens += len(ids)
            n_unk += sum(1 for i in ids if i == unk)
            n_words += len(set(words))
        batch.clear()

    for line in lines:
        n_lines += 1
        batch.append(line)
        if len(batch) >= batch_size:
            flush()
    flush()
    return {
        "lines": n_lines,
        "words": n_words,
        "tokens": n_tokens,
        "unk": n_unk,
        "unk_rate": n_unk / n_words if n_words else 0.0,
        "tokens_per_word": n_tokens / n_words if n_words else 0.0,
    }
