"""Pre-training data: tokenized memmap shards, MLM + NSP instances, masking, and deterministic batches.

Pipeline (as Google's ``create_pretraining_data.py``, stored so a corpus larger than RAM streams):

1. :func:`bertkit.data.pretraining.prepare.prepare_corpus` tokenizes documents (lists of sentences) in worker processes
   and writes shards (:mod:`bertkit.data.pretraining.shards`) of ``*.tokens.npy`` (uint16, or int32 for vocabularies
   over 65535), ``*.sentences.npy`` (token offset of every sentence, S+1) and ``*.documents.npy`` (sentence offset of
   every document, D+1), plus ``meta.json`` last as the commit marker. A small held-out part (whole documents when there
   are many; else the last sentences of each long document) goes to the ``eval`` shard, never trained on.
2. :class:`ShardLayout` lays out ``[CLS] A [SEP] B [SEP]`` instances of one shard as token *ranges* (a_start, a_end,
   b_start, b_end, next_sentence_label). A and B are runs of whole sentences, so each is a contiguous range of the
   shard's tokens, and truncation only moves an end. Chunks are cut vectorised: the sentences of a document that start
   in one cell of a ``max_tokens`` grid; only their starts are stored. Each instance is drawn on demand from a
   generator seeded by (seed, epoch or copy, shard, instance): a ``short_seq_prob`` shorter target, then B is the
   true continuation (label 0, IsNext) or a span of another document of the shard (label 1, NotNext), 50/50; overlong
   pairs lose tokens from the longer segment at random ends. Without NSP an instance is one segment ``[CLS] A [SEP]``
   (label -1). :func:`create_instances` materialises a layout (tests, inspection).
3. :func:`~bertkit.data.pretraining.masking.mask_instance` picks ``round(len * mask_prob)`` positions (at least 1,
   at most ``max_predictions``) among non-special tokens by the options' ``mask_strategy`` (the registry of
   :mod:`bertkit.data.pretraining.masking`: token, whole-word, ...); 80% become [MASK], 10% a random non-special
   token, 10% stay. [CLS], [SEP] and [PAD] are never picked. The budget recipe's data (one segment, no NSP:
   :attr:`PretrainingData.vectorised`) is laid out a whole batch at once by array passes, its echoes and token masks
   drawn by counter-based hashes of (seed, epoch or copy, instance, position) (:mod:`~bertkit.data.pretraining.draws`:
   :func:`~bertkit.data.pretraining.draws.mask_rows`, the same rule): a batch of 1,024 x 32 tokens in a few
   milliseconds where one generator per instance took 100 ms, so that a worker keeps ahead of a graphed GPU step.
   The other strategies mask its rows one by one, each instance with its own generator.
4. :class:`PretrainingData` serves batches by (epoch, index) as pure functions of the seed: the instance layout and
   order of an epoch, and every mask, come from generators or hashes seeded by (seed, epoch or copy, shard or
   instance). So a run resumes from its (epoch, index) position with no data state beyond those two numbers, and
   each rank of a distributed run reads its own strided part of the order. The order visits the shards in a permuted
   sequence, ``SHUFFLE_SHARDS`` at a time, shuffling those shards' instances together by a Feistel permutation (no index
   array): a rank holds one count per shard and the chunk starts of about two windows, whatever the corpus size, and
   an epoch starts after one vectorised pass over the sentence offsets. Masking is ``dynamic`` (fresh layout and masks
   each epoch) or ``static`` (``dupe_factor`` fixed copies, cycled).

Differences from Google's script, on purpose: the short-sequence target is re-drawn per instance rather than per
document (books are single documents here); a one-sentence chunk can still be an IsNext pair, split inside the
sentence, which keeps NSP at 50/50; the random document comes from the same shard; chunks come from a fixed grid
rather than a greedy fill, and a NotNext pair's unused sentences are not put back into the stream, so one epoch's A
and IsNext B cover about 2/3 of the text rather than 9/10 (the rest of each batch is B text drawn from the shard,
and the layout is drawn afresh each epoch: a few epochs cover all of it; tests/unit/test_instance_layout.py).
"""

from __future__ import annotations

import os
import pickle
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.pretraining.draws import couple_twins, mask_rows, splitmix
from bertkit.data.pretraining.echoes import ECHO_KEEP, ECHO_MASKS, draw_echoes, echo_clash, echo_refusal
from bertkit.data.pretraining.masking import (  # noqa: F401 (public here too)
    NO_LABEL,
    STRATEGIES,
    VocabInfo,
    mask_instance,
)
from bertkit.data.pretraining.shards import META_NAME, SHARD_FORMAT, file_sha256, read_meta  # noqa: F401 (public here too)
from bertkit.errors import InputError, PretrainError

SHUFFLE_SHARDS = 16  # shards whose instances an epoch shuffles together (see PretrainingData.ids_at)


# --------------------------------------------------------------------------------------------- shards


