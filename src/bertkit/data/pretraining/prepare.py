"""Corpus preparation: corpus files to tokenized memmap shards, streaming, in every core, resumable.

The pipeline is one pool (:func:`bertkit.data.pretraining.pipeline.ordered_map`): this process reads the files in
bounded blocks (:func:`bertkit.data.pretraining.corpus.iter_blocks`); each worker splits a block into sentences and
tokenizes them; the results come back in order and go to the shard writers. Memory is bounded by a block per task in
flight and one shard, never by the corpus: no file, document or token list is held whole.

Resuming: at every training shard written, the position reached (input file, block within it), the held-out text
so far and the documents' state are saved (``progress.json`` last, atomically). A preparation started again with the
same files, vocabulary and settings goes on from there, and writes the same shards as one never interrupted.

Reuse: ``meta.json`` (written last) records the fingerprint of the files (path, size, mtime), the vocabulary (its
tokens), the casing and every setting; shards with the same fingerprint are reused. ``bertkit prepare`` writes
into a cache directory keyed by that fingerprint (``$BERTKIT_CACHE``, default ``~/.cache/bertkit``, then
``prepared/<key>``), where ``bertkit pretrain`` finds them: they are linked into the run (hard links; a copy where
the cache is on another file system).

Held out (never trained on): ``eval_fraction`` of the text, as whole documents when there are many (every
``round(1/eval_fraction)``-th from the 100th), else the last sentences of each document of 50+ sentences (of each
stretch of ``HeldOut.SEGMENT`` sentences, for longer ones); at most ``max_eval_tokens`` tokens in all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from bertkit.data.pretraining.corpus import ENCODINGS, FORMATS, Block, document_pieces, expand_corpus, iter_blocks
from bertkit.data.pretraining.pipeline import ordered_map, progress_bar
from bertkit.data.pretraining.shards import META_NAME, SHARD_FORMAT, ShardWriter, file_sha256, read_meta
from bertkit.data.pretraining.splitter import SPLITTERS
from bertkit.data.pretraining.workers import init_tokenizer, tokenize_block
from bertkit.errors import InputError
from bertkit.files import atomic_write, write_json
from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.wordpiece import find_vocab

logger = logging.getLogger(__name__)

PREPARE_VERSION = 2
PROGRESS_NAME = "progress.json"
PENDING_EVAL_NAME = "eval.pending.npz"
DEFAULTS = {"shard_tokens": 1 << 24, "eval_fraction": 0.02, "max_eval_tokens": 1 << 21}
# a pre-training run trains its vocabulary on at most about this many bytes of its sentence-split corpus, every k-th
# sentence (:func:`sentence_sample`). On the shared corpus (books and Wikipedia, 347 MB split), the 8,000-token
# vocabulary trained on all of it spent 3,951 of its entries on single characters (3,847 of them non-ASCII: an
# alphabet that grows with the text), and took 80 s of a 2-core machine; on every 6th sentence, 1,379 entries, 6%
# fewer tokens a word on held-out sentences (1.19 against 1.27), 18 s
VOCAB_SAMPLE_BYTES = 64 << 20


def sentence_sample(path: str | os.PathLike, max_bytes: int = VOCAB_SAMPLE_BYTES) -> tuple[Callable, int]:
    """(lines, k): a function returning, afresh on each call, every k-th sentence of a Google-format file (a
    sentence per line, blank lines between documents), k the smallest that keeps them within about ``max_bytes``
    (1: all of them); for ``train_vocab(texts=lines)``, which reads them twice."""
    k = max(1, -(-Path(path).stat().st_size // max_bytes))

    def lines():
        with open(path, encoding="utf-8") as f:
            n = 0
            for line in f:
                if line.strip():
                    if n % k == 0:
                        yield line.rstrip("\n")
                    n += 1

    return lines, k


class PrepareError(InputError):
    """Preparation cannot go on (e.g. a corpus with no text)."""


# --------------------------------------------------------------------------------------------- main side


class HeldOut:
    """Routes each document's sentences, as they stream in, to the training writer or the held-out one."""

    SEGMENT = 1 << 16  # few long documents: the tail of each stretch of this many sentences is held out

    def __init__(self, train: ShardWriter, held: ShardWriter, eval_fraction: float, max_eval_tokens: int):
        self.train, self.held, self.fraction, self.cap = train, held, eval_fraction, max_eval_tokens
        self.every = max(2, round(1 / eval_fraction)) if eval_fraction > 0 else 0
        self.doc_index, self.doc_open, self.doc_eval = 0, False, False
        self._ids: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._n = 0

    @property
    def clean(self) -> bool:
        """No sentences buffered here (a resumable point)."""
        return self._n == 0

    def state(self) -> dict:
        return {"doc_index": self.doc_index, "doc_open": self.doc_open, "doc_eval": self.doc_eval}

    def restore(self, state: dict) -> None:
        self.doc_index, self.doc_open, self.doc_eval = state["doc_index"], state["doc_open"], state["doc_eval"]

    def add(self, ids: np.ndarray, lengths: np.ndarray, doc_end: bool) -> None:
        if not self.doc_open:
            self.doc_index += 1
            self.doc_open = True
            self.doc_eval = bool(
                self.every
                and self.doc_index % self.every == 0
                and self.doc_index >= 100
                and self.held.n_tokens < self.cap
            )
        if self.doc_eval:
            self.held.add(ids, lengths, doc_end)
        elif self.every and self.doc_index < 100:
            if len(lengths):
                self._ids.append(ids)
                self._lengths.append(lengths)
                self._n += len(lengths)
            if self._n >= self.SEGMENT or doc_end:
                self._segment(doc_end)
        else:
            self.train.add(ids, lengths, doc_end)
        if doc_end:
            self.doc_open = False

    def _segment(self, doc_end: bool) -> None:
        if not self._n:
            self.train.add(np.zeros(0, np.int32), np.zeros(0, np.int64), doc_end)
            return
        ids, lengths = np.concatenate(self._ids), np.concatenate(self._lengths)
        self._ids, self._lengths, self._n = [], [], 0
        n = len(lengths)
        if n >= 50 and self.held.n_tokens < self.cap:
            n_eval = max(1, int(n * self.fraction))
            cut = int(lengths[:-n_eval].sum())
            self.train.add(ids[:cut], lengths[:-n_eval], True)
            self.held.add(ids[cut:], lengths[-n_eval:], True)
        else:
            self.train.add(ids, lengths, doc_end)


