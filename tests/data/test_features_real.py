"""Encoder on real text and real vocabularies vs the transformers route (fp32): SST-2 dev with bert-base-uncased's
vocabulary, Korean NSMC reviews with the multilingual cased one. Tiny random models, built with transformers."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from tinymodels import one_thread  # noqa: E402, F401  (autouse fixture)

from bertkit import Encoder  # noqa: E402


def build(tmp_path, vocab_path, lowercase: bool):
    torch.manual_seed(0)
    vocab_size = sum(1 for _ in open(vocab_path, encoding="utf-8"))
    config = transformers.BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128
    )
    model = transformers.BertModel(config).eval()
    model.save_pretrained(tmp_path)
    shutil.copy(vocab_path, tmp_path / "vocab.txt")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path, do_lower_case=lowercase)
    return model, tokenizer


def hf_states(model, tokenizer, texts, batch_size=32):
    """Per text: every hidden state [L+1] x [T_i, H] with padding removed (batches of 32, input order)."""
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[s : s + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            hs = model(**batch, output_hidden_states=True).hidden_states
            for b, n in enumerate(batch["attention_mask"].sum(1).tolist()):
                out.append(([h[b, :n].numpy() for h in hs], batch["input_ids"][b, :n].tolist()))
    return out


def test_sst2_every_pooling_matches_transformers(shared_data, tmp_path):
    lines = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [line.split("\t")[0] for line in lines]
    assert len(texts) == 872
    model, tokenizer = build(tmp_path, shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", lowercase=True)
    ref = hf_states(model, tokenizer, texts)
    enc = Encoder.from_pretrained(tmp_path, precision="fp32")
    ids = [e.ids for e in enc.tokenize(texts, max_length=128)]
    assert ids == [r[1] for r in ref]  # same wordpieces, so the vectors below compare like with like

    got = enc.encode(texts, layers=-1, pooling="mean", max_length=128)  # the benchmark's computation
    want = np.stack([states[-1].mean(0) for states, _ in ref])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    got = enc.encode(texts, layers=[-1, -2, 0], pooling="mean_max", max_length=128)
    want = np.stack(
        [
            np.concatenate([f(states[k]) for k in (3, 2, 0) for f in (lambda h: h.mean(0), lambda h: h.max(0))])
            for states, _ in ref
        ]
    )
    # mean_max per layer is [mean, max]; layers are concatenated in the order asked
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for pooling, pick in (("cls", lambda h: h[0]), ("first", lambda h: h[1]), ("sep", lambda h: h[-1])):
        got = enc.encode(texts, layers=-2, pooling=pooling, max_length=128)
        np.testing.assert_allclose(got, np.stack([pick(states[2]) for states, _ in ref]), rtol=1e-4, atol=1e-5)
    pooled = enc.encode(texts[:64], pooling="cls_pooled", max_length=128)
    with torch.no_grad():
        batch = tokenizer(texts[:64], padding=True, return_tensors="pt")
        np.testing.assert_allclose(pooled, model(**batch).pooler_output.numpy(), rtol=1e-4, atol=1e-5)


def test_sst2_bf16_agrees_with_fp32(shared_data, tmp_path):
    lines = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:300]
    texts = [line.split("\t")[0] for line in lines]
    build(tmp_path, shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", lowercase=True)
    a = Encoder.from_pretrained(tmp_path, precision="bf16").encode(texts, layers=-1)
    b = Encoder.from_pretrained(tmp_path, precision="fp32").encode(texts, layers=-1)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.999


def test_korean_reviews_with_the_multilingual_vocab(shared_data, tmp_path):
    rows = (shared_data / "korean" / "nsmc" / "ratings_test.txt").read_text(encoding="utf-8").splitlines()[1:400]
    texts = [r.split("\t")[1] for r in rows if len(r.split("\t")) == 3 and r.split("\t")[1].strip()][:300]
    vocab = shared_data / "vocab" / "bert-base-multilingual-cased" / "vocab.txt"
    model, tokenizer = build(tmp_path, vocab, lowercase=False)
    ref = hf_states(model, tokenizer, texts)
    enc = Encoder.from_pretrained(tmp_path, precision="fp32", lowercase=False)
    assert [e.ids for e in enc.tokenize(texts, max_length=128)] == [r[1] for r in ref]
    got = enc.encode(texts, layers=-1, pooling="mean", max_length=128)
    np.testing.assert_allclose(got, np.stack([states[-1].mean(0) for states, _ in ref]), rtol=1e-4, atol=1e-5)
