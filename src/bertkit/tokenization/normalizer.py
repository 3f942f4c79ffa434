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

import functools
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
# Words longer than this (in characters of the original text) are normalised as one string (in C) before any
# per-character work, so that a 10 MB word costs what the reference's normalisation of it costs. Rust is slow on
# such words too (seconds per MB), so a chunk with a run this long that no separator, CJK ideograph or ASCII
# punctuation breaks takes the Python path.
LONG_WORD = 1000


@functools.lru_cache(maxsize=8)
def long_run_re(long_word: int, chinese: bool) -> re.Pattern:
    """Runs of more than ``long_word`` characters that no separator, ASCII punctuation or (with ``chinese``) CJK
    ideograph breaks."""
    breaks = re.escape(SEPARATORS) + "\\x21-\\x2f\\x3a-\\x40\\x5b-\\x60\\x7b-\\x7e"
    if chinese:
        breaks += cjk_class()
    return re.compile(f"[^{breaks}]{{{long_word + 1},}}")


@functools.lru_cache(maxsize=1)
def cjk_class() -> str:
    """A regex class body of the CJK ranges' characters that the reference splits off: without the code points its
    ``_clean_text`` drops first (those unassigned in these blocks, e.g. U+FADA), which split nothing."""
    parts = []
    for lo, hi in CJK_RANGES:
        start = None
        for cp in range(lo, hi + 2):
            kept = cp <= hi and unicodedata.category(chr(cp))[0] != "C"
            if kept and start is None:
                start = cp
            elif not kept and start is not None:
                parts.append(f"{chr(start)}-{chr(cp - 1)}")
                start = None
    return "".join(parts)


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


# A run of non-starters longer than this is put in canonical order before ``unicodedata.normalize`` sees it:
# CPython orders such runs by insertion sort, quadratic in the run's length (a 40k-mark run of alternating classes
# takes over a second, 10M never ends).
_SORT_RUN = 16


def distinct_chars(text: str) -> set[str]:
    """``set(text)``, several times faster on long texts (a histogram of code points instead of hashing each)."""
    if len(text) < 1 << 16:
        return set(text)
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return {chr(c) for c in np.flatnonzero(np.bincount(codes))}


def replace_chars(text: str, table: dict[str, str]) -> str:
    """``text`` with each character that is a key of ``table`` replaced by its value ("" deletes it).

    ``str.replace`` per character when there are few (it runs at memory speed), else ``str.translate``."""
    if len(table) <= 16:
        for c, r in table.items():
            text = text.replace(c, r)
        return text
    return text.translate({ord(c): r for c, r in table.items()})


def normalize(form: str, text: str) -> str:
    """``unicodedata.normalize(form, text)`` for "NFC"/"NFD", in linear time on any input.

    Same result: a text is first decomposed character by character (each character's own NFD), long runs of
    non-starters are stable-sorted by combining class (exactly the canonical ordering step), and only then given to
    ``unicodedata.normalize``, which then has nothing left to reorder.
    """
    if len(text) <= _SORT_RUN or text.isascii():
        return unicodedata.normalize(form, text)
    # is_normalized answers "no" at the first misordered mark, so it is linear too.
    if unicodedata.is_normalized(form, text):
        return text
    if unicodedata.is_normalized("NFD", text):  # marks already in order: nothing for unicodedata to reorder
        return unicodedata.normalize(form, text)
    distinct = distinct_chars(text)
    if not any(unicodedata.combining(c) for c in distinct):
        return unicodedata.normalize(form, text)
    table = {}
    for c in distinct:
        d = unicodedata.normalize("NFD", c)
        if d != c:
            table[c] = d
    decomposed = replace_chars(text, table)
    marks = [c for c in distinct_chars(decomposed) if unicodedata.combining(c)]
    classes = sorted({unicodedata.combining(c) for c in marks})
    if len(classes) > 1:
        # A stable sort by combining class: one pass per class, each keeping only that class's marks.
        keep = [{c: "" for c in marks if unicodedata.combining(c) != k} for k in classes]
        run = re.compile("[" + "".join(map(re.escape, marks)) + f"]{{{_SORT_RUN + 1},}}")
        decomposed = run.sub(lambda m: "".join(replace_chars(m.group(), t) for t in keep), decomposed)
    return unicodedata.normalize(form, decomposed)


def strip_accents(text: str) -> str:
    """NFD, then drop combining marks of category Mn (Google's ``_run_strip_accents``)."""
    decomposed = normalize("NFD", text)
    if decomposed.isascii():
        return decomposed
    return replace_chars(decomposed, {c: "" for c in distinct_chars(decomposed) if unicodedata.category(c) == "Mn"})


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


