"""A tiny ModernBERT through the commands that read a model's insides, as BERT goes: ``bertkit attention`` (every
layer's probabilities, equal to transformers' eager ``output_attentions``; sliding-window layers attend within their
window only), ``bertkit probe`` (per layer, the numbers of that layer), the feature-based tagger (``finetune
--feature-based``: a frozen ModernBERT under a trained tagger, served by ``load_pipeline``) and the reranker
(``finetune --task rerank``: a one-label ModernBertForSequenceClassification that transformers loads)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture: one torch thread)
from tinymodernbert import fixture_vocab, make_modernbert_dir

from bertkit.cli import main
from bertkit.pipelines import load_pipeline


@pytest.fixture(scope="module")
def ft(fixtures_dir):
    return fixtures_dir / "finetune"


@pytest.fixture(scope="module")
def vocab(fixtures_dir):
    return fixture_vocab(fixtures_dir)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, vocab):
    return make_modernbert_dir(tmp_path_factory.mktemp("mb"), vocab)  # local_attention 4: W = 2


def _csv(path):
    return list(csv.DictReader(path.open()))


def test_attention_maps_equal_transformers(model_dir, vocab, tmp_path, capsys):
    text = "the film is very good . the plot was boring ."
    png = tmp_path / "attn.png"
    assert main(["attention", "--model", str(model_dir), text, "--output", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    tokens = report["tokens"]
    assert tokens[0] == "[CLS]" and report["layers"] == 3 and report["heads"] == 4
    a = np.load(tmp_path / "attn.npz")["attention"]
    T = len(tokens)
    assert a.shape == (3, 4, T, T) and T > 8  # longer than 4 windows
    assert np.abs(a.sum(-1) - 1).max() < 1e-4  # rows are distributions
    far = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) > 2
    assert a[1:, :, far].max() == 0  # layers 2 and 3 slide: no weight beyond W = 2 positions
    assert a[0, :, far].min() > 0  # layer 1 is global
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    transformers = pytest.importorskip("transformers")
    hf = transformers.ModernBertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    ids = torch.tensor([[vocab.index(t) for t in tokens]])
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    want = torch.stack([x[0] for x in out.attentions]).float().numpy()
    np.testing.assert_allclose(a, want, atol=1e-5)


def test_sst2_probe_per_layer(model_dir, ft, tmp_path, capsys):
    from bertkit.data.tasks.glue import GLUE_TASKS, read_glue
    from bertkit.experiments.probe import fit_logistic
    from bertkit.features import Encoder
    from bertkit.tasks.metrics import accuracy

    out = tmp_path / "p"
    assert (
        main(
            [
                "probe",
                "--model",
                str(model_dir),
                "--task",
                "sst2",
                "--train",
                str(ft / "sst2_train.tsv"),
                "--dev",
                str(ft / "sst2_dev.tsv"),
                "--output",
                str(out),
                "--pooling",
                "mean,cls",
                "--precision",
                "fp32",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["task"] == "sst2"
    rows = {(r["layer"], r["pooling"]): float(r["accuracy"]) for r in _csv(out / "probe.csv")}
    assert set(rows) == {(lay, p) for lay in ("embeddings", "1", "2", "3") for p in ("mean", "cls")}
    # independent: Encoder.encode at that one layer, the same logistic probe, the dev accuracy
    train, dev = list(read_glue(ft / "sst2_train.tsv", "sst2")), list(read_glue(ft / "sst2_dev.tsv", "sst2"))
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    classes = list(GLUE_TASKS["sst2"].labels)
    y_train = np.array([classes.index(e.label) for e in train])
    for layer, name in ((0, "embeddings"), (2, "2"), (3, "3")):
        x_train = enc.encode([e.text_a for e in train], layers=[layer], pooling="mean", max_length=128)
        x_dev = enc.encode([e.text_a for e in dev], layers=[layer], pooling="mean", max_length=128)
        pred = fit_logistic(x_train, y_train, 2)(x_dev).tolist()
        assert rows[(name, "mean")] == pytest.approx(accuracy(pred, [classes.index(e.label) for e in dev]), abs=1e-4), (
            name
        )
    # ModernBERT's embeddings have no positions: [CLS] is one vector for every input, so its probe scores the
    # share of the class it picks; the layers above see the text
    labels = [e.label for e in dev]
    shares = {lab: labels.count(lab) / len(labels) for lab in set(labels)}
    assert rows[("embeddings", "cls")] in [pytest.approx(s) for s in shares.values()]


def test_conll_probe_word_features(model_dir, ft, tmp_path):
    from bertkit.data.tasks.conll import read_conll
    from bertkit.experiments.probe import word_features
    from bertkit.features import Encoder

    out = tmp_path / "p"
    assert (
        main(
            [
                "probe",
                "--model",
                str(model_dir),
                "--task",
                "conll2003",
                "--train",
                str(ft / "conll_train.txt"),
                "--dev",
                str(ft / "conll_dev.txt"),
                "--output",
                str(out),
                "--tagger",
                "linear",
                "--epochs",
                "1",
                "--precision",
                "fp32",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    rows = _csv(out / "probe.csv")
    layers = [r["layer"] for r in rows if r["kind"] == "layer"]
    assert layers == ["embeddings", "1", "2", "3"] and len([r for r in rows if r["kind"] == "table7"]) == 6
    assert all(0.0 <= float(r["score"]) <= 100.0 for r in rows)
    # the word features are each word's first piece at every hidden state of the ModernBERT
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    sentences = list(read_conll(ft / "conll_dev.txt"))[:2]
    feats, offsets = word_features(enc, sentences, 128)
    tok = enc.tokenizer
    pieces = [tok.encode(w, add_special_tokens=False).ids or [tok.unk_token_id] for w in sentences[0].words]
    starts = [int(x) for x in np.cumsum([1] + [len(p) for p in pieces[:-1]])]  # each word's first piece
    ids = torch.tensor([[tok.cls_token_id, *[i for p in pieces for i in p], tok.sep_token_id]])
    with torch.no_grad():
        states = enc.bert(ids, output_hidden_states=True).hidden_states
    want = torch.stack([h[0, starts] for h in states], dim=1).numpy()  # [W, L+1, H]
    np.testing.assert_allclose(feats[offsets[0] : offsets[1]], want, atol=1e-5)


def test_feature_based_tagger(model_dir, ft, tmp_path):
    from bertkit.modeling_modernbert import ModernBertModel
    from bertkit.tasks.tagging import FeatureTagger

    out = tmp_path / "fb"
    assert (
        main(
            [
                "finetune",
                "--task",
                "conll2003",
                "--train",
                str(ft / "conll_train.txt"),
                "--dev",
                str(ft / "conll_dev.txt"),
                "--model",
                str(model_dir),
                "--output",
                str(out),
                "--feature-based",
                "--tagger",
                "mlp",
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--lr",
                "1e-3",
                "--quiet",
                "--precision",
                "fp32",
                "--max-train-examples",
                "16",
            ]
        )
        == 0
    )
    assert (out / "tagger_config.json").is_file()
    assert json.loads((out / "config.json").read_text())["model_type"] == "modernbert"
    frozen, before = (
        ModernBertModel.from_pretrained(out).state_dict(),
        ModernBertModel.from_pretrained(model_dir).state_dict(),
    )
    assert frozen.keys() == before.keys() and all(torch.equal(frozen[k], before[k]) for k in frozen)
    tagger = FeatureTagger.from_pretrained(out)
    assert isinstance(tagger.bert, ModernBertModel)

    pipe = load_pipeline(out, precision="fp32")
    assert pipe.kind == "ner"
    texts = ["alice works for acme in berlin", "the film is very good"]
    got = pipe.ner(texts, aggregation_strategy="none", ignore_labels=[])
    for text, row in zip(texts, got):
        ids = pipe.tokenizer.encode(text).ids
        with torch.no_grad():
            logits = tagger(torch.tensor([ids])).logits[0, 1:-1]  # [CLS] and [SEP] are not tagged
        assert [o["entity"] for o in row] == [tagger.labels[i] for i in logits.argmax(-1).tolist()]
        np.testing.assert_allclose([o["score"] for o in row], logits.softmax(-1).max(-1).values.numpy(), atol=1e-5)
    enc = pipe.encoder()  # the server's encoder routes: the frozen ModernBERT
    assert enc.num_layers == 3 and enc.encode(texts, layers=-1).shape == (2, 32)


def _rerank_rows(squad_json) -> list[dict]:
    """(question, the context sentence holding the answer, another sentence of the context) from SQuAD fixtures."""
    rows = []
    for article in json.loads(squad_json.read_text())["data"]:
        for p in article["paragraphs"]:
            sentences = list(dict.fromkeys(s.strip() + " ." for s in p["context"].split(" . ") if s.strip()))
            for q in p["qas"]:
                answer = q["answers"][0]["text"]
                pos = next((s for s in sentences if answer in s), None)
                neg = next((s for s in sentences if answer not in s), None)
                if pos and neg:
                    rows.append({"query": q["question"], "positive": pos, "negative": neg})
    return rows


def test_reranker(model_dir, ft, tmp_path):
    from bertkit.modeling_modernbert import ModernBertForSequenceClassification

    data = {}
    for split in ("train", "dev"):
        rows = _rerank_rows(ft / f"squad_{split}.json")
        assert len(rows) >= 8
        data[split] = tmp_path / f"{split}.jsonl"
        data[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "rr"
    assert (
        main(
            [
                "finetune",
                "--task",
                "rerank",
                "--train",
                str(data["train"]),
                "--dev",
                str(data["dev"]),
                "--model",
                str(model_dir),
                "--output",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--lr",
                "1e-3",
                "--quiet",
                "--precision",
                "fp32",
                "--max-train-examples",
                "8",
            ]
        )
        == 0
    )
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForSequenceClassification"] and len(config["id2label"]) == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 < metrics["mrr"] <= 1
    pipe = load_pipeline(out, precision="fp32")
    assert pipe.kind == "rerank"
    model = ModernBertForSequenceClassification.from_pretrained(out).eval()
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out, attn_implementation="eager").eval()
    row = json.loads(data["dev"].read_text().splitlines()[0])
    ranked = pipe.rerank(row["query"], [row["negative"], row["positive"]], raw_scores=True)
    assert ranked[0]["score"] >= ranked[1]["score"]
    for r in ranked:
        ids = torch.tensor([pipe.tokenizer.encode(row["query"], [row["negative"], row["positive"]][r["index"]]).ids])
        with torch.no_grad():
            ours, theirs = model(ids).logits[0, 0].item(), hf(input_ids=ids).logits[0, 0].item()
        assert r["score"] == pytest.approx(ours, abs=1e-5) and theirs == pytest.approx(ours, abs=1e-5)
