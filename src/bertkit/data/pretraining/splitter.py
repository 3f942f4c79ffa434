"""Sentence splitting for pre-training corpora: a fast regular-expression splitter (the default) and ``pysbd``.

:func:`split_paragraph` follows the rules of ``pysbd`` (English, the "Golden Rules" segmenter) that matter in prose,
as a handful of regular expressions run over the whole paragraph rather than rule passes that rewrite it:

- a sentence ends at ``.``, ``!``, ``?`` or a run of them (``?!``), after any closing quotes and brackets, before
  whitespace;
- punctuation inside a pair of quotes (``"..."``, ``“...”``, ``'...'`` after a space, ``‘...’``), brackets,
  parentheses or ``--`` dashes does not end a sentence; the pair does, when it ends in ``.``, ``!``, ``?`` or ``-``
  and the next word is capitalised;
- a known abbreviation's period (``etc.``, ``no.``: pysbd's list) does not end a sentence before a word that is
  not capitalised; a title's (``Mr.``, ``Dr.``, ``St.``) never does; nor does a single letter's (``J. Smith``),
  unless it is ``I`` before a common sentence starter;
- ``!`` before a lowercase word, or ``...`` before anything but a capitalised word, does not end a sentence.

Whitespace inside a sentence is kept as it is. On the shared Gutenberg books it agrees with pysbd on more than 98%
of the sentence boundaries, both ways (:func:`boundary_agreement`; tests/data/test_splitter_agreement.py), at
50-100x its speed: the splitter is then no longer what bounds corpus preparation, the tokenizer is.
``--splitter pysbd`` keeps pysbd itself (with long paragraphs cut first, so its time stays linear).
"""

from __future__ import annotations

import bisect
import re

SPLITTERS = ("regex", "pysbd")
MAX_CHARS = 1 << 16

# pysbd's English abbreviations (pysbd/lang/common/standard.py), lowercased, without their final period
ABBREVIATIONS = frozenset(
    "adj adm adv al ala alta apr arc ariz ark art assn asst attys aug ave bart bld bldg blvd brig bros btw cal calif "
    "capt cl cmdr co col colo comdr con conn corp cpl cres ct d.phil dak dec del dept det dist dr dr.phil dr.philos "
    "drs e.g ens esp esq etc exp expy ext feb fed fla ft fwy fy ga gen gov hon hosp hr hway hwy i.e ia id ida ill inc "
    "ind ing insp is jan jr jul jun kan kans ken ky la lt ltd maj man mar mass may md me med messrs mex mfg mich min "
    "minn miss mlle mm mme mo mont mr mrs ms msgr mssrs mt mtn neb nebr nev no nos nov nr oct ok okla ont op ord ore p "
    "pa pd pde penn penna pfc ph ph.d pl plz pp prof pvt que rd rs ref rep reps res rev rt sask sec sen sens sep sept "
    "sfc sgt sr st supt surg tce tenn tex univ usafa u.s ut va v ver viz vs vt wash wis wisc wy wyo yuk fig".split()
)
# titles: their period never ends a sentence
PREPOSITIVE = frozenset(
    "adm attys brig capt cmdr col cpl det dr gen gov ing lt maj mr mrs ms mt messrs mssrs prof ph rep reps rev sen "
    "sens sgt st supt v vs fig".split()
)
NUMBER_ABBREVIATIONS = frozenset("art ext no nos p pp".split())
SENTENCE_STARTERS = frozenset(
    "A Being Did For He How However I In It Millions More She That The There They We What When Where Who Why".split()
)

_CLOSERS = "'\"\u2019\u201d)\\]"
# a candidate end: the word before it, its final punctuation, closing quotes/brackets, whitespace, the next character
_CANDIDATE = re.compile(r"(\.\.\.|\u2026|[.!?]{1,8})([" + _CLOSERS + r"]{0,8})(\s+|(?=\u2014|--))(?=(\S))")
# spans whose punctuation is protected, as pysbd's BetweenPunctuation
_PROTECTED = [
    re.compile(p)
    for p in (
        r"\"[^\"]*\"",
        r"\u201c[^\u201d]*\u201d",
        r"'(?<=\s')(?:[^']|'[a-zA-Z])*'",
        r"\u2018(?<=\s\u2018)(?:[^\u2019]|\u2019[a-zA-Z])*\u2019",
        r"\([^()]*\)",
        r"\[[^\]]*\]",
        r"--[^-]*--",
    )
]
_LEADING_APOSTROPHE = re.compile(r"'(?<=\s')(?:[^']|'[a-zA-Z])*'\S")
_APOSTROPHE_SPACE = re.compile(r"'\s")
_OPENERS = "\"\u201c'\u2018([-"
_QUOTES = "\"'\u201c\u201d"
# a quotation broken off by a dash and followed by a capitalised word: pysbd ends the sentence there
# pysbd: a parenthesis between two quotations is a sentence of its own
_PARENS_BETWEEN_QUOTES = re.compile(r"[\"\u201d](\s)\([^()]*\)(\s)[\"\u201c]")
_DASH_PAIR = re.compile(r"(?:-|\u2014)[\"'\u201c\u201d]\s(?=[A-Z])")
_WORD = re.compile(r"\w")


