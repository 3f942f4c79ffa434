"""Reading pre-training corpora: three input formats in, documents (lists of sentences) out.

Formats (``--corpus-format``, default ``auto``):

- ``google``: Google's ``create_pretraining_data.py`` input: one sentence per line, a blank line between documents.
- ``prose``: plain text, paragraphs separated by blank lines (lines inside a paragraph are joined), each file one
  document; paragraphs are split into sentences with ``pysbd``. A Project Gutenberg licence header and footer
  (``*** START OF ... ***`` / ``*** END OF ... ***``) are dropped when present.
- ``jsonl``: one JSON object per line with a ``text`` field, each a document, split into sentences like prose.

``auto`` picks ``jsonl`` for ``.jsonl``/``.json`` names and otherwise looks at the first lines: text where nearly
most lines end a sentence, and hold about one, is ``google``; anything else is ``prose``. Files may be
gzip-compressed (recognised by their first bytes, whatever the name); a file that is not text is refused, and a
directory is read as its text files (:func:`expand_corpus`). Text is UTF-8; with ``encoding="auto"`` (the default)
a line that is not is read as Windows-1252 (as old Project Gutenberg files are) with a warning;
``encoding="utf-8"`` fails naming the file and line.

Sentence splitting runs in worker processes (every core) on chunks of paragraphs, in order:
:func:`iter_documents` yields the same documents whatever the number of workers.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bertkit.errors import InputError

logger = logging.getLogger(__name__)

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


_GZIP_MAGIC = b"\x1f\x8b"
_SNIFF_BYTES = 1 << 16
# a text file has (nearly) no bytes that are neither valid UTF-8 nor ordinary whitespace/printable; Windows-1252
# prose has a few percent; compiled programs, images and archives have many (and NUL bytes)
_MAX_BINARY_FRACTION = 0.3


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def binary_reason(sample: bytes) -> str | None:
    """Why ``sample`` (a file's first bytes, decompressed) is not text, or None when it is."""
    if b"\x00" in sample:
        return "it holds NUL bytes (a binary file, not text)"
    if not sample:
        return None
    text = sample.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    if bad > _MAX_BINARY_FRACTION * len(text) and len(sample) >= 64:
        return f"{bad / len(text):.0%} of its first bytes are not text"
    return None


def open_text(path: str | os.PathLike) -> io.BufferedIOBase:
    """Open a file for binary line reading: gunzipped when its first bytes are gzip's magic (whatever its name);
    a file that is not text (NUL bytes, or mostly bytes that are neither UTF-8 nor printable) is refused."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory (give it as --corpus alone, or its files)")
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    f = gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb", buffering=_SNIFF_BYTES)
    try:
        reason = binary_reason(f.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(f, "peek") else b"")
    except (OSError, EOFError) as e:
        f.close()
        raise CorpusError(f"{path}: cannot read: {e}") from None
    if reason:
        f.close()
        raise CorpusError(f"{path}: not a text corpus: {reason}")
    return f


def text_size(path: str | os.PathLike) -> int:
    """Bytes of text in a file: its size, or for gzip the uncompressed size its trailer records (mod 2^32)."""
    path = Path(path)
    size = path.stat().st_size
    if size >= 18 and _is_gzip(path):
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    return size


def expand_corpus(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The corpus files: a file as given; a directory as its text files (recursively, sorted by path; hidden files,
    and files that are neither text nor gzip by their first bytes, are left out). A path that is neither, or a
    directory with no text file, is an error naming it."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            found = []
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p)
                if not f.is_file() or any(part.startswith(".") for part in rel.parts):
                    continue
                with open(f, "rb") as fh:
                    head = fh.read(_SNIFF_BYTES)
                if head[:2] == _GZIP_MAGIC or binary_reason(head) is None:
                    found.append(f)
            if not found:
                raise CorpusError(f"{p}: a directory with no text files to read as a corpus")
            files.extend(found)
        else:
            raise CorpusError(f"{p}: no such corpus file or directory")
    return files


def read_lines(path: str | os.PathLike, encoding: str = "auto", warn: bool = True,
               on_bytes: Callable[[int], None] | None = None) -> Iterator[str]:
    """Lines without their line break. ``utf-8``: a line that is not UTF-8 fails naming the file and line. ``auto``:
    such a line is read as Windows-1252 (old Gutenberg files), with one warning per file naming the first line.
    A NUL byte fails naming the line (a binary file). ``on_bytes(n)`` is told the bytes of each line read."""
    if encoding not in ENCODINGS:
        raise CorpusError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    number, warned = 0, False
    try:
        with open_text(path) as f:
            for number, raw in enumerate(f, 1):
                if on_bytes is not None:
                    on_bytes(len(raw))
                if b"\x00" in raw:
                    raise CorpusError(f"{path}: line {number}: a NUL byte: this is a binary file, not text")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if encoding == "utf-8":
                        raise CorpusError(f"{path}: line {number}: not UTF-8 text ({e.reason} at byte {e.start} of "
                                          "the line); convert it, or pass --encoding auto") from None
                    if warn and not warned:
                        logger.warning(f"bertkit: {path}: line {number} is not UTF-8; reading such lines as "
                                       "Windows-1252")
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


def read_raw_documents(path: str | os.PathLike, fmt: str = "auto", encoding: str = "auto",
                       on_bytes: Callable[[int], None] | None = None) -> Iterator[tuple[str, list[str]]]:
    """Yield ``(kind, items)`` per document: kind ``sentences`` (already split) or ``paragraphs`` (to split)."""
    if fmt not in FORMATS:
        raise CorpusError(f"corpus format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "auto":
        fmt = detect_format(path, encoding=encoding)
    if fmt == "google":
        doc: list[str] = []
        for line in read_lines(path, encoding, on_bytes=on_bytes):
            line = _WHITESPACE.sub(" ", line).strip()
            if line:
                doc.append(line)
            elif doc:
                yield "sentences", doc
                doc = []
        if doc:
            yield "sentences", doc
    elif fmt == "prose":
        paragraphs = _paragraphs(strip_gutenberg(list(read_lines(path, encoding, on_bytes=on_bytes))))
        if paragraphs:
            yield "paragraphs", paragraphs
    else:  # jsonl
        for number, line in enumerate(read_lines(path, encoding, on_bytes=on_bytes), 1):
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
# pysbd's time grows with the square of a paragraph's length (0.7 s at 25k characters, 20 s at 200k): longer
# paragraphs are cut into pieces of at most this many characters first, so splitting stays linear in the text
MAX_PARAGRAPH_CHARS = 4000
_CUT_AT = re.compile(r"[.!?]['\"\u2019\u201d)\]]*\s")


def cut_paragraph(paragraph: str, limit: int = MAX_PARAGRAPH_CHARS) -> list[str]:
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
    ``MAX_PARAGRAPH_CHARS`` are cut first (:func:`cut_paragraph`)."""
    global _SEGMENTER
    if _SEGMENTER is None:
        import pysbd

        _SEGMENTER = pysbd.Segmenter(language="en", clean=False)
    sentences = []
    for paragraph in paragraphs:
        for piece in cut_paragraph(paragraph) if len(paragraph) > MAX_PARAGRAPH_CHARS else (paragraph,):
            for s in _SEGMENTER.segment(piece):
                s = s.strip()
                if s:
                    sentences.append(s)
    return sentences


def _split_task(task: tuple[str, list[str]]) -> list[str]:
    kind, items = task
    return split_sentences(items) if kind == "paragraphs" else items


def _tasks(paths: Iterable[str | os.PathLike], fmt: str, encoding: str,
           on_bytes: Callable[[int], None] | None) -> Iterator[tuple[bool, tuple[str, list[str]]]]:
    """(last part of its document?, task) in order; long paragraph lists are cut into several tasks."""
    for path in paths:
        for kind, items in read_raw_documents(path, fmt, encoding, on_bytes):
            step = PARAGRAPHS_PER_TASK if kind == "paragraphs" else len(items)
            for start in range(0, len(items), step):
                yield start + step >= len(items), (kind, items[start:start + step])


def iter_documents(paths: Iterable[str | os.PathLike], fmt: str = "auto", workers: int | None = None,
                   on_document=None, encoding: str = "auto", progress: bool = False) -> Iterator[list[str]]:
    """Documents (lists of sentences) from every file (directories: their text files), in file order. ``workers``
    processes split sentences (default: every core; 0 or 1 = in this process). ``on_document(sentences)`` is called
    per document. ``progress``: a progress bar over the bytes read."""
    paths = expand_corpus(paths)
    workers = (os.cpu_count() or 1) if workers is None else workers
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(text_size(p) for p in paths), desc="reading", unit="B", unit_scale=True,
                   mininterval=1.0, dynamic_ncols=True)
    tasks = _tasks(paths, fmt, encoding, bar.update if bar is not None else None)
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
        if bar is not None:
            bar.close()


def write_sentences(paths: Iterable[str | os.PathLike], output: str | os.PathLike, fmt: str = "auto",
                    workers: int | None = None, encoding: str = "auto", progress: bool = False) -> int:
    """Sentence-split the corpus once into Google's format (a sentence per line, a blank line after each document)
    at ``output``, atomically (fsynced temp file, renamed); the vocabulary trainer and the tokenizer both read it.
    Returns the number of documents."""
    from bertkit.files import atomic_write

    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8") as f:
            for doc in iter_documents(paths, fmt, workers=workers, encoding=encoding, progress=progress):
                f.write("\n".join(doc) + "\n\n")
                count += 1

    atomic_write(output, write)
    return count
