"""Google-exact BERT text normalisation ("basic tokenization"), with character offsets.

The reference is Google's ``tokenization.py`` as kept in ``transformers`` (``BasicTokenizer`` of
``tokenization_bert_legacy``), which does, in order:

1. ``_clean_text``: drop NUL, U+FFFD and every character whose Unicode category starts with ``C``
   (Cc, Cf, Cs, Co, Cn) except ``\\t \\n \\r``; turn ``_is_whitespace`` characters (Zs and ``\\t \\n \\r``) into spaces;
2. put spaces around CJK ideographs (``_is_chinese_char`` ranges), if ``tokenize_chinese_chars``;
3. NFC-normalise the text, then split it on whitespace (``str.split``: this also splits on U+2028/U+2029);
4. per word: lowercase (``str.lower``, with its final-sigma rule) and, when lowercasing unless ``strip_accents`` is
   False (or when ``strip_accents`` is True), strip accents: NFD, then drop category Mn;
5. split off every punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, and Unicode category P*).

The Rust ``tokenizers`` ``BertNormalizer`` + ``BertPreTokenizer`` agree with this on almost all text, and are much
faster, but differ in places: they skip step 3's NFC, strip accents before lowercasing instead of after, have no
final-sigma rule, use older Unicode tables (so recent emoji are "unassigned" there and get dropped), has a typo in
one CJK range, and cannot take lone surrogates at all. :class:`ExactNormalizer` therefore decides, character by
character (memoised), whether Rust handles a character exactly as the reference does; text made only of such
characters goes to Rust, and every whitespace-delimited chunk that holds any other character is handled here in
Python (:meth:`ExactNormalizer.split_words`), exactly as the reference does it, with offsets into the original text.
"""

from __future__ import annotations

import re
import threading
import unicodedata

# Zs, plus \t \n \r (Google's _is_whitespace), plus the two str.split() separators that survive cleaning (Zl, Zp).
# Chunks between these characters are processed independently by both the reference and Rust.
SEPARATORS = (
    " \t\n\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_CHUNK_RE = re.compile("[^" + re.escape(SEPARATORS) + "]+")

# Google's _is_chinese_char ranges.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_whitespace(ch: str) -> bool:
    """Google's ``_is_whitespace``: space, ``\\t``, ``\\n``, ``\\r`` and category Zs."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    """The reference's ``_is_control``: any category starting with ``C``, except ``\\t``, ``\\n``, ``\\r``."""
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch)[0] == "C"


