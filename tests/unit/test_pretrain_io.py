"""Corpus readers (three formats, errors naming file and line), atomic checkpoints, RNG round trip, small helpers."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
import torch

from bertkit.data.corpus import CorpusError, detect_format, iter_documents, read_raw_documents, strip_gutenberg
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
    assert docs == [["It was a dark night.", "The rain fell in torrents, except at occasional intervals.",
                     "Mr. Smith went home.", '"Who is there?" she asked.', "Nobody answered."]]


def test_google_format_documents(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("First sentence here.\nSecond one, too.\n\n\nAnother document.\nIt ends.\n", encoding="utf-8")
    assert detect_format(p) == "google"
    assert list(iter_documents([p], workers=1)) == [["First sentence here.", "Second one, too."],
                                                     ["Another document.", "It ends."]]


def test_jsonl_and_gzip(tmp_path):
    p = tmp_path / "docs.jsonl.gz"
    lines = [json.dumps({"text": "One. Two here.\n\nThree."}), "", json.dumps({"text": "Four.", "id": 3})]
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert detect_format(p) == "jsonl"
    assert list(iter_documents([p], workers=1)) == [["One.", "Two here.", "Three."], ["Four."]]


@pytest.mark.parametrize("line,match", [("{not json", "line 2: invalid JSON"),
                                        ('{"body": "x"}', "line 2: expected an object with a 'text' field"),
                                        ('{"text": 5}', "line 2: field 'text' must be a string")])
def test_jsonl_errors_name_file_and_line(tmp_path, line, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"text": "fine."}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=match) as e:
        list(read_raw_documents(p))
    assert str(p) in str(e.value)


def test_non_utf8(tmp_path, capsys):
    p = tmp_path / "old.txt"
    p.write_bytes(b"Fine line.\nJane\x92s letter.\n")
    with pytest.raises(CorpusError, match=r"old.txt: line 2: not UTF-8"):
        list(read_raw_documents(p, "google", encoding="utf-8"))
    docs = list(read_raw_documents(p, "google"))  # auto: Windows-1252 for that line, with a warning
    assert docs == [("sentences", ["Fine line.", "Jane\u2019s letter."])]
    assert "line 2 is not UTF-8" in capsys.readouterr().err


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(CorpusError, match="no such corpus file"):
        list(iter_documents([tmp_path / "nope.txt"], workers=1))
    (tmp_path / "a.txt").write_text("x.\n")
    with pytest.raises(CorpusError, match="format must be one of"):
        list(read_raw_documents(tmp_path / "a.txt", "xml"))


def test_workers_give_the_same_documents(tmp_path):
    from bertkit.data import corpus as corpus_mod

    text = "\n\n".join(f"Paragraph {i} starts. It has a second sentence, number {i}." for i in range(600))
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.txt").write_text(PROSE, encoding="utf-8")
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    one = list(iter_documents(files, workers=1))
    two = list(iter_documents(files, workers=2))
    assert one == two and len(one) == 2 and len(one[0]) == 1200
    assert corpus_mod.PARAGRAPHS_PER_TASK < 600  # the first file really was cut into several tasks


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
    with pytest.raises(PretrainError, match="--batch-size must be >= 1"):
        PretrainConfig(corpus=["a"], output="o", max_steps=1, batch_size=0)
