"""Which files a corpus is: the paths given, directories walked, ``datasets.save_to_disk`` directories read through
their ``state.json``, and nothing outside them.

A corpus directory is read only below itself. A symbolic link inside it whose target lies outside is skipped with a
warning naming it, unless ``follow_symlinks`` (``--follow-symlinks``); a dataset's ``state.json`` or
``dataset_dict.json`` naming a file or split outside its directory is refused, naming it. A corpus someone else
prepared cannot put this machine's files (``/etc/passwd``, a key) into a model that may be shared.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import InputError
from bertkit.files import is_link_loop, resolved, unreadable_reason

logger = logging.getLogger("bertkit.data.pretraining.corpus")

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZ2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
PARQUET_MAGIC = b"PAR1"
SNIFF_BYTES = 1 << 16
# a text file has (nearly) no bytes that are neither valid UTF-8 nor ordinary whitespace/printable; Windows-1252
# prose has a few percent; compiled programs, images and archives have many (and NUL bytes)
_MAX_BINARY_FRACTION = 0.3


class CorpusError(InputError):
    """Unreadable corpus input; the message names the file (and line)."""


# UTF-32's little-endian mark starts with UTF-16's: either is text bertkit does not read as such
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def binary_reason(sample: bytes) -> str | None:
    """Why ``sample`` (a file's first bytes, decompressed) is not text, or None when it is."""
    if sample.startswith(_WIDE_BOMS):
        return "UTF-16 or UTF-32 text (its byte-order mark says so): convert it to UTF-8 first (iconv -t UTF-8)"
    if b"\x00" in sample:
        return "it holds NUL bytes (a binary file, not text)"
    if not sample:
        return None
    text = sample.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    if bad > _MAX_BINARY_FRACTION * len(text) and len(sample) >= 64:
        return f"{bad / len(text):.0%} of its first bytes are not text"
    return None


def is_compressed(head: bytes) -> bool:
    return head.startswith((GZIP_MAGIC, ZSTD_MAGIC, BZ2_MAGIC, XZ_MAGIC))


def _not_corpus_text(f: Path) -> str | None:
    """Why a file found in a corpus directory is not one to read, or None when it is (text, compressed text,
    Parquet, Arrow)."""
    name = f.name.lower()
    if name.endswith((".parquet", ".arrow")):
        return None
    with open(f, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    return None if is_compressed(head) or head[:4] == PARQUET_MAGIC else binary_reason(head)


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path``, links resolved, lies in ``root`` (resolved)."""
    return resolved(path).is_relative_to(resolved(root))


# ------------------------------------------------------------------------------ datasets.save_to_disk directories


def is_hf_dataset(d: Path) -> bool:
    return (d / "state.json").is_file() or (d / "dataset_dict.json").is_file()


def _confined(d: Path, name: object, listing: Path, what: str, follow_symlinks: bool) -> Path:
    """``d / name``, refused (naming ``listing`` and ``name``) when ``name`` is not a relative name inside ``d``."""
    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts:
        raise CorpusError(f"{listing}: names the {what} {name!r}, outside {d}; refused (a dataset reads only its own)")
    path = d / name
    if not follow_symlinks and not _inside(path, d):
        raise CorpusError(
            f"{listing}: its {what} {name!r} is a symbolic link to {path.resolve()}, outside {d}; refused "
            "(pass --follow-symlinks to read it)"
        )
    return path


def hf_arrow_files(d: Path, follow_symlinks: bool = False) -> list[Path]:
    """The Arrow files of a ``datasets.save_to_disk`` directory (a Dataset, or every split of a DatasetDict), each
    inside ``d``: a name that leaves it is a CorpusError naming the listing file and the name."""
    if (d / "dataset_dict.json").is_file():
        listing = d / "dataset_dict.json"
        try:
            splits = json.loads(listing.read_text(encoding="utf-8"))["splits"]
            splits = [_confined(d, s, listing, "split", follow_symlinks) for s in splits]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CorpusError(f"{listing}: unreadable ({e})") from None
        logger.info(f"bertkit: {d}: a DatasetDict; reading its splits {', '.join(s.name for s in splits)}")
        return [f for s in splits for f in hf_arrow_files(s, follow_symlinks)]
    listing = d / "state.json"
    try:
        entries = json.loads(listing.read_text(encoding="utf-8"))["_data_files"]
        names = [entry["filename"] for entry in entries]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{listing}: not a datasets.save_to_disk directory ({e})") from None
    files = [_confined(d, name, listing, "file", follow_symlinks) for name in names]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise CorpusError(f"{d}: the dataset's file {missing[0].name} is missing")
    return files


# ------------------------------------------------------------------------------------------------ the listing


@dataclass
class CorpusListing:
    """The files to read, in order, and how many were found: ``skipped`` counts the others by reason."""

    files: list[Path] = field(default_factory=list)
    found: int = 0
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        """``read 485 of 765 files found (280 skipped: symbolic link leaving the corpus)``."""
        text = f"read {len(self.files)} of {self.found} file(s) found"
        if self.skipped:
            text += " (skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items())) + ")"
        return text


def find_corpus(paths: Iterable[str | os.PathLike], follow_symlinks: bool = False) -> CorpusListing:
    """The corpus files: a file as given; a ``datasets.save_to_disk`` directory as its Arrow files; another directory
    as its corpus files (recursively, sorted by path; hidden files, and files that are neither text, compressed
    text, Parquet nor Arrow by their first bytes, are left out). Inside a directory, a symbolic link is followed
    when its target lies in the same directory given, else skipped with a warning naming it (``follow_symlinks``:
    followed, with a note). A file reached twice is read once. A path that is neither, or a directory with nothing
    to read, is an error naming it."""
    listing = CorpusListing()
    seen: set[Path] = set()

    def add(f: Path) -> None:
        real = resolved(f)
        if real in seen:
            logger.warning(
                f"bertkit: {f}: already read as part of the corpus (the same file as another); once is enough"
            )
            listing.skipped["read twice"] += 1
            return
        seen.add(real)
        listing.files.append(f)

    for p in map(Path, paths):
        if p.is_file():
            listing.found += 1
            add(p)
        elif p.is_dir() and is_hf_dataset(p):
            for f in hf_arrow_files(p, follow_symlinks):
                listing.found += 1
                add(f)
        elif p.is_dir():
            found = _walk(p, listing, follow_symlinks)
            if not found:
                raise CorpusError(f"{p}: a directory with no text files to read as a corpus")
            for f in found:
                add(f)
        elif p.exists() or is_link_loop(p):  # a pipe, socket or device (/dev/zero): reading one may never end
            raise CorpusError(f"{p}: {unreadable_reason(p)}; give a text file or directory")
        else:
            raise CorpusError(f"{p}: no such corpus file or directory")
    return listing


def expand_corpus(paths: Iterable[str | os.PathLike], follow_symlinks: bool = False) -> list[Path]:
    """:func:`find_corpus`'s files."""
    return find_corpus(paths, follow_symlinks).files


def _walk(root: Path, listing: CorpusListing, follow_symlinks: bool) -> list[Path]:
    """Corpus files under ``root`` in path order, never a directory twice; links leaving ``root`` are skipped unless
    ``follow_symlinks``. Counts what it finds and skips in ``listing``."""
    found: list[Path] = []
    visited = {resolved(root)}

    def skip(f: Path, why: str, message: str | None = None) -> None:
        listing.found += 1
        listing.skipped[why] += 1
        if message:
            logger.warning(f"bertkit: {f}: {message}")

    def visit(d: Path) -> None:
        try:
            entries = sorted(d.iterdir())
        except OSError as e:
            raise CorpusError(f"{d}: cannot list the directory ({e})") from None
        for f in entries:
            if f.name.startswith("."):
                if not f.is_dir():
                    skip(f, "hidden")
                continue
            if f.is_symlink():
                target = resolved(f)
                if is_link_loop(f):
                    skip(f, "link loop", "a symbolic link loop (it never reaches a file); skipped")
                    continue
                if not target.exists():
                    skip(f, "broken link", f"a symbolic link to {target}, which does not exist; skipped")
                    continue
                if not follow_symlinks and not _inside(target, root):
                    skip(
                        f,
                        "symbolic link leaving the corpus",
                        f"a symbolic link to {target}, outside {root}; skipped (pass --follow-symlinks to read it)",
                    )
                    continue
                if follow_symlinks:
                    logger.warning(f"bertkit: {f}: a symbolic link; following it to {target}")
            if f.is_dir():
                real = resolved(f)
                if real in visited:
                    logger.warning(f"bertkit: {f}: a directory already read (a link loop?); skipped")
                    continue
                visited.add(real)
                if is_hf_dataset(f):
                    arrows = hf_arrow_files(f, follow_symlinks)
                    listing.found += len(arrows)
                    found.extend(arrows)
                else:
                    visit(f)
            elif f.is_file() and (why := _not_corpus_text(f)) is None:
                listing.found += 1
                found.append(f)
            else:  # a text the user may have meant to read (UTF-16) is named; binaries are only counted
                skip(f, "not text", f"{why}; skipped" if why and why.startswith("UTF-") else None)

    visit(root)
    return found