def _writer_state(w: ShardWriter) -> dict[str, np.ndarray]:
    return {
        "ids": np.concatenate(w.ids) if w.ids else np.zeros(0, np.int32),
        "lengths": np.concatenate(w.lengths) if w.lengths else np.zeros(0, np.int64),
        "docs": np.asarray(w.doc_sentences, dtype=np.int64),
        "open": np.asarray([w.open_sentences]),
    }


def _restore_writer(w: ShardWriter, state) -> None:
    w._reset()
    if len(state["lengths"]):
        w.ids, w.lengths, w.n_tokens = [np.asarray(state["ids"])], [np.asarray(state["lengths"])], len(state["ids"])
    w.doc_sentences = [int(d) for d in state["docs"]]
    w.open_sentences = int(state["open"][0])


def vocab_fingerprint(tokenizer) -> str:
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()


def corpus_fingerprint(files: list[Path], tokenizer, **settings) -> dict:
    """What the shards depend on: the files (path, size, mtime), the vocabulary's tokens and casing, and every
    setting. Equal fingerprints mean equal shards."""
    entries = []
    for p in files:
        st = Path(p).stat()
        entries.append([str(Path(p).resolve()), st.st_size, st.st_mtime_ns])
    return {
        "version": PREPARE_VERSION,
        "files": entries,
        "vocab": vocab_fingerprint(tokenizer),
        "lowercase": bool(getattr(tokenizer, "lowercase", True)),
        **settings,
    }


