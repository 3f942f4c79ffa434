"""Vocabulary extension's choice and placing (``bertkit.tokenization.extend``) and its model surgery
(``bertkit.resize``): the dominant word is chosen, savings are counted as the tokenizer splits, missing characters come
first, ``[unusedN]`` slots fill first, the result tokenizes as Google's reference on the new vocab.txt, and a new row
is the mean of its pieces' rows (decoder and bias too)."""

from __future__ import annotations

import string
from collections import Counter

import pytest
import torch
from tinymodels import make_model_dir

from bertkit import BertForPreTraining
from bertkit.cli import main
from bertkit.commands.vocab_extend import extend_vocabulary
from bertkit.tokenization import BertTokenizer, load_vocab
from bertkit.tokenization.extend import WordPieceSplitter, choose_wordpiece, count_words, place_tokens

SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [c for c in string.ascii_lowercase if c not in "q"]  # no "q": words with one become [UNK]
VOCAB = SPECIALS + list(".,!?") + LETTERS + ["##" + c for c in LETTERS] + ["the", "cat"]


def tokenizer(vocab=VOCAB) -> BertTokenizer:
    return BertTokenizer({t: i for i, t in enumerate(vocab)})


def pieces(tok: BertTokenizer, lines) -> int:
    return sum(len(tok.tokenize(line)) for line in lines)


def test_the_dominant_word_is_chosen_first_with_its_saving():
    lines = ["zebra zebra the zebra, cats!"] * 40 + ["a horse and a mule"] * 3
    tok = tokenizer()
    chosen = choose_wordpiece(count_words(tok, lines), tok.vocab, 3)
    assert chosen[0].token == "zebra"
    assert chosen[0].saving == 120 * (len("zebra") - 1)  # 120 occurrences, 5 pieces -> 1


def test_savings_add_up_to_what_the_tokenizer_saves():
    """Each saving is counted by splitting again every word that holds the string, so their sum is exactly the
    corpus's loss of pieces under the real tokenizer on the new vocabulary (##-continuations and whole words)."""
    lines = ["walking talking walked talked stalking", "the walker talks", "walks and talks, walking"] * 5
    tok = tokenizer()
    chosen = choose_wordpiece(count_words(tok, lines), tok.vocab, 6)
    assert len(chosen) == 6 and any(c.token.startswith("##") for c in chosen)
    assert [c.saving for c in chosen] == sorted((c.saving for c in chosen), reverse=True)
    new = BertTokenizer(place_tokens(chosen, tok.vocab))
    assert pieces(tok, lines) - pieces(new, lines) == sum(c.saving for c in chosen)


def test_missing_characters_come_first_and_unk_words_go():
    lines = ["quiz quota aqua"] * 5 + ["the cat"] * 20
    tok = tokenizer()
    assert tok.tokenize("quiz aqua") == ["[UNK]", "[UNK]"]
    chosen = choose_wordpiece(count_words(tok, lines), tok.vocab, 3)
    assert [c.token for c in chosen[:2]] == ["q", "##q"]  # "q" starts 2 words (10 times), "##q" is in 1 (5 times)
    assert chosen[0].pieces == [tok.unk_token_id]  # it replaces an [UNK]
    new = BertTokenizer(place_tokens(chosen, tok.vocab))
    assert "[UNK]" not in new.tokenize(" ".join(lines))


def test_unused_slots_fill_first_then_the_vocabulary_grows():
    tok = tokenizer()
    chosen = choose_wordpiece(count_words(tok, ["zebra horse mule lion tiger hyena"] * 4), tok.vocab, 5)
    vocab = place_tokens(chosen, tok.vocab)
    assert [c.id for c in chosen] == [1, 2, 3, len(VOCAB), len(VOCAB) + 1]
    assert [c.slot for c in chosen[:3]] == ["[unused0]", "[unused1]", "[unused2]"] and chosen[3].slot is None
    assert len(vocab) == len(VOCAB) + 2 and sorted(vocab.values()) == list(range(len(vocab)))
    assert all(vocab[c.token] == c.id for c in chosen) and "[unused0]" not in vocab


def test_the_splitter_is_googles_wordpiece(fixtures_dir):
    from transformers.models.bert.tokenization_bert_legacy import WordpieceTokenizer

    vocab = load_vocab(fixtures_dir / "tokenizer" / "vocab.txt")
    ref = WordpieceTokenizer(vocab, "[UNK]", max_input_chars_per_word=200)
    mine = WordPieceSplitter(vocab)
    tok = BertTokenizer(vocab)
    words = Counter()
    for name in ("english.txt", "korean.txt"):
        words.update(count_words(tok, (fixtures_dir / "tokenizer" / name).read_text(encoding="utf-8").splitlines()))
    for word in list(words)[:3000]:
        assert (mine.split(word) or ["[UNK]"]) == ref.tokenize(word), word


