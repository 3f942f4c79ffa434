"""Reading pre-training corpora as a stream: files in, bounded blocks of text out, in order.

Formats (``--corpus-format``, default ``auto``):

- ``google``: Google's ``create_pretraining_data.py`` input: one sentence per line, a blank line between documents.
  The fastest path: nothing is split.
- ``prose``: plain text, paragraphs separated by blank lines (lines inside a paragraph are joined), each file one
  document, split into sentences (:mod:`bertkit.data.pretraining.splitter`). A Project Gutenberg licence header and
  footer (``*** START OF ... ***`` / ``*** END OF ... ***``) are dropped when present.
- ``jsonl``: one JSON object per line, its ``text`` field (``text_field``) a document, split like prose.
- ``parquet``: a Parquet file's text column (``text_field``), each row a document (read with pyarrow, a row group
  at a time).
- ``arrow``: an Arrow IPC stream file, as a Hugging Face ``datasets.save_to_disk`` directory holds them (the
  directory itself is recognised by its ``state.json``; a ``DatasetDict`` by ``dataset_dict.json``: every split).
- ``task``: a task file's text columns (TSV, CSV, JSONL, CoNLL; sentence pairs too), each example a document
  (:mod:`bertkit.data.pretraining.task_text`, which ``auto`` asks first).

``auto`` goes by the name (``.jsonl``/``.json``, ``.parquet``, ``.arrow``, under any ``.gz``/``.zst``) and then by
the first bytes (Parquet's ``PAR1``); text where most lines end a sentence and hold about one is ``google``,
anything else ``prose``. Text files may be gzip-, zstd-, bzip2- or xz-compressed (recognised by their first bytes,
whatever the name); a file that is not text is refused. Text is UTF-8; with ``encoding="auto"`` (the default) a
line that is not is read as Windows-1252 (as old Project Gutenberg files are) with a warning; ``encoding="utf-8"``
fails naming the file and line. A Parquet/Arrow column with no text is an error; one with null rows, a warning.

A directory is read as its corpus files, recursively, in path order, and only below itself
(:mod:`bertkit.data.pretraining.corpus_files`): a symbolic link leaving it is skipped with a warning unless
``follow_symlinks``; a target already read (or a directory loop) is read once. A truncated or corrupt compressed
file is an error naming the file and the last line read, never a shorter corpus.

Memory stays bounded whatever the corpus: :func:`iter_blocks` never holds a file, a document or a line whole (a
line longer than ``MAX_LINE_BYTES`` is read in pieces cut at a space). Only a JSONL record, or a Parquet/Arrow
row, is held whole, as it must be parsed whole.
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import json
import logging
import lzma
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.data.pretraining.corpus_files import (
    BZ2_MAGIC,
    GZIP_MAGIC,
    PARQUET_MAGIC,
    SNIFF_BYTES,
    XZ_MAGIC,
    ZSTD_MAGIC,
    CorpusError,
    binary_reason,
    expand_corpus,
)
from bertkit.data.pretraining.pipeline import ordered_map, progress_bar
from bertkit.data.pretraining.splitter import split_paragraphs
from bertkit.data.pretraining.task_text import sniff, task_documents
from bertkit.files import atomic_write, unreadable_reason

logger = logging.getLogger(__name__)

FORMATS = ("auto", "google", "prose", "jsonl", "parquet", "arrow", "task")
ENCODINGS = ("auto", "utf-8")
# a block of text handed to a worker: about this many characters (documents are cut at paragraph boundaries)
BLOCK_CHARS = 1 << 19
# a line is read in pieces of at most this many bytes (cut at a space), so one huge line is never held whole
MAX_LINE_BYTES = 1 << 20
# a paragraph is cut (at a line) once it reaches this many characters, so a file without blank lines streams too
MAX_PARAGRAPH_CHARS = 1 << 16

_GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\s*\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_LICENCE_LINES, _NEXT_START_LINES = 400, 1000
_SENTENCE_END = re.compile(r"[.!?]['\"\u2019\u201d)\]]*$")
_INNER_SENTENCE_END = re.compile(r"[.!?]['\"\u2019\u201d)\]]*\s+['\"\u2018\u201c(]*[A-Z]")
_WHITESPACE = re.compile(r"\s+")


_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz")
# a zstd stream is decompressed this many compressed bytes at a time (bounds the output of one call)
_ZSTD_CHUNK = 1 << 12
# what a truncated or corrupt compressed stream raises, whatever the library: each means "cannot read on"
_STREAM_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def _head(path: Path, n: int = 8) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


class _Counting(io.RawIOBase):
    """A raw file that counts the bytes read from disk (progress, whatever the compression)."""

    def __init__(self, f):
        self.f, self.count = f, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        self.count += n or 0
        return n

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()
        super().close()


class _ZstdFrames(io.RawIOBase):
    """A zstd stream of one or more frames, decompressed a small chunk at a time; a stream that ends inside a frame
    raises EOFError (``zstandard``'s stream reader returns what it has, silently: a truncated file would read as a
    shorter corpus)."""

    def __init__(self, raw):
        import zstandard

        self.raw, self.new = raw, zstandard.ZstdDecompressor().decompressobj
        self.d, self.out, self.in_frame, self.done = self.new(), bytearray(), False, False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self.out and not self.done:
            data = self.raw.read(_ZSTD_CHUNK)
            if not data:
                if self.in_frame:
                    raise EOFError("the zstd stream ends inside a frame (a truncated file)")
                self.done = True
            while data:
                self.out += self.d.decompress(data)
                self.in_frame = True
                data = b""
                if self.d.eof:  # a frame ended: what follows is the next one
                    data, self.d, self.in_frame = self.d.unused_data, self.new(), False
        n = min(len(b), len(self.out))
        b[:n] = self.out[:n]
        del self.out[:n]
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _decompressed(head: bytes, raw) -> io.RawIOBase | io.BufferedIOBase:
    """``raw`` decompressed by its first bytes (gzip, zstd, bzip2, xz), or ``raw`` itself. Each reader raises on a
    truncated or corrupt stream (EOFError, OSError, zlib/lzma errors), never ends early in silence."""
    if head.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=io.BufferedReader(raw, 1 << 16), mode="rb")
    if head.startswith(ZSTD_MAGIC):
        return _ZstdFrames(raw)
    if head.startswith(BZ2_MAGIC):
        return bz2.BZ2File(io.BufferedReader(raw, 1 << 16))
    if head.startswith(XZ_MAGIC):
        return lzma.LZMAFile(io.BufferedReader(raw, 1 << 16))
    return raw


def open_text(path: str | os.PathLike, counter: list | None = None) -> io.BufferedIOBase:
    """Open a file for binary line reading: decompressed when its first bytes are gzip's, zstd's, bzip2's or xz's
    magic (whatever its name); a file that is not text (NUL bytes, or mostly bytes that are neither UTF-8 nor
    printable) is refused. ``counter``: a one-element list that receives the raw (on-disk) byte counter,
    ``counter[0].count``."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory (give it as --corpus alone, or its files)")
    if (why := unreadable_reason(path)) is not None:
        raise CorpusError(f"{path}: " + ("no such corpus file" if why == "no such file" else why))
    head = _head(path, 6)
    raw = _Counting(open(path, "rb", buffering=0))  # noqa: SIM115 (closed with the returned reader)
    if counter is not None:
        counter.append(raw)
    try:
        f = io.BufferedReader(_decompressed(head, raw), SNIFF_BYTES)
        reason = binary_reason(f.peek(SNIFF_BYTES)[:SNIFF_BYTES])
    except Exception as e:  # noqa: BLE001 (gzip, zstd and OS errors: all mean the file cannot be read)
        raw.close()
        raise CorpusError(f"{path}: cannot read: {e}") from None
    if reason:
        f.close()
        raise CorpusError(f"{path}: not a text corpus: {reason}")
    return f


