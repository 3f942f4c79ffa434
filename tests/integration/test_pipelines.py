"""bertkit.pipelines on tiny fixture models fine-tuned here for a few steps: the answers equal `bertkit predict`'s
(same labels, spans and probabilities) and a plain forward pass of the model; NER grouping equals transformers'
TokenClassificationPipeline(aggregation_strategy="simple"); directories without a head are refused by name. The
reranker is fine-tuned from a BERT and a ModernBERT, each loaded by transformers with the same scores."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import torch
from tinymodels import NER_TEXTS, finetune_quickly, one_by_one_logits

from bertkit.cli import main
from bertkit.pipelines import (
    QuestionAnsweringPipeline,
    TextClassificationPipeline,
    TokenClassificationPipeline,
    load_pipeline,
)


def _finetune(tmp_path_factory, tiny_dir, task, train, dev, *extra):
    return finetune_quickly(task, train, dev, tiny_dir, tmp_path_factory.mktemp(task), *extra)


def _predict(model_dir, data, out):
    assert (
        main(
            [
                "predict",
                "--model",
                str(model_dir),
                "--data",
                str(data),
                "--output",
                str(out),
                "--quiet",
                "--precision",
                "fp32",
                "--batch-size",
                "5",
            ]
        )
        == 0
    )
    return out


def _tsv(path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


# --------------------------------------------------------------------------------------------- classification


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory, tiny_dir, ft):
    return _finetune(tmp_path_factory, tiny_dir, "sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv")


def test_classification_equals_predict_and_the_model(sst2_dir, ft, tmp_path):
    rows = _tsv(ft / "sst2_dev.tsv")[1:]
    texts = [r[0] for r in rows]
    pred = _tsv(_predict(sst2_dir, ft / "sst2_dev.tsv", tmp_path / "p") / "predictions.tsv")[1:]
    pipe = load_pipeline(sst2_dir, precision="fp32", batch_size=5)
    assert isinstance(pipe, TextClassificationPipeline) and pipe.kind == "classification"
    assert pipe.labels == ["0", "1"]  # the GLUE task's label names, saved with the model
    top = pipe.predict(texts)
    assert [t[0]["label"] for t in top] == [p[1] for p in pred]
    # scores: the softmax of the model's own logits, batched and padded or not (1e-5 in fp32)
    logits = one_by_one_logits(sst2_dir, pipe.tokenizer, texts)
    probs = torch.tensor(logits).softmax(-1).numpy()
    every = pipe.predict(texts, return_all_scores=True)
    for i, labels in enumerate(every):
        assert [x["score"] for x in labels] == sorted((x["score"] for x in labels), reverse=True)
        for x in labels:
            assert x["score"] == pytest.approx(probs[i, int(x["label"])], abs=1e-5)
    raw = pipe.predict(texts[:3], raw_scores=True, top_k=2)
    for i, labels in enumerate(raw):
        for x in labels:
            assert x["score"] == pytest.approx(logits[i, int(x["label"])], abs=1e-5)
    # a single text gives one list; a (text, pair) tuple is one pair
    assert pipe.predict(texts[0]) == [top[0][0]]
    assert len(pipe.predict((texts[0], texts[1]), return_all_scores=True)) == 2


def test_pairs_regression_scores(tmp_path_factory, tiny_dir, ft, tmp_path):
    d = _finetune(tmp_path_factory, tiny_dir, "stsb", ft / "stsb_train.tsv", ft / "stsb_dev.tsv")
    rows = _tsv(ft / "stsb_dev.tsv")
    header, rows = rows[0], rows[1:]
    a, b = header.index("sentence1"), header.index("sentence2")
    pairs = [(r[a], r[b]) for r in rows]
    pred = _tsv(_predict(d, ft / "stsb_dev.tsv", tmp_path / "p") / "predictions.tsv")[1:]
    pipe = load_pipeline(d, precision="fp32", batch_size=4)
    assert pipe.kind == "regression"
    out = pipe.predict(pairs)
    got = [o[0]["score"] for o in out]
    assert got == pytest.approx([float(p[1]) for p in pred], abs=6e-4)  # predictions.tsv keeps 3 decimals
    logits = one_by_one_logits(d, pipe.tokenizer, [p[0] for p in pairs], [p[1] for p in pairs])
    assert got == pytest.approx(logits[:, 0].tolist(), abs=1e-5)  # the raw value: no sigmoid for regression


# --------------------------------------------------------------------------------------------- errors


# --------------------------------------------------------------------------------------------- NER


@pytest.fixture(scope="module")
def conll_dir(tmp_path_factory, tiny_dir, ft):
    return _finetune(tmp_path_factory, tiny_dir, "conll2003", ft / "conll_train.txt", ft / "conll_dev.txt")


def _conll_sentences(path) -> list[list[str]]:
    sentences, words = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-DOCSTART-"):
            continue
        if not line.strip():
            if words:
                sentences.append(words)
            words = []
        else:
            words.append(line.split()[0])
    if words:
        sentences.append(words)
    return sentences


def test_ner_token_labels_equal_predict(conll_dir, ft, tmp_path):
    out = _predict(conll_dir, ft / "conll_dev.txt", tmp_path / "p")
    blocks = [b for b in (out / "predictions.txt").read_text().split("\n\n") if b.strip()]
    predicted = [[line.split()[-1] for line in b.splitlines()] for b in blocks]
    sentences = _conll_sentences(ft / "conll_dev.txt")
    assert len(sentences) == len(predicted)
    pipe = load_pipeline(conll_dir, precision="fp32", batch_size=3)
    assert isinstance(pipe, TokenClassificationPipeline)
    texts = [" ".join(words) for words in sentences]
    tokens = pipe.ner(texts, aggregation_strategy="none", ignore_labels=())
    for text, words, tags, toks in zip(texts, sentences, predicted, tokens):
        by_start = {}
        for t in toks:
            by_start.setdefault(t["start"], t)  # the first word piece starting at a character
        pos = 0
        for word, tag in zip(words, tags):
            start = text.index(word, pos)
            pos = start + len(word)
            assert by_start[start]["entity"] == tag  # the first sub-token's label, as `predict` tags a word
            assert text[by_start[start]["start"] : by_start[start]["end"]].lower() == by_start[start]["word"].lower()


# --------------------------------------------------------------------------------------------- QA


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory, tiny_dir, ft):
    # short windows, so that the fixture's contexts go through several doc-stride windows
    return _finetune(
        tmp_path_factory,
        tiny_dir,
        "squad",
        ft / "squad_train.json",
        ft / "squad_dev.json",
        "--max-seq-length",
        "40",
        "--doc-stride",
        "16",
        "--max-query-length",
        "16",
    )


def test_qa_equals_predict(squad_dir, ft, tmp_path):
    out = _predict(squad_dir, ft / "squad_dev.json", tmp_path / "p")
    preds = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    data = json.loads((ft / "squad_dev.json").read_text())
    items = [(q["id"], q["question"], p["context"]) for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    pipe = load_pipeline(squad_dir, precision="fp32", batch_size=7, qa_convention="google")  # predict's convention
    assert isinstance(pipe, QuestionAnsweringPipeline) and pipe.task.doc_stride == 16
    from bertkit.data.tasks.squad import SquadExample

    windows = pipe.task.featurize([SquadExample("x", items[0][1], items[0][2])], pipe.tokenizer)
    assert len(windows) > 2  # the long-context path is the one under test
    answers = pipe.answer([{"question": q, "context": c} for _, q, c in items])
    for (qid, _q, context), ans in zip(items, answers):
        assert ans["answer"] == preds[qid]
        assert context[ans["start"] : ans["end"]] == ans["answer"]
        best = next(n for n in nbest[qid] if n["text"] == preds[qid])
        assert ans["score"] == pytest.approx(best["probability"], abs=1e-5)
        assert (ans["start"], ans["end"]) == (best["start"], best["end"])
    qid, q, c = items[1]
    assert pipe.answer(q, c) == answers[1] == pipe({"question": q, "context": c})
    with pytest.raises(ValueError, match="inputs\\[0\\] must be an object with 'question' and 'context'"):
        pipe.answer([{"question": "x"}])


def test_encoder_shares_the_fine_tuned_weights(sst2_dir):
    pipe = load_pipeline(sst2_dir, precision="fp32")
    enc = pipe.encoder()
    assert enc.bert is pipe.model.bert
    vec = enc.encode(["the film is good ."], pooling="cls", layers=-1)
    assert vec.shape == (1, 32)


# --------------------------------------------------------------------------------------------- rerank


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


@pytest.fixture(scope="module")
def rerank_data(tmp_path_factory, ft):
    d = tmp_path_factory.mktemp("rerank-data")
    for split in ("train", "dev"):
        rows = _rerank_rows(ft / f"squad_{split}.json")
        assert len(rows) >= 8
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_finetune_rerank_then_pipeline_equals_predict(arch, tmp_path_factory, finetune_base_of, rerank_data, tmp_path):
    """``finetune --task rerank`` gives a one-label ``{Bert|ModernBert}ForSequenceClassification`` that transformers
    loads with the same score; the pipeline's raw scores are ``bertkit predict``'s and the model's."""
    base = finetune_base_of(arch)
    d = _finetune(tmp_path_factory, base, "rerank", rerank_data / "train.jsonl", rerank_data / "dev.jsonl")
    name = {"bert": "BertForSequenceClassification", "modernbert": "ModernBertForSequenceClassification"}[arch]
    config = json.loads((d / "config.json").read_text())
    assert config["architectures"] == [name] and len(config["id2label"]) == 1
    metrics = json.loads((d / "metrics.json").read_text())
    assert 0 < metrics["mrr"] <= 1 and 0 <= metrics["accuracy"] <= 1
    rows = [json.loads(x) for x in (rerank_data / "dev.jsonl").read_text().splitlines()]
    pred = _tsv(_predict(d, rerank_data / "dev.jsonl", tmp_path / "p") / "predictions.tsv")
    assert pred[0] == ["index", "score", "negative_score"] and len(pred) == len(rows) + 1
    pipe = load_pipeline(d, precision="fp32", batch_size=3)
    assert pipe.kind == "rerank"
    for row, (_, pos, neg) in zip(rows, pred[1:]):
        out = pipe.rerank(row["query"], [row["negative"], row["positive"]], raw_scores=True)
        scores = {o["index"]: o["score"] for o in out}
        assert scores[1] == pytest.approx(float(pos), abs=1e-5) and scores[0] == pytest.approx(float(neg), abs=1e-5)
        assert out[0]["score"] >= out[1]["score"]
    transformers = pytest.importorskip("transformers")
    extra = {"attn_implementation": "eager"} if arch == "modernbert" else {}
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(d, **extra).eval()
    assert type(hf).__name__ == name
    row = rows[0]
    for o in pipe.rerank(row["query"], [row["negative"], row["positive"]], raw_scores=True):
        enc = pipe.tokenizer.encode(row["query"], [row["negative"], row["positive"]][o["index"]])
        inputs = {"input_ids": torch.tensor([enc.ids])}
        if arch == "bert":
            inputs["token_type_ids"] = torch.tensor([enc.type_ids])
        with torch.no_grad():
            assert hf(**inputs).logits[0, 0].item() == pytest.approx(o["score"], abs=1e-5)