def _protected_spans(text: str, apostrophes: bool = False) -> tuple[list[int], list[int]]:
    """Spans whose punctuation is protected, as pysbd's BetweenPunctuation: each kind found on its own (they may
    overlap, as pysbd's passes do), then merged into disjoint (starts, ends). ``apostrophes``: only the kinds that
    also protect a ``'`` (all but straight single quotes)."""
    spans = []
    for opener, pattern in zip(_OPENERS, _PROTECTED):
        if opener == "'" and (
            apostrophes or "'" in text and _LEADING_APOSTROPHE.search(text) and not _APOSTROPHE_SPACE.search(text)
        ):
            continue  # as pysbd: no single-quote spans in a text with a word like 'tis and no closing quote
        if opener in text:
            spans.extend(m.span() for m in pattern.finditer(text) if m.end() - m.start() > 2)
    if not spans:
        return [], []
    spans.sort()
    starts, ends = [spans[0][0]], [spans[0][1]]
    for s, e in spans[1:]:
        if s < ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return starts, ends


def _inside(pos: int, starts: list[int], ends: list[int], strict: bool = True) -> bool:
    """Whether ``pos`` lies inside a protected span (``strict``: not on its closing character)."""
    i = bisect.bisect_right(starts, pos) - 1
    return i >= 0 and pos < ends[i] - strict


def _is_end(word: str, punct: str, closers: str, space: str, nxt: str, after: str) -> bool:
    """Whether ``word`` + ``punct`` + ``closers``, followed by ``space`` and the character ``nxt`` (``after``: the
    next word), ends a sentence."""
    if punct in ("...", "\u2026"):
        return nxt.isupper()
    if closers[:1] in _QUOTES and closers and punct[-1] in "!?":
        return False  # pysbd protects "!" and "?" before a quote (its quotation rule decides, before this)
    if len(punct) > 1 or punct == "?":
        return True
    if punct == "!":  # and "!" before a lowercase word
        return not nxt.islower()
    # a single period
    if closers:
        return space == " " and nxt.isupper() or closers[-1] in ")]" and not nxt.islower()
    bare = word.lstrip("\"'\u2018\u201c([").lower()
    if bare in ABBREVIATIONS:
        if nxt.isupper() and bare not in PREPOSITIVE:
            return after not in ("I", "I'm", "I'll")
        if bare in PREPOSITIVE:
            return False
        if bare in NUMBER_ABBREVIATIONS:
            return not nxt.isdigit() and nxt != "(" and not nxt.islower()
        return False
    if len(bare) == 1 and bare.isalpha():
        return bare == "i" and after in SENTENCE_STARTERS
    if "." in bare and len(bare) <= 6 and all(len(p) <= 2 for p in bare.split(".")):  # p.m, U.S
        return nxt.isupper()
    return True


def split_paragraph(text: str) -> list[str]:
    """The sentences of one paragraph, stripped, by the rules in the module's doc (whitespace inside is kept)."""
    text = text.strip()
    if not text:
        return []
    starts, ends = _protected_spans(text)
    cuts = []  # (end of a sentence, start of the next)
    sentence_start, apostrophe_spans = 0, None
    for m in _CANDIDATE.finditer(text):
        punct, closers, space, nxt = m.groups()
        if len(closers) == 1 and closers in _QUOTES and len(space) == 1 and "A" <= nxt <= "Z":
            # pysbd's quotation-at-end-of-sentence rule, protected or not; but a "'" inside other quotes is not one
            if closers == "'" and apostrophe_spans is None:
                apostrophe_spans = _protected_spans(text, apostrophes=True)
            cut = closers != "'" or not _inside(m.end(2) - 1, *apostrophe_spans, strict=False)
        elif starts and _inside(m.start(1), starts, ends):
            # a parenthesis that opens a sentence and closes here, before a capitalised word, is a sentence
            i = bisect.bisect_right(starts, m.start(1)) - 1
            cut = (
                text[starts[i]] == "("
                and starts[i] == sentence_start
                and m.end(2) == ends[i]
                and len(space) == 1
                and "A" <= nxt <= "Z"
            )
        else:
            after_start = m.end(3)
            space_at = text.find(" ", after_start)
            after = text[after_start : space_at if space_at >= 0 else len(text)]
            word_at = m.start(1)
            if punct == ".":
                word_at = max(text.rfind(" ", 0, word_at), text.rfind("\t", 0, word_at)) + 1
            cut = _is_end(text[word_at : m.start(1)], punct, closers, space, nxt, after)
        if cut:
            cuts.append((m.start(3), m.end(3)))
            sentence_start = m.end(3)
    if "(" in text:
        for m in _PARENS_BETWEEN_QUOTES.finditer(text):
            cuts.extend([(m.start(1), m.end(1)), (m.start(2), m.end(2))])
        cuts.sort()
    if "-" in text or "\u2014" in text:
        cuts.extend((m.end() - 1, m.end()) for m in _DASH_PAIR.finditer(text))
        cuts.sort()
    out, last = [], 0
    for end, start in cuts:
        if end > last:
            out.append(text[last:end])
            last = start
    out.append(text[last:])
    return [s for s in out if s]