def file_size(path: str | os.PathLike) -> int:
    return Path(path).stat().st_size


def _decode(raw: bytes, path, number: int, encoding: str, warned: list) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if encoding == "utf-8":
            raise CorpusError(
                f"{path}: line {number}: not UTF-8 text ({e.reason} at byte {e.start} of the line); "
                "convert it, or pass --encoding auto"
            ) from None
        if not warned:
            logger.warning(f"bertkit: {path}: line {number} is not UTF-8; reading such lines as Windows-1252")
            warned.append(True)
        return raw.decode("cp1252", errors="replace")


def read_lines(
    path: str | os.PathLike,
    encoding: str = "auto",
    warn: bool = True,
    counter: list | None = None,
    max_bytes: int | None = MAX_LINE_BYTES,
) -> Iterator[str]:
    """Lines without their line break. ``utf-8``: a line that is not UTF-8 fails naming the file and line. ``auto``:
    such a line is read as Windows-1252 (old Gutenberg files), with one warning per file naming the first line.
    A NUL byte fails naming the line (a binary file). A line longer than ``max_bytes`` comes in pieces, cut after a
    space where there is one (None: whole lines, as JSON records need)."""
    if encoding not in ENCODINGS:
        raise CorpusError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    number, warned, carry = 0, ([] if warn else [True]), b""
    try:
        with open_text(path, counter) as f:
            while True:
                raw = f.readline(max_bytes) if max_bytes else f.readline()
                if not raw:
                    break
                if carry:
                    raw, carry = carry + raw, b""
                partial = max_bytes is not None and not raw.endswith(b"\n") and len(raw) >= max_bytes
                if partial:  # a piece of a long line: cut after its last space (or a character boundary)
                    cut = raw.rfind(b" ") + 1
                    if cut <= 0:
                        cut = len(raw)
                        while cut > 0 and (raw[cut - 1] & 0xC0) == 0x80:
                            cut -= 1
                        cut = cut - 1 if cut > 0 and raw[cut - 1] >= 0xC0 else cut
                        cut = cut or len(raw)
                    raw, carry = raw[:cut], raw[cut:]
                else:
                    number += 1
                if b"\x00" in raw:
                    raise CorpusError(f"{path}: line {number + partial}: a NUL byte: this is a binary file, not text")
                line = _decode(raw, path, number + partial, encoding, warned)
                if number == 1 or (number == 0 and partial):
                    line = line.removeprefix("\ufeff")
                yield line.rstrip("\r\n")
            if carry:
                yield _decode(carry, path, number + 1, encoding, warned).rstrip("\r\n")
    except _STREAM_ERRORS as e:  # e.g. a truncated .gz / .zst, a corrupt .bz2
        raise CorpusError(f"{path}: cannot read after line {number} (the last whole line read): {e}") from None
    except Exception as e:
        if type(e).__module__.startswith("zstd") or "zstd" in type(e).__name__.lower():
            raise CorpusError(f"{path}: cannot read after line {number} (the last whole line read): {e}") from None
        raise