@functools.lru_cache(maxsize=65536)
def _attaches(ch: str) -> bool:
    """True for characters that NFC may compose with what precedes them: marks and Hangul medial/final jamo."""
    cp = ord(ch)
    return unicodedata.category(ch)[0] == "M" or unicodedata.combining(ch) != 0 or 0x1160 <= cp <= 0x11FF


@functools.lru_cache(maxsize=65536)
def is_dropped(ch: str) -> bool:
    """True for the characters Google's ``_clean_text`` removes: NUL, U+FFFD and controls (``C*`` but ``\\t\\n\\r``)."""
    cp = ord(ch)
    return cp == 0 or cp == 0xFFFD or is_control(ch)


@functools.lru_cache(maxsize=65536)
def is_case_ignorable(ch: str) -> bool:
    """Python's ``Case_Ignorable``: what ``str.lower``'s final-sigma rule looks through (probed, not tabulated)."""
    return ("A\u03a3" + ch + ",").lower()[1] == "\u03c2" and ("A\u03a3" + ch + "B").lower()[1] == "\u03c3"


@functools.lru_cache(maxsize=65536)
def is_cased(ch: str) -> bool:
    """Python's ``Cased`` for a character that is not case-ignorable (what makes a preceding sigma non-final)."""
    return ("A\u03a3" + ch).lower()[1] == "\u03c3"


