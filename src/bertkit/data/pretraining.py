"""Pre-training data: tokenized memmap shards, MLM + NSP instances, masking, and deterministic batches.

Pipeline (as Google's ``create_pretraining_data.py``, stored so a corpus larger than RAM streams):

1. :func:`build_shards` tokenizes documents (lists of sentences) in worker processes and writes shards of
   ``*.tokens.npy`` (uint16, or int32 for vocabularies over 65535), ``*.sentences.npy`` (token offset of every
   sentence, S+1) and ``*.documents.npy`` (sentence offset of every document, D+1), plus ``meta.json`` last as the
   commit marker. A small held-out part (whole documents when there are many; else the last sentences of each long
   document) goes to the ``eval`` shard, never trained on.
2. :func:`create_instances` lays out ``[CLS] A [SEP] B [SEP]`` instances of one shard as token *ranges*: an int64
   array ``[N, 5]`` of (a_start, a_end, b_start, b_end, next_sentence_label). A and B are runs of whole sentences, so
   each is a contiguous range of the shard's tokens, and truncation only moves an end. B is the true continuation
   (label 0, IsNext) or a span of another document of the shard (label 1, NotNext), 50/50; segments are filled to
   ``max_seq_length`` with ``short_seq_prob`` shorter targets; overlong pairs lose tokens from the longer segment at
   a random end. Without NSP an instance is one segment ``[CLS] A [SEP]`` (label -1).
3. :func:`mask_instance` picks ``round(len * mask_prob)`` positions (at least 1, at most ``max_predictions``) among
   non-special tokens, by whole words with ``whole_word``; 80% become [MASK], 10% a random non-special token, 10%
   stay. [CLS], [SEP] and [PAD] are never picked.
4. :class:`PretrainingData` serves batches by (epoch, index) as pure functions of the seed: the instance layout and
   order of an epoch, and every mask, come from generators seeded by (seed, epoch or copy, shard or instance). So a
   run resumes from its (epoch, index) position with no data state beyond those two numbers, and each rank of a
   distributed run reads its own strided part of the order. Masking is ``dynamic`` (fresh layout and masks each
   epoch) or ``static`` (``dupe_factor`` fixed copies, cycled).

Differences from Google's script, on purpose: the short-sequence target is re-drawn per instance rather than per
document (books are single documents here); a one-sentence chunk can still be an IsNext pair, split inside the
sentence, which keeps NSP at 50/50; the random document comes from the same shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.files import atomic_write, write_json

META_NAME = "meta.json"
SHARD_FORMAT = 1
NO_LABEL = -100


# --------------------------------------------------------------------------------------------- vocabulary facts


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object: np.save would add ".npy" to the temp file's name
        np.save(f, array)


@dataclass(frozen=True)
class VocabInfo:
    """What masking needs from a vocabulary: special ids, which ids continue a word (``##``), random-token pool."""

    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    is_continuation: np.ndarray  # [V] bool: token starts with "##"
    random_pool: np.ndarray  # ids a random replacement may take (not [PAD]/[CLS]/[SEP]/[MASK]/[UNK]/[unusedN])

    @classmethod
    def from_tokens(cls, tokens: list[str]) -> VocabInfo:
        index = {t: i for i, t in enumerate(tokens)}
        for special in ("[PAD]", "[CLS]", "[SEP]", "[MASK]"):
            if special not in index:
                raise ValueError(f"the vocabulary has no {special} token, which pre-training needs")
        cont = np.array([t.startswith("##") for t in tokens], dtype=bool)
        pool = np.array(
            [i for i, t in enumerate(tokens) if not (t.startswith("[") and t.endswith("]"))], dtype=np.int64
        )
        if len(pool) == 0:
            raise ValueError("the vocabulary has no ordinary tokens")
        return cls(len(tokens), index["[CLS]"], index["[SEP]"], index["[MASK]"], index["[PAD]"], cont, pool)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> VocabInfo:
        return cls.from_tokens(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------- shards


_TOKENIZER = None


def _init_tokenizer(vocab_path: str, lowercase: bool | None) -> None:
    global _TOKENIZER
    from bertkit.tokenization import BertTokenizer

    _TOKENIZER = BertTokenizer.from_pretrained(vocab_path, lowercase=lowercase)


def _tokenize_part(part: tuple[bool, list[str]]) -> tuple[bool, np.ndarray, np.ndarray]:
    """(last part of its document?, token ids int32, sentence lengths int64); empty sentences dropped."""
    last, sentences = part
    ids, lengths = [], []
    for s in sentences:
        toks = _TOKENIZER.convert_tokens_to_ids(_TOKENIZER.tokenize(s))
        if toks:
            ids.extend(toks)
            lengths.append(len(toks))
    return last, np.asarray(ids, dtype=np.int32), np.asarray(lengths, dtype=np.int64)


def _parts(documents: Iterable[list[str]], size: int = 1000) -> Iterator[tuple[bool, list[str]]]:
    """Documents cut into parts of at most ``size`` sentences, so one long book still uses every core."""
    for doc in documents:
        for start in range(0, max(1, len(doc)), size):
            yield start + size >= len(doc), doc[start:start + size]


class _ShardWriter:
    """Accumulates tokenized documents and writes ``<name>.{tokens,sentences,documents}.npy`` shards."""

    def __init__(self, directory: Path, prefix: str, dtype: np.dtype, shard_tokens: int):
        self.directory, self.prefix, self.dtype, self.shard_tokens = directory, prefix, dtype, shard_tokens
        self.shards: list[dict] = []
        self._reset()

    def _reset(self) -> None:
        self.ids: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.doc_sentences: list[int] = []
        self.n_tokens = 0

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        if len(lengths) == 0:
            return
        self.ids.append(ids)
        self.lengths.append(lengths)
        self.doc_sentences.append(len(lengths))
        self.n_tokens += len(ids)
        if self.n_tokens >= self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.doc_sentences:
            return
        name = self.prefix if self.prefix == "eval" else f"{self.prefix}-{len(self.shards):05d}"
        tokens = np.concatenate(self.ids).astype(self.dtype)
        sentences = np.concatenate([[0], np.cumsum(np.concatenate(self.lengths))]).astype(np.int64)
        documents = np.concatenate([[0], np.cumsum(self.doc_sentences)]).astype(np.int64)
        for part, array in (("tokens", tokens), ("sentences", sentences), ("documents", documents)):
            final = self.directory / f"{name}.{part}.npy"
            atomic_write(final, lambda p, a=array: _save_npy(p, a))
        self.shards.append({"name": name, "tokens": len(tokens), "sentences": int(len(sentences) - 1),
                            "documents": int(len(documents) - 1)})
        self._reset()


def build_shards(
    documents: Iterable[list[str]],
    vocab_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    lowercase: bool | None = None,
    shard_tokens: int = 1 << 24,
    eval_fraction: float = 0.02,
    workers: int | None = None,
    fingerprint: dict | None = None,
    progress: bool = True,
) -> dict:
    """Tokenize ``documents`` into memmap shards under ``out_dir``; returns (and writes) the ``meta.json`` dict.

    ``eval_fraction`` of the text is held out: every ``round(1/fraction)``-th document when there are many, else the
    last sentences of each document of 50+ sentences. ``fingerprint`` (e.g. the corpus files' sizes) is stored in the
    meta so a later run can reuse the shards only when it matches."""
    from tqdm import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / META_NAME).unlink(missing_ok=True)  # no commit marker until every shard is written
    _init_tokenizer(str(vocab_path), lowercase)
    vocab_size = len(_TOKENIZER)
    dtype = np.dtype(np.uint16 if vocab_size <= 65535 else np.int32)
    train = _ShardWriter(out_dir, "train", dtype, shard_tokens)
    held = _ShardWriter(out_dir, "eval", dtype, 1 << 62)
    every = max(2, round(1 / eval_fraction)) if eval_fraction > 0 else 0

    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers > 1:
        import multiprocessing as mp

        pool = mp.get_context("fork").Pool(workers, _init_tokenizer, (str(vocab_path), lowercase))
        results = pool.imap(_tokenize_part, _parts(documents), chunksize=4)
    else:
        pool = None
        results = map(_tokenize_part, _parts(documents))
    doc_index = 0
    bar = tqdm(desc="tokenizing", unit=" docs", disable=not progress, mininterval=1.0)
    ids_parts: list[np.ndarray] = []
    len_parts: list[np.ndarray] = []
    try:
        for last, part_ids, part_lengths in results:
            ids_parts.append(part_ids)
            len_parts.append(part_lengths)
            if not last:
                continue
            ids, lengths = np.concatenate(ids_parts), np.concatenate(len_parts)
            ids_parts, len_parts = [], []
            doc_index += 1
            bar.update(1)
            if every and doc_index % every == 0 and doc_index >= 100:  # many documents: hold out whole ones
                held.add(ids, lengths)
            elif every and doc_index < 100 and len(lengths) >= 50:  # few, long documents: hold out their ends
                n_eval = max(1, int(len(lengths) * eval_fraction))
                cut = int(lengths[:-n_eval].sum())
                train.add(ids[:cut], lengths[:-n_eval])
                held.add(ids[cut:], lengths[-n_eval:])
            else:
                train.add(ids, lengths)
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
    train.flush()
    held.flush()
    if not train.shards:
        raise ValueError("the corpus holds no text to pre-train on (every document was empty)")
    meta = {
        "format": SHARD_FORMAT,
        "vocab_size": vocab_size,
        "vocab_sha256": file_sha256(vocab_path),
        "lowercase": _TOKENIZER.lowercase if hasattr(_TOKENIZER, "lowercase") else lowercase,
        "dtype": dtype.name,
        "shards": train.shards,
        "eval": held.shards[0] if held.shards else None,
        "fingerprint": fingerprint or {},
    }
    write_json(out_dir / META_NAME, meta, sort_keys=False)
    return meta


def read_meta(out_dir: str | os.PathLike) -> dict | None:
    path = Path(out_dir) / META_NAME
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == SHARD_FORMAT else None


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
                raise ValueError(f"{path}: unreadable shard ({e}); delete {directory} to rebuild it") from None
        return cls(name, *arrays)


# --------------------------------------------------------------------------------------------- instances


def create_instances(
    shard: Shard, max_seq_length: int, short_seq_prob: float, nsp: bool, rng: random.Random
) -> np.ndarray:
    """Instances of one shard as token ranges ``[N, 5]``: (a_start, a_end, b_start, b_end, label).

    With NSP, label 0 = IsNext, 1 = NotNext, and ``len(A) + len(B) + 3 <= max_seq_length``; without, B is empty,
    label -1 and ``len(A) + 2 <= max_seq_length``."""
    sent = np.asarray(shard.sentences)
    docs = np.asarray(shard.documents)
    n_docs = len(docs) - 1
    max_tokens = max_seq_length - (3 if nsp else 2)
    if max_tokens < 2:
        raise ValueError(f"max_seq_length {max_seq_length} is too short for an instance")
    out: list[tuple[int, int, int, int, int]] = []

    def target() -> int:
        return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens

    for d in range(n_docs):
        s_lo, s_hi = int(docs[d]), int(docs[d + 1])
        i = s_lo
        chunk_start, length, goal = s_lo, 0, target()
        while i < s_hi:
            length += int(sent[i + 1] - sent[i])
            if i == s_hi - 1 or length >= goal:
                n = i + 1 - chunk_start  # sentences in the chunk
                if not nsp:
                    a_lo, a_hi = int(sent[chunk_start]), int(sent[i + 1])
                    a_hi = min(a_hi, a_lo + max_tokens)
                    out.append((a_lo, a_hi, 0, 0, -1))
                else:
                    is_random = rng.random() < 0.5
                    if is_random or n >= 2:
                        a_end = rng.randint(1, n - 1) if n >= 2 else 1  # sentences in A
                        a_lo, a_hi = int(sent[chunk_start]), int(sent[chunk_start + a_end])
                    else:  # IsNext from a single sentence: split it inside
                        a_lo, whole = int(sent[chunk_start]), int(sent[i + 1])
                        if whole - a_lo < 2:
                            is_random = True
                            a_hi = whole
                        else:
                            a_hi = rng.randint(a_lo + 1, whole - 1)
                    if is_random:
                        goal_b = max(1, goal - (a_hi - a_lo))
                        other = d
                        for _ in range(10):
                            other = rng.randint(0, n_docs - 1)
                            if other != d or n_docs == 1:
                                break
                        o_lo, o_hi = int(docs[other]), int(docs[other + 1])
                        j = rng.randint(o_lo, o_hi - 1)
                        b_lo = b_hi = int(sent[j])
                        while j < o_hi and b_hi - b_lo < goal_b:
                            b_hi = int(sent[j + 1])
                            j += 1
                        # the unused sentences of the chunk go back to the stream
                        if n >= 2:
                            i = chunk_start + (a_end if n >= 2 else 1) - 1
                    else:
                        b_lo = a_hi
                        b_hi = int(sent[i + 1])
                    # truncate the longer segment at a random end until the pair fits
                    while (a_hi - a_lo) + (b_hi - b_lo) > max_tokens:
                        if a_hi - a_lo > b_hi - b_lo:
                            if rng.random() < 0.5:
                                a_lo += 1
                            else:
                                a_hi -= 1
                        elif rng.random() < 0.5:
                            b_lo += 1
                        else:
                            b_hi -= 1
                    if a_hi > a_lo and b_hi > b_lo:
                        out.append((a_lo, a_hi, b_lo, b_hi, int(is_random)))
                chunk_start, length, goal = i + 1, 0, target()
            i += 1
    return np.asarray(out, dtype=np.int64).reshape(-1, 5)


def mask_instance(
    ids: np.ndarray,
    special: np.ndarray,
    vocab: VocabInfo,
    mask_prob: float,
    max_predictions: int,
    whole_word: bool,
    rng: np.random.Generator,
    mix: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> tuple[np.ndarray, np.ndarray]:
    """Mask one instance. ``ids`` [T] (no padding), ``special`` [T] bool ([CLS]/[SEP]). Returns (masked ids, labels
    with the original id at masked positions and -100 elsewhere).

    ``mix`` = (mask, random, keep): the shares of chosen positions whose input becomes [MASK], a random token, or stays
    unchanged (the paper's 80/10/10). Held-out evaluation uses (1, 0, 0): a kept token would give its label away."""
    cand = np.flatnonzero(~special)
    labels = np.full(len(ids), NO_LABEL, dtype=np.int64)
    if len(cand) == 0:
        return ids.copy(), labels
    num = min(max_predictions, max(1, round(len(ids) * mask_prob)))
    if whole_word:
        # a word = a non-continuation token and the "##" tokens after it (Google's grouping)
        starts = ~vocab.is_continuation[ids[cand]]
        starts[0] = True
        starts[1:] |= np.diff(cand) != 1  # a special token between two pieces also separates them
        word_of = np.cumsum(starts) - 1
        n_words = int(word_of[-1]) + 1
        bounds = np.concatenate([np.flatnonzero(starts), [len(cand)]])
        chosen: list[int] = []
        for w in rng.permutation(n_words):
            size = int(bounds[w + 1] - bounds[w])
            if len(chosen) >= num:
                break
            if len(chosen) + size > num:
                continue
            chosen.extend(cand[bounds[w]:bounds[w + 1]].tolist())
        picked = np.asarray(sorted(chosen), dtype=np.int64)
    else:
        picked = np.sort(rng.choice(cand, size=min(num, len(cand)), replace=False))
    out = ids.copy()
    labels[picked] = ids[picked]
    r = rng.random(len(picked))
    out[picked[r < mix[0]]] = vocab.mask_id
    rand_pos = picked[r >= mix[0] + mix[2]]  # [mask | keep | random] on [0, 1): the paper's draw order
    out[rand_pos] = vocab.random_pool[rng.integers(0, len(vocab.random_pool), len(rand_pos))]
    return out, labels


# --------------------------------------------------------------------------------------------- batches

HONEST_MIX = (1.0, 0.0, 0.0)  # held-out inputs: every chosen position [MASK]


@dataclass
class DataOptions:
    max_seq_length: int = 128
    batch_size: int = 32
    nsp: bool = True
    mask_prob: float = 0.15
    max_predictions: int | None = None  # default ceil(max_seq_length * mask_prob)
    whole_word: bool = False
    short_seq_prob: float = 0.1
    masking: str = "dynamic"  # or "static"
    dupe_factor: int = 5  # static masking: fixed copies, cycled over epochs
    seed: int = 0
    mask_mix: tuple[float, float, float] = (0.8, 0.1, 0.1)  # training inputs of chosen positions: mask/random/keep

    def __post_init__(self) -> None:
        if self.masking not in ("dynamic", "static"):
            raise ValueError(f"masking must be 'dynamic' or 'static', got {self.masking!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length must be >= 8, got {self.max_seq_length}")
        if self.batch_size < 1 or self.dupe_factor < 1:
            raise ValueError("batch_size and dupe_factor must be >= 1")
        self.mask_mix = tuple(float(x) for x in self.mask_mix)
        if len(self.mask_mix) != 3 or min(self.mask_mix) < 0 or abs(sum(self.mask_mix) - 1.0) > 1e-6:
            raise ValueError(f"mask_mix must be three non-negative shares (mask, random, keep) summing to 1, "
                             f"got {self.mask_mix}")
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

    def __init__(self, directory: str | os.PathLike, vocab: VocabInfo, options: DataOptions, rank: int = 0,
                 world_size: int = 1, split: str = "train"):
        self.directory = Path(directory)
        meta = read_meta(self.directory)
        if meta is None:
            raise ValueError(f"{self.directory}: no pre-training shards (meta.json missing)")
        if meta["vocab_size"] != vocab.vocab_size:
            raise ValueError(f"{self.directory}: shards were built with a vocabulary of {meta['vocab_size']} tokens, "
                             f"this one has {vocab.vocab_size}")
        names = [s["name"] for s in meta["shards"]] if split == "train" else (
            [meta["eval"]["name"]] if meta.get("eval") else [])
        self.shards = [Shard.open(self.directory, n) for n in names]
        self.vocab, self.options, self.rank, self.world_size, self.split = vocab, options, rank, world_size, split
        self._cache: dict[int, np.ndarray] = {}  # layout key -> instances (two kept: a prefetch may cross epochs)
        self._order_cache: dict[int, np.ndarray] = {}

    def __reduce__(self):
        """Pickled as its arguments: another process (a batch-building worker) reopens the memmaps instead of receiving
        copies of the shards, and keeps the reopened object for the next batch."""
        return _reopen, (str(self.directory), self.vocab, self.options, self.rank, self.world_size, self.split)

    def _key(self, epoch: int) -> int:
        o = self.options
        return epoch % o.dupe_factor if o.masking == "static" else epoch

    def instances(self, epoch: int) -> np.ndarray:
        """All instances of an epoch, ``[N, 6]``: (shard, a_start, a_end, b_start, b_end, label)."""
        key = self._key(epoch)
        if key in self._cache:
            return self._cache[key]
        o = self.options
        parts = []
        for s, shard in enumerate(self.shards):
            rng = random.Random(f"bertkit-instances/{o.seed}/{key}/{s}")
            inst = create_instances(shard, o.max_seq_length, o.short_seq_prob, o.nsp, rng)
            parts.append(np.concatenate([np.full((len(inst), 1), s, dtype=np.int64), inst], axis=1))
        table = np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)
        self._cache = {k: v for k, v in self._cache.items() if k != key}
        while len(self._cache) >= 2:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = table
        return table

    def order(self, epoch: int) -> np.ndarray:
        """This rank's instance indices for an epoch, in order (a permutation drawn from (seed, epoch))."""
        if epoch in self._order_cache:
            return self._order_cache[epoch]
        n = len(self.instances(epoch))
        perm = np.random.default_rng([self.options.seed, 7, epoch]).permutation(n)
        per_rank = n // self.world_size
        order = perm[self.rank::self.world_size][:per_rank]
        self._order_cache = {k: v for k, v in self._order_cache.items() if k > epoch - 2}  # this epoch and the last
        self._order_cache[epoch] = order
        return order

    def num_batches(self, epoch: int = 0) -> int:
        return len(self.order(epoch)) // self.options.batch_size

    def instance_tokens(self, epoch: int, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(ids, token_type_ids, special mask, nsp label) of instance ``i`` before masking."""
        o, v = self.options, self.vocab
        s, a_lo, a_hi, b_lo, b_hi, label = (int(x) for x in self.instances(epoch)[i])
        toks = self.shards[s].tokens
        a = np.asarray(toks[a_lo:a_hi], dtype=np.int64)
        if o.nsp:
            b = np.asarray(toks[b_lo:b_hi], dtype=np.int64)
            ids = np.concatenate([[v.cls_id], a, [v.sep_id], b, [v.sep_id]])
            types = np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)])
        else:
            ids = np.concatenate([[v.cls_id], a, [v.sep_id]])
            types = np.zeros(len(ids), np.int64)
        special = np.zeros(len(ids), bool)
        special[0] = True
        special[len(a) + 1] = True
        special[-1] = True
        return ids, types, special, label

    def example(self, epoch: int, i: int, mix: tuple[float, float, float] | None = None) -> dict[str, np.ndarray | int]:
        """Instance ``i`` of an epoch, masked (the mask depends only on seed, epoch or copy, and ``i``); ``mix``
        overrides the options' mask/random/keep shares."""
        o = self.options
        ids, types, special, label = self.instance_tokens(epoch, i)
        rng = np.random.default_rng([o.seed, 11, self._key(epoch), i])
        masked, labels = mask_instance(ids, special, self.vocab, o.mask_prob, o.max_predictions, o.whole_word, rng,
                                       mix or o.mask_mix)
        return {"input_ids": masked, "token_type_ids": types, "labels": labels, "next_sentence_label": label,
                "original_ids": ids}

    def batch(self, epoch: int, index: int) -> dict[str, np.ndarray]:
        """Batch ``index`` of this rank's order for ``epoch``: int64 arrays padded to the longest (multiple of 8)."""
        o = self.options
        idx = self.order(epoch)[index * o.batch_size:(index + 1) * o.batch_size]
        if len(idx) < o.batch_size:
            raise IndexError(f"batch {index} is past the end of epoch {epoch} ({self.num_batches(epoch)} batches)")
        return collate([self.example(epoch, int(i)) for i in idx], self.vocab.pad_id, o.nsp)

    def eval_batches(self, max_batches: int) -> list[dict[str, np.ndarray]]:
        """Fixed held-out batches (static masks, layout copy 0), the same every call. Every chosen position's input is
        [MASK] (none random, none kept), whatever the training mix: the honest meter scores only what the model had
        to infer (docs/pretraining.md, "How quality is measured")."""
        o = self.options
        n = min(len(self.instances(0)), max_batches * o.batch_size)
        out = []
        for start in range(0, n, o.batch_size):
            out.append(collate([self.example(0, i, HONEST_MIX) for i in range(start, min(n, start + o.batch_size))],
                               self.vocab.pad_id, o.nsp))
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
    return batch


def prepare_corpus(
    corpus: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    vocab_path: str | os.PathLike,
    corpus_format: str = "auto",
    lowercase: bool | None = None,
    workers: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
    encoding: str = "auto",
) -> dict:
    """Shards for ``corpus`` under ``out_dir``, reusing existing ones built from the same files and vocabulary."""
    from bertkit.data.corpus import expand_corpus, iter_documents

    corpus = expand_corpus(corpus)
    fingerprint = {"files": [[str(Path(p).resolve()), Path(p).stat().st_size, int(Path(p).stat().st_mtime)]
                             for p in corpus], "format": corpus_format, "encoding": encoding}
    meta = read_meta(out_dir)
    if meta is not None and meta.get("fingerprint") == fingerprint and meta.get("vocab_sha256") == file_sha256(
            vocab_path):
        log(f"reusing the tokenized corpus in {out_dir}")
        return meta
    log(f"tokenizing {len(corpus)} file(s) into {out_dir}")
    docs = iter_documents(corpus, corpus_format, workers=workers, encoding=encoding)
    return build_shards(docs, vocab_path, out_dir, lowercase=lowercase, workers=workers, fingerprint=fingerprint,
                        progress=progress)


def token_counts(directory: str | os.PathLike, vocab_size: int, max_tokens: int = 1 << 27) -> np.ndarray:
    """``[V]`` int64: how often each token id occurs in the training shards (the first ``max_tokens`` of them: an
    estimate that is plenty for a unigram distribution, and bounded in time)."""
    meta = read_meta(directory)
    if meta is None:
        raise ValueError(f"{directory}: no pre-training shards (meta.json missing)")
    counts = np.zeros(vocab_size, dtype=np.int64)
    left = max_tokens
    for info in meta["shards"]:
        tokens = Shard.open(directory, info["name"]).tokens[:left]
        counts += np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab_size)[:vocab_size]
        left -= len(tokens)
        if left <= 0:
            break
    return counts


def unigram_log_probs(counts: np.ndarray, exclude: Iterable[int] = (), floor: float = 0.1) -> np.ndarray:
    """``[V]`` float32 log-probabilities of the tokens' frequencies: what an MLM head that ignores its input
    should predict. Ids in ``exclude`` (special tokens, never a label) and unseen tokens get ``floor`` counts."""
    counts = counts.astype(np.float64).copy()
    counts[list(exclude)] = 0
    counts = np.maximum(counts, floor)
    return np.log(counts / counts.sum()).astype(np.float32)