def strip_gutenberg(lines: list[str]) -> list[str]:
    """Drop a Project Gutenberg licence header (up to ``*** START OF ...``) and footer (from ``*** END OF ...``)."""
    return list(_strip_gutenberg_stream(iter(lines)))


def _strip_gutenberg_stream(lines: Iterator[str], header_lines: int = 2000) -> Iterator[str]:
    """Streaming :func:`strip_gutenberg`: the first ``header_lines`` (at most 1 MB) are held to look for the START
    marker. After an END marker, lines are dropped up to the next START marker when one comes within
    ``_NEXT_START_LINES`` (books joined in one file: the licence and the next header), to the end of the file, or
    else the licence's ``_LICENCE_LINES`` (Gutenberg's is 350 lines) and the text after it is kept."""
    head: list[str] = []
    chars = 0
    for line in lines:
        head.append(line)
        chars += len(line)
        if "***" in line and _GUTENBERG_START.match(line):
            head = []
            break
        if len(head) >= header_lines or chars >= 1 << 20:
            break
    after_end: list[str] | None = None  # the lines after an END marker, held until the licence's length is known
    for line in itertools.chain(head, lines):
        if "***" in line:
            if _GUTENBERG_END.match(line):
                if after_end is not None and len(after_end) > _LICENCE_LINES:
                    yield from after_end[_LICENCE_LINES:]
                after_end = []
                continue
            if after_end is not None and _GUTENBERG_START.match(line):
                after_end = None  # the licence and the next book's header: dropped
                continue
        if after_end is None:
            yield line
        else:
            after_end.append(line)
            if len(after_end) >= _NEXT_START_LINES:  # no next book's START: the licence was its first lines
                yield from after_end[_LICENCE_LINES:]
                after_end = None