@dataclass
class Shard:
    """One shard's memory-mapped arrays (read lazily by the OS, never loaded whole)."""

    name: str
    tokens: np.ndarray  # [N] uint16/int32
    sentences: np.ndarray  # [S+1] int64 token offsets
    documents: np.ndarray  # [D+1] int64 sentence offsets

    @classmethod
    def open(cls, directory: str | os.PathLike, name: str) -> Shard:
        directory = Path(directory)
        arrays = []
        for part in ("tokens", "sentences", "documents"):
            path = directory / f"{name}.{part}.npy"
            try:
                arrays.append(np.load(path, mmap_mode="r"))
            except (OSError, ValueError) as e:
                raise InputError(f"{path}: unreadable shard ({e}); delete {directory} to rebuild it") from None
        return cls(name, *arrays)


# --------------------------------------------------------------------------------------------- instances


def _chunk_starts(shard: Shard, max_tokens: int) -> np.ndarray:
    """First sentence of every chunk of one shard, ``[N]`` int64, vectorised: a chunk is the run of a document's
    sentences that start inside one cell of a grid of ``max_tokens`` tokens laid from the document's start (so, like
    a greedy fill, only a document's last chunk is short). Every document start begins a chunk."""
    sent = np.asarray(shard.sentences, dtype=np.int64)
    docs = np.asarray(shard.documents, dtype=np.int64)
    n_sent = len(sent) - 1
    if n_sent <= 0:
        return np.zeros(0, dtype=np.int64)
    cell = (sent[:-1] - np.repeat(sent[docs[:-1]], np.diff(docs))) // max_tokens  # [S]
    new = np.empty(n_sent, dtype=bool)
    new[0] = True
    np.not_equal(cell[1:], cell[:-1], out=new[1:])
    new[docs[:-1][docs[:-1] < n_sent]] = True
    return np.flatnonzero(new)


def _popcount_bits(rng: random.Random, n: int) -> int:
    """How many of ``n`` fair coin flips came up heads (a Binomial(n, 1/2) draw)."""
    return bin(rng.getrandbits(n)).count("1") if n > 0 else 0


def _fit(rng: random.Random, a_lo: int, a_hi: int, b_lo: int, b_hi: int, m: int) -> tuple[int, int, int, int]:
    """A and B truncated at random ends until ``len(A) + len(B) <= m`` (Google's one-token loop, in closed form: the
    longer one loses tokens until both are equal, then B and A alternate, B first)."""
    la, lb = a_hi - a_lo, b_hi - b_lo
    excess = la + lb - m
    if excess > 0:
        first = min(excess, abs(la - lb))
        rest = excess - first
        cut_a = (first if la > lb else 0) + rest // 2
        cut_b = (first if la <= lb else 0) + (rest + 1) // 2
        front_a, front_b = _popcount_bits(rng, cut_a), _popcount_bits(rng, cut_b)
        a_lo, a_hi = a_lo + front_a, a_hi - (cut_a - front_a)
        b_lo, b_hi = b_lo + front_b, b_hi - (cut_b - front_b)
    return a_lo, a_hi, b_lo, b_hi


