"""Reading pre-training corpora: three input formats in, documents (lists of sentences) out.

Formats (``--corpus-format``, default ``auto``):

- ``google``: Google's ``create_pretraining_data.py`` input: one sentence per line, a blank line between documents.
- ``prose``: plain text, paragraphs separated by blank lines (lines inside a paragraph are joined), each file one
  document; paragraphs are split into sentences with ``pysbd``. A Project Gutenberg licence header and footer
  (``*** START OF ... ***`` / ``*** END OF ... ***``) are dropped when present.
- ``jsonl``: one JSON object per line with a ``text`` field, each a document, split into sentences like prose.

``auto`` picks ``jsonl`` for ``.jsonl``/``.json`` names and otherwise looks at the first lines: text where nearly
most lines end a sentence, and hold about one, is ``google``; anything else is ``prose``. Files may be
gzip-compressed (``.gz``). Text is UTF-8; with ``encoding="auto"`` (the default) a line that is not is read as
Windows-1252 (as old Project Gutenberg files are) with a warning; ``encoding="utf-8"`` fails naming the file and line.

Sentence splitting runs in worker processes (every core) on chunks of paragraphs, in order:
:func:`iter_documents` yields the same documents whatever the number of workers.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.errors import InputError

FORMATS = ("auto", "google", "prose", "jsonl")
# a document's paragraphs are split in chunks of this many, so one huge file still uses every core
PARAGRAPHS_PER_TASK = 256

_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?]['\"\u2019\u201d)\]]*$")
_INNER_SENTENCE_END = re.compile(r"[.!?]['\"\u2019\u201d)\]]*\s+['\"\u2018\u201c(]*[A-Z]")
_WHITESPACE = re.compile(r"\s+")


class CorpusError(InputError):
    """Unreadable corpus input; the message names the file (and line)."""


ENCODINGS = ("auto", "utf-8")


def open_text(path: str | os.PathLike) -> io.BufferedIOBase:
    """Open a file for binary line reading, transparently gunzipping ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_lines(path: str | os.PathLike, encoding: str = "auto", warn: bool = True) -> Iterator[str]:
    """Lines without their line break. ``utf-8``: a line that is not UTF-8 fails naming the file and line. ``auto``:
    such a line is read as Windows-1252 (old Gutenberg files), with one warning per file naming the first line."""
    if encoding not in ENCODINGS:
        raise CorpusError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    number, warned = 0, False
    try:
        with open_text(path) as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if encoding == "utf-8":
                        raise CorpusError(f"{path}: line {number}: not UTF-8 text ({e.reason} at byte {e.start} of "
                                          "the line); convert it, or pass --encoding auto") from None
                    if warn and not warned:
                        print(f"bertkit: {path}: line {number} is not UTF-8; reading such lines as Windows-1252",
                              file=sys.stderr)
                        warned = True
                    line = raw.decode("cp1252", errors="replace")
                if number == 1:
                    line = line.removeprefix("\ufeff")
                yield line.rstrip("\r\n")
    except (OSError, EOFError) as e:  # e.g. a truncated .gz
        raise CorpusError(f"{path}: cannot read after line {number}: {e}") from None


def strip_gutenberg(lines: list[str]) -> list[str]:
    """Drop a Project Gutenberg licence header (up to ``*** START OF ...``) and footer (from ``*** END OF ...``)."""
    start = next((i for i, line in enumerate(lines[:2000]) if _GUTENBERG_START.match(line)), None)
    if start is not None:
        lines = lines[start + 1:]
    end = next((i for i in range(len(lines) - 1, -1, -1) if _GUTENBERG_END.match(lines[i])), None)
    if end is not None:
        lines = lines[:end]
    return lines


def detect_format(path: str | os.PathLike, sample_lines: int = 400, encoding: str = "auto") -> str:
    """``jsonl`` by name; else ``google`` when >= 60% of sampled lines end a sentence and few hold two; else prose
    (hard-wrapped prose ends a sentence on a minority of lines; unwrapped prose holds several per line)."""
    name = Path(path).name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    sample: list[str] = []
    for line in read_lines(path, encoding, warn=False):
        if line.strip():
            sample.append(line.strip())
            if len(sample) >= sample_lines:
                break
    if not sample:
        return "google"
    ends = sum(bool(_SENTENCE_END.search(s)) for s in sample) / len(sample)
    multi = sum(len(_INNER_SENTENCE_END.findall(s)) for s in sample) / len(sample)
    return "google" if ends >= 0.6 and multi <= 0.5 else "prose"