@pytest.fixture(scope="module")
def extended(tmp_path_factory, fixtures_dir):
    """A tiny BERT on the fixture vocabulary (5 [unused] slots) extended by 12 tokens on the Korean fixture text."""
    base = tmp_path_factory.mktemp("base")
    vocab = fixtures_dir / "tokenizer" / "vocab.txt"
    make_model_dir(base, vocab, cls=BertForPreTraining)
    with torch.no_grad():  # a decoder bias that is not all zeros, so that its mean is tested
        model = BertForPreTraining.from_pretrained(base)
        model.cls.predictions.bias.copy_(torch.randn(model.config.vocab_size))
        model.save_pretrained(base)
    corpus = fixtures_dir / "tokenizer" / "korean.txt"
    out = tmp_path_factory.mktemp("ext")
    report = extend_vocabulary(base, [corpus], 12, out)
    return base, out, report, corpus


def test_google_reference_tokenizes_the_extended_vocabulary_alike(extended):
    """Google's BasicTokenizer + WordpieceTokenizer (transformers' port of tokenization.py) on the new vocab.txt."""
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer
    from transformers.models.bert.tokenization_bert_legacy import load_vocab as google_load_vocab

    _, out, report, corpus = extended
    assert len(report["chosen"]) == 12 and report["slots"] == 5
    vocab = google_load_vocab(str(out / "vocab.txt"))
    basic, wordpiece = BasicTokenizer(do_lower_case=True), WordpieceTokenizer(vocab, "[UNK]", 200)
    mine = BertTokenizer.from_pretrained(out)
    lines = corpus.read_text(encoding="utf-8").splitlines()
    new_ids = {c.id for c in report["chosen"]}
    used = 0
    for line in lines:
        ids = mine.encode(line, truncation=False).ids[1:-1]
        assert ids == [vocab[p] for w in basic.tokenize(line) for p in wordpiece.tokenize(w)], line
        used += sum(i in new_ids for i in ids)
    assert used > 0  # the new tokens are in use


def test_a_new_row_is_the_mean_of_its_pieces_rows(extended):
    base, out, report, _ = extended
    old = BertForPreTraining.from_pretrained(base)
    new = BertForPreTraining.from_pretrained(out)
    old_emb, new_emb = old.bert.embeddings.word_embeddings.weight, new.bert.embeddings.word_embeddings.weight
    assert new_emb.shape[0] == report["vocab_size"][1] == old_emb.shape[0] + 7
    for c in report["chosen"]:
        torch.testing.assert_close(new_emb[c.id], old_emb[c.pieces].mean(0))
        torch.testing.assert_close(new.cls.predictions.bias[c.id], old.cls.predictions.bias[c.pieces].mean())
    assert new.cls.predictions.decoder.weight.data_ptr() == new_emb.data_ptr()  # tied, so the decoder follows
    kept = [i for i in range(old_emb.shape[0]) if i not in {c.id for c in report["chosen"]}]
    torch.testing.assert_close(new_emb[kept], old_emb[kept])


def test_random_rows_follow_the_initialiser(extended, tmp_path):
    base, _, _, corpus = extended
    report = extend_vocabulary(base, [corpus], 12, tmp_path, init="random", seed=3)
    new = BertForPreTraining.from_pretrained(tmp_path)
    rows = new.bert.embeddings.word_embeddings.weight[[c.id for c in report["chosen"]]]
    std = new.config.initializer_range
    assert rows.abs().max() <= 2 * std and 0.5 * std < rows.std() < 1.5 * std
    assert torch.all(new.cls.predictions.bias[[c.id for c in report["chosen"]]] == 0)


def test_the_command_and_its_errors(extended, tmp_path, capsys):
    base, _, _, corpus = extended
    args = ["vocab", "extend", "--model", str(base), "--corpus", str(corpus), "--add", "4", "--output", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "4 tokens added (4 into [unusedN] slots)" in out and "pieces per word" in out
    assert main(args[:-1] + [str(tmp_path / "x"), "--corpus", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit vocab: error:") and "missing.txt" in err and len(err.splitlines()) == 1


def test_bad_requests_are_refused_in_one_line(extended, tmp_path, capsys):
    base, _, _, corpus = extended
    args = ["vocab", "extend", "--model", str(base), "--corpus", str(corpus)]
    for extra, words in (
        (["--add", "0", "--output", str(tmp_path / "a")], "--add 0"),
        (["--add", "3", "--output", str(base)], "is also --model"),
        # a corpus whose words split as well as they can: the model unchanged would be written under a new name
        (["--add", "3", "--min-saving", "1000000", "--output", str(tmp_path / "b")], "no token would save"),
    ):
        assert main(args + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("bertkit vocab: error:") and words in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_unigram_tokenizer_json_is_refused_naming_it(extended, tmp_path, capsys):
    from tokenizers import Tokenizer, models

    base, _, _, corpus = extended
    model = tmp_path / "unigram"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        (model / name).write_bytes((base / name).read_bytes())
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    Tokenizer(models.Unigram([(t, -1.0) for t in tokens], unk_id=1)).save(str(model / "tokenizer.json"))
    assert (
        main(
            [
                "vocab",
                "extend",
                "--model",
                str(model),
                "--corpus",
                str(corpus),
                "--add",
                "3",
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (a warning before it: the file has no template)
    assert err.startswith("bertkit vocab: error:") and "tokenizer.json" in err and "'Unigram'" in err
    assert not (tmp_path / "out").exists()
