"""Issue 31's corpus probes: a corpus reads only what it names (no file outside a corpus directory or a dataset's
directory), and no input is lost in silence (a truncated or corrupt compressed file, a column with no text)."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import re

import pytest
from tinycorpus import google_format

from bertkit.data.pretraining.corpus import CorpusError, expand_corpus, iter_documents, read_lines
from bertkit.data.pretraining.corpus_files import find_corpus

DOCS = [[f"Sentence {j} of document {i} is here." for j in range(30)] for i in range(400)]
TEXT = google_format(DOCS)
SECRET = "root:x:0:0:root:/root:/bin/bash\n"


def _lines(text: str) -> list[str]:
    return text.split("\n")[:-1]


# ------------------------------------------------------------------------------------------------ confinement


@pytest.mark.parametrize("name", ["../../secret.txt", "/ABS/secret.txt"])
def test_a_dataset_state_json_naming_a_file_outside_is_refused(tmp_path, name):
    (tmp_path / "secret.txt").write_text(SECRET)
    name = name.replace("/ABS", str(tmp_path))
    ds = tmp_path / "corpus" / "ds"
    ds.mkdir(parents=True)
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    for given in (ds, tmp_path / "corpus"):  # the dataset itself, or a corpus directory holding it
        with pytest.raises(CorpusError, match=re.escape(f"{ds / 'state.json'}: names the file {name!r}, outside")):
            expand_corpus([given])


def test_a_dataset_dict_naming_a_split_outside_is_refused(tmp_path):
    ds = tmp_path / "dd"
    ds.mkdir()
    (ds / "dataset_dict.json").write_text(json.dumps({"splits": ["../../etc"]}))
    with pytest.raises(CorpusError, match=r"dataset_dict.json: .*names the split '../../etc', outside"):
        expand_corpus([ds])


def test_a_dataset_file_that_links_outside_is_refused_unless_asked(tmp_path):
    (tmp_path / "secret.txt").write_text(SECRET)
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "data-00000.arrow").symlink_to(tmp_path / "secret.txt")
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000.arrow"}]}))
    with pytest.raises(CorpusError, match="'data-00000.arrow' is a symbolic link to .*secret.txt, outside"):
        expand_corpus([ds])
    assert expand_corpus([ds], follow_symlinks=True) == [ds / "data-00000.arrow"]


def test_a_symlink_leaving_the_corpus_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(SECRET)
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    d = tmp_path / "corpus"
    (d / "inner").mkdir(parents=True)
    (d / "a.txt").write_text("Ay one.\n")
    (d / "inner" / "b.txt").write_text("Bee one.\n")
    (d / "etc").symlink_to(etc, target_is_directory=True)
    (d / "passwd.txt").symlink_to(etc / "passwd")
    (d / "inside.txt").symlink_to(d / "inner" / "b.txt")  # inside the corpus: followed (and read once)
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        listing = find_corpus([d])
    assert [f.relative_to(d).as_posix() for f in listing.files] == ["a.txt", "inner/b.txt"]
    assert f"{d / 'etc'}: a symbolic link to {etc.resolve()}, outside {d}; skipped" in caplog.text
    assert f"{d / 'passwd.txt'}: a symbolic link to" in caplog.text and "--follow-symlinks" in caplog.text
    assert listing.skipped["symbolic link leaving the corpus"] == 2
    assert listing.summary().startswith(f"read 2 of {listing.found} file(s) found (")
    assert listing.found == 5  # a.txt, inner/b.txt, the two links out, and inside.txt (the same file as b.txt)
    assert all("root:x" not in " ".join(doc) for doc in iter_documents([d], workers=1))
    followed = expand_corpus([d], follow_symlinks=True)
    assert sorted(f.resolve().name for f in followed) == ["a.txt", "b.txt", "hosts", "passwd"]


def test_meta_json_lists_every_file_read(tmp_path):
    from tinycorpus import TOKENIZER_VOCAB

    from bertkit.data.pretraining.prepare import prepare_corpus

    outside = tmp_path / "outside.txt"
    outside.write_text(TEXT)
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text(TEXT)
    (d / "gz.txt.gz").write_bytes(gzip.compress(TEXT.encode()))
    (d / "link.txt").symlink_to(outside)
    meta = prepare_corpus([d], tmp_path / "out", TOKENIZER_VOCAB, workers=1, progress=False, use_cache=False)
    assert [f[0] for f in meta["fingerprint"]["files"]] == [str((d / n).resolve()) for n in ("a.txt", "gz.txt.gz")]


# ------------------------------------------------------------------------------------------------ truncation


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


COMPRESSORS = {"gz": gzip.compress, "zst": _zstd, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_every_compressed_format_reads_whole(tmp_path, kind):
    p = tmp_path / f"corpus.{kind}"  # recognised by its bytes: the name says nothing
    p.write_bytes(COMPRESSORS[kind](TEXT.encode()))
    assert list(read_lines(p)) == _lines(TEXT)


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_truncated_compressed_file_is_refused_naming_it_and_the_last_good_line(tmp_path, kind):
    p = tmp_path / f"corpus.{kind}"
    text = TEXT * 5 if kind == "bz2" else TEXT  # bzip2 decompresses by blocks of 900 kB: more than one
    whole = COMPRESSORS[kind](text.encode())
    p.write_bytes(whole[: len(whole) * 2 // 3])
    read: list[str] = []
    with pytest.raises(CorpusError, match=re.escape(f"{p}: cannot read after line ")) as e:
        read.extend(read_lines(p))
    line = int(re.search(r"after line (\d+)", str(e.value)).group(1))
    assert 0 < line == len(read) and read == _lines(text)[:line]  # every line before it was read whole
    if kind == "zst":  # the probe, through the reader prepare uses
        with pytest.raises(CorpusError, match=re.escape(str(p))):
            list(iter_documents([p], "google", workers=1))


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_corrupt_compressed_file_is_refused_naming_it(tmp_path, kind):
    whole = bytearray(COMPRESSORS[kind](TEXT.encode()))
    for i in range(len(whole) // 2, len(whole) // 2 + 40):
        whole[i] ^= 0x55
    p = tmp_path / f"corpus.{kind}"
    p.write_bytes(bytes(whole))
    with pytest.raises(CorpusError, match=re.escape(f"{p}: cannot read")):
        list(read_lines(p))


def test_zstd_of_several_frames_reads_every_frame(tmp_path):
    half = len(TEXT) // 2
    cut = TEXT.index("\n", half) + 1
    p = tmp_path / "frames.zst"
    p.write_bytes(_zstd(TEXT[:cut].encode()) + _zstd(TEXT[cut:].encode()))
    assert list(read_lines(p)) == _lines(TEXT)


# ------------------------------------------------------------------------------------------------ empty columns


def test_a_parquet_column_of_nulls_is_an_error_and_some_nulls_a_warning(tmp_path, caplog):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": pa.array([None] * 5, pa.string())}), nulls)
    with pytest.raises(CorpusError, match=r"nulls.parquet: column 'text' holds no text: its 5 row\(s\) are all null"):
        list(iter_documents([nulls], workers=1))
    untyped = tmp_path / "untyped.parquet"  # a column of nulls written without a type
    pq.write_table(pa.table({"text": [None, None]}), untyped)
    with pytest.raises(CorpusError, match="untyped.parquet: column 'text' holds no text"):
        list(iter_documents([untyped], workers=1))
    some = tmp_path / "some.parquet"
    pq.write_table(pa.table({"text": ["A sentence here.", None, "", "Another one."]}), some)
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        assert list(iter_documents([some], workers=1)) == [["A sentence here."], ["Another one."]]
    assert "some.parquet: column 'text': 2 of 4 row(s) null or empty; skipped" in caplog.text


def test_pretrain_has_the_follow_symlinks_flag(tmp_path):
    from bertkit.cli import CommandParser, config_of, configure
    from bertkit.commands import pretrain

    parser = CommandParser(prog="bertkit pretrain")
    configure(pretrain, parser)
    base = ["--corpus", "c", "--output", str(tmp_path / "o"), "--max-steps", "1"]
    assert config_of(pretrain, parser.parse_args([*base, "--follow-symlinks"])).follow_symlinks is True
    assert config_of(pretrain, parser.parse_args(base)).follow_symlinks is False


# ------------------------------------------------------------------------------------------------ issue 60


def _loop(d):
    """``d/l1.txt -> l2.txt -> l1.txt`` beside a real a.txt."""
    d.mkdir()
    (d / "a.txt").write_text(TEXT)
    (d / "l1.txt").symlink_to("l2.txt")
    (d / "l2.txt").symlink_to("l1.txt")
    return d


@pytest.mark.parametrize("where", ["the corpus walk", "a corpus file", "a task file", "the output rule"])
def test_a_symlink_loop_is_skipped_or_refused_in_one_line(tmp_path, where, caplog):
    """Issue 60, item 9: a link loop in a corpus folder (prepare, pretrain --corpus, vocab), given as a corpus or task
    file (finetune --train, evaluate --data), or among a command's inputs (outputs.check_output) was Path.resolve()'s
    ``RuntimeError: Symlink loop`` traceback. The walk skips it with a warning naming it, as a looping directory; a
    file given is refused naming it; the output rule compares it as far as it resolves."""
    from bertkit.data.tasks.readers import DataError, check_file
    from bertkit.outputs import check_output

    d = _loop(tmp_path / "corpus")
    if where == "the corpus walk":
        with caplog.at_level(logging.WARNING):
            listing = find_corpus([d])
        assert listing.files == [d / "a.txt"] and listing.skipped == {"link loop": 2}
        assert f"{d / 'l1.txt'}: a symbolic link loop" in caplog.text
    elif where == "a corpus file":
        with pytest.raises(CorpusError, match=re.escape(f"{d / 'l1.txt'}: a symbolic link loop")):
            expand_corpus([d / "l1.txt"])
    elif where == "a task file":
        with pytest.raises(DataError, match=re.escape(f"{d / 'l1.txt'}: a symbolic link loop")):
            check_file(d / "l1.txt")
    else:
        assert check_output(tmp_path / "out", {"--train": d / "l1.txt"}) == tmp_path / "out"


def test_a_utf16_file_in_a_corpus_folder_is_named_where_it_is_skipped(tmp_path, caplog):
    """Issue 60: a UTF-16 text in a corpus folder was counted as skipped but not named (a binary still is only
    counted)."""
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text(TEXT)
    (d / "wide.txt").write_bytes("some text\n".encode("utf-16"))
    (d / "prog.bin").write_bytes(b"\x7fELF\x00" * 100)
    with caplog.at_level(logging.WARNING):
        listing = find_corpus([d])
    assert listing.files == [d / "a.txt"] and listing.skipped == {"not text": 2}
    assert f"{d / 'wide.txt'}: UTF-16 or UTF-32 text" in caplog.text and "prog.bin" not in caplog.text