def _paragraphs(lines: Iterable[str]) -> list[str]:
    """Blank-line-separated paragraphs, each one line of single-spaced text."""
    paragraphs, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def read_raw_documents(path: str | os.PathLike, fmt: str = "auto",
                       encoding: str = "auto") -> Iterator[tuple[str, list[str]]]:
    """Yield ``(kind, items)`` per document: kind ``sentences`` (already split) or ``paragraphs`` (to split)."""
    if fmt not in FORMATS:
        raise CorpusError(f"corpus format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "auto":
        fmt = detect_format(path, encoding=encoding)
    if fmt == "google":
        doc: list[str] = []
        for line in read_lines(path, encoding):
            line = _WHITESPACE.sub(" ", line).strip()
            if line:
                doc.append(line)
            elif doc:
                yield "sentences", doc
                doc = []
        if doc:
            yield "sentences", doc
    elif fmt == "prose":
        paragraphs = _paragraphs(strip_gutenberg(list(read_lines(path, encoding))))
        if paragraphs:
            yield "paragraphs", paragraphs
    else:  # jsonl
        for number, line in enumerate(read_lines(path, encoding), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}: line {number}: invalid JSON ({e.msg})") from None
            if not isinstance(record, dict) or "text" not in record:
                raise CorpusError(f"{path}: line {number}: expected an object with a 'text' field")
            text = record["text"]
            if not isinstance(text, str):
                raise CorpusError(f"{path}: line {number}: field 'text' must be a string, got {type(text).__name__}")
            paragraphs = _paragraphs(text.splitlines())
            if paragraphs:
                yield "paragraphs", paragraphs


_SEGMENTER = None


def split_sentences(paragraphs: list[str]) -> list[str]:
    """Sentences of each paragraph, with pysbd (English rules), in order; empty ones dropped."""
    global _SEGMENTER
    if _SEGMENTER is None:
        import pysbd

        _SEGMENTER = pysbd.Segmenter(language="en", clean=False)
    sentences = []
    for paragraph in paragraphs:
        for s in _SEGMENTER.segment(paragraph):
            s = s.strip()
            if s:
                sentences.append(s)
    return sentences


def _split_task(task: tuple[str, list[str]]) -> list[str]:
    kind, items = task
    return split_sentences(items) if kind == "paragraphs" else items


def _tasks(paths: Iterable[str | os.PathLike], fmt: str,
           encoding: str) -> Iterator[tuple[bool, tuple[str, list[str]]]]:
    """(last part of its document?, task) in order; long paragraph lists are cut into several tasks."""
    for path in paths:
        for kind, items in read_raw_documents(path, fmt, encoding):
            step = PARAGRAPHS_PER_TASK if kind == "paragraphs" else len(items)
            for start in range(0, len(items), step):
                yield start + step >= len(items), (kind, items[start:start + step])


def iter_documents(paths: Iterable[str | os.PathLike], fmt: str = "auto", workers: int | None = None,
                   on_document=None, encoding: str = "auto") -> Iterator[list[str]]:
    """Documents (lists of sentences) from every file, in file order. ``workers`` processes split sentences
    (default: every core; 0 or 1 = in this process). ``on_document(sentences)`` is called per document."""
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.is_file():
            raise CorpusError(f"{p}: no such corpus file")
    workers = (os.cpu_count() or 1) if workers is None else workers
    tasks = _tasks(paths, fmt, encoding)
    flags: list[bool] = []

    def flagged() -> Iterator[tuple[str, list[str]]]:
        for last, task in tasks:
            flags.append(last)
            yield task

    if workers <= 1:
        results: Iterator[list[str]] = map(_split_task, flagged())
        pool = None
    else:
        import multiprocessing as mp

        pool = mp.get_context("spawn" if os.name == "nt" else "fork").Pool(workers)
        results = pool.imap(_split_task, flagged(), chunksize=1)
    try:
        doc: list[str] = []
        for i, sentences in enumerate(results):
            doc.extend(sentences)
            if flags[i]:
                if doc:
                    if on_document is not None:
                        on_document(doc)
                    yield doc
                doc = []
    finally:
        if pool is not None:
            pool.terminate()
