"""Vocabulary extension: which N strings to add to a model's vocabulary for a user's corpus, and where they go.

*What is chosen.* The corpus is cut into words exactly as the model's tokenizer cuts it (Google's basic tokenization
for WordPiece, the ``tokenizer.json``'s normaliser and pre-tokenizer for BPE), and each distinct word is split into
pieces by the tokenizer's own algorithm. A string is worth what its addition saves: the number of pieces the corpus
loses when the tokenizer, given the string, splits every word again (frequency times pieces saved per word, summed).

- WordPiece (:func:`choose_wordpiece`): first *coverage*: a word holding a character the vocabulary lacks (in the
  form it needs: word-initial, or ``##`` inside a word) becomes [UNK] and loses all its text, so the missing
  characters come first, most frequent first (seen at least ``min_saving`` times). Then *savings*, greedily: the
  candidates are the strings spanned by two or more consecutive pieces of a word as it is split now (whole words and
  ``##`` continuations alike), each estimated at frequency x (pieces spanned - 1). The best estimate is re-counted
  exactly by splitting again every word that holds it (greedy longest-match-first can also make a split longer, or
  turn a word into [UNK]); it is taken when its exact saving still beats every other candidate, and the words it
  changed update the estimates of the rest. A word that is [UNK] counts as its characters.
- Byte-level BPE (:func:`choose_bpe`): a new token is a new merge, appended after the file's merges, so it applies
  only where the file's merges left its two parts side by side. That is BPE training continued on the user's corpus:
  the most frequent adjacent pair in the words as they are tokenized now, whose saving is exactly its count.

*Where they go* (:func:`place_tokens`): WordPiece fills Google's ``[unusedN]`` slots first, then grows the vocabulary;
a ``tokenizer.json`` takes the ids after its highest one (a model's embedding rows beyond its tokenizer, such as
ModernBERT's padding rows, are then reused first, as the model surgery in ``bertkit.resize`` does).

Each chosen token carries the ids of the pieces it replaces: its old tokenization (WordPiece: the string split by
the old vocabulary; BPE: the old tokens it is merged from). A new embedding row starts as their mean.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.errors import InputError

UNUSED_RE = re.compile(r"\[unused\d+\]")
MAX_RUN = 12  # the most pieces of a word one candidate spans


@dataclass
class Choice:
    """One string chosen for the vocabulary.

    ``token``: as the vocabulary writes it (``##`` for a WordPiece continuation; a BPE token in its byte-level form);
    ``saving``: pieces it saved on the corpus when chosen (for a coverage character: the word occurrences it appears
    in that were [UNK]); ``pieces``: ids, in the old vocabulary, of the pieces it replaces; ``parts``: a BPE merge's
    two tokens (None for WordPiece); ``id`` and ``slot`` (the ``[unusedN]`` it took, if any) are set by
    :func:`place_tokens`."""

    token: str
    saving: int
    pieces: list[int]
    parts: tuple[str, str] | None = None
    id: int = -1
    slot: str | None = None


# ------------------------------------------------------------------------------------------------------- the corpus


def count_words(tokenizer: Any, lines: Iterable[str]) -> Counter:
    """Distinct words of ``lines`` -> frequency, cut as ``tokenizer`` cuts text before its model splits words."""
    counts: Counter = Counter()
    if hasattr(tokenizer, "basic_tokenize"):  # WordPiece: Google's basic tokenization
        for line in lines:
            counts.update(tokenizer.basic_tokenize(line))
        return counts
    rust = tokenizer._rust
    for line in lines:
        text = rust.normalizer.normalize_str(line) if rust.normalizer is not None else line
        words = rust.pre_tokenizer.pre_tokenize_str(text) if rust.pre_tokenizer is not None else [(text, None)]
        counts.update(w for w, _ in words)
    return counts


# -------------------------------------------------------------------------------------------------------- WordPiece


class WordPieceSplitter:
    """Google's greedy longest-match-first WordPiece on one word, over a vocabulary that may grow.

    ``split(word)`` -> the pieces, or None when the word becomes [UNK] (too long, or a position no piece matches)."""

    def __init__(self, vocab: Iterable[str], max_input_chars_per_word: int = 200) -> None:
        self.vocab = set(vocab)
        self._inner = {t[2:] for t in self.vocab if t.startswith("##")}  # "##x" in vocab <=> "x" in _inner
        self.max_chars = max_input_chars_per_word
        self.longest = max((len(t) - 2 if t.startswith("##") else len(t) for t in self.vocab), default=1)

    def add(self, token: str) -> None:
        self.vocab.add(token)
        if token.startswith("##"):
            self._inner.add(token[2:])
        self.longest = max(self.longest, len(token) - 2 if token.startswith("##") else len(token))

    def discard(self, token: str) -> None:
        self.vocab.discard(token)
        if token.startswith("##"):
            self._inner.discard(token[2:])

    def split(self, word: str, continuation: bool = False) -> list[str] | None:
        """Pieces of ``word``; ``continuation``: the word is the inside of a longer one (its first piece is ``##``).
        A word's first piece is looked up as it is (a word may begin with "##"), the others without their "##" in
        ``_inner`` (no string is built per try)."""
        n = len(word)
        if n > self.max_chars:
            return None
        pieces, start, longest = [], 0, self.longest
        inner = continuation
        table = self._inner if inner else self.vocab
        while start < n:
            end = min(n, start + longest)
            while end > start and word[start:end] not in table:
                end -= 1
            if end == start:
                return None
            pieces.append("##" + word[start:end] if inner else word[start:end])
            start, inner, table = end, True, self._inner
        return pieces


def _cost(word: str, pieces: list[str] | None) -> int:
    """Pieces of a word; a word that is [UNK] counts as its characters (it lost them all)."""
    return len(word) if pieces is None else len(pieces)


def _runs(word: str, pieces: list[str] | None) -> Iterable[tuple[str, int]]:
    """(candidate, pieces saved) for each run of 2+ consecutive pieces of ``word``."""
    if pieces is None or len(pieces) < 2:
        return
    bounds = [0]
    for p in pieces:
        bounds.append(bounds[-1] + (len(p) - 2 if p.startswith("##") else len(p)))
    for i in range(len(pieces) - 1):
        for j in range(i + 2, min(len(pieces), i + MAX_RUN) + 1):
            s = word[bounds[i] : bounds[j]]
            yield (s if i == 0 else "##" + s), j - i - 1


class _Corpus:
    """The distinct words, their frequencies and current splits (with each piece's start -> end), and a search index
    (all words in one string)."""

    def __init__(self, counts: Counter, splitter: WordPieceSplitter) -> None:
        self.words = list(counts)
        self.freq = [counts[w] for w in self.words]
        self.splitter = splitter
        self.pieces = [splitter.split(w) for w in self.words]
        self.spans = [_spans(p) for p in self.pieces]
        self.changed_at = [0] * len(self.words)  # the vocabulary size (in chosen tokens) at a word's last new split
        self.version = 0
        self.starts, pos = [], 0
        for w in self.words:
            self.starts.append(pos)
            pos += len(w) + 1
        self.text = " ".join(self.words)  # words hold no spaces
        self._holding: dict[str, dict[int, list[int]]] = {}

    def holding(self, token: str) -> dict[int, list[int]]:
        """Word index -> positions where ``token`` could match: a ``##`` token inside a word, another at its start
        (cached: the words do not change, only their splits)."""
        found = self._holding.get(token)
        if found is None:
            inner = token.startswith("##")
            s = token[2:] if inner else token
            found, k = {}, self.text.find(s)
            while k >= 0:
                w = bisect.bisect_right(self.starts, k) - 1
                if (k > self.starts[w]) == inner:
                    found.setdefault(w, []).append(k - self.starts[w])
                k = self.text.find(s, k + 1)
            self._holding[token] = found
        return found

    def resplit(self, token: str) -> tuple[int, dict[int, list[str] | None]]:
        """(exact saving, word index -> new split) if ``token`` were added to the vocabulary. Greedy longest-match
        only changes a word where the token starts at one of its pieces' starts and is longer than that piece (or a
        word that is [UNK]): only those are split again."""
        n = len(token) - 2 if token.startswith("##") else len(token)
        self.splitter.add(token)
        saving, changed = 0, {}
        try:
            for w, positions in self.holding(token).items():
                spans = self.spans[w]
                if spans is not None and not any(spans.get(p, n) < n for p in positions):
                    continue
                new = self.splitter.split(self.words[w])
                if new != self.pieces[w]:
                    changed[w] = new
                    saving += self.freq[w] * (_cost(self.words[w], self.pieces[w]) - _cost(self.words[w], new))
        finally:
            self.splitter.discard(token)
        return saving, changed

    def still_exact(self, token: str, counted_at: int) -> bool:
        """Whether a saving counted when ``counted_at`` tokens were chosen holds now: no word holding ``token``
        was split anew since."""
        changed_at = self.changed_at
        return all(changed_at[w] <= counted_at for w in self.holding(token))

    def commit(self, token: str, changed: dict[int, list[str] | None]) -> None:
        """Add ``token`` to the vocabulary, with the new splits :meth:`resplit` found."""
        self.splitter.add(token)
        self.version += 1
        for w, new in changed.items():
            self.pieces[w] = new
            self.spans[w] = _spans(new)
            self.changed_at[w] = self.version


def _spans(pieces: list[str] | None) -> dict[int, int] | None:
    """Each piece's start -> its length, in characters of the word (None for an [UNK] word)."""
    if pieces is None:
        return None
    out, pos = {}, 0
    for k, p in enumerate(pieces):
        n = len(p) - 2 if k > 0 else len(p)
        out[pos] = n
        pos += n
    return out


def _coverage(counts: Counter, splitter: WordPieceSplitter, n: int, min_count: int) -> list[tuple[str, int]]:
    """The characters (in the form each word needs) that [UNK] words lack, most frequent first (all words count)."""
    vocab, missing = splitter.vocab, Counter()
    for word, freq in counts.items():
        if len(word) <= splitter.max_chars and splitter.split(word) is None:
            forms = {c if i == 0 else "##" + c for i, c in enumerate(word)}
            missing.update({f: freq for f in forms if f not in vocab})
    return [(t, c) for t, c in missing.most_common() if c >= min_count][:n]


def choose_wordpiece(
    counts: Counter,
    vocab: dict[str, int],
    n: int,
    max_input_chars_per_word: int = 200,
    min_saving: int = 2,
    unk_token: str = "[UNK]",
    min_word_count: int = 2,
) -> list[Choice]:
    """The up to ``n`` strings to add to a WordPiece ``vocab`` for a corpus of word ``counts`` (see the module's
    docstring: missing characters first, then the greatest exact savings, greedily). Stops early when nothing saves
    ``min_saving`` pieces. Only words seen ``min_word_count`` times take part (words seen once are most of a corpus's
    distinct words but a small part of its text, and they would make each step several times slower)."""
    splitter = WordPieceSplitter(vocab, max_input_chars_per_word)
    old = WordPieceSplitter(vocab, max_input_chars_per_word)
    corpus = _Corpus(Counter({w: c for w, c in counts.items() if c >= min_word_count}), splitter)
    chosen: list[tuple[str, int]] = []

    def accept(token: str, saving: int, changed: dict[int, list[str] | None]) -> None:
        chosen.append((token, saving))
        before: dict[str, int] = {}
        for w, new in changed.items():
            for cand, s in _runs(corpus.words[w], corpus.pieces[w]):
                before.setdefault(cand, estimate[cand])
                estimate[cand] -= corpus.freq[w] * s
            for cand, s in _runs(corpus.words[w], new):
                before.setdefault(cand, estimate.get(cand, 0))
                estimate[cand] = estimate.get(cand, 0) + corpus.freq[w] * s
        corpus.commit(token, changed)
        for cand, value in before.items():  # a lower estimate is re-queued when its old entry comes up
            if estimate[cand] > value:
                heapq.heappush(heap, (-estimate[cand], cand, -1))

    for token, count in _coverage(counts, splitter, n, min_saving):
        chosen.append((token, count))
        corpus.commit(token, corpus.resplit(token)[1])
    estimate: dict[str, int] = {}
    for word, freq, pieces in zip(corpus.words, corpus.freq, corpus.pieces):
        for cand, s in _runs(word, pieces):
            estimate[cand] = estimate.get(cand, 0) + freq * s
    # (-value, candidate, -1 for an estimate | the corpus.version an exact saving was counted at)
    heap = [(-v, c, -1) for c, v in estimate.items()]
    heapq.heapify(heap)
    while heap and len(chosen) < n:
        value, cand, counted_at = heapq.heappop(heap)
        if -value < min_saving:
            break
        if cand in splitter.vocab:
            continue
        if counted_at < 0 and -value != estimate.get(cand):  # a stale estimate: queued again at its value now
            if min_saving <= estimate.get(cand, 0) < -value:
                heapq.heappush(heap, (-estimate[cand], cand, -1))
            continue
        if counted_at >= 0 and corpus.still_exact(cand, counted_at):  # exact now, and still the best: take it
            accept(cand, -value, corpus.resplit(cand)[1])
            continue
        saving, _ = corpus.resplit(cand)
        if saving >= min_saving:
            heapq.heappush(heap, (-saving, cand, corpus.version))
    return [
        Choice(
            t, s, [vocab[p] for p in (old.split(t[2:], True) if t.startswith("##") else old.split(t)) or [unk_token]]
        )
        for t, s in chosen
    ]


# ------------------------------------------------------------------------------------------------- byte-level BPE


def bpe_spec(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``model`` of a ``tokenizer.json`` this module can extend (a BPE), or an InputError naming ``where``."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise InputError(
            f"{where}: vocabulary extension handles WordPiece (vocab.txt) and BPE tokenizer.json files; this one is "
            f"{model.get('type')!r}"
        )
    if model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise InputError(f"{where}: a BPE with dropout or sub-word marks is not supported by vocabulary extension")
    return model


def choose_bpe(counts: Counter, tokenizer: Any, n: int, min_saving: int = 2) -> list[Choice]:
    """Up to ``n`` new merges for a BPE ``tokenizer`` (``FastTokenizer``) on a corpus of pre-tokenized word
    ``counts``: BPE training continued from the file's merges, each merge saving exactly its pair's count."""
    rust = tokenizer._rust
    vocab = rust.get_vocab(with_added_tokens=True)
    words = [[t.value for t in rust.model.tokenize(w)] for w in counts]
    freq = list(counts.values())
    pairs: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for k, pieces in enumerate(words):
        for pair in zip(pieces, pieces[1:]):
            pairs[pair] += freq[k]
            where.setdefault(pair, set()).add(k)
    heap = [(-c, pair) for pair, c in pairs.items()]
    heapq.heapify(heap)
    expand: dict[str, list[int]] = {}
    chosen: list[Choice] = []
    while heap and len(chosen) < n:
        count, pair = heapq.heappop(heap)
        if -count != pairs.get(pair, 0):
            continue  # stale
        if -count < min_saving:
            break
        merged = pair[0] + pair[1]
        del pairs[pair]
        if merged in vocab or merged in expand:
            continue  # the token exists (reachable by another path): it is not a new row
        pieces = [i for p in pair for i in expand.get(p, [vocab.get(p, -1)])]
        expand[merged] = pieces
        choice = Choice(merged, 0, pieces, parts=pair)
        chosen.append(choice)
        touched: set[tuple[str, str]] = set()
        for k in where.pop(pair, ()):
            old = words[k]
            for p in zip(old, old[1:]):
                pairs[p] -= freq[k]
                touched.add(p)
            words[k] = new = _merge(old, pair, merged)
            choice.saving += freq[k] * (len(old) - len(new))  # not the pair's count where it overlaps itself (a a a)
            for p in zip(new, new[1:]):
                pairs[p] += freq[k]
                where.setdefault(p, set()).add(k)
                touched.add(p)
        for p in touched - {pair}:
            if pairs.get(p, 0) > 0:
                heapq.heappush(heap, (-pairs[p], p))
    return chosen


def _merge(pieces: list[str], pair: tuple[str, str], merged: str) -> list[str]:
    """``pieces`` with each occurrence of ``pair`` (left to right) merged, as BPE applies one merge."""
    out, i = [], 0
    while i < len(pieces):
        if i + 1 < len(pieces) and pieces[i] == pair[0] and pieces[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(pieces[i])
            i += 1
    return out


# -------------------------------------------------------------------------------------------------------- placing


def place_tokens(choices: Sequence[Choice], vocab: dict[str, int], use_unused: bool = True) -> dict[str, int]:
    """Give each choice its id (WordPiece: the ``[unusedN]`` slots in id order first, then new ids after the last);
    return the new vocabulary (token -> id). ``vocab`` is not changed."""
    new = dict(vocab)
    slots = sorted((i, t) for t, i in vocab.items() if UNUSED_RE.fullmatch(t)) if use_unused else []
    next_id = max(vocab.values(), default=-1) + 1
    for k, choice in enumerate(choices):
        if k < len(slots):
            choice.id, choice.slot = slots[k]
            del new[choice.slot]
        else:
            choice.id, next_id = next_id, next_id + 1
        new[choice.token] = choice.id
    return new


def extend_bpe_json(spec_text: str, choices: Sequence[Choice], where: str) -> str:
    """The ``tokenizer.json`` text with each choice as a new token of the BPE vocabulary (its ``id``) and a new
    merge after the file's merges (in the file's own spelling of merges: ``"a b"`` or ``["a", "b"]``)."""
    spec = json.loads(spec_text)
    model = bpe_spec(spec, where)
    merges = model.setdefault("merges", [])
    as_text = bool(merges) and isinstance(merges[0], str)
    for choice in choices:
        assert choice.parts is not None and choice.id >= 0
        model["vocab"][choice.token] = choice.id
        merges.append(" ".join(choice.parts) if as_text else list(choice.parts))
    return json.dumps(spec, ensure_ascii=False)
