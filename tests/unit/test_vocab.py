"""Vocabulary training (English, Korean, Chinese fixtures), Google layout, stats, and the ``bertkit vocab`` command."""

from __future__ import annotations

import pytest

from bertkit.errors import InputError
from bertkit.tokenization import BertTokenizer, load_vocab, train_vocab, vocab_stats


@pytest.fixture(scope="module")
def texts(fixtures_dir):
    return fixtures_dir / "tokenizer"


def _lines(path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_english_vocab_has_google_layout_and_loads_in_transformers(tmp_path, texts):
    from transformers import BertTokenizerFast

    tok = train_vocab(texts / "english.txt", vocab_size=600, output=tmp_path, show_progress=False)
    vocab = load_vocab(tmp_path / "vocab.txt")
    ids = {t: vocab[t] for t in ("[PAD]", "[unused0]", "[unused98]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    assert ids == {
        "[PAD]": 0,
        "[unused0]": 1,
        "[unused98]": 99,
        "[UNK]": 100,
        "[CLS]": 101,
        "[SEP]": 102,
        "[MASK]": 103,
    }
    assert len(vocab) == 600 == tok.vocab_size
    assert "alice" in vocab and "the" in vocab and "Alice" not in vocab
    assert any(t.startswith("##") for t in vocab)
    lines = _lines(texts / "english.txt")
    fast = BertTokenizerFast.from_pretrained(str(tmp_path))
    mine = BertTokenizer.from_pretrained(tmp_path)
    assert mine.lowercase is True
    for line in lines[:50]:
        assert fast(line)["input_ids"] == mine.encode(line).ids
    stats = vocab_stats(tok, lines)
    assert stats["lines"] == len(lines)
    assert stats["unk_rate"] < 0.01
    assert 1.0 <= stats["tokens_per_word"] < 2.0
    assert stats["tokens"] == sum(len(tok.tokenize(x)) for x in lines)


def test_num_unused_is_configurable_and_cased_training(tmp_path, texts):
    tok = train_vocab(
        [texts / "english.txt"],
        vocab_size=400,
        lowercase=False,
        num_unused=3,
        output=tmp_path / "v.txt",
        show_progress=False,
    )
    vocab = load_vocab(tmp_path / "v.txt")
    assert [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])][:8] == [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[unused2]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    assert "Alice" in vocab and tok.lowercase is False


@pytest.mark.parametrize("name, limit", [("english.txt", None), ("korean.txt", 300)])
def test_the_same_text_trains_the_same_vocabulary(texts, name, limit):
    # Rust's trainer alone numbered its ## letters in hash-map order: 8 runs gave 8 vocabularies
    runs = {
        tuple(train_vocab(texts / name, vocab_size=600, limit_alphabet=limit, show_progress=False).vocab)
        for _ in range(4)
    }
    assert len(runs) == 1
    vocab = next(iter(runs))
    assert "##e" in vocab and "##." not in vocab and "##," not in vocab  # punctuation is a word of its own


def test_texts_train_the_vocabulary_the_files_do(texts):
    """texts= (the corpus's lines from the caller; the tokenizer layer reads no file format) trains the vocabulary
    files= trains from the same lines; each is read twice (the ## letters, then the trainer)."""
    lines = (texts / "english.txt").read_text(encoding="utf-8").splitlines()
    calls = []

    def source():
        calls.append(1)
        return iter(lines)

    from_texts = train_vocab(texts=source, vocab_size=600, show_progress=False)
    assert len(calls) == 2
    assert from_texts.vocab == train_vocab(texts / "english.txt", vocab_size=600, show_progress=False).vocab


@pytest.mark.parametrize("name,size", [("korean.txt", 1500), ("chinese.txt", 400)])
def test_korean_and_chinese_training(tmp_path, texts, name, size):
    lines = _lines(texts / name)
    train, held = lines[: int(len(lines) * 0.8)], lines[int(len(lines) * 0.8) :]
    (tmp_path / "train.txt").write_text("\n".join(train), encoding="utf-8")
    tok = train_vocab(
        tmp_path / "train.txt",
        vocab_size=size,
        lowercase=False,
        min_frequency=1,
        show_progress=False,
        output=tmp_path / "out",
    )
    stats = vocab_stats(tok, held)
    assert stats["words"] > 0
    assert stats["unk_rate"] < 0.15, stats
    if name == "chinese.txt":
        assert "天" in tok.vocab and tok.tokenize("今天天气很好") == list("今天天气很好")  # one ideograph per word
    else:
        assert any("\uac00" <= t[-1] <= "\ud7a3" and len(t.removeprefix("##")) > 1 for t in tok.vocab)  # Hangul words
    again = BertTokenizer.from_pretrained(tmp_path / "out")
    assert again.vocab == tok.vocab and again.encode(held[0]).ids == tok.encode(held[0]).ids


def test_train_vocab_errors(tmp_path, texts):
    with pytest.raises(InputError, match="--vocab-size 50: leaves no room beyond the 104"):
        train_vocab(texts / "english.txt", vocab_size=50, show_progress=False)
    with pytest.raises(InputError, match="missing.txt: no such corpus file"):
        train_vocab(tmp_path / "missing.txt", vocab_size=500, show_progress=False)


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.mark.parametrize(
    "missing,reason",
    [
        ("[UNK]", "words it cannot cover"),
        ("[CLS]", "start every input"),
        ("[PAD]", "pad batches"),
        ("[SEP]", "end every segment"),
        ("[MASK]", "masked-language-model"),
    ],
)
def test_missing_special_token_gives_its_own_reason(tmp_path, missing, reason):
    from bertkit.errors import InputError

    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([t for t in SPECIALS if t != missing] + ["hello"]) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        BertTokenizer.from_pretrained(path)
    message = str(info.value)
    assert str(path) in message and missing in message and reason in message
    if missing != "[UNK]":
        assert "cannot cover" not in message


def _unreadable_cases(tmp_path):
    binary = tmp_path / "binary" / "vocab.txt"
    binary.parent.mkdir()
    binary.write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\x00\x01garbage\n")
    nul = tmp_path / "nul" / "vocab.txt"
    nul.parent.mkdir()
    nul.write_bytes(("\n".join(SPECIALS) + "\n\x00\x00\n").encode())
    directory = tmp_path / "dir" / "vocab.txt"
    directory.mkdir(parents=True)
    return {"not a UTF-8": binary, "NUL bytes": nul, "is a directory": directory}


def test_unreadable_vocab_is_a_one_line_error_naming_the_file(tmp_path):
    from bertkit.errors import InputError

    for reason, path in _unreadable_cases(tmp_path).items():
        loads = [load_vocab, lambda p: BertTokenizer.from_pretrained(p.parent)]
        if path.is_file():
            loads.append(BertTokenizer.from_pretrained)
        for load in loads:
            with pytest.raises(InputError) as info:
                load(path)
            message = str(info.value)
            assert str(path) in message and reason in message and "\n" not in message


def test_vocab_without_read_permission_is_named(tmp_path, monkeypatch):
    from pathlib import Path

    from bertkit.errors import InputError

    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(SPECIALS) + "\n", encoding="utf-8")
    real = Path.read_bytes

    def denied(self):  # chmod 000 is not enforced for root, so refuse the read the way the kernel would
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(InputError, match=r"vocab\.txt: cannot read the vocabulary file \(Permission denied\)"):
        BertTokenizer.from_pretrained(tmp_path)
