"""The quickstart's printed figure holds on new text: its model is cut to the length it trained (the outputs at
those lengths unchanged), and it is scored on bundled novels it never read, not on later sentences of its books;
the bundled books carry no Gutenberg licence text, and no cloze item is a sentence of the unseen ones."""

from __future__ import annotations

import gzip
import json
import re

import torch

from bertkit.commands.quickstart import bundled_corpus, cap_positions, score_unseen_books
from bertkit.modeling import BertForPreTraining
from tests.tinymodels import FINETUNE_VOCAB, make_model_dir


def test_cap_positions_keeps_the_trained_rows_and_outputs(tmp_path):
    model_dir = make_model_dir(tmp_path / "m", FINETUNE_VOCAB, max_position_embeddings=64, seed=3)
    before = BertForPreTraining.from_pretrained(model_dir).eval()
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 45, 3], [2, 50, 51, 52, 53, 54, 55, 3]])
    assert cap_positions(model_dir, 16)
    assert json.loads((model_dir / "config.json").read_text())["max_position_embeddings"] == 16
    after = BertForPreTraining.from_pretrained(model_dir).eval()
    assert after.bert.embeddings.position_embeddings.weight.shape[0] == 16
    with torch.no_grad():
        torch.testing.assert_close(after(ids).prediction_logits, before(ids).prediction_logits, rtol=0, atol=0)
    assert not cap_positions(model_dir, 16)  # nothing left to cut


def test_unseen_books_are_bundled_apart_and_scored(tmp_path):
    from bertkit.cli import main

    train, unseen = bundled_corpus(), bundled_corpus("heldout")
    assert len(unseen) == 2 and not {p.name for p in train} & {p.name for p in unseen}
    train_text = "".join(gzip.decompress(p.read_bytes()).decode("utf-8")[:20000] for p in train)
    for book in unseen:  # a held-out book shares no opening passage with the training books
        assert gzip.decompress(book.read_bytes()).decode("utf-8")[:200] not in train_text
    corpus = tmp_path / "alice.txt"
    corpus.write_text(gzip.decompress(train[0].read_bytes()).decode("utf-8")[:30000], encoding="utf-8")
    out = tmp_path / "run"
    argv = ["pretrain", "--corpus", str(corpus), "--output", str(out), "--vocab-size", "400", "--model-size"]
    argv += ["bert-tiny", "--max-steps", "2", "--seq-len", "32", "--batch-size", "8", "--workers", "1", "--quiet"]
    assert main([*argv, "--threads", "1", "--precision", "fp32"]) == 0
    smaller = min(unseen, key=lambda p: p.stat().st_size)  # seconds
    score = score_unseen_books(out, [smaller])
    meta = json.loads((out / "heldout" / "meta.json").read_text())
    assert [f[0] for f in meta["fingerprint"]["files"]] == [str(smaller)]
    assert meta["eval"]["tokens"] > 5 * sum(s["tokens"] for s in meta["shards"])  # most of the book is scored
    assert score["masked_tokens"] > 500 and 0 < score["mlm_baseline"] < 0.5 and 0 <= score["mlm_acc"] <= 1


def _words(text: str) -> str:
    """Lower-cased words and punctuation marks, space-separated, as the cloze items are written."""
    text = text.lower().translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))
    return " " + " ".join(re.findall(r"\w+|[^\w\s]", text)) + " "


def test_bundled_books_are_plain_text_and_the_cloze_items_are_not_in_the_unseen_ones():
    """The bundled books carry no Gutenberg licence text, and no cloze item, filled in with any answer it accepts,
    is a sentence of the unseen books (the probe asks what the training books taught, not what the scored ones say).
    """
    from bertkit.tasks.cloze import CLOZE_ITEMS

    for book in bundled_corpus() + bundled_corpus("heldout"):
        text = gzip.decompress(book.read_bytes()).decode("utf-8")
        assert "gutenberg" not in text.lower() and "\r" not in text, book.name
    unseen = " ".join(_words(gzip.decompress(b.read_bytes()).decode("utf-8")) for b in bundled_corpus("heldout"))
    filled = [_words(s.replace("[MASK]", a)) for s, answers in CLOZE_ITEMS for a in answers]
    assert len(filled) > len(CLOZE_ITEMS)
    assert [s for s in filled if s in unseen] == []
    # the check can fail: a sentence of an unseen book, written as an item, is found
    sentence = "the time traveller (for so it will be convenient to speak of him) was expounding"
    assert _words(sentence) in unseen