# --------------------------------------------------------------------------------------------- ONNX Runtime backend


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_ner_on_onnx_equals_torch(arch, random_ner_dir, fixtures_dir, tmp_path):
    """A random token-classification head (BERT's and ModernBERT's, over IOB labels) on ONNX Runtime: every piece's
    tag, span and score, and the grouped entities, are the PyTorch model's."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    if arch == "bert":
        d = random_ner_dir
    else:
        from tinymodels import NER_LABELS
        from tinymodernbert import fixture_vocab, make_modernbert_dir

        labels = dict(enumerate(NER_LABELS))
        d = make_modernbert_dir(
            tmp_path / "ner", fixture_vocab(fixtures_dir), "ModernBertForTokenClassification", 4, id2label=labels
        )
    onnx, ref = load_pipeline(d, backend="onnx"), load_pipeline(d, precision="fp32")
    assert onnx.backend == "onnx"
    a = onnx.ner(NER_TEXTS, aggregation_strategy="none", ignore_labels=[])
    b = ref.ner(NER_TEXTS, aggregation_strategy="none", ignore_labels=[])
    assert [[(o["entity"], o["start"], o["end"]) for o in x] for x in a] == [
        [(o["entity"], o["start"], o["end"]) for o in x] for x in b
    ]
    assert [o["score"] for x in a for o in x] == pytest.approx([o["score"] for x in b for o in x], abs=1e-4)
    grouped, want = onnx.ner(NER_TEXTS), ref.ner(NER_TEXTS)
    assert any(grouped)  # the random head tags something
    assert [[(o["entity_group"], o["start"], o["end"]) for o in x] for x in grouped] == [
        [(o["entity_group"], o["start"], o["end"]) for o in x] for x in want
    ]


def test_onnx_backend_equals_torch(sst2_dir, squad_dir, ft, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    texts = [r[0] for r in _tsv(ft / "sst2_dev.tsv")[1:]]
    torch_clf = load_pipeline(sst2_dir, precision="fp32")
    onnx_clf = load_pipeline(sst2_dir, backend="onnx", batch_size=5)
    assert onnx_clf.backend == "onnx" and type(onnx_clf.model).__name__ == "OnnxRuntimeModel"
    np.testing.assert_allclose(onnx_clf.logits(texts), torch_clf.logits(texts), atol=1e-4)
    assert [x[0]["label"] for x in onnx_clf.predict(texts)] == [x[0]["label"] for x in torch_clf.predict(texts)]
    enc = onnx_clf.encoder()  # ONNX Runtime on the fine-tuned encoder's every-layer graph
    assert enc.backend == "onnx" and type(enc.runner.model).__name__ == "OnnxRuntimeModel"
    np.testing.assert_allclose(enc.encode(texts, layers=-1), torch_clf.encoder().encode(texts, layers=-1), atol=1e-4)

    data = json.loads((ft / "squad_dev.json").read_text())
    items = [
        {"question": q["question"], "context": p["context"]}
        for a in data["data"]
        for p in a["paragraphs"]
        for q in p["qas"]
    ][:6]
    a = load_pipeline(squad_dir, backend="onnx").answer(items)
    b = load_pipeline(squad_dir, precision="fp32").answer(items)
    assert [(x["answer"], x["start"]) for x in a] == [(x["answer"], x["start"]) for x in b]
    assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-4)

    # a model.onnx in the directory is used as it is; int8 goes through ONNX Runtime's quantiser
    d = tmp_path / "clf"
    shutil.copytree(sst2_dir, d)
    from bertkit.export import export_onnx

    export_onnx(d, d / "model.onnx")
    assert load_pipeline(d, backend="onnx").model.path == str(d / "model.onnx")
    q = load_pipeline(d, backend="onnx", quantize="int8")
    assert q.model.path != str(d / "model.onnx") and q.quantize == "int8"
    np.testing.assert_allclose(q.logits(texts), torch_clf.logits(texts), atol=0.05)
    with pytest.raises(ValueError, match="backend must be one of torch, onnx"):
        load_pipeline(d, backend="tensorrt")