def is_punctuation(ch: str) -> bool:
    """Google's ``_is_punctuation``: all non-alphanumeric printable ASCII, plus Unicode category P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch)[0] == "P"


def is_chinese_char(cp: int) -> bool:
    """Google's ``_is_chinese_char``: the CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana)."""
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def strip_accents(text: str) -> str:
    """NFD, then drop combining marks of category Mn (Google's ``_run_strip_accents``)."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def reference_basic_tokenize(
    text: str, lowercase: bool = True, strip_accents_: bool | None = None, tokenize_chinese_chars: bool = True
) -> list[str]:
    """A line-by-line port of the reference ``BasicTokenizer.tokenize`` (no offsets; used to vet characters)."""
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        if is_whitespace(ch):
            out.append(" ")
        elif tokenize_chinese_chars and is_chinese_char(cp):
            out.extend((" ", ch, " "))
        else:
            out.append(ch)
    words = []
    for token in unicodedata.normalize("NFC", "".join(out)).split():
        if lowercase:
            token = token.lower()
            if strip_accents_ is not False:
                token = strip_accents(token)
        elif strip_accents_:
            token = strip_accents(token)
        piece: list[str] = []
        for ch in token:
            if is_punctuation(ch):
                if piece:
                    words.append("".join(piece))
                    piece = []
                words.append(ch)
            else:
                piece.append(ch)
        if piece:
            words.append("".join(piece))
    return " ".join(words).split()


def _attaches(ch: str) -> bool:
    """True for characters that NFC may compose with what precedes them: marks and Hangul medial/final jamo."""
    cp = ord(ch)
    return unicodedata.category(ch)[0] == "M" or unicodedata.combining(ch) != 0 or 0x1160 <= cp <= 0x11FF


# (lowercase, strip_accents, tokenize_chinese_chars) -> (safe characters, unsafe characters, lock)
_VERDICTS: dict[tuple[bool, bool | None, bool], tuple[set[str], set[str], threading.Lock]] = {}


class ExactNormalizer:
    """Google-exact normalisation and pre-tokenization, routed through Rust where Rust is known to agree.

    Args:
        lowercase: lowercase the text (uncased models).
        strip_accents: None means "strip when lowercasing" (Google's behaviour); True/False force it.
        tokenize_chinese_chars: split CJK ideographs into single-character words.
    """

    def __init__(
        self, lowercase: bool = True, strip_accents: bool | None = None, tokenize_chinese_chars: bool = True
    ) -> None:
        from tokenizers import normalizers, pre_tokenizers

        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.do_strip = (lowercase and strip_accents is not False) or bool(strip_accents)
        self.rust_normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=tokenize_chinese_chars,
            strip_accents=self.do_strip,
            lowercase=lowercase,
        )
        self.rust_pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        # Verdicts depend only on the settings (and the installed tokenizers), so instances share them.
        self._safe, self._unsafe, self._lock = _VERDICTS.setdefault(
            (lowercase, strip_accents, tokenize_chinese_chars), (set(), set(), threading.Lock())
        )

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.lowercase, self.strip_accents, self.tokenize_chinese_chars))

    # ----------------------------------------------------------------------------------------------------------------
    # deciding which characters Rust handles exactly

    def _char_is_safe(self, ch: str) -> bool:
        cp = ord(ch)
        # Separators must be handled alike (chunks are cut at them): they are checked by the probe alone.
        if ch not in SEPARATORS:
            if 0xD800 <= cp <= 0xDFFF or _attaches(ch) or not unicodedata.is_normalized("NFC", ch):
                return False
            if self.lowercase and ch == "\u03a3":  # the final-sigma rule depends on context
                return False
        probe = f"a{ch}a"
        expected = reference_basic_tokenize(probe, self.lowercase, self.strip_accents, self.tokenize_chinese_chars)
        normalized = self.rust_normalizer.normalize_str(probe)
        got = [w for w, _ in self.rust_pre_tokenizer.pre_tokenize_str(normalized)]
        return got == expected

    def unsafe_chars(self, text: str) -> set[str]:
        """The characters of ``text`` that Rust does not handle exactly like the reference (empty for ASCII)."""
        if text.isascii():
            return set()
        chars = set(text)
        new = chars - self._safe - self._unsafe
        if new:
            with self._lock:
                for ch in new:
                    (self._safe if self._char_is_safe(ch) else self._unsafe).add(ch)
        return chars & self._unsafe

    def mask_unsafe(self, text: str) -> tuple[str, list[tuple[int, int]]]:
        """Return ``text`` with every chunk holding an unsafe character blanked out (same length), and those chunks.

        A chunk is a maximal run of non-separator characters; both the reference and Rust process chunks
        independently, so the blanked text goes to Rust and the chunks to :meth:`split_words`.
        """
        bad = self.unsafe_chars(text)
        if not bad:
            return text, []
        spans: list[tuple[int, int]] = []
        for m in _CHUNK_RE.finditer(text):
            if not bad.isdisjoint(m.group()):
                spans.append(m.span())
        parts = []
        last = 0
        for s, e in spans:
            parts.append(text[last:s])
            parts.append(" " * (e - s))
            last = e
        parts.append(text[last:])
        return "".join(parts), spans

    # ----------------------------------------------------------------------------------------------------------------
    # the exact Python path

    def split_words(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """Basic-tokenize ``text[start:end]`` exactly like the reference; return (word, begin, end) in ``text``.

        Offsets are character positions in ``text``. Where normalisation changes the number of characters inside a
        word, a word's span covers the whole group of original characters it came from.
        """
        end = len(text) if end is None else end
        words: list[tuple[str, int, int]] = []
        chars: list[tuple[str, int]] = []
        for i in range(start, end):
            ch = text[i]
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or is_control(ch):
                continue
            if is_whitespace(ch) or ch.isspace():
                if chars:
                    self._finish_word(chars, words)
                    chars = []
            elif self.tokenize_chinese_chars and is_chinese_char(cp):
                if chars:
                    self._finish_word(chars, words)
                    chars = []
                self._finish_word([(ch, i)], words)
            else:
                chars.append((ch, i))
        if chars:
            self._finish_word(chars, words)
        return words

    def _finish_word(self, chars: list[tuple[str, int]], out: list[tuple[str, int, int]]) -> None:
        # Group characters into units (a base character and what NFC may attach to it), transform each unit.
        units: list[list] = []  # [text, begin, end]
        for ch, i in chars:
            if units and _attaches(ch):
                units[-1][0] += ch
                units[-1][2] = i + 1
            else:
                units.append([ch, i, i + 1])
        texts = [unicodedata.normalize("NFC", u[0]) for u in units]
        whole = unicodedata.normalize("NFC", "".join(u[0] for u in units))
        if "".join(texts) != whole:
            units, texts = [[whole, units[0][1], units[-1][2]]], [whole]
        if self.lowercase:
            lowered_whole = "".join(texts).lower()  # str.lower applies the final-sigma rule across the word
            lowered = [t.lower() for t in texts]
            if sum(map(len, lowered)) == len(lowered_whole):
                pos = 0
                for k, t in enumerate(lowered):
                    texts[k] = lowered_whole[pos : pos + len(t)]
                    pos += len(t)
            else:
                units, texts = [[lowered_whole, units[0][1], units[-1][2]]], [lowered_whole]
        if self.do_strip:
            stripped = [strip_accents(t) for t in texts]
            whole = strip_accents("".join(texts))
            if "".join(stripped) != whole:
                units, stripped = [[whole, units[0][1], units[-1][2]]], [whole]
            texts = stripped
        # Split off punctuation.
        piece: list[str] = []
        begin = end = -1
        for (_, ub, ue), t in zip(units, texts):
            for ch in t:
                if is_punctuation(ch):
                    if piece:
                        self._emit("".join(piece), begin, end, out)
                        piece = []
                    self._emit(ch, ub, ue, out)
                else:
                    if not piece:
                        begin = ub
                    piece.append(ch)
                    end = ue
        if piece:
            self._emit("".join(piece), begin, end, out)

    @staticmethod
    def _emit(word: str, begin: int, end: int, out: list[tuple[str, int, int]]) -> None:
        # The reference re-splits on whitespace after punctuation splitting.
        for w in word.split():
            out.append((w, begin, end))

    def basic_tokenize(self, text: str) -> list[str]:
        """The reference's basic tokenization of ``text`` (words after cleaning, casing and punctuation splitting)."""
        return [w for w, _, _ in self.split_words(text)]

    def normalize_for_training(self, text: str) -> str:
        """Text that Rust's normaliser turns into exactly the reference's words (for vocabulary training)."""
        _, spans = self.mask_unsafe(text)
        if not spans:
            return text
        return " ".join(self.basic_tokenize(text))