def sentence_boundaries(sentences: list[str]) -> set[int]:
    """Where ``sentences`` (one paragraph's) end, as counts of word characters (``\\w``) before each boundary: so
    two splitters that only differ in where a quote, bracket or space goes (pysbd leaves a closing quote or a lone
    ``*`` as a sentence of its own at times) agree. A piece with no word character is merged into the previous one."""
    merged: list[str] = []
    for s in sentences:
        if merged and not _WORD.search(s):
            merged[-1] += s
        else:
            merged.append(s)
    out, n = set(), 0
    for s in merged[:-1]:
        n += len(_WORD.findall(s))
        out.add(n)
    return out


def boundary_agreement(reference: list[list[str]], ours: list[list[str]]) -> tuple[float, float]:
    """(recall, precision) of ``ours``' sentence boundaries against ``reference``'s, paragraph by paragraph."""
    ref_n = our_n = common = 0
    for r, o in zip(reference, ours, strict=True):
        a, b = sentence_boundaries(r), sentence_boundaries(o)
        ref_n, our_n, common = ref_n + len(a), our_n + len(b), common + len(a & b)
    return common / max(ref_n, 1), common / max(our_n, 1)


def split_paragraphs(paragraphs: list[str], splitter: str = "regex") -> list[str]:
    """Sentences of each paragraph, in order, empty ones dropped; ``splitter`` is ``regex`` or ``pysbd``. A
    paragraph longer than ``MAX_CHARS`` is cut first (after a sentence end, else a space), so the time stays
    linear whatever the text."""
    if splitter == "regex":
        out = []
        for p in paragraphs:
            for piece in cut_paragraph(p, MAX_CHARS) if len(p) > MAX_CHARS else (p,):
                out.extend(split_paragraph(piece))
        return out
    if splitter == "pysbd":
        return split_sentences(paragraphs)
    raise ValueError(f"splitter must be one of {SPLITTERS}, got {splitter!r}")


# ------------------------------------------------------------------------------------------------ pysbd


_SEGMENTER = None


def segmenter():
    """The one pysbd segmenter (English rules, text kept as it is), built on first use."""
    global _SEGMENTER
    if _SEGMENTER is None:
        import pysbd

        _SEGMENTER = pysbd.Segmenter(language="en", clean=False)
    return _SEGMENTER


_CUT_AT = re.compile(r"[.!?]['\"\u2019\u201d)\]]*\s")
# pysbd's time grows with the square of a paragraph's length: longer paragraphs are cut into pieces first
PYSBD_MAX_CHARS = 4000


def cut_paragraph(paragraph: str, limit: int = PYSBD_MAX_CHARS) -> list[str]:
    """``paragraph`` in pieces of at most ``limit`` characters: cut after the last sentence end in the second half of
    a window, else at its last whitespace, else at the limit (text with no spaces)."""
    pieces = []
    while len(paragraph) > limit:
        window = paragraph[:limit]
        cut = max((m.end() for m in _CUT_AT.finditer(window, limit // 2)), default=0)
        if not cut:
            space = max(window.rfind(" "), window.rfind("\t"), window.rfind("\n"))
            cut = space + 1 if space >= limit // 2 else limit
        pieces.append(paragraph[:cut])
        paragraph = paragraph[cut:]
    pieces.append(paragraph)
    return pieces


def split_sentences(paragraphs: list[str]) -> list[str]:
    """Sentences of each paragraph, with pysbd (English rules), in order; empty ones dropped. Paragraphs longer than
    ``PYSBD_MAX_CHARS`` are cut first (:func:`cut_paragraph`)."""
    sentences = []
    for paragraph in paragraphs:
        for piece in cut_paragraph(paragraph) if len(paragraph) > PYSBD_MAX_CHARS else (paragraph,):
            for s in segmenter().segment(piece):
                s = s.strip()
                if s:
                    sentences.append(s)
    return sentences


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text`` (pysbd, English rules)."""
    spans, pos = [], 0
    for sentence in segmenter().segment(text):
        s = sentence.strip()
        if not s:
            continue
        start = text.find(s, pos)
        if start < 0:  # pysbd normalised something: fall back to the running position
            start = pos
        end = start + len(s)
        spans.append((start, end))
        pos = end
    return spans or [(0, len(text))]
