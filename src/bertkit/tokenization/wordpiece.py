"""``BertTokenizer``: Google-exact BERT tokenization on top of the Rust ``tokenizers`` library.

Text goes through :class:`~bertkit.tokenization.normalizer.ExactNormalizer` (Google's cleaning, CJK splitting, casing,
accent stripping and punctuation splitting) and then greedy longest-match-first WordPiece with ``##`` continuations.
Rust does the work for every chunk of text it handles exactly as Google's reference does; the rest (rare: combining
marks, final sigma, characters newer than Rust's Unicode tables, lone surrogates...) is done in Python.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.files import write_json, write_text
from bertkit.tokenization import normalizer as _normalizer
from bertkit.tokenization import vocab as _vocab
from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.normalizer import SEPARATORS, ExactNormalizer
from bertkit.tokenization.vocab import SPECIAL_TOKENS, VocabNotFoundError

# (ids, tokens, offsets, word_ids) of one segment, without special tokens
_Segment = tuple[list[int], list[str], list[tuple[int, int]], list[int]]

CONFIG_NAME = "tokenizer_config.json"
VOCAB_NAME = "vocab.txt"
TOKENIZER_JSON_NAME = "tokenizer.json"


def find_vocab(directory: str | Path) -> Path | None:
    """The file a model directory's tokenizer is read from: ``vocab.txt``, else ``tokenizer.json``; None if neither.

    Use this (or just :meth:`BertTokenizer.from_pretrained`) wherever a directory is checked for a vocabulary:
    directories written by transformers 5 hold only ``tokenizer.json``.
    """
    directory = Path(directory)
    for name in (VOCAB_NAME, TOKENIZER_JSON_NAME):
        if (directory / name).exists():
            return directory / name
    return None


def truncate_pair_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths Google's ``_truncate_seq_pair`` leaves: pop from the longer segment (B on ties) until both fit.

    Closed form of the token-by-token loop, so a 10 MB input does not loop millions of times.
    """
    budget = max(budget, 0)
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    if len_a > len_b:
        d = min(excess, len_a - len_b)
        len_a -= d
        excess -= d
    elif len_b > len_a:
        d = min(excess, len_b - len_a)
        len_b -= d
        excess -= d
    # now len_a == len_b or excess == 0; the loop alternates B, A, B, A...
    len_b -= (excess + 1) // 2
    len_a -= excess // 2
    return len_a, len_b


# Texts longer than this are cut (at separators) into pieces of about this size, which Rust runs in parallel.
LONG_TEXT = 50_000
_SEPARATOR_RE = re.compile("[" + re.escape(SEPARATORS) + "]")


def _prefix_start(max_tokens: int) -> int:
    """Texts longer than this (in characters) are tokenized by growing prefixes when at most ``max_tokens`` tokens
    are kept (a first prefix this long holds ``max_tokens`` tokens on ordinary text)."""
    return 8 * max(max_tokens, 0) + 1024


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("expected a list of texts, got one str")
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"expected str, got {type(t).__name__}")


def _cut_points(text: str, size: int | None = None) -> list[tuple[int, int]]:
    """Spans covering ``text``, each ending at a separator (where both Google and Rust start a new word)."""
    size = LONG_TEXT if size is None else size
    spans = []
    start = 0
    while len(text) - start > size:
        m = _SEPARATOR_RE.search(text, start + size)
        if m is None:
            break
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    return spans


