"""Corpus preparation: every input format, the streaming pipeline (no hang), resume, held-out text, progress.
``bertkit prepare`` itself and the memory probes (child processes) are in tests/integration/test_prepare_runs.py."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
from tinycorpus import google_format, mixed_corpus

from bertkit.data.pretraining import corpus as corpus_module
from bertkit.data.pretraining.corpus import CorpusError, expand_corpus, iter_documents
from bertkit.data.pretraining.prepare import PrepareError, prepare_corpus, sentence_sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIXTURES / "tokenizer" / "vocab.txt"

DOCS = [
    ["The cat sat on the mat.", "It was happy!", "Was it, or was it not?"],
    ["A dog ran home.", "Mr. Smith saw it there."],
    ["One more document.", '"Good," she said.', "The end."],
]


def _prose(doc: list[str]) -> str:
    return " ".join(doc) + "\n"


def _shards(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.npy"))}


# --------------------------------------------------------------------------------------------- formats


def test_plain_text_prose_and_google_format(tmp_path):
    g = tmp_path / "google.txt"
    g.write_text(google_format(DOCS), encoding="utf-8")
    assert list(iter_documents([g], workers=1)) == DOCS
    for i, doc in enumerate(DOCS):
        (tmp_path / "prose" / f"{i}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "prose" / f"{i}.txt").write_text(_prose(doc), encoding="utf-8")
    assert list(iter_documents([tmp_path / "prose"], "prose", workers=1)) == DOCS


def test_jsonl_with_a_text_field_and_gzip(tmp_path):
    p = tmp_path / "docs.jsonl.gz"
    lines = [json.dumps({"body": " ".join(d), "id": i}) for i, d in enumerate(DOCS)]
    p.write_bytes(gzip.compress("\n".join(lines).encode()))
    assert list(iter_documents([p], text_field="body", workers=1)) == DOCS
    with pytest.raises(CorpusError, match=r"docs.jsonl.gz: line 1: expected an object with a 'text' field"):
        list(iter_documents([p], workers=1))


def test_zstd_compressed_text(tmp_path):
    zstandard = pytest.importorskip("zstandard")  # a run-time dependency: always installed
    p = tmp_path / "corpus.txt.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(google_format(DOCS).encode()))
    assert list(iter_documents([p], workers=1)) == DOCS
    q = tmp_path / "named-plain.txt"  # recognised by its bytes, whatever the name
    q.write_bytes(p.read_bytes())
    assert list(iter_documents([q], "google", workers=1)) == DOCS


def test_parquet_text_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "docs.parquet"
    table = pa.table({"id": [0, 1, 2, 3], "text": [" ".join(DOCS[0]), None, " ".join(DOCS[1]), " ".join(DOCS[2])]})
    pq.write_table(table, p, row_group_size=2)
    assert list(iter_documents([p], workers=1)) == DOCS  # nulls skipped
    with pytest.raises(CorpusError, match=r"docs.parquet: no column 'content' \(columns: id, text\)"):
        list(iter_documents([p], text_field="content", workers=1))
    with pytest.raises(CorpusError, match="column 'id' holds int64, not text"):
        list(iter_documents([p], text_field="id", workers=1))


def test_hugging_face_save_to_disk_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": [" ".join(d) for d in DOCS], "n": [1, 2, 3]})
    ds.save_to_disk(str(tmp_path / "ds"))
    assert all(p.suffix == ".arrow" for p in expand_corpus([tmp_path / "ds"]))
    assert list(iter_documents([tmp_path / "ds"], workers=1)) == DOCS
    dd = datasets.DatasetDict({"train": ds.select([0, 1]), "test": ds.select([2])})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert list(iter_documents([tmp_path / "dd"], workers=1)) == DOCS


def test_directory_of_formats_follows_links_it_is_asked_to_with_a_note(tmp_path, caplog):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text(google_format(DOCS[:1]), encoding="utf-8")
    (d / "sub" / "b.jsonl").write_text(json.dumps({"text": " ".join(DOCS[1])}) + "\n", encoding="utf-8")
    outside = tmp_path / "elsewhere.parquet"
    pq.write_table(pa.table({"text": [" ".join(DOCS[2])]}), outside)
    (d / "c.parquet").symlink_to(outside)
    (d / "sub" / "loop").symlink_to(d, target_is_directory=True)
    (d / "dup.txt").symlink_to(d / "a.txt")
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        files = expand_corpus([d], follow_symlinks=True)
    assert [f.relative_to(d).as_posix() for f in files] == ["a.txt", "c.parquet", "sub/b.jsonl"]
    assert "c.parquet: a symbolic link; following it to" in caplog.text
    assert "a directory already read" in caplog.text and "the same file as another" in caplog.text
    assert list(iter_documents(files, workers=1)) == [DOCS[0], DOCS[2], DOCS[1]]
    assert list(iter_documents([d], workers=1)) == [DOCS[0], DOCS[1]]  # by default, the link out is skipped


# --------------------------------------------------------------------------------------------- shards


@pytest.mark.timeout(600)
def test_preparation_20_times_with_workers_never_hangs(tmp_path, monkeypatch):
    """The former pipeline (two fork pools, one feeding the other) hung in about one run of three; this one is run
    20 times with 2 worker processes under a timeout, and gives the same shards as the in-process run each time."""
    monkeypatch.setattr(corpus_module, "BLOCK_CHARS", 1000)  # many small blocks: many tasks in flight
    corpus = mixed_corpus(tmp_path, n_docs=20)
    ref = prepare_corpus(
        [corpus], tmp_path / "ref", VOCAB, workers=1, progress=False, use_cache=False, shard_tokens=2000
    )
    assert len(ref["shards"]) >= 2
    expected = _shards(tmp_path / "ref")
    for i in range(20):
        out = tmp_path / f"run{i}"
        meta = prepare_corpus([corpus], out, VOCAB, workers=2, progress=False, use_cache=False, shard_tokens=2000)
        assert meta["shards"] == ref["shards"] and _shards(out) == expected


def test_resume_after_an_interrupted_preparation_gives_the_same_shards(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "BLOCK_CHARS", 1000)  # shards end at blocks: small ones, several shards
    corpus = mixed_corpus(tmp_path)
    ref = prepare_corpus(
        [corpus], tmp_path / "ref", VOCAB, workers=1, progress=False, use_cache=False, shard_tokens=1500
    )
    assert len(ref["shards"]) >= 4 and ref["eval"] is not None

    class Stop(Exception):
        pass

    seen = []

    def stop_after_two(record):
        seen.append(record)
        if len(seen) == 2:
            raise Stop

    out = tmp_path / "out"
    with pytest.raises(Stop):
        prepare_corpus(
            [corpus],
            out,
            VOCAB,
            workers=2,
            progress=False,
            use_cache=False,
            shard_tokens=1500,
            on_checkpoint=stop_after_two,
        )
    assert not (out / "meta.json").exists() and (out / "progress.json").is_file()
    log: list[str] = []
    meta = prepare_corpus(
        [corpus], out, VOCAB, workers=1, progress=False, use_cache=False, shard_tokens=1500, log=log.append
    )
    assert any("resuming the preparation" in m and "after 2 shard(s)" in m for m in log), log
    assert meta["shards"] == ref["shards"] and meta["eval"] == ref["eval"]
    assert _shards(out) == _shards(tmp_path / "ref")
    assert not (out / "progress.json").exists()
    # other settings: the interrupted record is not used
    other = tmp_path / "other"
    with pytest.raises(Stop):
        seen.clear()
        prepare_corpus(
            [corpus],
            other,
            VOCAB,
            workers=1,
            progress=False,
            use_cache=False,
            shard_tokens=1500,
            on_checkpoint=stop_after_two,
        )
    log.clear()
    prepare_corpus(
        [corpus], other, VOCAB, workers=1, progress=False, use_cache=False, shard_tokens=1600, log=log.append
    )
    assert any("starting afresh" in m for m in log), log


def test_directory_corpora_are_found_in_the_cache_as_pretrain_names_them(tmp_path, monkeypatch):
    """``bertkit prepare --corpus DIR1 DIR2`` keys the cache by the files the directories hold; ``bertkit pretrain``
    passes those files (its own expansion of the same directories, here given relative to the working directory)
    and finds the shards there, linked, not tokenized again. A file added under a directory is another corpus."""
    import os
    import shutil

    from bertkit.data.pretraining.prepare import cache_dir

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    books = mixed_corpus(tmp_path)  # tmp_path/corpus
    wiki = tmp_path / "wiki" / "shard"
    wiki.mkdir(parents=True)
    (wiki / "w.jsonl").write_text("".join(json.dumps({"text": " ".join(d)}) + "\n" for d in DOCS), encoding="utf-8")
    first = prepare_corpus([books, wiki.parent], tmp_path / "first", VOCAB, workers=1, progress=False, use_cache=False)
    assert len(first["fingerprint"]["files"]) == 4
    cached = cache_dir(first["fingerprint"])
    shutil.copytree(tmp_path / "first", cached)  # where ``bertkit prepare`` (no --output) writes them
    log: list[str] = []
    pretrain_files = [str(f) for f in expand_corpus(["corpus", "wiki"])]  # as pretrain_setup passes them
    meta = prepare_corpus(pretrain_files, tmp_path / "run" / "shards", VOCAB, workers=1, progress=False, log=log.append)
    assert any("reusing the corpus prepared in" in m for m in log), log
    assert meta == first and _shards(tmp_path / "run" / "shards") == _shards(cached)
    name = first["shards"][0]["name"] + ".tokens.npy"
    assert os.stat(tmp_path / "run" / "shards" / name).st_ino == os.stat(cached / name).st_ino
    (wiki / "more.jsonl").write_text(json.dumps({"text": "A new record."}) + "\n", encoding="utf-8")
    log.clear()
    again = prepare_corpus(["corpus", "wiki"], tmp_path / "again", VOCAB, workers=1, progress=False, log=log.append)
    assert any("tokenizing 5 file(s)" in m for m in log), log
    assert again["fingerprint"] != first["fingerprint"]


def test_held_out_whole_documents_when_many_tails_when_few(tmp_path):
    many = tmp_path / "many.txt"
    many.write_text(google_format([[f"Doc {i} has words.", "And more of them."] for i in range(250)]), encoding="utf-8")
    meta = prepare_corpus([many], tmp_path / "m", VOCAB, workers=1, progress=False, use_cache=False)
    assert meta["eval"]["documents"] == 4  # documents 100, 150, 200 and 250: every 50th from the 100th
    assert sum(s["documents"] for s in meta["shards"]) == 246
    few = tmp_path / "few.txt"
    few.write_text(google_format([[f"Sentence {j} of {i}." for j in range(100)] for i in range(3)]), encoding="utf-8")
    meta = prepare_corpus([few], tmp_path / "f", VOCAB, workers=1, progress=False, use_cache=False)
    assert meta["eval"]["documents"] == 3 and meta["eval"]["sentences"] == 6  # the last 2% of each
    capped = prepare_corpus([few], tmp_path / "c", VOCAB, workers=1, progress=False, use_cache=False, max_eval_tokens=1)
    assert capped["eval"]["documents"] == 1  # the cap stops holding out after the first


def test_a_corpus_without_text_is_an_error(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("\n\n   \n", encoding="utf-8")
    with pytest.raises(PrepareError, match="no text to pre-train on"):
        prepare_corpus([p], tmp_path / "out", VOCAB, workers=1, progress=False, use_cache=False)


def test_progress_bar_shows_bytes_rate_and_text_speed(tmp_path, capsys):
    corpus = mixed_corpus(tmp_path)
    prepare_corpus([corpus], tmp_path / "out", VOCAB, workers=1, progress=True, use_cache=False)
    err = capsys.readouterr().err
    assert "preparing: 100%" in err and "B/s" in err and "text " in err and "MB/s" in err


def test_the_vocabulary_sample_is_every_kth_sentence_across_documents(tmp_path):
    """A run's vocabulary reads every k-th sentence of its split corpus, k the smallest that keeps it within the
    byte cap (so a corpus's later documents count as its first), afresh on each call; under the cap, all of it."""
    docs = [[f"doc {d} sentence {i} ." for i in range(7)] for d in range(5)]
    path = tmp_path / "sentences.txt"
    path.write_text("".join("".join(s + "\n" for s in doc) + "\n" for doc in docs), encoding="utf-8")
    every = [s for doc in docs for s in doc]
    lines, k = sentence_sample(path, max_bytes=path.stat().st_size // 3 + 1)
    assert k == 3 and list(lines()) == every[::3] == list(lines())
    assert {s.split()[1] for s in lines()} == {str(d) for d in range(5)}  # every document contributes
    lines, k = sentence_sample(path, max_bytes=path.stat().st_size)
    assert k == 1 and list(lines()) == every
