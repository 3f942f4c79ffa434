"""`bertkit vocab` and `bertkit tokenize` through the command: a vocabulary trained and used, an unreadable one
refused in one line."""

from __future__ import annotations

import pytest

from bertkit.tokenization import load_vocab


@pytest.fixture(scope="module")
def texts(fixtures_dir):
    return fixtures_dir / "tokenizer"


def test_vocab_command(tmp_path, texts, capsys):
    from bertkit.cli import main

    code = main(
        [
            "vocab",
            str(texts / "english.txt"),
            "-o",
            str(tmp_path),
            "--vocab-size",
            "500",
            "--quiet",
            "--num-unused",
            "10",
            "--holdout",
            str(texts / "english.txt"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "[UNK]=11" in out and "tokens/word" in out and "[UNK] rate" in out
    assert len(load_vocab(tmp_path / "vocab.txt")) == 500
    assert main(["tokenize", str(tmp_path), "Alice was there"]) == 0
    assert capsys.readouterr().out.split() == ["[CLS]", "alice", "was", "there", "[SEP]"]


def test_unreadable_vocab_through_the_cli(tmp_path, capsys):
    from bertkit.cli import main

    path = tmp_path / "binary" / "vocab.txt"  # not UTF-8 (tests/unit/test_vocab.py reads every unreadable case)
    path.parent.mkdir()
    path.write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\x00\x01garbage\n")
    assert main(["tokenize", str(path), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit tokenize: error:") and str(path) in err and len(err.splitlines()) == 1