class TokenIds:
    """Token <-> id conversion shared by :class:`BertTokenizer` and ``FastTokenizer``: each holds ``vocab`` (token ->
    id) and ``unk_token_id``, and defines ``_token(id)``."""

    vocab: dict[str, int]
    unk_token_id: int | None

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Token(s) -> id(s); unknown tokens map to the unknown token's id (None when the tokenizer has none)."""
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.unk_token_id)
        return [self.vocab.get(t, self.unk_token_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """Id(s) -> token(s). Raises IndexError for an id outside the vocabulary."""
        if isinstance(ids, int):
            return self._token(ids)
        return [self._token(int(i)) for i in ids]

    def _token(self, idx: int) -> str:
        raise NotImplementedError


class BertTokenizer(TokenIds):
    """Google-exact BERT WordPiece tokenizer.

    Args:
        vocab: token -> id, ids 0..V-1. Must hold [PAD] [UNK] [CLS] [SEP] [MASK].
        lowercase: uncased model (lowercase, and strip accents unless ``strip_accents`` is False).
        strip_accents: None follows ``lowercase`` (Google); True/False force it.
        tokenize_chinese_chars: split CJK ideographs into one word each.
        max_input_chars_per_word: longer words become [UNK]; Google's default is 200 (Hugging Face's is 100).
        model_max_length: default ``max_length`` for truncation and "max_length" padding.
    """

    pad_token = "[PAD]"
    unk_token = "[UNK]"
    cls_token = "[CLS]"
    sep_token = "[SEP]"
    mask_token = "[MASK]"

    def __init__(
        self,
        vocab: dict[str, int],
        lowercase: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        max_input_chars_per_word: int = 200,
        model_max_length: int = 512,
    ) -> None:
        from tokenizers import Tokenizer, models

        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks the special token(s) {', '.join(missing)}")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"vocabulary ids must be 0..{len(vocab) - 1}, each used once")
        if max_input_chars_per_word < 1:
            raise ValueError(f"max_input_chars_per_word must be >= 1, got {max_input_chars_per_word}")
        self.vocab: dict[str, int] = dict(vocab)
        self._id_to_token: list[str] = [""] * len(vocab)
        for token, idx in vocab.items():
            self._id_to_token[idx] = token
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.model_max_length = model_max_length
        self.normalizer = ExactNormalizer(lowercase, strip_accents, tokenize_chinese_chars)
        self._rust = Tokenizer(
            models.WordPiece(self.vocab, unk_token=self.unk_token, max_input_chars_per_word=max_input_chars_per_word)
        )
        self._rust.normalizer = self.normalizer.rust_normalizer
        self._rust.pre_tokenizer = self.normalizer.rust_pre_tokenizer
        self._model = self._rust.model
        self.pad_token_id = self.vocab[self.pad_token]
        self.unk_token_id = self.vocab[self.unk_token]
        self.cls_token_id = self.vocab[self.cls_token]
        self.sep_token_id = self.vocab[self.sep_token]
        self.mask_token_id = self.vocab[self.mask_token]
        self.all_special_ids = {self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id}
        self.all_special_ids.add(self.mask_token_id)

    def __reduce__(self) -> tuple:
        # Rebuilt from its settings, so it pickles (e.g. into DataLoader workers).
        return (
            self.__class__,
            (
                self.vocab,
                self.lowercase,
                self.strip_accents,
                self.tokenize_chinese_chars,
                self.max_input_chars_per_word,
                self.model_max_length,
            ),
        )

    # ----------------------------------------------------------------------------------------------------------------
    # loading and saving

    @classmethod
    def from_pretrained(cls, path: str | Path, lowercase: bool | None = None, **kwargs: Any) -> BertTokenizer:
        """Load from a model or tokenizer directory, a ``vocab.txt``, or a ``tokenizer.json``.

        A directory is read from its ``vocab.txt`` or, when it has none (transformers 5 writes none), from its
        ``tokenizer.json`` (which must describe BERT's WordPiece: its vocabulary, casing, accent stripping, CJK
        splitting and word-length limit are taken from it). ``tokenizer_config.json`` next to either overrides those
        settings. ``lowercase`` overrides both; with none of them, the casing is guessed from the vocabulary (uncased
        when almost no token has an uppercase letter). Other keyword arguments override the config.

        Raises:
            VocabNotFoundError: (a ``FileNotFoundError``) no vocabulary there.
            VocabError: (a ``ValueError``) an unreadable or invalid vocabulary, or a non-BERT ``tokenizer.json``.
        """
        path = Path(path)
        source = find_vocab(path) if path.is_dir() else path
        if source is None:
            raise VocabNotFoundError(f"{path}: no {VOCAB_NAME} or {TOKENIZER_JSON_NAME} (the tokenizer's vocabulary)")
        if not source.exists():
            raise VocabNotFoundError(f"{source}: no such vocabulary file")
        config_file = source.parent / CONFIG_NAME
        options: dict[str, Any] = {}
        if source.suffix == ".json":
            vocab, options = _vocab.load_tokenizer_json(source)
        else:
            vocab = _vocab.load_vocab(source, required=SPECIAL_TOKENS)
        config = _vocab.read_json_object(config_file, "the tokenizer config")
        if config.get("do_lower_case") is not None:
            options["lowercase"] = config["do_lower_case"]
        if lowercase is not None:
            options["lowercase"] = lowercase
        if options.get("lowercase") is None:
            options["lowercase"] = guess_lowercase(vocab)
        options["lowercase"] = bool(options["lowercase"])
        for key in ("strip_accents", "tokenize_chinese_chars", "max_input_chars_per_word"):
            if key in config:
                options[key] = config[key]
        max_len = config.get("model_max_length")
        if isinstance(max_len, int) and 0 < max_len < 1_000_000:  # HF writes 1e30 for "unknown"
            options["model_max_length"] = max_len
        options.update(kwargs)
        return cls(vocab, **options)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``vocab.txt``, ``tokenizer_config.json`` and ``tokenizer.json`` (readable by ``transformers``'
        ``AutoTokenizer`` whatever the model type, BERT or ModernBERT)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        _vocab.save_vocab(self.vocab, directory / VOCAB_NAME)
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "max_input_chars_per_word": self.max_input_chars_per_word,
            "model_max_length": self.model_max_length,
            "pad_token": self.pad_token,
            "unk_token": self.unk_token,
            "cls_token": self.cls_token,
            "sep_token": self.sep_token,
            "mask_token": self.mask_token,
        }
        write_json(directory / CONFIG_NAME, config, sort_keys=False)
        # tokenizer.json too: transformers opens a ModernBERT directory only through one (issue 31)
        write_text(directory / TOKENIZER_JSON_NAME, wordpiece_tokenizer_json(self))
        return directory

    # ----------------------------------------------------------------------------------------------------------------
    # vocabulary

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return (
            f"BertTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase}, "
            f"strip_accents={self.strip_accents}, tokenize_chinese_chars={self.tokenize_chinese_chars}, "
            f"max_input_chars_per_word={self.max_input_chars_per_word})"
        )

    def _token(self, idx: int) -> str:
        if not 0 <= idx < len(self._id_to_token):
            raise IndexError(f"token id {idx} is outside the vocabulary (size {len(self._id_to_token)})")
        return self._id_to_token[idx]

    # ----------------------------------------------------------------------------------------------------------------
    # tokenizing one segment

    def basic_tokenize(self, text: str) -> list[str]:
        """Google's basic tokenization (cleaning, casing, CJK and punctuation splitting), before WordPiece."""
        return self.normalizer.basic_tokenize(text)

    def tokenize(self, text: str) -> list[str]:
        """Wordpieces of ``text``, without special tokens."""
        return self._segments([text])[0][1]

    def _segments(self, texts: Sequence[str], max_tokens: int | None = None) -> list[_Segment]:
        """Tokenize each text (no special tokens): ids, tokens, offsets, word ids.

        With ``max_tokens``, a segment may hold only its first tokens (at least ``max_tokens`` of them, or all): a
        long text is then only tokenized as far as needed (:meth:`_segment_prefix`), so the cost is bounded by
        ``max_tokens`` rather than by the text.
        """
        _check_texts(texts)
        out: list[_Segment | None] = [None] * len(texts)
        short = []
        for k, text in enumerate(texts):
            if max_tokens is not None and len(text) > _prefix_start(max_tokens):
                out[k] = self._segment_prefix(text, max_tokens)
            elif len(text) > LONG_TEXT:
                out[k] = self._segment_long(text, max_tokens)
            else:
                short.append(k)
        for k, seg in zip(short, self._segments_short([texts[k] for k in short])):
            out[k] = seg
        return out  # type: ignore[return-value]

    def _segments_short(self, texts: Sequence[str], tail_unsafe: Sequence[bool] | None = None) -> list[_Segment]:
        out: list[_Segment] = []
        for text, spans, parts in self._encode_parts(texts, tail_unsafe):
            if not spans and len(parts) == 1 and parts[0][0] == 0:
                enc = parts[0][1]
                out.append((enc.ids, enc.tokens, enc.offsets, enc.word_ids))
            else:
                out.append(self._merge(text, parts, spans))
        return out

    def _encode_parts(
        self, texts: Sequence[str], tail_unsafe: Sequence[bool] | None = None
    ) -> list[tuple[str, list[tuple[int, int]], list[tuple[int, Any]]]]:
        """Per text: (text, the chunks for the Python path, [(offset, Rust encoding)] for the text between them).

        The text between Python chunks goes to Rust as separate pieces (one batch for all texts), not blanked out:
        Rust takes about a second per megabyte even of spaces.
        """
        tails = tail_unsafe if tail_unsafe is not None else [False] * len(texts)
        spans_all = [self.normalizer.mask_unsafe(t, tail)[1] for t, tail in zip(texts, tails)]
        pieces: list[str] = []
        where: list[tuple[int, int]] = []  # (text index, offset) of each piece
        for k, (text, spans) in enumerate(zip(texts, spans_all)):
            last = 0
            for s, e in [*spans, (len(text), len(text))]:
                if s > last and (not spans or not text[last:s].isspace()):
                    pieces.append(text[last:s])
                    where.append((k, last))
                last = e
            if not spans and not text:
                pieces.append(text)
                where.append((k, 0))
        encs = self._rust.encode_batch(pieces, add_special_tokens=False) if pieces else []
        parts: list[list[tuple[int, Any]]] = [[] for _ in texts]
        for (k, offset), enc in zip(where, encs):
            parts[k].append((offset, enc))
        return [(t, sp, pa) for t, sp, pa in zip(texts, spans_all, parts)]

    def _segment_prefix(self, text: str, max_tokens: int) -> _Segment:
        """The first tokens (at least ``max_tokens``, or all) of ``text``, from as short a prefix as will do.

        Prefixes grow geometrically, each ending at the first cut (:meth:`ExactNormalizer.prefix_cut`) after twice
        the last: a place where the reference's words of the prefix are exactly the first words of the whole text
        (a separator, a CJK ideograph, or a punctuation mark that ends a word whatever follows). So the result is
        the whole text's tokens, cut short, for a cost proportional to the prefix tokenized, not to the text.
        """
        # The chunk that a cut falls in must take the same path (Rust or Python) as in the whole text: Python if it
        # has an unsafe character or a long run (see ExactNormalizer.mask_unsafe), after the cut included.
        last_unsafe: dict[int, int] = {}  # chunk end -> position of the last unsafe character before it
        long_runs: dict[int, tuple[int, int]] = {}  # chunk end -> (searched from, start of a long run or chunk end)
        target = _prefix_start(max_tokens)
        while target < len(text):
            cut = self.normalizer.prefix_cut(text, target)
            if cut is None:
                break
            p, prefix = cut
            m = _SEPARATOR_RE.search(text, p)
            end = m.start() if m else len(text)
            if end not in last_unsafe:
                last_unsafe[end] = self.normalizer.last_unsafe(text, end)
            start = max(p - _normalizer.LONG_WORD, 0)  # a run across p has more than LONG_WORD characters from here
            if end not in long_runs or long_runs[end][1] < start:
                run = self.normalizer.long_run(text, start, end)
                long_runs[end] = (start, run.start() if run else end)
            tail = last_unsafe[end] >= p or long_runs[end][1] < end
            seg = (
                self._segment_long(prefix, max_tokens, tail)
                if len(prefix) > LONG_TEXT
                else (self._segments_short([prefix], [tail])[0])
            )
            if len(seg[0]) >= max_tokens:
                return seg
            target = 2 * p
        return self._segment_long(text, max_tokens) if len(text) > LONG_TEXT else self._segments_short([text])[0]

    def _segment_long(self, text: str, max_tokens: int | None, tail_unsafe: bool = False) -> _Segment:
        """Cut a long text at separators into pieces (Google's rules process them independently), run the pieces
        in batches (Rust runs a batch in parallel), and join their tokens with shifted offsets and word ids. With
        ``max_tokens``, stop once that many tokens are there. ``tail_unsafe`` as in ``mask_unsafe``."""
        ids: list[int] = []
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        words: list[int] = []
        n_words = 0
        cuts = _cut_points(text)
        group = 8
        for g in range(0, len(cuts), group):
            spans = cuts[g : g + group]
            tails = [tail_unsafe and e == len(text) for _, e in spans]
            for (start, _), (p_ids, p_tokens, p_offsets, p_words) in zip(
                spans, self._segments_short([text[s:e] for s, e in spans], tails)
            ):
                ids.extend(p_ids)
                tokens.extend(p_tokens)
                offsets.extend([(s + start, e + start) for s, e in p_offsets])
                words.extend([w + n_words for w in p_words])
                if p_words:
                    n_words += p_words[-1] + 1
            if max_tokens is not None and len(ids) >= max_tokens:
                break
        return ids, tokens, offsets, words

    def _ids(self, texts: Sequence[str], max_tokens: int | None = None) -> list[list[int]]:
        """Ids only (the fast path behind ``__call__``); ``max_tokens`` as in :meth:`_segments`."""
        _check_texts(texts)
        start = _prefix_start(max_tokens) if max_tokens is not None else LONG_TEXT
        if any(len(t) > min(start, LONG_TEXT) for t in texts):
            return [seg[0] for seg in self._segments(texts, max_tokens)]
        out = []
        for text, spans, parts in self._encode_parts(texts):
            plain = not spans and len(parts) == 1 and parts[0][0] == 0
            out.append(parts[0][1].ids if plain else self._merge(text, parts, spans)[0])
        return out

    def _wordpiece(self, word: str, begin: int, end: int) -> list[tuple[int, str, tuple[int, int]]]:
        if len(word) > self.max_input_chars_per_word:
            return [(self.unk_token_id, self.unk_token, (begin, end))]
        pieces = self._model.tokenize(word)
        if len(pieces) == 1 and pieces[0].id == self.unk_token_id:
            return [(self.unk_token_id, self.unk_token, (begin, end))]
        out = []
        aligned = end - begin == len(word)
        pos = begin
        for k, p in enumerate(pieces):
            value = p.value
            n = len(value) - 2 if k > 0 and value.startswith("##") else len(value)
            span = (pos, pos + n) if aligned else (begin, end)
            pos += n
            out.append((p.id, value, span))
        return out

    def _merge(self, text: str, parts: list[tuple[int, Any]], spans: list[tuple[int, int]]) -> _Segment:
        """Combine Rust's tokens (of the pieces between ``spans``) with Python's exact tokens for ``spans``."""
        items: list[tuple[int, int, str, tuple[int, int], tuple[int, ...]]] = []
        for k, (shift, enc) in enumerate(parts):
            for i, t, o, w in zip(enc.ids, enc.tokens, enc.offsets, enc.word_ids):
                o = (o[0] + shift, o[1] + shift)
                items.append((o[0], i, t, o, (0, k, w)))
        n_words = 0
        for s, e in spans:
            for word, b, en in self.normalizer.split_words(text, s, e):
                for i, t, o in self._wordpiece(word, b, en):
                    items.append((b, i, t, o, (1, n_words, 0)))
                n_words += 1
        items.sort(key=lambda it: it[0])  # stable: pieces of one word keep their order
        ids, tokens, offsets, words = [], [], [], []
        last_key, wid = None, -1
        for _, i, t, o, key in items:
            if key != last_key:
                wid += 1
                last_key = key
            ids.append(i)
            tokens.append(t)
            offsets.append(o)
            words.append(wid)
        return ids, tokens, offsets, words

    # ----------------------------------------------------------------------------------------------------------------
    # encoding

    def _limit(self, max_length: int | None, truncation: bool) -> int | None:
        if not truncation:
            return None
        return self.model_max_length if max_length is None else max_length

    def _build(self, a: _Segment, b: _Segment | None, limit: int | None, add_special_tokens: bool) -> Encoding:
        a_ids, a_tokens, a_offsets, a_words = a
        la = len(a_ids)
        lb = len(b[0]) if b is not None else 0
        if limit is not None:
            n_special = (3 if b is not None else 2) if add_special_tokens else 0
            if b is None:
                la = min(la, max(limit - n_special, 0))
            else:
                la, lb = truncate_pair_lengths(la, lb, limit - n_special)
        cls, sep = ([self.cls_token_id], [self.sep_token_id]) if add_special_tokens else ([], [])
        cls_t, sep_t = ([self.cls_token], [self.sep_token]) if add_special_tokens else ([], [])
        sp = [(0, 0)] if add_special_tokens else []
        none = [None] if add_special_tokens else []
        ids = cls + a_ids[:la] + sep
        tokens = cls_t + a_tokens[:la] + sep_t
        offsets = sp + list(a_offsets[:la]) + sp
        words: list[int | None] = none + list(a_words[:la]) + none
        seq: list[int | None] = none + [0] * la + none
        type_ids = [0] * len(ids)
        special = [1] * len(cls) + [0] * la + [1] * len(sep)
        if b is not None:
            b_ids, b_tokens, b_offsets, b_words = b
            ids += b_ids[:lb] + sep
            tokens += b_tokens[:lb] + sep_t
            offsets += list(b_offsets[:lb]) + sp
            words += list(b_words[:lb]) + none
            seq += [1] * lb + none
            type_ids += [1] * (lb + len(sep))
            special += [0] * lb + [1] * len(sep)
        return Encoding(
            ids=ids,
            tokens=tokens,
            type_ids=type_ids,
            attention_mask=[1] * len(ids),
            special_tokens_mask=special,
            offsets=offsets,
            word_ids=words,
            sequence_ids=seq,
        )

    def encode(
        self,
        text: str,
        pair: str | None = None,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> Encoding:
        """Encode ``text`` (and ``pair``) as ``[CLS] A [SEP] (B [SEP])``.

        With ``truncation`` the result holds at most ``max_length`` tokens (default ``model_max_length``); pairs lose
        tokens from the longer segment first (Google's ``_truncate_seq_pair``).
        """
        return self.encode_batch([text], None if pair is None else [pair], max_length, truncation, add_special_tokens)[
            0
        ]

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> list[Encoding]:
        """:meth:`encode` for many texts at once (Rust works on the batch in parallel)."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of texts; use encode() for one text")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pairs")
        limit = self._limit(max_length, truncation)
        # Tokens beyond the limit never survive truncation (for pairs too: each segment keeps at most the budget).
        a = self._segments(texts, limit)
        b = self._segments(pairs, limit) if pairs is not None else [None] * len(a)
        return [self._build(x, y, limit, add_special_tokens) for x, y in zip(a, b)]

    def __call__(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        padding: str | bool = "longest",
        max_length: int | None = None,
        truncation: bool = True,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = "pt",
        add_special_tokens: bool = True,
    ) -> dict[str, Any]:
        """Encode a batch into padded ``input_ids``, ``token_type_ids`` and ``attention_mask`` of shape [B, T].

        Args:
            texts: one text or a list of texts (segment A).
            pairs: optional segment B, one per text.
            padding: "longest" (or True) pads to the longest in the batch; "max_length" pads to ``max_length``
                (default ``model_max_length``); False/"do_not_pad" pads nothing (lists only, or equal lengths).
            max_length: truncation limit (and "max_length" padding length).
            truncation: truncate to ``max_length`` (default ``model_max_length``).
            pad_to_multiple_of: round the padded length up to a multiple of this.
            return_tensors: "pt" (torch.long tensors), "np" (int64 arrays) or None (lists).
        """
        if isinstance(texts, str):
            texts = [texts]
            if isinstance(pairs, str):
                pairs = [pairs]
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pairs")
        limit = self._limit(max_length, truncation)
        a_all = self._ids(texts, limit)
        b_all = self._ids(pairs, limit) if pairs is not None else None
        cls, sep = self.cls_token_id, self.sep_token_id
        input_ids: list[list[int]] = []
        type_ids: list[list[int]] = []
        for k, a in enumerate(a_all):
            if b_all is None:
                if limit is not None and len(a) > limit - 2 * add_special_tokens:
                    a = a[: max(limit - 2 * add_special_tokens, 0)]
                ids = [cls, *a, sep] if add_special_tokens else list(a)
                input_ids.append(ids)
                type_ids.append([0] * len(ids))
            else:
                b = b_all[k]
                la, lb = len(a), len(b)
                if limit is not None:
                    la, lb = truncate_pair_lengths(la, lb, limit - 3 * add_special_tokens)
                if add_special_tokens:
                    ids = [cls, *a[:la], sep, *b[:lb], sep]
                    types = [0] * (la + 2) + [1] * (lb + 1)
                else:
                    ids = a[:la] + b[:lb]
                    types = [0] * la + [1] * lb
                input_ids.append(ids)
                type_ids.append(types)
        return self._pad(input_ids, type_ids, padding, max_length, pad_to_multiple_of, return_tensors)

    def _pad(
        self,
        input_ids: list[list[int]],
        type_ids: list[list[int]],
        padding: str | bool,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        return_tensors: str | None,
    ) -> dict[str, Any]:
        lengths = [len(x) for x in input_ids]
        longest = max(lengths, default=0)
        if padding is True or padding == "longest":
            target = longest
        elif padding == "max_length":
            target = max(self.model_max_length if max_length is None else max_length, longest)
        elif padding is False or padding == "do_not_pad" or padding is None:
            target = None
        else:
            raise ValueError(f"padding must be 'longest', 'max_length' or False, got {padding!r}")
        if target is not None and pad_to_multiple_of:
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        if target is None:
            if return_tensors is None:
                return {
                    "input_ids": input_ids,
                    "token_type_ids": type_ids,
                    "attention_mask": [[1] * n for n in lengths],
                }
            if len(set(lengths)) > 1:
                raise ValueError("sequences have different lengths; use padding='longest' to return tensors")
            target = longest
        import numpy as np

        n = len(input_ids)
        ids_arr = np.full((n, target), self.pad_token_id, dtype=np.int64)
        types_arr = np.zeros((n, target), dtype=np.int64)
        for k, (ids, types) in enumerate(zip(input_ids, type_ids)):
            ids_arr[k, : len(ids)] = ids
            types_arr[k, : len(types)] = types
        mask_arr = (np.arange(target)[None, :] < np.asarray(lengths, dtype=np.int64)[:, None]).astype(np.int64)
        out = {"input_ids": ids_arr, "token_type_ids": types_arr, "attention_mask": mask_arr}
        if return_tensors == "pt":
            import torch

            return {k: torch.from_numpy(v) for k, v in out.items()}
        if return_tensors == "np":
            return out
        if return_tensors is None:
            return {k: v.tolist() for k, v in out.items()}
        raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")

    # ----------------------------------------------------------------------------------------------------------------
    # decoding

    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = True) -> str:
        """Join wordpieces back into text: ``##`` pieces attach to the previous piece, words are space-separated.

        With ``skip_special_tokens``, [PAD] [CLS] [SEP] [MASK] are dropped ([UNK] stays, it marks lost text).
        Accepts a list of ints or a 1-D tensor/array.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        skip = self.all_special_ids - {self.unk_token_id} if skip_special_tokens else set()
        words: list[str] = []
        for i in ids:
            i = int(i)
            if i in skip:
                continue
            token = self._token(i)
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)


def guess_lowercase(vocab: dict[str, int]) -> bool:
    """Guess whether a vocabulary is uncased: under 1% of its (non-[SPECIAL]) tokens have an uppercase letter.

    (Google's cased vocabularies have 16-29% such tokens; uncased ones none; bert-base-chinese 2 in 21128.)
    """
    plain = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    upper = sum(1 for t in plain if t != t.lower())
    return upper <= 0.01 * len(plain)


def wordpiece_tokenizer_json(tokenizer: BertTokenizer) -> str:
    """BERT's WordPiece pipeline as a ``tokenizer.json`` (the ``tokenizers`` library's ``BertNormalizer``,
    ``BertPreTokenizer``, ``WordPiece`` model and decoder, ``[CLS] A [SEP] B [SEP]`` template), the settings
    ``tokenizer``'s: what transformers' ``TokenizersBackend`` needs to open a ModernBERT directory (its
    ``AutoTokenizer`` builds no tokenizer from ``vocab.txt`` for that model type), and what transformers 5 itself
    writes for BERT. bertkit reads it back as the same :class:`BertTokenizer` (``fast.is_bert_wordpiece``)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    t = tokenizer
    rust = Tokenizer(
        models.WordPiece(t.vocab, unk_token=t.unk_token, max_input_chars_per_word=t.max_input_chars_per_word)
    )
    rust.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=t.tokenize_chinese_chars,
        strip_accents=t.strip_accents,
        lowercase=t.lowercase,
    )
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    rust.post_processor = processors.TemplateProcessing(
        single=f"{t.cls_token}:0 $A:0 {t.sep_token}:0",
        pair=f"{t.cls_token}:0 $A:0 {t.sep_token}:0 $B:1 {t.sep_token}:1",
        special_tokens=[(t.cls_token, t.cls_token_id), (t.sep_token, t.sep_token_id)],
    )
    rust.decoder = decoders.WordPiece(prefix="##")
    specials = (t.pad_token, t.unk_token, t.cls_token, t.sep_token, t.mask_token)
    rust.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])  # their vocab ids
    return rust.to_str(pretty=True)