def _suffix_name(path: str | os.PathLike) -> str:
    name = Path(path).name.lower()
    for suffix in _COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def detect_format(path: str | os.PathLike, sample_lines: int = 400, encoding: str = "auto") -> str:
    """``jsonl``/``parquet``/``arrow`` by name (or Parquet's magic bytes); else ``google`` when >= 60% of sampled
    lines end a sentence and few hold two; else prose (hard-wrapped prose ends a sentence on a minority of lines;
    unwrapped prose holds several per line)."""
    name = _suffix_name(path)
    if name == Path(path).name.lower() and Path(path).is_file() and sniff(path):  # task files (task_text)
        return "task"
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
    head = _head(Path(path)) if Path(path).is_file() else b""
    if head[:4] == PARQUET_MAGIC:
        return "parquet"
    sample: list[str] = []
    chars = 0
    for line in read_lines(path, encoding, warn=False, max_bytes=1 << 16):
        if line.strip():
            sample.append(line.strip()[:4096])
            chars += len(sample[-1])
            if len(sample) >= sample_lines or chars >= 1 << 20:
                break
    if not sample:
        return "google"
    ends = sum(bool(_SENTENCE_END.search(s)) for s in sample) / len(sample)
    multi = sum(len(_INNER_SENTENCE_END.findall(s)) for s in sample) / len(sample)
    return "google" if ends >= 0.6 and multi <= 0.5 else "prose"


def paragraphs(lines: Iterable[str]) -> list[str]:
    """Blank-line-separated paragraphs, each one line of single-spaced text."""
    out, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


# ------------------------------------------------------------------------------------------------ blocks


@dataclass
class Block:
    """A bounded piece of the corpus, in order. ``kind`` ``sentences``: each item one sentence (Google's format);
    ``texts``: each item text to cut into paragraphs and sentences. ``ends``: indices of the items after which a
    document ends. ``where``: (file index, block index within the file), the position a resume restarts after."""

    kind: str
    items: list[str]
    ends: list[int]
    where: tuple[int, int] = (0, 0)
    chars: int = 0
    read_bytes: int = 0  # on-disk bytes of the file read so far (progress)
    extra: dict = field(default_factory=dict)


def _google_blocks(path, encoding, counter) -> Iterator[tuple[str, list[str], list[int]]]:
    items: list[str] = []
    ends: list[int] = []
    chars = 0
    for line in read_lines(path, encoding, counter=counter):
        line = line.strip()
        if line:
            if "  " in line or "\t" in line:
                line = _WHITESPACE.sub(" ", line)
            items.append(line)
            chars += len(line)
        elif items and (not ends or ends[-1] != len(items) - 1):
            ends.append(len(items) - 1)
            if chars >= BLOCK_CHARS:
                yield "sentences", items, ends
                items, ends, chars = [], [], 0
        if chars >= 2 * BLOCK_CHARS:  # one long document: its sentences in several blocks
            yield "sentences", items, ends
            items, ends, chars = [], [], 0
    if items and (not ends or ends[-1] != len(items) - 1):
        ends.append(len(items) - 1)
    yield "sentences", items, ends or [-1]  # the file's last block closes its last document


def _prose_blocks(path, encoding, counter) -> Iterator[tuple[str, list[str], list[int]]]:
    """A prose file (one document) as texts of about ``BLOCK_CHARS``, cut at blank lines."""
    lines: list[str] = []
    chars = para = 0
    for line in _strip_gutenberg_stream(read_lines(path, encoding, counter=counter)):
        blank = not line.strip()
        if blank and chars >= BLOCK_CHARS:
            yield "texts", ["\n".join(lines)], []
            lines, chars, para = [], 0, 0
            continue
        lines.append(line)
        chars += len(line) + 1
        para = 0 if blank else para + len(line) + 1
        if para >= MAX_PARAGRAPH_CHARS:  # no blank line for long: cut the paragraph here
            lines.append("")
            para = 0
            if chars >= 2 * BLOCK_CHARS:
                yield "texts", ["\n".join(lines)], []
                lines, chars = [], 0
    yield "texts", ["\n".join(lines)], [0]


