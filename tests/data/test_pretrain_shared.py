"""Pre-training data on the real shared files: Google's sample_text.txt, Gutenberg books (one in Windows-1252 with a
licence header), the bert-base-uncased vocabulary."""

from __future__ import annotations

import re

import numpy as np
import pytest


def test_google_sample_text_documents(shared_data):
    from bertkit.data.pretraining.corpus import detect_format, iter_documents

    path = shared_data / "corpus" / "sample_text.txt"
    assert detect_format(path) == "google"
    docs = list(iter_documents([path], workers=1))
    raw = path.read_text(encoding="utf-8")
    expected = [d for d in re.split(r"\n\s*\n", raw) if d.strip()]
    assert len(docs) == len(expected)
    assert docs[0][0].startswith("This text is included to make sure Unicode is handled properly")
    assert sum(len(d) for d in docs) == sum(1 for line in raw.splitlines() if line.strip())


def test_gutenberg_book_in_windows_1252_with_licence(shared_data):
    from bertkit.data.pretraining.corpus import iter_documents

    path = shared_data / "corpus" / "gutenberg" / "pg1342.txt"
    (doc,) = list(iter_documents([path], workers=2))
    text = " ".join(doc)
    assert "PROJECT GUTENBERG" not in text.upper()  # header and footer dropped
    assert "It is a truth universally acknowledged" in text
    assert "Jane\u2019s" in text or "Jane's" in text
    assert "\ufffd" not in text
    assert len(doc) > 4000  # sentences, not lines or paragraphs
    assert np.median([len(s) for s in doc]) < 200


def test_shards_round_trip_with_bert_base_vocab(shared_data, tmp_path):
    from bertkit.data.pretraining.corpus import iter_documents
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo, read_meta
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.tokenization import BertTokenizer

    vocab = shared_data / "vocab" / "bert-base-uncased" / "vocab.txt"
    files = [shared_data / "corpus" / "sample_text.txt", shared_data / "corpus" / "gutenberg" / "pg11.txt"]
    meta = prepare_corpus(files, tmp_path / "shards", vocab, workers=2, progress=False, log=lambda m: None)
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 30522 and meta["eval"] is not None
    tok = BertTokenizer.from_pretrained(vocab)
    docs = list(iter_documents(files, workers=1))
    data = PretrainingData(tmp_path / "shards", VocabInfo.from_tokenizer(tok), DataOptions(batch_size=8))
    shard = data.shards[0]
    first = docs[0][0]
    n = int(shard.sentences[1])
    assert tok.convert_ids_to_tokens([int(x) for x in shard.tokens[:n]]) == tok.tokenize(first)
    # a second call reuses the shards
    again = prepare_corpus(files, tmp_path / "shards", vocab, workers=1, progress=False, log=lambda m: None)
    assert again == read_meta(tmp_path / "shards")
    batch = data.batch(0, 0)
    assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].max() < 30522


@pytest.mark.timeout(150)
def test_short_pretrain_with_bert_base_vocab_loads_in_transformers(shared_data, tmp_path):
    import torch

    from bertkit.recipes.pretrain import PretrainConfig, pretrain

    out = tmp_path / "run"
    pretrain(
        PretrainConfig(
            corpus=[str(shared_data / "corpus" / "gutenberg" / "pg5200.txt")],
            vocab=str(shared_data / "vocab" / "bert-base-uncased"),
            output=str(out),
            model_size="bert-tiny",
            seq_len=64,
            batch_size=8,
            max_steps=4,
            eval_batches=2,
            quiet=True,
            workers=2,
            whole_word_mask=True,
        )
    )
    transformers = pytest.importorskip("transformers")
    model = transformers.BertForPreTraining.from_pretrained(out).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(out)
    with torch.no_grad():
        logits = model(**tok(["gregor woke up ."], return_tensors="pt")).prediction_logits
    assert logits.shape[-1] == 30522 and torch.isfinite(logits).all()