class ShardLayout:
    """One shard's instances for one layout key (an epoch, or a static copy), built lazily.

    Only the chunk starts are stored (``[N]`` int64, vectorised by :func:`_chunk_starts`, the same for every key);
    instance ``k`` is drawn
    when asked from a generator seeded by (seed, key, shard, k): its short-sequence target, the A/B split, IsNext or
    a random B from another document of the shard, and the truncation. So an instance costs microseconds and no
    table of the whole corpus is ever held."""

    def __init__(
        self,
        shard: Shard,
        max_seq_length: int,
        short_seq_prob: float,
        nsp: bool,
        seed: str,
        starts: np.ndarray | None = None,
        pairs: bool = False,
    ):
        self.shard, self.short_seq_prob, self.nsp, self.seed = shard, short_seq_prob, nsp, seed
        self.pairs = nsp or pairs
        self.max_tokens = max_seq_length - (3 if self.pairs else 2)
        if self.max_tokens < 2:
            raise InputError(f"max_seq_length {max_seq_length} is too short for an instance")
        self.starts = _chunk_starts(shard, self.max_tokens) if starts is None else starts
        # plain ndarray views of the memmaps: indexing and slicing them skips np.memmap's per-access bookkeeping
        self._sent, self._docs = np.asarray(shard.sentences), np.asarray(shard.documents)
        self.n_sentences = len(shard.sentences) - 1
        self.n_docs = len(shard.documents) - 1

    def __len__(self) -> int:
        return len(self.starts)

    def instance(self, k: int) -> tuple[int, int, int, int, int]:
        """(a_start, a_end, b_start, b_end, label) of instance ``k``: token ranges of the shard; label 0 IsNext,
        1 NotNext, -1 without NSP (B empty, or with ``pairs`` the true continuation from a sentence boundary)."""
        sent, docs, m = self._sent, self._docs, self.max_tokens
        rng = random.Random(f"bertkit-instance/{self.seed}/{k}")
        c0 = int(self.starts[k])
        c1 = int(self.starts[k + 1]) if k + 1 < len(self.starts) else self.n_sentences
        lo = int(sent[c0])
        goal = rng.randint(2, m) if rng.random() < self.short_seq_prob else m
        e = c1
        if goal < m:  # a short instance: the chunk's first sentences that reach the target
            e = min(c1, c0 + 1 + int(np.searchsorted(sent[c0 + 1 : c1 + 1], lo + goal)))
        n = e - c0  # sentences in the instance
        if not self.nsp:
            a_hi = int(sent[c0 + rng.randint(1, n - 1)]) if self.pairs and n >= 2 else lo
            if not lo < a_hi < int(sent[e]):  # one segment: one sentence, or an empty A or B
                return lo, min(int(sent[e]), lo + m), 0, 0, -1
            return (*_fit(rng, lo, a_hi, a_hi, int(sent[e]), m), -1)
        is_random = rng.random() < 0.5
        if is_random or n >= 2:
            a_lo, a_hi = lo, int(sent[c0 + (rng.randint(1, n - 1) if n >= 2 else 1)])
        else:  # IsNext from a single sentence: split it inside
            a_lo, whole = lo, int(sent[e])
            if whole - a_lo < 2:
                is_random, a_hi = True, whole
            else:
                a_hi = rng.randint(a_lo + 1, whole - 1)
        if is_random:
            goal_b = max(1, goal - (a_hi - a_lo))
            d = int(np.searchsorted(docs, c0, side="right")) - 1
            other = d
            for _ in range(10):
                other = rng.randint(0, self.n_docs - 1)
                if other != d or self.n_docs == 1:
                    break
            o_lo, o_hi = int(docs[other]), int(docs[other + 1])
            j = rng.randint(o_lo, o_hi - 1)
            b_lo = int(sent[j])
            b_hi = int(sent[min(o_hi, j + 1 + int(np.searchsorted(sent[j + 1 : o_hi + 1], b_lo + goal_b)))])
        else:
            b_lo, b_hi = a_hi, int(sent[e])
        if b_hi <= b_lo and a_hi - a_lo >= 2:  # empty sentences only: B is A's second half
            mid = a_lo + (a_hi - a_lo) // 2
            a_hi, b_lo, b_hi, is_random = mid, mid, a_hi, False
        return (*_fit(rng, a_lo, a_hi, b_lo, b_hi, m), int(is_random))

    def table(self) -> np.ndarray:
        """Every instance, ``[N, 5]`` int64 (for tests and inspection: training never builds it)."""
        return np.asarray([self.instance(k) for k in range(len(self))], dtype=np.int64).reshape(-1, 5)


def create_instances(
    shard: Shard, max_seq_length: int, short_seq_prob: float, nsp: bool, seed: str | int = 0, pairs: bool = False
) -> np.ndarray:
    """Instances of one shard as token ranges ``[N, 5]``: (a_start, a_end, b_start, b_end, label).

    With NSP, label 0 = IsNext, 1 = NotNext, and ``len(A) + len(B) + 3 <= max_seq_length``; without, B is empty,
    label -1 and ``len(A) + 2 <= max_seq_length``, or with ``pairs`` (``segments="pair"``) B is the true
    continuation from a random sentence boundary where the instance has two sentences or more, label -1 and
    ``len(A) + len(B) + 3 <= max_seq_length``. Materialises :class:`ShardLayout` (which training reads lazily)."""
    return ShardLayout(shard, max_seq_length, short_seq_prob, nsp, str(seed), pairs=pairs).table()