def _text_documents_blocks(docs: Iterator[str]) -> Iterator[tuple[str, list[str], list[int]]]:
    """Documents (JSONL records, Parquet/Arrow rows) gathered into texts of about ``BLOCK_CHARS``; a longer document
    is cut at blank lines into several items."""
    items: list[str] = []
    ends: list[int] = []
    chars = 0
    for text in docs:
        while len(text) > BLOCK_CHARS:
            cut = text.rfind("\n\n", BLOCK_CHARS // 2, BLOCK_CHARS)
            if cut < 0:
                cut = text.rfind("\n", BLOCK_CHARS // 2, BLOCK_CHARS)
            if cut < 0:
                cut = text.rfind(" ", BLOCK_CHARS // 2, BLOCK_CHARS)
            cut = cut + 1 if cut >= 0 else BLOCK_CHARS
            items.append(text[:cut])
            text = text[cut:]
            yield "texts", items, ends
            items, ends, chars = [], [], 0
        items.append(text)
        ends.append(len(items) - 1)
        chars += len(text)
        if chars >= BLOCK_CHARS:
            yield "texts", items, ends
            items, ends, chars = [], [], 0
    if items:
        yield "texts", items, ends


def _jsonl_texts(path, encoding, counter, text_field: str) -> Iterator[str]:
    for number, line in enumerate(read_lines(path, encoding, counter=counter, max_bytes=None), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}: line {number}: invalid JSON ({e.msg})") from None
        except RecursionError:
            raise CorpusError(f"{path}: line {number}: JSON nested too deeply") from None
        if not isinstance(record, dict) or text_field not in record:
            raise CorpusError(f"{path}: line {number}: expected an object with a {text_field!r} field")
        text = record[text_field]
        if not isinstance(text, str):
            raise CorpusError(
                f"{path}: line {number}: field {text_field!r} must be a string, got {type(text).__name__}"
            )
        yield text


def _table_texts(path, fmt: str, text_field: str, counter) -> Iterator[str]:
    """The ``text_field`` column of a Parquet file (a row group at a time) or an Arrow IPC stream/file (a record batch
    at a time): strings, each a document; nulls are skipped."""
    import pyarrow as pa

    path = Path(path)
    raw = _Counting(open(path, "rb", buffering=0))  # noqa: SIM115 (closed below)
    if counter is not None:
        counter.append(raw)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(io.BufferedReader(raw, 1 << 20))
            names = pf.schema_arrow.names
            batches = lambda: pf.iter_batches(batch_size=1024, columns=[text_field])  # noqa: E731
        else:
            source = pa.input_stream(io.BufferedReader(raw, 1 << 20))
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid:
                raw.close()
                raw = _Counting(open(path, "rb", buffering=0))  # noqa: SIM115
                reader = pa.ipc.open_file(pa.memory_map(str(path)))
            names = reader.schema.names
            if hasattr(reader, "num_record_batches"):
                batches = lambda: (reader.get_batch(i) for i in range(reader.num_record_batches))  # noqa: E731
            else:
                batches = lambda: iter(reader)  # noqa: E731
        if text_field not in names:
            raise CorpusError(f"{path}: no column {text_field!r} (columns: {', '.join(names)}); pass --text-field")
        rows = empty = 0
        for batch in batches():
            column = batch.column(batch.schema.get_field_index(text_field))
            if pa.types.is_null(column.type):
                rows, empty = rows + len(column), empty + len(column)
                continue
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise CorpusError(f"{path}: column {text_field!r} holds {column.type}, not text")
            for text in column.to_pylist():
                rows += 1
                if text and text.strip():
                    yield text
                else:
                    empty += 1
        _check_column(path, text_field, rows, empty)
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(f"{path}: cannot read as {fmt}: {e}") from None
    finally:
        raw.close()


def _check_column(path, text_field: str, rows: int, empty: int) -> None:
    """A column with no text at all is an error; one with some null or empty rows, a warning with the counts."""
    if rows and empty == rows:
        raise CorpusError(f"{path}: column {text_field!r} holds no text: its {rows} row(s) are all null or empty")
    if empty:
        logger.warning(f"bertkit: {path}: column {text_field!r}: {empty} of {rows} row(s) null or empty; skipped")


def file_blocks(
    path: str | os.PathLike,
    fmt: str = "auto",
    encoding: str = "auto",
    text_field: str = "text",
    counter: list | None = None,
) -> Iterator[tuple[str, list[str], list[int]]]:
    """(kind, items, ends) blocks of one file, in order (see :class:`Block`); always at least one block."""
    if fmt not in FORMATS:
        raise CorpusError(f"corpus format must be one of {FORMATS}, got {fmt!r}")
    if encoding not in ENCODINGS:
        raise CorpusError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if fmt == "auto":
        fmt = detect_format(path, encoding=encoding)
    if fmt == "google":
        yield from _google_blocks(path, encoding, counter)
    elif fmt == "prose":
        yield from _prose_blocks(path, encoding, counter)
    elif fmt == "jsonl":
        yield from _text_documents_blocks(_jsonl_texts(path, encoding, counter, text_field))
    elif fmt == "task":
        yield from _text_documents_blocks(task_documents(path, text_field))
    else:
        yield from _text_documents_blocks(_table_texts(path, fmt, text_field, counter))


def iter_blocks(
    paths: list[Path],
    fmt: str = "auto",
    encoding: str = "auto",
    text_field: str = "text",
    start: tuple[int, int] | None = None,
) -> Iterator[Block]:
    """Every file's blocks, in order, each tagged with its position. ``start``: skip every block up to and
    including that (file, block) position (a resumed preparation; those blocks are read but not returned)."""
    for i, path in enumerate(paths):
        if start is not None and i < start[0]:
            continue
        counter: list = []
        for j, (kind, items, ends) in enumerate(file_blocks(path, fmt, encoding, text_field, counter)):
            if start is not None and i == start[0] and j <= start[1]:
                continue
            yield Block(kind, items, ends, (i, j), sum(map(len, items)), counter[0].count if counter else 0)


def corpus_texts(
    paths: Iterable[str | os.PathLike],
    fmt: str = "auto",
    encoding: str = "auto",
    text_field: str = "text",
    follow_symlinks: bool = False,
) -> Iterator[str]:
    """The corpus's non-empty lines of text, stripped, in file order, read exactly as ``prepare`` and ``pretrain``
    read it (the one corpus reader of ``bertkit vocab`` and ``vocab extend``): directories expanded and confined,
    compressed files decompressed, JSONL/Parquet/Arrow/task files by their text, a binary file refused. Files are
    checked before the first line is returned (a missing or binary one fails now, not halfway); a corpus with no
    text at all fails once read, naming it: ``CorpusError``s, one line each."""
    names = [str(p) for p in paths]
    files = check_corpus_files(expand_corpus(names, follow_symlinks), fmt, encoding)
    return _texts(files, names, fmt, encoding, text_field)


def check_corpus_files(
    files: list[Path], fmt: str = "auto", encoding: str = "auto", text_field: str = "text", some_text: bool = False
) -> list[Path]:
    """Refuse, before any work, a corpus file that is missing, unreadable, not a regular file, binary or UTF-16
    (its first bytes, decompressed), as every reader of it would once it got there: a ``CorpusError`` naming it.
    ``some_text``: also read up to the first text, so that a corpus with none (empty or blank files) is refused
    now, as :func:`corpus_texts` refuses it once read. Returns ``files``."""
    for path in files:
        if (fmt if fmt != "auto" else detect_format(path, encoding=encoding)) not in ("parquet", "arrow"):
            open_text(path).close()
    if some_text:  # quietly: the read that follows gives the warnings (a line not UTF-8) once
        quiet, logger.disabled = logger.disabled, True
        try:
            next(_texts(files, [str(f) for f in files], fmt, encoding, text_field), None)
        finally:
            logger.disabled = quiet
    return files


def _texts(files: list[Path], names: list[str], fmt: str, encoding: str, text_field: str) -> Iterator[str]:
    empty = True
    for block in iter_blocks(files, fmt, encoding, text_field):
        for item in block.items:
            for line in item.splitlines():
                line = line.strip()
                if line:
                    empty = False
                    yield line
    if empty:
        raise CorpusError(f"the corpus ({', '.join(names)}) holds no text (every file is empty)")


# ------------------------------------------------------------------------------------------------ sentences


def block_sentences(kind: str, items: list[str], splitter: str = "regex") -> tuple[list[str], list[int]]:
    """The sentences of a block's items and how many come from each item."""
    if kind == "sentences":
        return items, [1] * len(items)
    sentences: list[str] = []
    counts = []
    for text in items:
        before = len(sentences)
        sentences.extend(split_paragraphs(paragraphs(text.split("\n")), splitter))
        counts.append(len(sentences) - before)
    return sentences, counts


def _split_task(task: tuple[str, list[str], str]) -> tuple[list[str], list[int]]:
    return block_sentences(*task)


def document_pieces(counts: list[int], ends: list[int]) -> list[tuple[int, int, bool]]:
    """(first sentence, end sentence, does the document end there?) for each run of a block's sentences that belongs
    to one document; ``counts`` is sentences per item, ``ends`` the items after which a document ends (``-1``: the
    block only closes the document left open)."""
    pieces, start, total = [], 0, 0
    end_set = set(ends)
    for i, c in enumerate(counts):
        total += c
        if i in end_set:
            pieces.append((start, total, True))
            start = total
    if start < total:
        pieces.append((start, total, False))
    if -1 in end_set:
        pieces.append((total, total, True))
    return pieces


def iter_documents(
    paths: Iterable[str | os.PathLike],
    fmt: str = "auto",
    workers: int | None = None,
    on_document=None,
    encoding: str = "auto",
    progress: bool = False,
    splitter: str = "regex",
    text_field: str = "text",
) -> Iterator[list[str]]:
    """Documents (lists of sentences) from every file (directories: their corpus files), in file order; the same
    whatever ``workers`` (default: every core; 0 or 1 = in this process). Each document is held whole here: for
    corpora of any size, use :func:`bertkit.data.pretraining.prepare.prepare_corpus` or :func:`write_sentences`, which
    stream. ``on_document(sentences)`` is called per document."""

    files = expand_corpus(paths)
    blocks = iter_blocks(files, fmt, encoding, text_field)
    tasks = ((b, (b.kind, b.items, splitter)) for b in blocks)
    doc: list[str] = []
    with ordered_map(_split_task, tasks, workers) as results:
        for _block, (sentences, counts) in results:
            for lo, hi, end in document_pieces(counts, _block.ends):
                doc.extend(sentences[lo:hi])
                if end:
                    if doc:
                        if on_document is not None:
                            on_document(doc)
                        yield doc
                    doc = []
    if doc:
        if on_document is not None:
            on_document(doc)
        yield doc


def write_sentences(
    paths: Iterable[str | os.PathLike],
    output: str | os.PathLike,
    fmt: str = "auto",
    workers: int | None = None,
    encoding: str = "auto",
    progress: bool = False,
    splitter: str = "regex",
    text_field: str = "text",
) -> int:
    """Sentence-split the corpus once into Google's format (a sentence per line, a blank line after each document)
    at ``output``, atomically (fsynced temp file, renamed), streaming: memory does not grow with the corpus. The
    vocabulary trainer and the tokenizer both read it. Returns the number of documents; a corpus with none is a
    ``CorpusError`` naming it (as :func:`corpus_texts` words it), not the sentence file's name later."""

    names = [str(p) for p in paths]
    files = expand_corpus(names)
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        open_doc = False
        bar = progress_bar(files, "splitting", progress)
        blocks = iter_blocks(files, fmt, encoding, text_field)
        tasks = ((b, (b.kind, b.items, splitter)) for b in blocks)
        try:
            with open(tmp, "w", encoding="utf-8") as f, ordered_map(_split_task, tasks, workers) as results:
                for block, (sentences, counts) in results:
                    bar.advance(block)
                    for lo, hi, end in document_pieces(counts, block.ends):
                        if hi > lo:
                            f.write("\n".join(sentences[lo:hi]) + "\n")
                            open_doc = True
                        if end and open_doc:
                            f.write("\n")
                            count += 1
                            open_doc = False
                if open_doc:
                    f.write("\n")
                    count += 1
        finally:
            bar.close()

    atomic_write(output, write)
    if count == 0:
        raise CorpusError(f"the corpus ({', '.join(names)}) holds no text (every file is empty)")
    return count
