"""`bertkit probe` on a tiny random model and the shipped fixtures: per-layer numbers are the numbers of that layer
(checked against an independent computation), change with the layer, and features are cached. The classification
and NER probes run on a BERT and a ModernBERT (``arch_dir``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture: one torch thread for tiny models)

from bertkit.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, ft):
    """A tiny random BERT of 3 layers on the fine-tuning fixtures' vocabulary."""
    from tinymodels import make_model_dir

    vocab = (ft / "vocab.txt").read_text(encoding="utf-8").split()
    return make_model_dir(tmp_path_factory.mktemp("probe-model"), vocab, layers=3)


@pytest.fixture(params=["bert", "modernbert"])
def arch_dir(request, model_dir, finetune_base_of):
    """(architecture, a tiny random model of 3 layers): ``model_dir``, or the 3-layer ModernBERT of
    ``finetune_base_of`` (layers 2 and 3 sliding-window)."""
    return request.param, model_dir if request.param == "bert" else finetune_base_of("modernbert")


def _csv(path):
    import csv

    return list(csv.DictReader(path.open()))


def test_stsb_probe_is_each_layers_cosine_spearman(model_dir, ft, tmp_path, capsys):
    from bertkit.data.tasks.glue import read_glue
    from bertkit.features import Encoder
    from bertkit.tasks.metrics import spearman

    out = tmp_path / "p"
    argv = [
        "probe",
        "--model",
        str(model_dir),
        "--task",
        "stsb",
        "--dev",
        str(ft / "stsb_dev.tsv"),
        "--output",
        str(out),
        "--pooling",
        "mean,cls",
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert not any(report["cached"].values())
    rows = {(r["layer"], r["pooling"]): float(r["score"]) for r in _csv(out / "probe.csv")}
    assert set(rows) == {(lay, p) for lay in ("embeddings", "1", "2", "3") for p in ("mean", "cls")}
    # independent: Encoder.encode at that one layer, cosine, Spearman
    dev = list(read_glue(ft / "stsb_dev.tsv", "stsb"))
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    for layer, name in ((0, "embeddings"), (2, "2"), (3, "3")):
        a = enc.encode([e.text_a for e in dev], layers=[layer], pooling="mean", normalize=True)
        b = enc.encode([e.text_b for e in dev], layers=[layer], pooling="mean", normalize=True)
        want = 100 * spearman(np.round((a * b).sum(-1), 5).tolist(), [e.label for e in dev])
        assert rows[(name, "mean")] == pytest.approx(want, abs=1e-3)
    means = [rows[(lay, "mean")] for lay in ("embeddings", "1", "2", "3")]
    assert len(set(means)) > 1  # the number changes when the layer changes (16 dev pairs: ranks can tie)
    md = (out / "probe.md").read_text()
    assert "| layer | mean | cls |" in md and "| 3 |" in md
    data = (out / "probe.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # second run: features come from the cache, same numbers
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["cached"] and all(again["cached"].values())
    assert {(r["layer"], r["pooling"]): float(r["score"]) for r in _csv(out / "probe.csv")} == rows


def test_sst2_linear_probe_per_layer(arch_dir, ft, tmp_path, capsys):
    from bertkit.data.tasks.glue import GLUE_TASKS, read_glue
    from bertkit.experiments.probe import fit_logistic
    from bertkit.features import Encoder
    from bertkit.tasks.metrics import accuracy

    arch, model_dir = arch_dir
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
                "cls,mean",
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
    assert all(0.0 <= v <= 1.0 for v in rows.values())
    # independent: Encoder.encode at that one layer, the same logistic probe, the dev accuracy
    train, dev = list(read_glue(ft / "sst2_train.tsv", "sst2")), list(read_glue(ft / "sst2_dev.tsv", "sst2"))
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    classes = list(GLUE_TASKS["sst2"].labels)
    y_train = np.array([classes.index(e.label) for e in train])
    for layer, name in ((0, "embeddings"), (2, "2"), (3, "3")):
        x_train = enc.encode([e.text_a for e in train], layers=[layer], pooling="mean", max_length=128)
        x_dev = enc.encode([e.text_a for e in dev], layers=[layer], pooling="mean", max_length=128)
        pred = fit_logistic(x_train, y_train, 2)(x_dev).tolist()
        want = accuracy(pred, [classes.index(e.label) for e in dev])
        assert rows[(name, "mean")] == pytest.approx(want, abs=1e-4), (arch, name)
    # the embeddings' [CLS] is the same vector for every input (BERT: [CLS] + position 0 + segment 0; ModernBERT's
    # embeddings have no positions): the probe can only predict one class there, so it scores the share of that
    # class; deeper [CLS] vectors see the text
    labels = [e.label for e in dev]
    shares = {lab: labels.count(lab) / len(labels) for lab in set(labels)}
    assert rows[("embeddings", "cls")] in [pytest.approx(s) for s in shares.values()]
    assert max(rows[(lay, "cls")] for lay in ("1", "2", "3")) > rows[("embeddings", "cls")]


def test_ner_probe_layers_and_table7(arch_dir, ft, tmp_path, capsys):
    from bertkit.data.tasks.conll import read_conll
    from bertkit.experiments.probe import word_features
    from bertkit.features import Encoder

    arch, model_dir = arch_dir
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
                "10",
                "--tagger-lr",
                "3e-2",
                "--precision",
                "fp32",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    rows = _csv(out / "probe.csv")
    layers = [r for r in rows if r["kind"] == "layer"]
    table7 = [r["layer"] for r in rows if r["kind"] == "table7"]
    assert [r["layer"] for r in layers] == ["embeddings", "1", "2", "3"]
    assert table7 == [
        "embeddings",
        "second-to-last hidden",
        "last hidden",
        "weighted sum last four hidden",
        "concat last four hidden",
        "weighted sum all layers",
    ]
    scores = {r["layer"]: float(r["score"]) for r in rows}
    assert all(0.0 <= v <= 100.0 for v in scores.values())
    assert max(scores.values()) > 0.0, arch  # the tagger learned entities
    # Table 7's single-layer rows are the per-layer probes (same features, seed and tagger)
    assert scores["last hidden"] == pytest.approx(float(layers[-1]["score"]))
    feats = list((out / "features").glob("train-words-*.npy"))
    words = np.load(feats[0])
    assert len(feats) == 1 and words.shape[1:] == (4, 32)  # [words, L+1, H]
    assert all(not np.allclose(words[:, i], words[:, i + 1]) for i in range(3))
    assert (out / "probe_table7.png").is_file() and "Table 7" in (out / "probe.md").read_text()
    # the word features are each word's first piece at every hidden state of the model
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


def test_feature_cache_key_follows_the_tokenizer_files(tmp_path):
    """The cache key changes when any tokenizer file changes (a BPE ``tokenizer.json`` as much as ``vocab.txt``), so
    features computed with another tokenizer are never reused; it stays put when nothing changed."""
    from bertkit.experiments.probe import model_fingerprint

    (tmp_path / "config.json").write_text('{"model_type": "modernbert"}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = model_fingerprint(tmp_path)
    assert model_fingerprint(tmp_path) == before
    keys = {before}
    for name, text in (
        ("tokenizer.json", '{"model": {"type": "BPE"}}'),
        ("tokenizer_config.json", "{}"),
        ("special_tokens_map.json", '{"cls_token": "<s>"}'),
        ("vocab.txt", "[PAD]\n"),
    ):
        (tmp_path / name).write_text(text)
        keys.add(model_fingerprint(tmp_path))
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}}}')
    keys.add(model_fingerprint(tmp_path))
    assert len(keys) == 6
