"""Corpus readers (three formats, errors naming file and line), atomic checkpoints, RNG round trip, small helpers."""

from __future__ import annotations

import gzip
import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.data.pretraining.corpus import CorpusError, detect_format, file_blocks, iter_documents, strip_gutenberg
from bertkit.training import checkpointing as C

PROSE = """*** START OF THE PROJECT GUTENBERG EBOOK TEST ***

It was a dark night. The rain fell in
torrents, except at occasional intervals. Mr. Smith
went home.

"Who is there?" she asked. Nobody answered.

*** END OF THE PROJECT GUTENBERG EBOOK TEST ***
Licence text that must not be read.
"""


def test_prose_is_split_into_sentences_and_licence_dropped(tmp_path):
    p = tmp_path / "book.txt"
    p.write_text(PROSE, encoding="utf-8")
    assert detect_format(p) == "prose"
    docs = list(iter_documents([p], workers=1))
    assert docs == [
        [
            "It was a dark night.",
            "The rain fell in torrents, except at occasional intervals.",
            "Mr. Smith went home.",
            '"Who is there?" she asked.',
            "Nobody answered.",
        ]
    ]


def test_google_format_documents(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("First sentence here.\nSecond one, too.\n\n\nAnother document.\nIt ends.\n", encoding="utf-8")
    assert detect_format(p) == "google"
    assert list(iter_documents([p], workers=1)) == [
        ["First sentence here.", "Second one, too."],
        ["Another document.", "It ends."],
    ]


def test_jsonl_and_gzip(tmp_path):
    p = tmp_path / "docs.jsonl.gz"
    lines = [json.dumps({"text": "One. Two here.\n\nThree."}), "", json.dumps({"text": "Four.", "id": 3})]
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert detect_format(p) == "jsonl"
    assert list(iter_documents([p], workers=1)) == [["One.", "Two here.", "Three."], ["Four."]]


@pytest.mark.parametrize(
    "line,match",
    [
        ("{not json", "line 2: invalid JSON"),
        ('{"body": "x"}', "line 2: expected an object with a 'text' field"),
        ('{"text": 5}', "line 2: field 'text' must be a string"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, line, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"text": "fine."}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=match) as e:
        list(file_blocks(p))
    assert str(p) in str(e.value)


def test_non_utf8(tmp_path, caplog):
    p = tmp_path / "old.txt"
    p.write_bytes(b"Fine line.\nJane\x92s letter.\n")
    with pytest.raises(CorpusError, match=r"old.txt: line 2: not UTF-8"):
        list(file_blocks(p, "google", encoding="utf-8"))
    blocks = list(file_blocks(p, "google"))  # auto: Windows-1252 for that line, with a warning
    assert blocks == [("sentences", ["Fine line.", "Jane\u2019s letter."], [1])]
    assert "line 2 is not UTF-8" in caplog.text


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(CorpusError, match="no such corpus file"):
        list(iter_documents([tmp_path / "nope.txt"], workers=1))
    (tmp_path / "a.txt").write_text("x.\n")
    with pytest.raises(CorpusError, match="format must be one of"):
        list(file_blocks(tmp_path / "a.txt", "xml"))


def test_workers_give_the_same_documents(tmp_path, monkeypatch):
    from bertkit.data.pretraining import corpus as corpus_mod

    monkeypatch.setattr(corpus_mod, "BLOCK_CHARS", 2000)  # the first file is cut into several blocks
    text = "\n\n".join(f"Paragraph {i} starts. It has a second sentence, number {i}." for i in range(600))
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.txt").write_text(PROSE, encoding="utf-8")
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    one = list(iter_documents(files, workers=1))
    two = list(iter_documents(files, workers=2))
    assert one == two and len(one) == 2 and len(one[0]) == 1200
    assert len(list(corpus_mod.file_blocks(files[0]))) > 5


def test_books_joined_in_one_file_keep_every_book_and_drop_every_licence(tmp_path):
    p = tmp_path / "joined.txt"
    licence = "".join(f"Licence line {i}.\n" for i in range(350))
    book = PROSE.replace("must not be read.\n", "must not be read.\n" + licence)
    unmarked = "".join(f"An unmarked book, line {i}.\n" for i in range(1500))
    p.write_text(book + book.replace("dark night", "bright day") + unmarked, encoding="utf-8")
    (doc,) = list(iter_documents([p], "prose", workers=1))
    assert doc[0] == "It was a dark night." and "It was a bright day." in doc
    assert doc.count("Nobody answered.") == 2 and not any("Licence" in s for s in doc)
    text = " ".join(doc)
    assert "An unmarked book, line 400." in text and "An unmarked book, line 1499." in text


def test_strip_gutenberg_leaves_plain_text_alone():
    lines = ["a", "b"]
    assert strip_gutenberg(lines) == lines


# --------------------------------------------------------------------------------------------- checkpoints


def test_rng_state_round_trip():
    C.set_rng_state(C.rng_state())
    state = C.rng_state()
    expect = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(1)
    C.set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expect


def test_checkpoint_round_trip_weights_only_and_rotation(tmp_path):
    model = torch.nn.Linear(3, 2)
    for step in (1, 2, 3):
        C.save_checkpoint(tmp_path, step, {"model": model.state_dict(), "data": {"epoch": 0, "index": step}}, keep=2)
    assert [s for s, _ in C.list_checkpoints(tmp_path)] == [2, 3]
    latest = C.latest_checkpoint(tmp_path)
    state = C.load_checkpoint(latest)
    assert state["step"] == 3 and state["data"]["index"] == 3
    torch.testing.assert_close(state["model"]["weight"], model.weight.detach())


def test_interrupted_save_leaves_previous_checkpoint_loadable(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    C.save_checkpoint(tmp_path, 5, {"model": model.state_dict()})
    real_save = torch.save

    def dying_save(obj, f, *a, **k):  # writes part of the file, then the process "dies"
        real_save(obj, f, *a, **k)
        with open(f, "r+b") as fh:
            fh.truncate(100)
        raise KeyboardInterrupt("killed during save")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        C.save_checkpoint(tmp_path, 10, {"model": model.state_dict()})
    monkeypatch.undo()
    latest = C.latest_checkpoint(tmp_path)
    assert latest.name == "step-00000005.pt"
    assert C.load_checkpoint(latest)["step"] == 5
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_torn_checkpoint_is_reported_by_name(tmp_path):
    bad = tmp_path / "step-00000001.pt"
    bad.write_bytes(b"\x80\x02garbage")
    with pytest.raises(ValueError, match="step-00000001.pt: not a readable bertkit checkpoint"):
        C.load_checkpoint(bad)


# --------------------------------------------------------------------------------------------- helpers


def test_parse_duration():
    from bertkit.recipes.pretrain import parse_duration

    assert parse_duration("90") == 90 and parse_duration("2m") == 120 and parse_duration("1h30m") == 5400
    assert parse_duration("1.5h") == 5400
    with pytest.raises(ValueError, match="cannot read duration"):
        parse_duration("ten minutes")


def test_config_validation():
    from bertkit.recipes.pretrain import PretrainConfig, PretrainError

    with pytest.raises(PretrainError, match="--max-steps or --max-time"):
        PretrainConfig(corpus=["a"], output="o")
    with pytest.raises(PretrainError, match="--batch-size must be > 0, got 0"):
        PretrainConfig(corpus=["a"], output="o", max_steps=1, batch_size=0)


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1280 vs 1174"),
        OSError(28, "No space left on device"),
    ],
)
def test_disk_full_save_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, failure):
    from bertkit.errors import RunError
    from bertkit.training import checkpointing as ck

    ck.save_checkpoint(tmp_path, 1, {"model": {"w": torch.ones(2)}})

    def full(obj, path):
        Path(path).write_bytes(b"PK half")
        raise failure

    monkeypatch.setattr(ck.torch, "save", full)
    with pytest.raises(RunError, match=r"disk full .*previous checkpoint .*step-00000001.pt is intact"):
        ck.save_checkpoint(tmp_path, 2, {"model": {"w": torch.zeros(2)}})
    assert ck.latest_checkpoint(tmp_path).name == "step-00000001.pt"
    assert torch.equal(ck.load_checkpoint(ck.latest_checkpoint(tmp_path))["model"]["w"], torch.ones(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001.pt"]  # no temp file left
    monkeypatch.setattr(ck.torch, "save", lambda obj, path: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):  # other failures are not called a full disk
        ck.save_checkpoint(tmp_path, 3, {"model": {}})


# --------------------------------------------------------------------------------------------- hostile corpora


def test_gzip_is_recognised_by_its_bytes_not_its_name(tmp_path):
    p = tmp_path / "looks-plain.txt"
    p.write_bytes(gzip.compress(b"First sentence here.\nSecond one, too.\n"))
    assert list(iter_documents([p], "google", workers=1)) == [["First sentence here.", "Second one, too."]]
    q = tmp_path / "not-really.gz"
    q.write_text("Plain text. Named .gz.\n", encoding="utf-8")
    assert list(iter_documents([q], "google", workers=1)) == [["Plain text. Named .gz."]]


def test_binary_files_are_refused_naming_them(tmp_path):
    elf = tmp_path / "program"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 40)
    noise = tmp_path / "noise.txt"
    noise.write_bytes(np.random.default_rng(0).integers(128, 256, 5000, dtype=np.uint8).tobytes())
    late = tmp_path / "late.txt"
    late.write_bytes(b"A fine first line.\n" * 5000 + b"then \x00 a NUL.\n")
    packed = tmp_path / "packed.txt"
    packed.write_bytes(gzip.compress(b"\x00\x01\x02" * 1000))
    for p, why in ((elf, "NUL bytes"), (noise, "not text"), (late, "line 5001: a NUL byte"), (packed, "NUL bytes")):
        with pytest.raises(CorpusError, match=why) as e:
            list(iter_documents([p], "google", workers=1))
        assert str(p) in str(e.value)


def test_a_directory_is_read_as_its_text_files(tmp_path):
    from bertkit.data.pretraining.corpus import expand_corpus

    d = tmp_path / "books"
    (d / "b" / "deeper").mkdir(parents=True)
    (d / "b" / "deeper" / "z.txt").write_text("Zed one.\n", encoding="utf-8")
    (d / "a.txt").write_text("Ay one.\n", encoding="utf-8")
    (d / "c.txt.gz").write_bytes(gzip.compress(b"See one.\n"))
    (d / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    (d / ".hidden.txt").write_text("Hidden.\n", encoding="utf-8")
    assert [p.relative_to(d).as_posix() for p in expand_corpus([d])] == ["a.txt", "b/deeper/z.txt", "c.txt.gz"]
    assert list(iter_documents([d], "google", workers=1)) == [["Ay one."], ["Zed one."], ["See one."]]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="empty: a directory with no text files"):
        expand_corpus([tmp_path / "empty"])


def test_long_paragraphs_are_cut_so_splitting_stays_linear(tmp_path):
    """A paragraph of ~1 MB on one line (which pysbd alone takes many minutes on) is split in bounded time, and
    every character but whitespace survives the cuts."""
    from bertkit.data.pretraining.splitter import PYSBD_MAX_CHARS as MAX_PARAGRAPH_CHARS
    from bertkit.data.pretraining.splitter import cut_paragraph, split_sentences

    rng = random.Random(0)
    words = "the cat sat on a mat and then it ran away. Mr. Smith went to Washington on Monday! why? yes.".split()
    line = " ".join(rng.choice(words) for _ in range(60_000))  # ~280 KB of sentences
    spaceless = "x" * 1_000_000 + "." * 1_000_000
    pieces = cut_paragraph(line)
    assert "".join(pieces) == line and max(map(len, pieces)) <= MAX_PARAGRAPH_CHARS
    assert all(p.endswith((". ", "! ", "? ")) for p in pieces[:-1])  # cut after sentence ends where there are some
    assert "".join(cut_paragraph(spaceless)) == spaceless
    t0 = time.process_time()  # CPU time (workers=1: in this process): a busy machine slows the wall clock only
    for text in (line, spaceless):
        p = tmp_path / "one-line.txt"
        p.write_text(text + "\n", encoding="utf-8")
        sentences = [s for doc in iter_documents([p], "prose", workers=1) for s in doc]
        assert "".join(sentences).replace(" ", "") == text.replace(" ", "")
    assert time.process_time() - t0 < 120  # quadratic splitting takes hours on these
    assert split_sentences(["Short one. Another."]) == ["Short one.", "Another."]