# Kinds of prefix cut before a character (see ExactNormalizer.cut_kind).
CUT_ALWAYS, CUT_PUNCT, CUT_IF_NOT_COMPOSED = 1, 2, 3


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
        chars = distinct_chars(text)
        new = chars - self._safe - self._unsafe
        if new:
            with self._lock:
                for ch in new:
                    (self._safe if self._char_is_safe(ch) else self._unsafe).add(ch)
        return chars & self._unsafe

    def mask_unsafe(self, text: str, tail_unsafe: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """Return ``text`` with every chunk holding an unsafe character blanked out (same length), and those chunks.

        A chunk is a maximal run of non-separator characters; both the reference and Rust process chunks
        independently, so the blanked text goes to Rust and the chunks to :meth:`split_words`. ``tail_unsafe``
        sends the last chunk (when ``text`` does not end with a separator) to Python too: ``text`` is then a prefix
        cut inside a chunk that has an unsafe character further on, and both parts must take the same path.
        """
        bad = self.unsafe_chars(text)
        long_run = len(text) > LONG_WORD and self.long_run(text) is not None
        if not bad and not tail_unsafe and not long_run:
            return text, []
        spans: list[tuple[int, int]] = []
        for m in _CHUNK_RE.finditer(text):
            chunk = m.group()
            if (
                (any(c in chunk for c in bad) if len(bad) <= 16 else not bad.isdisjoint(chunk))
                or (tail_unsafe and m.end() == len(text))
                or (long_run and len(chunk) > LONG_WORD and self.long_run(chunk))
            ):
                spans.append(m.span())
        if not spans:
            return text, []
        parts = []
        last = 0
        for s, e in spans:
            parts.append(text[last:s])
            parts.append(" " * (e - s))
            last = e
        parts.append(text[last:])
        return "".join(parts), spans

    def long_run(self, text: str, start: int = 0, end: int | None = None) -> re.Match | None:
        """The first run of more than ``LONG_WORD`` characters in ``text[start:end]`` that no separator, ASCII
        punctuation or CJK ideograph breaks (such a chunk takes the Python path), or None."""
        end = len(text) if end is None else end
        return long_run_re(LONG_WORD, self.tokenize_chinese_chars).search(text, start, end)

    def last_unsafe(self, text: str, end: int) -> int:
        """Position of the last unsafe character in ``text[:end]``, or -1 (scans back from ``end`` only as far as
        needed)."""
        hi, width = end, 4096
        while hi > 0:
            lo = max(hi - width, 0)
            bad = self.unsafe_chars(text[lo:hi])
            if bad:
                return max(text.rfind(c, lo, hi) for c in bad)
            hi, width = lo, width * 2
        return -1

    # ----------------------------------------------------------------------------------------------------------------
    # where a text may be cut: tokenizing a prefix must give exactly the first words of the whole text

    def cut_kind(self, ch: str) -> int:
        """Whether a prefix may end just before ``ch`` (0: no; else a CUT_* kind), from ``ch`` alone.

        - CUT_ALWAYS: a separator or (with ``tokenize_chinese_chars``) a CJK ideograph; both end a word before any
          normalisation (the reference splits on whitespace and puts spaces around CJK ideographs).
        - CUT_PUNCT: a starter (combining class 0, attaching to nothing before it, never the second character of a
          canonical composition) whose own normalisation starts with punctuation: the word before it ends there.
          With lowercasing, the final-sigma rule still looks through it (see :meth:`prefix_before`).
        - CUT_IF_NOT_COMPOSED: as CUT_PUNCT when accents are not stripped: NFC could compose it with the marks
          after it (``<`` + U+0338 is ``≮``, not punctuation), so the marks that follow decide.
        """
        kind = self._cut_kinds.get(ch)
        if kind is None:
            kind = self._cut_kinds[ch] = self._find_cut_kind(ch)
        return kind

    @functools.cached_property
    def _cut_kinds(self) -> dict[str, int]:
        return {}

    def _find_cut_kind(self, ch: str) -> int:
        if ch in SEPARATORS:
            return CUT_ALWAYS
        # Every second character of a canonical composition attaches (a mark, or a Hangul medial/final jamo; a test
        # checks this against the installed Unicode tables), so a character that does not attach composes with
        # nothing before it. A dropped character cuts nothing, in the CJK blocks too (cleaning comes first).
        if is_dropped(ch) or _attaches(ch) or 0xD800 <= ord(ch) <= 0xDFFF:
            return 0
        if self.tokenize_chinese_chars and is_chinese_char(ord(ch)):
            return CUT_ALWAYS
        alone = self.normalize_word(ch)
        if not alone or not is_punctuation(alone[0]) or _attaches(alone[0]):
            return 0
        # Stripping decomposes again, so what NFC composes with ch (< + U+0338) still starts with it.
        return CUT_PUNCT if self.do_strip else CUT_IF_NOT_COMPOSED

    def prefix_before(self, text: str, p: int) -> str | None:
        """``text[:p]`` made to tokenize exactly as the first words of ``text`` do, or None if ``p`` is no cut.

        For a CUT_PUNCT cut while lowercasing, a capital sigma whose final-sigma context runs through the cut
        (only case-ignorable characters in between) is replaced by the lowercase form the whole text gives it.
        """
        kind = self.cut_kind(text[p]) if 0 < p < len(text) else 0
        if kind == 0:
            return None
        if kind == CUT_ALWAYS:
            return text[:p]
        if kind == CUT_IF_NOT_COMPOSED:
            end = p + 1
            while end < len(text) and end - p <= 64 and (_attaches(text[end]) or is_dropped(text[end])):
                end += 1
            if end > p + 1:
                if end - p > 64:
                    return None
                group = "".join(c for c in text[p:end] if not is_dropped(c))
                if not unicodedata.normalize("NFC", group).startswith(unicodedata.normalize("NFC", text[p])):
                    return None
        if self.lowercase:
            s = text.rfind("\u03a3", 0, p)
            if s >= 0 and all(is_dropped(c) or is_case_ignorable(c) for c in distinct_chars(text[s + 1 : p])):
                q = self._first_opaque(text, p)
                if q < len(text) and text[q] not in SEPARATORS and is_cased(text[q]):
                    return text[:s] + "\u03c3" + text[s + 1 : p]
        return text[:p]

    @staticmethod
    def _first_opaque(text: str, start: int) -> int:
        """The first position at or after ``start`` that the final-sigma rule does not look through (or len)."""
        i, width = start, 256
        while i < len(text):
            window = text[i : i + width]
            opaque = [c for c in distinct_chars(window) if not (is_dropped(c) or is_case_ignorable(c))]
            if opaque:
                return i + min(window.find(c) for c in opaque)
            i, width = i + len(window), width * 2
        return len(text)

    def prefix_cut(self, text: str, target: int, max_misses: int = 1000) -> tuple[int, str] | None:
        """The first cut at or after ``target``: (p, prefix) with :meth:`prefix_before`, or None if there is none.

        Candidates are found by a regular expression over the distinct characters of growing windows, so a text with
        no cut is scanned once, in C. Gives up (None) after ``max_misses`` candidates that turn out not to be cuts.
        """
        i, width, misses = max(target, 1), 4096, 0
        while i < len(text):
            window = text[i : i + width]
            candidates = [c for c in distinct_chars(window) if self.cut_kind(c)]
            if candidates:
                for m in re.finditer("[" + "".join(map(re.escape, candidates)) + "]", window):
                    prefix = self.prefix_before(text, i + m.start())
                    if prefix is not None:
                        return i + m.start(), prefix
                    misses += 1
                    if misses > max_misses:
                        return None
            i, width = i + len(window), width * 2
        return None

    # ----------------------------------------------------------------------------------------------------------------
    # the exact Python path

    def split_words(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """Basic-tokenize ``text[start:end]`` exactly like the reference; return (word, begin, end) in ``text``.

        Offsets are character positions in ``text``. Where normalisation changes the number of characters inside a
        word, a word's span covers the whole group of original characters it came from. Linear in the length of
        the text, however long its words or runs of combining marks.
        """
        end = len(text) if end is None else end
        words: list[tuple[str, int, int]] = []
        for m in self._word_re.finditer(text, start, end):
            b, e = m.span()
            if e - b > LONG_WORD:
                self._long_word(text, b, e, words)
                continue
            chars = [(ch, i) for i, ch in enumerate(m.group(), b) if not is_dropped(ch)]
            if chars:
                self._finish_word(self._units(chars), words)
        return words

    @functools.cached_property
    def _word_re(self) -> re.Pattern:
        # Words before punctuation splitting: runs between separators, with CJK ideographs as words of their own.
        seps = re.escape(SEPARATORS)
        if not self.tokenize_chinese_chars:
            return re.compile(f"[^{seps}]+")
        cjk = cjk_class()
        return re.compile(f"[{cjk}]|[^{seps}{cjk}]+")

    @staticmethod
    def _units(chars: list[tuple[str, int]]) -> list[list]:
        """Group characters into units [text, begin, end]: a base character and what NFC may attach to it."""
        units: list[list] = []  # [list of characters, begin, end]
        for ch, i in chars:
            if units and _attaches(ch):
                units[-1][0].append(ch)
                units[-1][2] = i + 1
            else:
                units.append([[ch], i, i + 1])
        for u in units:
            u[0] = "".join(u[0])
        return units

    def normalize_word(self, word: str) -> str:
        """The reference's NFC, lowercasing and accent stripping of one word (cleaned, without whitespace)."""
        word = normalize("NFC", word)
        if self.lowercase:
            word = word.lower()
        if self.do_strip:
            word = strip_accents(word)
        return word

    def _long_word(self, text: str, b: int, e: int, out: list[tuple[str, int, int]]) -> None:
        """A word longer than ``LONG_WORD``: normalise it whole (in C); a word with no punctuation is one piece."""
        word = text[b:e]
        distinct = distinct_chars(word)
        dropped = "".join(c for c in distinct if is_dropped(c))
        kept = replace_chars(word, dict.fromkeys(dropped, ""))
        if not kept:
            return
        normalized = self.normalize_word(kept)
        if not normalized:
            return
        attach = "".join(c for c in distinct if _attaches(c))
        if any(is_punctuation(c) or c.isspace() for c in distinct_chars(normalized)):
            # Several pieces: the exact per-unit path, with units found by a regular expression.
            self._finish_word(self._units_of(word, b, dropped, attach), out)
            return
        # One piece: it starts at the first unit whose text survives normalisation (a unit that starts with a
        # base character always does), and ends with the last unit.
        units = self._units_of(word, b, dropped, attach, limit=2)
        head = units[0][0]
        first = units[0] if len(units) == 1 or not _attaches(head[0]) or self.normalize_word(head) else units[1]
        out.append((normalized, first[1], b + len(word.rstrip(dropped)) if dropped else e))

    @staticmethod
    def _units_of(word: str, offset: int, dropped: str, attach: str, limit: int | None = None) -> list[list]:
        """:meth:`_units` of ``word`` (at ``offset`` in the text) without a per-character loop (``dropped`` and
        ``attach``: its characters that cleaning drops, and that attach to the one before)."""
        glue = re.escape(attach + dropped)
        base = f"[^{glue}]" if glue else "."
        pattern = re.compile(f"(?s){base}[{glue}]*|[{glue}]+" if glue else "(?s).")
        table = dict.fromkeys(dropped, "")
        units: list[list] = []
        for m in pattern.finditer(word):
            g = m.group()
            kept = replace_chars(g, table) if dropped else g
            if not kept:
                continue
            begin = m.start() + (len(g) - len(g.lstrip(dropped)) if dropped else 0)
            end = m.start() + (len(g.rstrip(dropped)) if dropped else len(g))
            units.append([kept, offset + begin, offset + end])
            if limit is not None and len(units) >= limit:
                break
        return units

    def _finish_word(self, units: list[list], out: list[tuple[str, int, int]]) -> None:
        texts = [normalize("NFC", u[0]) for u in units]
        whole = normalize("NFC", "".join(u[0] for u in units))
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
