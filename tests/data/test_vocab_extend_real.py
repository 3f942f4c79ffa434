"""Real-data tier: Google's uncased vocabulary extended by 2,000 tokens on NSMC adaptation text (as
benchmarks/bench_vocab_extend.py splits it) tokenizes the held-out NSMC reviews with bertkit exactly as Google's
reference (transformers' port of tokenization.py) does on the new vocab.txt, and the issue's targets hold: pieces per
word fall by at least 40%, and at most 2% of the words are [UNK]. About 40 seconds on 2 shared cores."""

from __future__ import annotations

import sys
from pathlib import Path

from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.extend import choose_wordpiece, count_words, place_tokens

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_vocab_extend import measure, nsmc_split  # noqa: E402


def test_extended_uncased_vocabulary_on_held_out_korean(shared_data, tmp_path):
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer
    from transformers.models.bert.tokenization_bert_legacy import load_vocab as google_load_vocab

    tok = BertTokenizer.from_pretrained(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt")
    parts = nsmc_split(shared_data / "korean" / "nsmc" / "ratings_test.txt")
    chosen = choose_wordpiece(count_words(tok, parts["adapt"]), tok.vocab, 2000)
    assert len(chosen) == 2000
    new = BertTokenizer(place_tokens(chosen, tok.vocab))
    new.save_pretrained(tmp_path)
    vocab = google_load_vocab(str(tmp_path / "vocab.txt"))
    basic, wordpiece = BasicTokenizer(do_lower_case=True), WordpieceTokenizer(vocab, "[UNK]", 200)
    held = parts["test"]
    for line in held:
        ids = new.encode(line, truncation=False).ids[1:-1]
        assert ids == [vocab[p] for w in basic.tokenize(line) for p in wordpiece.tokenize(w)], line
    counts = count_words(tok, held)
    before, after = measure(counts, tok.vocab), measure(counts, new.vocab)
    assert after["ppw"] <= 0.6 * before["ppw"] and after["ppw_nfc"] <= 0.6 * before["ppw_nfc"]
    assert after["unk"] <= 0.02 < before["unk"]
