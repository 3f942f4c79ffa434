"""Pre-training shards on disk: the writer of ``<name>.{tokens,sentences,documents}.npy`` and ``meta.json``, the
commit marker that says which shards are whole. :mod:`bertkit.data.pretraining.prepare` writes them;
:mod:`bertkit.data.pretraining.instances` reads them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from bertkit.files import atomic_write

META_NAME = "meta.json"
SHARD_FORMAT = 1


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object: np.save would add ".npy" to the temp file's name
        np.save(f, array)


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ShardWriter:
    """Accumulates tokenized sentences and writes ``<name>.{tokens,sentences,documents}.npy`` shards (atomically).

    ``add(ids, lengths, doc_end)`` appends sentences to the open document and closes it with ``doc_end``; a shard
    is written by :meth:`flush` (at ``shard_tokens`` when ``auto_flush``), and a document still open then ends with
    the shard (its rest starts a document of the next one). Memory is one shard's tokens."""

    def __init__(self, directory: Path, prefix: str, dtype: np.dtype, shard_tokens: int, auto_flush: bool = True):
        self.directory, self.prefix, self.dtype, self.shard_tokens = directory, prefix, dtype, shard_tokens
        self.auto_flush = auto_flush
        self.shards: list[dict] = []
        self._reset()

    def _reset(self) -> None:
        self.ids: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.doc_sentences: list[int] = []
        self.open_sentences = 0
        self.n_tokens = 0

    def add(self, ids: np.ndarray, lengths: np.ndarray, doc_end: bool = True) -> None:
        if len(lengths):
            self.ids.append(np.asarray(ids).astype(self.dtype, copy=False))  # stored at the shard's width
            self.lengths.append(lengths)
            self.open_sentences += len(lengths)
            self.n_tokens += len(ids)
        if doc_end and self.open_sentences:
            self.doc_sentences.append(self.open_sentences)
            self.open_sentences = 0
        if self.auto_flush and self.n_tokens >= self.shard_tokens:
            self.flush()

    @property
    def full(self) -> bool:
        return self.n_tokens >= self.shard_tokens

    def flush(self) -> None:
        if self.open_sentences:
            self.doc_sentences.append(self.open_sentences)
            self.open_sentences = 0
        if not self.doc_sentences:
            return
        name = self.prefix if self.prefix == "eval" else f"{self.prefix}-{len(self.shards):05d}"
        tokens = np.concatenate(self.ids).astype(self.dtype, copy=False)
        sentences = np.concatenate([[0], np.cumsum(np.concatenate(self.lengths))]).astype(np.int64)
        documents = np.concatenate([[0], np.cumsum(self.doc_sentences)]).astype(np.int64)
        self._reset()
        for part, array in (("tokens", tokens), ("sentences", sentences), ("documents", documents)):
            final = self.directory / f"{name}.{part}.npy"
            atomic_write(final, lambda p, a=array: _save_npy(p, a))
        self.shards.append(
            {
                "name": name,
                "tokens": len(tokens),
                "sentences": int(len(sentences) - 1),
                "documents": int(len(documents) - 1),
            }
        )


def read_meta(out_dir: str | os.PathLike) -> dict | None:
    path = Path(out_dir) / META_NAME
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == SHARD_FORMAT else None
