"""Pre-training data on the real shared files: Google's sample_text.txt, Gutenberg books (one in Windows-1252 with a
licence header), the bert-base-uncased vocabulary; a slice of the shared corpus (two ``.txt.zst`` books, a
``.jsonl.zst`` of 40 Wikipedia articles, in nested directories) read whole."""

from __future__ import annotations

import re
from pathlib import Path

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


# ------------------------------------------------------------------ the shared corpus: books + Wikipedia, a slice

WIKI_ARTICLES = 40  # the first articles of one Wikipedia shard


def _corpus_slice(shared_data, root):
    """``root/books``: two small books as the shared corpus holds them (``.txt.zst``); ``root/wiki/head``: the first
    ``WIKI_ARTICLES`` records of ``wiki-000.jsonl.zst``, zstd again (a directory below a directory). Returns the two
    directories, the books' texts and the records."""
    import io
    import json
    import shutil

    zstandard = pytest.importorskip("zstandard")
    source = shared_data / "corpus"
    books, wiki = root / "books", root / "wiki" / "head"
    books.mkdir(parents=True)
    wiki.mkdir(parents=True)
    texts = []
    for name in ("pg810.txt.zst", "pg23222.txt.zst"):  # two of the smallest books (about 11,000 words each)
        shutil.copyfile(source / "books" / name, books / name)
        texts.append(zstandard.ZstdDecompressor().decompressobj().decompress((books / name).read_bytes()).decode())
    with open(source / "wiki" / "wiki-000.jsonl.zst", "rb") as f:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        head = [next(lines) for _ in range(WIKI_ARTICLES)]
    (wiki / "wiki-000-head.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress("".join(head).encode()))
    return [books, wiki.parent], texts, [json.loads(line) for line in head]


def test_a_slice_of_the_books_and_wikipedia_read_whole(shared_data, tmp_path):
    """A ``.txt.zst`` book is one prose document, a ``.jsonl.zst`` record's ``text`` field one document (its id and
    title are not text); directories are read recursively, in path order, and every sentence is in the shards:
    training and held-out tokens together are the tokenizer's count of the documents' sentences."""
    from bertkit.data.pretraining.corpus import detect_format, expand_corpus, iter_documents
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.tokenization import BertTokenizer

    dirs, texts, records = _corpus_slice(shared_data, tmp_path / "corpus")
    files = expand_corpus(dirs)
    assert [f.name for f in files] == ["pg23222.txt.zst", "pg810.txt.zst", "wiki-000-head.jsonl.zst"]
    assert [detect_format(f) for f in files] == ["prose", "prose", "jsonl"]
    docs = list(iter_documents(dirs, workers=1))
    assert len(docs) == 2 + WIKI_ARTICLES
    flat = ["".join("".join(doc).split()) for doc in docs]  # the characters, whitespace aside
    assert flat[:2] == ["".join(t.split()) for t in reversed(texts)]  # every character of each book, nothing else
    assert flat[2:] == ["".join(r["text"].split()) for r in records]  # the text field, without id or title

    vocab = shared_data / "vocab" / "bert-base-uncased" / "vocab.txt"
    meta = prepare_corpus(dirs, tmp_path / "shards", vocab, workers=2, progress=False, use_cache=False)
    assert [Path(f[0]).name for f in meta["fingerprint"]["files"]] == [f.name for f in files]
    (shard,) = meta["shards"]
    assert shard["documents"] == len(docs)
    assert meta["eval"]["documents"] == sum(len(d) >= 50 for d in docs)  # fewer than 100: each long one's tail
    assert shard["sentences"] + meta["eval"]["sentences"] == sum(map(len, docs))
    tok = BertTokenizer.from_pretrained(vocab)
    assert shard["tokens"] + meta["eval"]["tokens"] == sum(len(tok.tokenize(s)) for d in docs for s in d)