def fingerprint_key(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()[:20]


def cache_root() -> Path:
    return Path(os.environ.get("BERTKIT_CACHE") or Path.home() / ".cache" / "bertkit")


def cache_dir(fingerprint: dict) -> Path:
    """Where ``bertkit prepare`` keeps the shards of this fingerprint."""
    return cache_root() / "prepared" / fingerprint_key(fingerprint)


def _link_shards(src: Path, dst: Path, meta: dict) -> None:
    """Hard-link (or copy, across file systems) a finished shard directory's files into ``dst``; meta.json last."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / META_NAME).unlink(missing_ok=True)
    names = [s["name"] for s in meta["shards"]] + ([meta["eval"]["name"]] if meta.get("eval") else [])
    for name in names:
        for part in ("tokens", "sentences", "documents"):
            f = f"{name}.{part}.npy"
            (dst / f).unlink(missing_ok=True)
            try:
                os.link(src / f, dst / f)
            except OSError:
                shutil.copyfile(src / f, dst / f)
    write_json(dst / META_NAME, meta, sort_keys=False)


def _settings(corpus_format, encoding, splitter, text_field, shard_tokens, eval_fraction, max_eval_tokens) -> dict:
    if corpus_format not in FORMATS:
        raise PrepareError(f"corpus format must be one of {FORMATS}, got {corpus_format!r}")
    if encoding not in ENCODINGS:
        raise PrepareError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if splitter not in SPLITTERS:
        raise PrepareError(f"splitter must be one of {SPLITTERS}, got {splitter!r}")
    if shard_tokens < 1 or not 0 <= eval_fraction < 1 or max_eval_tokens < 0:
        raise PrepareError("shard_tokens must be >= 1, eval_fraction in [0, 1), max_eval_tokens >= 0")
    return {
        "format": corpus_format,
        "encoding": encoding,
        "splitter": splitter,
        "text_field": text_field,
        "shard_tokens": int(shard_tokens),
        "eval_fraction": float(eval_fraction),
        "max_eval_tokens": int(max_eval_tokens),
    }


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
    splitter: str = "regex",
    text_field: str = "text",
    shard_tokens: int = DEFAULTS["shard_tokens"],
    eval_fraction: float = DEFAULTS["eval_fraction"],
    max_eval_tokens: int = DEFAULTS["max_eval_tokens"],
    use_cache: bool = True,
    on_checkpoint: Callable[[dict], None] | None = None,
    follow_symlinks: bool = False,
) -> dict:
    """Shards for ``corpus`` under ``out_dir`` (see the module's doc); returns the ``meta.json`` dict.

    ``workers`` processes split and tokenize (default: every core; 0 or 1: in this process, same shards).
    ``use_cache``: link shards that ``bertkit prepare`` made in the cache, when they match. ``on_checkpoint``
    is called with the progress record after each one is saved (tests interrupt a preparation there).
    ``follow_symlinks``: read links leaving a corpus directory too (default: skipped, with a warning).
    ``meta.json``'s ``fingerprint.files`` lists every file read."""

    settings = _settings(corpus_format, encoding, splitter, text_field, shard_tokens, eval_fraction, max_eval_tokens)
    files = expand_corpus(corpus, follow_symlinks)
    out_dir = Path(out_dir)
    tokenizer = BertTokenizer.from_pretrained(str(vocab_path), lowercase=lowercase)
    fingerprint = corpus_fingerprint(files, tokenizer, **settings)
    meta = read_meta(out_dir)
    if meta is not None and meta.get("fingerprint") == fingerprint:
        log(f"reusing the tokenized corpus in {out_dir}")
        return meta
    if use_cache:
        cached = cache_dir(fingerprint)
        meta = read_meta(cached)
        if meta is not None and meta.get("fingerprint") == fingerprint and cached.resolve() != out_dir.resolve():
            log(f"reusing the corpus prepared in {cached} (bertkit prepare)")
            _link_shards(cached, out_dir, meta)
            return meta
    return _build(
        files,
        out_dir,
        str(vocab_path),
        tokenizer,
        lowercase,
        fingerprint,
        settings,
        workers,
        progress,
        log,
        on_checkpoint,
    )


def _build(
    files,
    out_dir: Path,
    vocab_path: str,
    tokenizer,
    lowercase,
    fingerprint: dict,
    settings: dict,
    workers,
    progress: bool,
    log,
    on_checkpoint,
) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / META_NAME).unlink(missing_ok=True)  # no commit marker until every shard is written
    vocab_size = len(tokenizer)
    dtype = np.dtype(np.uint16 if vocab_size <= 65535 else np.int32)
    train = ShardWriter(out_dir, "train", dtype, settings["shard_tokens"], auto_flush=False)
    held = ShardWriter(out_dir, "eval", dtype, 1 << 62, auto_flush=False)
    router = HeldOut(train, held, settings["eval_fraction"], settings["max_eval_tokens"])
    key = fingerprint_key(fingerprint)
    start = _resume(out_dir, key, train, held, router, log)
    if start is None:
        log(f"tokenizing {len(files)} file(s) into {out_dir}")
    blocks = iter_blocks(files, settings["format"], settings["encoding"], settings["text_field"], start=start)
    done_bytes = sum(Path(f).stat().st_size for f in files[: start[0]]) if start else 0
    bar = progress_bar(files, "preparing", progress, done_bytes)
    tasks = ((b, (b.kind, b.items, settings["splitter"])) for b in blocks)
    try:
        with ordered_map(tokenize_block, tasks, workers, init_tokenizer, (vocab_path, lowercase)) as results:
            for block, (ids, lengths, counts) in results:
                bar.advance(block)
                _route(block, ids, lengths, counts, router)
                if train.full and router.clean:
                    record = _checkpoint(out_dir, key, block, train, held, router)
                    if on_checkpoint is not None:
                        on_checkpoint(record)
    finally:
        bar.close()
    train.flush()
    held.flush()
    if not train.shards:
        raise PrepareError(
            f"the corpus ({', '.join(map(str, files[:3]))}{', ...' if len(files) > 3 else ''}) holds "
            "no text to pre-train on (every document was empty)"
        )
    meta = {
        "format": SHARD_FORMAT,
        "vocab_size": vocab_size,
        "vocab_sha256": file_sha256(tokenizer_vocab_file(vocab_path)),
        "lowercase": bool(getattr(tokenizer, "lowercase", True)),
        "dtype": dtype.name,
        "shards": train.shards,
        "eval": held.shards[0] if held.shards else None,
        "fingerprint": fingerprint,
    }
    write_json(out_dir / META_NAME, meta, sort_keys=False)
    (out_dir / PROGRESS_NAME).unlink(missing_ok=True)
    (out_dir / PENDING_EVAL_NAME).unlink(missing_ok=True)
    return meta


def tokenizer_vocab_file(vocab_path: str | os.PathLike) -> Path:
    p = Path(vocab_path)
    if p.is_dir():
        return find_vocab(p) or p / "vocab.txt"
    return p


def _route(block: Block, ids, lengths, counts: list[int], router: HeldOut) -> None:
    ids = np.frombuffer(ids, dtype=np.int32) if len(ids) else np.zeros(0, np.int32)
    lengths = np.frombuffer(lengths, dtype=np.int64) if len(lengths) else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for lo, hi, end in document_pieces(counts, block.ends):
        router.add(ids[offsets[lo] : offsets[hi]], lengths[lo:hi], end)


def _checkpoint(out_dir: Path, key: str, block: Block, train: ShardWriter, held: ShardWriter, router: HeldOut) -> dict:
    """Write the full training shard, then the held-out text so far, then the progress record (last)."""
    train.flush()
    state = _writer_state(held)
    atomic_write(out_dir / PENDING_EVAL_NAME, lambda p: _save_npz(p, state))
    record = {"key": key, "position": list(block.where), "router": router.state(), "shards": train.shards}
    write_json(out_dir / PROGRESS_NAME, record, sort_keys=False)
    return record


def _save_npz(path: Path, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _resume(
    out_dir: Path, key: str, train: ShardWriter, held: ShardWriter, router: HeldOut, log
) -> tuple[int, int] | None:
    """The position to go on after, when ``out_dir`` holds an interrupted preparation of the same fingerprint."""
    path = out_dir / PROGRESS_NAME
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("key") != key:
            log(f"{out_dir}: an interrupted preparation of other files or settings; starting afresh")
            return None
        with np.load(out_dir / PENDING_EVAL_NAME) as z:
            state = {k: z[k] for k in z.files}
        for s in record["shards"]:
            for part in ("tokens", "sentences", "documents"):
                if not (out_dir / f"{s['name']}.{part}.npy").is_file():
                    raise FileNotFoundError(f"{s['name']}.{part}.npy")
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"{out_dir}: cannot resume the interrupted preparation ({e}); starting afresh")
        return None
    _restore_writer(held, state)
    train.shards = list(record["shards"])
    router.restore(record["router"])
    position = tuple(record["position"])
    log(f"resuming the preparation in {out_dir} after {len(train.shards)} shard(s) (file {position[0] + 1})")
    return position  # type: ignore[return-value]


def build_shards_from_documents(
    documents: Iterable[list[str]],
    vocab_path,
    out_dir,
    lowercase=None,
    shard_tokens: int = DEFAULTS["shard_tokens"],
    eval_fraction: float = DEFAULTS["eval_fraction"],
    workers=None,
    fingerprint: dict | None = None,
    progress: bool = False,
    max_eval_tokens: int = DEFAULTS["max_eval_tokens"],
) -> dict:
    """Shards from documents already split into sentences (in memory): each document is one block."""

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / META_NAME).unlink(missing_ok=True)
    tokenizer = BertTokenizer.from_pretrained(str(vocab_path), lowercase=lowercase)
    dtype = np.dtype(np.uint16 if len(tokenizer) <= 65535 else np.int32)
    train = ShardWriter(out_dir, "train", dtype, shard_tokens)
    held = ShardWriter(out_dir, "eval", dtype, 1 << 62, auto_flush=False)
    router = HeldOut(train, held, eval_fraction, max_eval_tokens)
    tasks = ((Block("sentences", doc, [len(doc) - 1]), ("sentences", list(doc), "regex")) for doc in documents)
    with ordered_map(tokenize_block, tasks, workers, init_tokenizer, (str(vocab_path), lowercase)) as results:
        for block, (ids, lengths, counts) in results:
            _route(block, ids, lengths, counts, router)
    train.flush()
    held.flush()
    if not train.shards:
        raise PrepareError("the corpus holds no text to pre-train on (every document was empty)")
    meta = {
        "format": SHARD_FORMAT,
        "vocab_size": len(tokenizer),
        "vocab_sha256": file_sha256(tokenizer_vocab_file(vocab_path)),
        "lowercase": bool(getattr(tokenizer, "lowercase", True)),
        "dtype": dtype.name,
        "shards": train.shards,
        "eval": held.shards[0] if held.shards else None,
        "fingerprint": fingerprint or {},
    }
    write_json(out_dir / META_NAME, meta, sort_keys=False)
    return meta