def permute(positions: np.ndarray, n: int, key: list[int]) -> np.ndarray:
    """A pseudo-random permutation of ``[0, n)`` evaluated at ``positions``, without materialising it: a 4-round
    Feistel network over the next even power of two, with values that land at or past ``n`` walked on until they
    fall inside (cycle walking), which keeps it a bijection of ``[0, n)``. ``key`` seeds the round keys."""
    positions = np.asarray(positions, dtype=np.int64)
    if n <= 1:
        return positions.copy()
    bits = max(2, int(n - 1).bit_length())
    bits += bits % 2
    half = np.uint64(bits // 2)
    low = np.uint64((1 << (bits // 2)) - 1)
    round_keys = np.random.default_rng(key).integers(0, 1 << 63, size=4, dtype=np.uint64)
    x = positions.astype(np.uint64)
    todo = np.arange(len(x))
    with np.errstate(over="ignore"):
        while len(todo):
            y = x[todo]
            left, right = y >> half, y & low
            for k in round_keys:
                left, right = right, left ^ (splitmix(right ^ k) & low)
            x[todo] = (left << half) | right
            todo = todo[x[todo] >= np.uint64(n)]
    return x.astype(np.int64)


# --------------------------------------------------------------------------------------------- batches

HONEST_MIX = (1.0, 0.0, 0.0)  # held-out inputs: every chosen position [MASK]
NSP_HELP = "next-sentence prediction on [CLS] A [SEP] B [SEP] pairs (paper)"  # --nsp's
SEGMENTS = ("one", "pair")  # an instance without NSP: one run of sentences, or two split at a sentence boundary
SEGMENTS_HELP = (  # --segments'
    "without NSP, what an instance holds: one: [CLS] A [SEP], a run of whole sentences; pair: [CLS] A [SEP] B [SEP], "
    "the same run split at a random sentence boundary (BERT's IsNext format without its loss), so a model sees the "
    "layout of the sentence-pair tasks it will be fine-tuned on"
)


def parse_mask_mix(text: str) -> tuple[float, float, float]:
    """``"80/10/10"`` -> (0.8, 0.1, 0.1): the shares of chosen positions given [MASK], a random token, or kept."""
    try:
        parts = tuple(float(x) / 100 for x in str(text).split("/"))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0 or abs(sum(parts) - 1) > 1e-6:
        raise PretrainError(
            f"--mask-mix must be three percentages MASK/RANDOM/KEEP summing to 100 (e.g. 80/10/10), got {text!r}"
        )
    return parts  # type: ignore[return-value]


@dataclass
class DataOptions:
    max_seq_length: int = 128
    batch_size: int = 32
    nsp: bool = True
    mask_prob: float = 0.15
    max_predictions: int | None = None  # default ceil(max_seq_length * mask_prob)
    mask_strategy: str = "token"  # a name of masking.STRATEGIES
    short_seq_prob: float = 0.1
    masking: str = "dynamic"  # or "static"
    dupe_factor: int = 5  # static masking: fixed copies, cycled over epochs
    seed: int = 0
    mask_mix: tuple[float, float, float] = (0.8, 0.1, 0.1)  # training inputs of chosen positions: mask/random/keep
    segments: str = "one"  # without NSP: "one" ([CLS] A [SEP]) or "pair" ([CLS] A [SEP] B [SEP], B the true next)
    echo_share: float = 0.0  # the share of instances built as echoes ([CLS] A [SEP] A' [SEP]; instance_tokens)
    echo_keep: float = ECHO_KEEP  # an echo's A' keeps each token of A with this probability
    echo_mask: str = "independent"  # "coupled" or "apart": how an echo's twins are masked (draws.couple_twins)

    def __post_init__(self) -> None:
        if self.masking not in ("dynamic", "static"):
            raise InputError(f"masking must be 'dynamic' or 'static', got {self.masking!r}")
        if self.segments not in SEGMENTS:
            raise InputError(f"segments must be one of {', '.join(SEGMENTS)}, got {self.segments!r}")
        if not 0.0 <= self.echo_share < 1.0:
            raise InputError(f"echo_share must be in [0, 1), got {self.echo_share}")
        if not 0.0 < self.echo_keep <= 1.0:
            raise InputError(f"echo_keep must be in (0, 1], got {self.echo_keep}")
        if self.echo_mask not in ECHO_MASKS:
            raise InputError(f"echo_mask must be one of {', '.join(ECHO_MASKS)}, got {self.echo_mask!r}")
        clash = echo_clash(self.nsp, self.segments)
        if self.echo_share > 0 and clash:
            raise InputError(echo_refusal(self.echo_share, clash, option=True))
        if self.mask_strategy not in STRATEGIES:
            raise InputError(f"mask_strategy must be one of {', '.join(STRATEGIES)}, got {self.mask_strategy!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise InputError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.max_seq_length < 8:
            raise InputError(f"max_seq_length must be >= 8, got {self.max_seq_length}")
        if self.batch_size < 1 or self.dupe_factor < 1:
            raise InputError("batch_size and dupe_factor must be >= 1")
        self.mask_mix = tuple(float(x) for x in self.mask_mix)
        if len(self.mask_mix) != 3 or min(self.mask_mix) < 0 or abs(sum(self.mask_mix) - 1.0) > 1e-6:
            raise InputError(
                f"mask_mix must be three non-negative shares (mask, random, keep) summing to 1, got {self.mask_mix}"
            )
        if self.max_predictions is None:
            self.max_predictions = int(np.ceil(self.max_seq_length * self.mask_prob))


_REOPENED: dict[bytes, PretrainingData] = {}


def _reopen(*args) -> PretrainingData:
    key = pickle.dumps(args)
    if key not in _REOPENED:
        while len(_REOPENED) >= 4:
            _REOPENED.pop(next(iter(_REOPENED)))
        _REOPENED[key] = PretrainingData(*args)
    return _REOPENED[key]


class PretrainingData:
    """Batches of MLM (+ NSP) instances over memmap shards, addressed by (epoch, index).

    ``rank``/``world_size`` give each process a disjoint strided part of each epoch's order; every rank has the same
    number of batches per epoch (the remainder is dropped)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        vocab: VocabInfo,
        options: DataOptions,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
    ):
        self.directory = Path(directory)
        meta = read_meta(self.directory)
        if meta is None:
            raise InputError(f"{self.directory}: no pre-training shards (meta.json missing)")
        if meta["vocab_size"] != vocab.vocab_size:
            raise InputError(
                f"{self.directory}: shards were built with a vocabulary of {meta['vocab_size']} tokens, "
                f"this one has {vocab.vocab_size}"
            )
        names = (
            [s["name"] for s in meta["shards"]]
            if split == "train"
            else ([meta["eval"]["name"]] if meta.get("eval") else [])
        )
        self.shards = [Shard.open(self.directory, n) for n in names]
        self.vocab, self.options, self.rank, self.world_size, self.split = vocab, options, rank, world_size, split
        self._starts: dict[int, np.ndarray] = {}  # shard -> its chunk starts, the recently read shards only
        self._counts: np.ndarray | None = None  # instances per shard
        self._first_ids: np.ndarray | None = None

    def __reduce__(self):
        """Pickled as its arguments: another process (a batch-building worker) reopens the memmaps instead of receiving
        copies of the shards, and keeps the reopened object for the next batch."""
        return _reopen, (str(self.directory), self.vocab, self.options, self.rank, self.world_size, self.split)

    def _key(self, epoch: int) -> int:
        o = self.options
        return epoch % o.dupe_factor if o.masking == "static" else epoch

    # An epoch's instances are numbered shard by shard (id = instances of the shards before + k). Its order visits
    # the shards in a permuted sequence, SHUFFLE_SHARDS at a time: within such a window the instances of all its
    # shards are shuffled together by a Feistel permutation (no index array), and ranks take strided positions. So
    # a rank holds the chunk starts of about two windows of shards and one count per shard, whatever the corpus size.
    # Every epoch has the same chunks (so the same count); what is drawn afresh is each instance's layout.

    def _layout(self, key: int, s: int) -> ShardLayout:
        o = self.options
        starts = self._starts.pop(s, None)  # re-inserted below: the dict's order is least recent first
        shard, seed = self.shards[s], f"{o.seed}/{key}/{s}"
        layout = ShardLayout(shard, o.max_seq_length, o.short_seq_prob, o.nsp, seed, starts, o.segments == "pair")
        while len(self._starts) >= 2 * SHUFFLE_SHARDS + 2:
            self._starts.pop(next(iter(self._starts)))
        self._starts[s] = layout.starts
        return layout

    def counts(self, epoch: int = 0) -> np.ndarray:
        """``[shards]`` int64: how many instances each shard has (the chunks do not depend on the epoch: one
        vectorised pass over each shard's sentence offsets, once; the chunk starts are rebuilt when read)."""
        if self._counts is None:
            self._counts = np.asarray([len(self._layout(0, s)) for s in range(len(self.shards))], dtype=np.int64)
        return self._counts

    def num_instances(self, epoch: int = 0) -> int:
        return int(self.counts(epoch).sum())

    def _first(self) -> np.ndarray:
        """``[shards + 1]``: the id of each shard's first instance (and the total)."""
        if self._first_ids is None:
            self._first_ids = np.concatenate([[0], np.cumsum(self.counts())])
        return self._first_ids

    def _locate(self, epoch: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Instance ids -> (shard, index within the shard's layout)."""
        first = self._first()
        s = np.searchsorted(first, ids, side="right") - 1
        return s, ids - first[s]

    def ids_at(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The instance ids at ``positions`` of the epoch's global order (a pure function of seed and epoch)."""
        counts, first = self.counts(epoch), self._first()
        shards = np.random.default_rng([self.options.seed, 7, epoch]).permutation(len(counts))
        windows = [shards[w : w + SHUFFLE_SHARDS] for w in range(0, len(shards), SHUFFLE_SHARDS)]
        window_first = np.concatenate([[0], np.cumsum([counts[w].sum() for w in windows])])
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        w_of = np.searchsorted(window_first, positions, side="right") - 1
        for w in np.unique(w_of):
            at = np.flatnonzero(w_of == w)
            inner = permute(
                positions[at] - window_first[w],
                int(window_first[w + 1] - window_first[w]),
                [self.options.seed, 7, epoch, int(w)],
            )
            member_first = np.concatenate([[0], np.cumsum(counts[windows[w]])])
            j = np.searchsorted(member_first, inner, side="right") - 1
            out[at] = first[windows[w][j]] + inner - member_first[j]
        return out

    def _per_rank(self, epoch: int) -> int:
        return self.num_instances(epoch) // self.world_size

    def order(self, epoch: int) -> np.ndarray:
        """This rank's instance ids for an epoch, in order (materialised: for tests and inspection)."""
        return self.ids_at(epoch, self.rank + self.world_size * np.arange(self._per_rank(epoch)))

    def instances(self, epoch: int) -> np.ndarray:
        """All instances of an epoch, ``[N, 6]``: (shard, a_start, a_end, b_start, b_end, label), in id order.
        Materialised for tests and inspection; training reads instances one by one."""
        key = self._key(epoch)
        parts = [
            np.concatenate([np.full((n, 1), s, dtype=np.int64), self._layout(key, s).table()], axis=1)
            for s, n in enumerate(self.counts(epoch))
        ]
        return np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)

    def num_batches(self, epoch: int = 0) -> int:
        return self._per_rank(epoch) // self.options.batch_size

    def instance_tokens(
        self, epoch: int, i: int, echoes: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(ids, token_type_ids, special mask, nsp label) of instance ``i`` before masking: with one segment and no
        NSP, row ``i`` of :meth:`_rows` (echoes included: ``echoes=False``, the held-out batches, builds none); else
        ``[CLS] A [SEP] B [SEP]`` from the layout (``[CLS] A [SEP]`` where sentence pairs find one sentence)."""
        if self.vectorised:
            tokens, special, types, n, _ = self._rows(epoch, np.asarray([i]), echoes)
            return tokens[0, : n[0]], types[0, : n[0]], special[0, : n[0]], -1
        o, v = self.options, self.vocab
        s, k = (int(x[0]) for x in self._locate(epoch, np.asarray([i])))
        a_lo, a_hi, b_lo, b_hi, label = self._layout(self._key(epoch), s).instance(k)
        toks = self.shards[s].tokens
        a = np.asarray(toks[a_lo:a_hi], dtype=np.int64)
        if o.nsp or b_hi > b_lo:
            b = np.asarray(toks[b_lo:b_hi], dtype=np.int64)
            ids = np.concatenate([[v.cls_id], a, [v.sep_id], b, [v.sep_id]])
            types = np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)])
        else:  # sentence pairs without NSP from a one-sentence chunk: one segment
            ids = np.concatenate([[v.cls_id], a, [v.sep_id]])
            types = np.zeros(len(ids), np.int64)
        special = np.zeros(len(ids), bool)
        special[[0, len(a) + 1, len(ids) - 1]] = True
        return ids, types, special, label

    def example(
        self,
        epoch: int,
        i: int,
        mix: tuple[float, float, float] | None = None,
        mask_prob: float | None = None,
        raw: bool = False,
        echoes: bool = True,
    ) -> dict[str, np.ndarray | int]:
        """Instance ``i`` of an epoch, masked (the mask depends only on seed, epoch or copy, ``i`` and the rate);
        ``mix`` overrides the options' mask/random/keep shares, ``mask_prob`` their rate. ``raw``: unmasked, with its
        special tokens' mask (``special``), for a strategy that masks later (``adaptive``, in the Feed);
        ``echoes``: as :meth:`instance_tokens`'. With one segment and no NSP, the row of a batch of one."""
        o = self.options
        if self.vectorised:
            batch, tokens, n = self._batch_of(epoch, np.asarray([i]), mix or o.mask_mix, mask_prob, raw, echoes)
            row = {k: batch[k][0, : n[0]] for k in ("input_ids", "token_type_ids", "labels")}
            special = {"special": batch["special_tokens_mask"][0, : n[0]]} if raw else {}
            return {**row, "next_sentence_label": -1, "original_ids": tokens[0, : n[0]], **special}
        ids, types, special, label = self.instance_tokens(epoch, i, echoes)
        if raw:
            masked, labels = ids, np.full(len(ids), NO_LABEL, dtype=np.int64)
        else:
            masked, labels = self._masked(epoch, i, ids, special, mix or o.mask_mix, mask_prob)
        return {
            "input_ids": masked,
            "token_type_ids": types,
            "labels": labels,
            "next_sentence_label": label,
            "original_ids": ids,
            **({"special": special} if raw else {}),
        }

    def _masked(self, epoch: int, i: int, ids, special, mix, mask_prob: float | None) -> tuple[np.ndarray, np.ndarray]:
        """Instance ``i``'s ``ids`` masked alone by the options' strategy, with its own generator."""
        o = self.options
        rng = np.random.default_rng([o.seed, 11, self._key(epoch), i])
        rate = o.mask_prob if mask_prob is None else mask_prob
        return mask_instance(ids, special, self.vocab, rate, o.max_predictions, o.mask_strategy, rng, mix)

    @property
    def vectorised(self) -> bool:
        """Whether batches are laid out by array passes over all their rows (:meth:`_rows`): one segment and no NSP,
        the budget recipe's (echoes included). Token masking then runs on the whole batch too (``draws.mask_rows``);
        the other strategies mask row by row, each instance with its own generator. NSP and sentence pairs are
        built instance by instance: where echoes can be, this route is (echoes.echo_clash)."""
        return echo_clash(self.options.nsp, self.options.segments) is None

    def _spans(self, epoch: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard [B], first token [B], end [B]) of one-segment instances ``ids``: :meth:`ShardLayout.instance`'s A,
        array by array where no short target is drawn (the chunk's tokens up to ``max_tokens``), else one by one."""
        key, (shard, k) = self._key(epoch), self._locate(epoch, ids)
        lo, hi = np.empty(len(ids), dtype=np.int64), np.empty(len(ids), dtype=np.int64)
        for s in np.unique(shard):
            at, layout = np.flatnonzero(shard == s), self._layout(key, int(s))
            if self.options.short_seq_prob > 0:
                lo[at], hi[at] = np.asarray([layout.instance(int(j))[:2] for j in k[at]]).reshape(-1, 2).T
                continue
            j, last = k[at], len(layout.starts) - 1
            end = np.where(j < last, layout.starts[np.minimum(j + 1, last)], layout.n_sentences)  # the next chunk's
            lo[at] = layout._sent[layout.starts[j]]
            hi[at] = np.minimum(layout._sent[end], lo[at] + layout.max_tokens)
        return shard, lo, hi

    def _rows(self, epoch: int, ids: np.ndarray, echoes: bool) -> tuple[np.ndarray, ...]:
        """One-segment instances ``ids`` laid out by array passes: ``[CLS] A [SEP]``, or an echo's ``[CLS] A [SEP]
        A' [SEP]`` (:meth:`_echoes`) -> (ids [B, T] padded to a multiple of 8, special [B, T] ([CLS]/[SEP]),
        token types [B, T], lengths [B], twins [B, T]: at each of A''s columns, its twin's column in A, else -1)."""
        o, v, key = self.options, self.vocab, self._key(epoch)
        B = len(ids)
        shard, lo, hi = self._spans(epoch, ids)
        lengths = hi - lo
        width = max(1, int(lengths.max(initial=0)))
        a = np.zeros((B, width), dtype=np.int64)  # A's tokens, left-aligned
        for s in np.unique(shard):
            at, tokens = np.flatnonzero(shard == s), self.shards[s].tokens
            offsets = np.minimum(np.arange(width), np.maximum(lengths[at, None] - 1, 0))
            a[at] = np.asarray(tokens[np.minimum(lo[at, None] + offsets, len(tokens) - 1)], dtype=np.int64)
        if echoes and o.echo_share > 0:
            echo, a_len, kept = draw_echoes(self.options, key, ids, lengths)
        else:
            echo, a_len, kept = np.zeros(B, dtype=bool), lengths, np.zeros((B, width), dtype=bool)
        b_len = np.where(echo, np.minimum(kept.sum(1), o.max_seq_length - 3 - a_len), 0)
        b = np.zeros_like(a)  # A's kept tokens, left-aligned in order
        r, j = np.nonzero(kept)
        slot = np.cumsum(kept, axis=1)[r, j] - 1  # each kept token's place in A'
        b[r, slot] = a[r, j]
        n = a_len + 2 + np.where(echo, b_len + 1, 0)
        T = -(-int(n.max(initial=8)) // 8) * 8
        col = np.arange(T)[None, :]
        b_first = (a_len + 2)[:, None]
        in_b = echo[:, None] & (col >= b_first) & (col < b_first + b_len[:, None])
        special = (col == 0) | (col == a_len[:, None] + 1) | (echo[:, None] & (col == b_first + b_len[:, None]))
        at_a = np.take_along_axis(a, np.broadcast_to(np.clip(col - 1, 0, width - 1), (B, T)), 1)
        at_b = np.take_along_axis(b, np.broadcast_to(np.clip(col - b_first, 0, width - 1), (B, T)), 1)
        tokens = np.where((col >= 1) & (col <= a_len[:, None]), at_a, v.pad_id)
        tokens = np.where(in_b, at_b, tokens)
        tokens = np.where(special, np.where(col == 0, v.cls_id, v.sep_id), tokens)
        types = (echo[:, None] & (col >= b_first) & (col < n[:, None])).astype(np.int64)
        twins = np.full((B, T), -1, dtype=np.int64)
        room = slot < b_len[r]  # the kept tokens A' has room for
        twins[r[room], b_first[r[room], 0] + slot[room]] = j[room] + 1
        return tokens, special, types, n, twins

    def _batch_of(
        self, epoch: int, ids: np.ndarray, mix, mask_prob: float | None, raw: bool, echoes: bool
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Instances ``ids`` as one batch (:meth:`_rows`), masked: by token, all rows at once (``draws.mask_rows``);
        by another strategy, row by row as :meth:`example` masks an instance; ``raw``, not at all (with the special
        tokens' mask, [PAD] included) -> (the batch as :func:`collate` lays it out, the unmasked ids, the lengths)."""
        o, key = self.options, self._key(epoch)
        tokens, special, types, n, twins = self._rows(epoch, ids, echoes)
        real = np.arange(tokens.shape[1])[None, :] < n[:, None]
        batch = {"token_type_ids": types, "attention_mask": real.astype(np.int64)}
        rate = o.mask_prob if mask_prob is None else mask_prob
        if raw:
            inputs, labels = tokens, np.full(tokens.shape, NO_LABEL, dtype=np.int64)
            batch["special_tokens_mask"] = special | ~real
        elif o.mask_strategy == "token":
            inputs, labels = mask_rows(tokens, special, n, self.vocab, rate, o.max_predictions, mix, (o.seed, key, ids))
        else:
            inputs, labels = tokens.copy(), np.full(tokens.shape, NO_LABEL, dtype=np.int64)
            for r, (i, k) in enumerate(zip(ids, n)):
                inputs[r, :k], labels[r, :k] = self._masked(epoch, int(i), tokens[r, :k], special[r, :k], mix, rate)
        if o.echo_mask != "independent" and not raw:
            couple_twins(inputs, labels, tokens, twins, self.vocab.mask_id, o.echo_mask)
        return {"input_ids": inputs, **batch, "labels": labels}, tokens, n

    def batch(self, epoch: int, index: int, mask_prob: float | None = None, raw: bool = False) -> dict[str, np.ndarray]:
        """Batch ``index`` of this rank's order for ``epoch``: int64 arrays padded to the longest (multiple of 8);
        ``mask_prob`` and ``raw`` as :meth:`example`'s (``raw`` adds ``special_tokens_mask``)."""
        o = self.options
        if not 0 <= index < self.num_batches(epoch):
            raise IndexError(f"batch {index} is past the end of epoch {epoch} ({self.num_batches(epoch)} batches)")
        positions = self.rank + self.world_size * np.arange(index * o.batch_size, (index + 1) * o.batch_size)
        if self.vectorised:
            return self._batch_of(epoch, self.ids_at(epoch, positions), o.mask_mix, mask_prob, raw, True)[0]
        examples = [self.example(epoch, int(i), None, mask_prob, raw) for i in self.ids_at(epoch, positions)]
        return collate(examples, self.vocab.pad_id, o.nsp)

    def eval_batches(self, max_batches: int) -> list[dict[str, np.ndarray]]:
        """Fixed held-out batches (static masks, layout copy 0), the same every call. Every chosen position's input is
        [MASK] (none random, none kept), whatever the training mix: the honest meter scores only what the model had
        to infer (docs/pretraining.md, "How quality is measured"), and none is an echo (a token A' repeats is given
        away)."""
        o = self.options
        n = min(self.num_instances(0), max_batches * o.batch_size)
        out = []
        for start in range(0, n, o.batch_size):
            rows = np.arange(start, min(n, start + o.batch_size))
            if self.vectorised:
                out.append(self._batch_of(0, rows, HONEST_MIX, None, False, False)[0])
            else:
                examples = [self.example(0, int(i), HONEST_MIX, echoes=False) for i in rows]
                out.append(collate(examples, self.vocab.pad_id, o.nsp))
        return out


def collate(examples: list[dict], pad_id: int, nsp: bool, multiple: int = 8) -> dict[str, np.ndarray]:
    T = max(len(e["input_ids"]) for e in examples)
    T = -(-T // multiple) * multiple
    B = len(examples)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    labels = np.full((B, T), NO_LABEL, dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for r, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[r, :n] = e["input_ids"]
        types[r, :n] = e["token_type_ids"]
        labels[r, :n] = e["labels"]
        mask[r, :n] = 1
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}
    if nsp:
        batch["next_sentence_label"] = np.asarray([e["next_sentence_label"] for e in examples], dtype=np.int64)
    if "special" in examples[0]:  # an unmasked batch's special tokens ([PAD] too), for masking later
        special = np.ones((B, T), dtype=bool)
        for r, e in enumerate(examples):
            special[r, : len(e["special"])] = e["special"]
        batch["special_tokens_mask"] = special
    return batch


def first_tokens(directory: str | os.PathLike, max_tokens: int) -> Iterator[np.ndarray]:
    """The training shards' token ids as int64 arrays, shard by shard, up to the first ``max_tokens`` in all."""
    meta = read_meta(directory)
    if meta is None:
        raise InputError(f"{directory}: no pre-training shards (meta.json missing)")
    left = max_tokens
    for info in meta["shards"]:
        if left <= 0:
            break
        tokens = np.asarray(Shard.open(directory, info["name"]).tokens[:left], dtype=np.int64)
        left -= len(tokens)
        yield tokens


def token_counts(directory: str | os.PathLike, vocab_size: int, max_tokens: int = 1 << 27) -> np.ndarray:
    """``[V]`` int64: how often each token id occurs in the training shards (the first ``max_tokens`` of them: an
    estimate that is plenty for a unigram distribution, and bounded in time)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for tokens in first_tokens(directory, max_tokens):
        counts += np.bincount(tokens, minlength=vocab_size)[:vocab_size]
    return counts


def unigram_log_probs(counts: np.ndarray, exclude: Iterable[int] = (), floor: float = 0.1) -> np.ndarray:
    """``[V]`` float32 log-probabilities of the tokens' frequencies: what an MLM head that ignores its input
    should predict. Ids in ``exclude`` (special tokens, never a label) and unseen tokens get ``floor`` counts."""
    counts = counts.astype(np.float64).copy()
    counts[list(exclude)] = 0
    counts = np.maximum(counts, floor)
    return np.log(counts / counts.sum()).astype(np.float32)
