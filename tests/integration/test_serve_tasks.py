"""Task models over HTTP: tiny models fine-tuned here (as tests/unit/test_pipelines.py does) and served with the
encoder beside them on one server. /predict, /ner and /qa answer what `bertkit predict` and the in-process pipeline
answer; POST / goes to the head's route; huggingface_hub's text_classification reads the answer."""

from __future__ import annotations

import csv
import json
import time

import numpy as np
import pytest
import torch
from asgi import asgi_json
from starlette.testclient import TestClient
from tinymodels import FINETUNE_FIXTURES, finetune_base, finetune_quickly, http_json

from bertkit.cli import main
from bertkit.commands.serve import load_model
from bertkit.features import Encoder
from bertkit.serve.app import ServerThread, ServeSettings, create_app

TIMEOUT = 120


def raw(url: str, path: str, body=None, method=None):
    return http_json(url, path, body, method, timeout=TIMEOUT)


def _tsv(path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    ft = FINETUNE_FIXTURES
    base = finetune_base(tmp_path_factory.mktemp("base"))
    out = {"base": base, "ft": ft}
    for task, train, dev, extra in [
        ("sst2", "sst2_train.tsv", "sst2_dev.tsv", []),
        ("conll2003", "conll_train.txt", "conll_dev.txt", []),
        (
            "squad",
            "squad_train.json",
            "squad_dev.json",
            ["--max-seq-length", "40", "--doc-stride", "16", "--max-query-length", "16"],
        ),
    ]:
        out[task] = finetune_quickly(task, ft / train, ft / dev, base, tmp_path_factory.mktemp(task), *extra)
    return out


@pytest.fixture(scope="module")
def server(dirs):
    models = {
        name: load_model(str(dirs[key]), "cpu", "fp32")
        for name, key in [("clf", "sst2"), ("ner", "conll2003"), ("qa", "squad"), ("base", "base")]
    }
    assert isinstance(models["base"], Encoder) and models["clf"].kind == "classification"
    with ServerThread(create_app(models, ServeSettings())) as srv:
        srv.models = models
        yield srv


def test_predict_equals_bertkit_predict(server, dirs, tmp_path):
    ft = dirs["ft"]
    texts = [r[0] for r in _tsv(ft / "sst2_dev.tsv")[1:]]
    assert (
        main(
            [
                "predict",
                "--model",
                str(dirs["sst2"]),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--output",
                str(tmp_path / "p"),
                "--quiet",
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    labels = [row[1] for row in _tsv(tmp_path / "p" / "predictions.tsv")[1:]]
    status, out = raw(server.url, "/predict?model=clf", {"inputs": [[t] for t in texts]})
    assert status == 200 and [o[0]["label"] for o in out] == labels
    want = server.models["clf"].predict(texts, return_all_scores=True)
    for got, w in zip(out, want):
        assert [g["label"] for g in got] == [x["label"] for x in w]
        np.testing.assert_allclose([g["score"] for g in got], [x["score"] for x in w], rtol=1e-5, atol=1e-5)
        assert sorted(g["label"] for g in got) == ["0", "1"]  # TEI: every label, best first
    status, out = raw(server.url, "/?model=clf", {"inputs": texts[0]})  # POST / goes to the head's route
    assert status == 200 and out[0]["label"] == labels[0]
    status, info = raw(server.url, "/info?model=clf")
    assert info["model_type"] == {"classifier": {"id2label": {"0": "0", "1": "1"}, "label2id": {"0": 0, "1": 1}}}
    status, out = raw(server.url, "/embed?model=clf", {"inputs": texts[:2]})  # the encoder routes stay
    assert status == 200 and len(out[0]) == 32


def test_text_classification_client(server, dirs):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    text = _tsv(dirs["ft"] / "sst2_dev.tsv")[1][0]
    client = huggingface_hub.InferenceClient(base_url=server.url + "/?model=clf", timeout=TIMEOUT)
    got = client.text_classification(text)
    want = server.models["clf"].predict(text, return_all_scores=True)
    assert [x.label for x in got] == [w["label"] for w in want]
    np.testing.assert_allclose([x.score for x in got], [w["score"] for w in want], rtol=1e-5, atol=1e-5)


def test_ner_and_qa_equal_the_pipeline(server):
    text = "George Washington went to Washington ."
    status, out = raw(server.url, "/ner?model=ner", {"inputs": text})
    assert status == 200 and out == json.loads(json.dumps(server.models["ner"].ner(text)))
    assert out and all(0 <= e["start"] < e["end"] <= len(text) for e in out)  # character offsets into the input
    context = "The cat sat on the mat in the big house by the river , and the dog slept in the sun all day ."
    status, out = raw(server.url, "/qa?model=qa", {"question": "where did the cat sit ?", "context": context})
    want = server.models["qa"].answer("where did the cat sit ?", context)
    assert status == 200 and out["answer"] == want["answer"] and out["start"] == want["start"]
    assert context[out["start"] : out["end"]] == out["answer"]
    assert out["score"] == pytest.approx(want["score"], abs=1e-5)


def test_wrong_head_and_no_head(server):
    status, out = raw(server.url, "/qa?model=clf", {"question": "a", "context": "b"})
    assert status == 422 and "classification head" in out["error"]
    status, out = raw(server.url, "/predict?model=base", {"inputs": "the cat"})
    assert status == 422 and "no task head" in out["error"]
    status, out = raw(server.url, "/predict?model=clf", {"inputs": ["x" * 60_000]})
    assert status == 422 and "--max-input-chars" in out["error"]


def test_int8_models_serve(dirs):
    models = {
        "clf": load_model(str(dirs["sst2"]), "cpu", "auto", "int8"),
        "base": load_model(str(dirs["base"]), "cpu", "auto", "int8"),
    }
    fp32 = {"clf": load_model(str(dirs["sst2"]), "cpu", "fp32"), "base": load_model(str(dirs["base"]), "cpu", "fp32")}
    plain = [m for m in models["base"].bert.modules() if type(m) is torch.nn.Linear]
    int8 = [m for m in models["base"].bert.modules() if "quantized" in type(m).__module__ and hasattr(m, "weight")]
    assert int8 and not plain  # every Linear really is an int8 one
    texts = [r[0] for r in _tsv(dirs["ft"] / "sst2_dev.tsv")[1:6]]
    with TestClient(create_app(models, ServeSettings())) as srv:
        status, out = asgi_json(srv, "/embed?model=base", {"inputs": texts, "normalize": True})
        want = fp32["base"].encode(texts, normalize=True)
        assert status == 200 and np.min(np.sum(np.asarray(out) * want, axis=1)) > 0.99  # cosine to fp32
        status, out = asgi_json(srv, "/predict?model=clf", {"inputs": [[t] for t in texts]})
        assert status == 200 and len(out) == len(texts) and sorted(x["label"] for x in out[0]) == ["0", "1"]


def test_task_routes_refuse_unknown_parameters_and_name_every_route(server):
    for path, body, field in [
        (
            "/qa?model=qa",
            {"inputs": {"question": "where ?", "context": "the mat"}, "parameters": {"bogus": 1}},
            "parameters.bogus",
        ),
        ("/ner?model=ner", {"inputs": "George went home", "parameters": {"bogus": 1}}, "parameters.bogus"),
        ("/predict?model=clf", {"inputs": "a fine film", "parameters": {"bogus": 1}}, "parameters.bogus"),
        ("/ner?model=ner", {"inputs": "George went home", "parameters": {"stride": 8}}, "parameters.stride"),
        ("/predict?model=clf", {"inputs": "a fine film", "options": {"bogus": True}}, "options.bogus"),
        (
            "/predict?model=clf",
            {"inputs": "a fine film", "raw_scores": True, "parameters": {"function_to_apply": "sigmoid"}},
            "raw_scores",
        ),
    ]:
        status, out = raw(server.url, path, body)
        assert status == 422 and field in out["error"], (path, out)
    status, out = raw(server.url, "/rerank?model=clf", {"query": "a", "texts": ["b"]})
    assert status == 422 and "/predict" in out["error"] and "/embed" in out["error"]  # every route it serves
    status, out = raw(server.url, "/predict?model=clf", {"inputs": "a fine film", "options": {"use_cache": True}})
    assert status == 200
    status, info = raw(server.url, "/info?model=qa")
    assert (info["precision"], info["backend"], info["device"], info["task"]) == ("fp32", "torch", "cpu", "qa")


def test_ner_and_qa_are_bounded_before_computing(server):
    """/ner and /qa count the request's tokens against --max-request-tokens (and their answer against
    --max-output-values) before any compute, as /tokenize and /embed do."""
    app = create_app({"ner": server.models["ner"], "qa": server.models["qa"]}, ServeSettings(max_request_tokens=2000))
    with TestClient(app) as small:
        start = time.monotonic()
        status, out = asgi_json(small, "/ner?model=ner", {"inputs": [f"w{i} " * 300 for i in range(10)]})
        assert status == 422 and "--max-request-tokens" in out["error"] and "'inputs'" in out["error"]
        context = "the cat sat on the mat . " * 100
        status, out = asgi_json(small, "/qa?model=qa", {"inputs": [{"question": "where ?", "context": context}] * 5})
        assert status == 422 and "--max-request-tokens" in out["error"]
        assert time.monotonic() - start < 10
        status, out = asgi_json(
            small, "/qa?model=qa", {"question": "where did the cat sit ?", "context": context[:200]}
        )
        assert status == 200 and context[out["start"] : out["end"]] == out["answer"]
        status, out = asgi_json(small, "/ner?model=ner", {"inputs": "\u200b\u200b"})
        assert status == 400 and "is empty" in out["error"]


def _entities(items) -> list[dict]:
    """huggingface_hub's output elements (or the pipeline's dicts) as comparable dicts, scores rounded to 1e-5."""
    out = []
    for x in items:
        d = (
            dict(x)
            if isinstance(x, dict)
            else {k: getattr(x, k) for k in ("entity_group", "entity", "score", "word", "start", "end")}
        )
        out.append(
            {
                k: (round(v, 5) if k == "score" else v)
                for k, v in d.items()
                if k in ("entity_group", "entity", "score", "word", "start", "end") and v is not None
            }
        )
    return out


def test_inference_client_on_every_task_route(server, dirs):
    """huggingface_hub's InferenceClient sends each task's parameters; the server's answers equal the in-process
    pipeline's with the same arguments (fp32), and each parameter really changes the answer."""
    huggingface_hub = pytest.importorskip("huggingface_hub")

    def client(path: str):
        return huggingface_hub.InferenceClient(base_url=server.url + path, timeout=TIMEOUT)

    clf, ner_pipe, qa_pipe = server.models["clf"], server.models["ner"], server.models["qa"]
    text = _tsv(dirs["ft"] / "sst2_dev.tsv")[1][0]
    for function in ("softmax", "sigmoid", "none"):
        for top_k in (1, 2):
            got = client("/?model=clf").text_classification(text, function_to_apply=function, top_k=top_k)
            want = clf.predict(text, function_to_apply=function, top_k=top_k)
            assert [x.label for x in got] == [w["label"] for w in want] and len(got) == top_k
            np.testing.assert_allclose([x.score for x in got], [w["score"] for w in want], rtol=1e-5, atol=1e-6)
    sig = client("/?model=clf").text_classification(text, function_to_apply="sigmoid", top_k=2)
    assert abs(sum(x.score for x in sig) - 1) > 1e-3  # sigmoid is each label's own: really not the softmax

    sentence = "George Washington went to Washington and met John in Paris ."
    seen = []
    for strategy in ("simple", "none", "first", "max", "average"):
        for ignore in (["O"], []):
            got = client("/ner?model=ner").token_classification(
                sentence, aggregation_strategy=strategy, ignore_labels=ignore
            )
            want = ner_pipe.ner(sentence, aggregation_strategy=strategy, ignore_labels=ignore)
            assert _entities(got) == _entities(want), (strategy, ignore)
            seen.append(len(got))
    assert seen[3] > seen[2]  # "none" with nothing ignored has every token, "O" ones included
    kinds = {e["entity"] for e in ner_pipe.ner(sentence, aggregation_strategy="none", ignore_labels=[])}
    dropped = sorted(kinds)[:1] + ["O"]
    got = client("/ner?model=ner").token_classification(sentence, aggregation_strategy="none", ignore_labels=dropped)
    assert got == [] or not {x.entity for x in got} & set(dropped)

    question, context = (
        "where did the cat sit ?",
        ("The cat sat on the mat in the big house by the river , and the dog slept in the sun all day ."),
    )
    for top_k, impossible in ((1, False), (2, False), (3, True)):
        got = client("/qa?model=qa").question_answering(
            question=question, context=context, top_k=top_k, handle_impossible_answer=impossible
        )
        want = qa_pipe.answer(question, context, top_k=top_k, handle_impossible_answer=impossible)
        got, want = (got, want) if top_k > 1 else ([got], [want])
        assert len(got) == len(want) >= min(top_k, 2)
        assert [(x.answer, x.start, x.end) for x in got] == [(w["answer"], w["start"], w["end"]) for w in want]
        np.testing.assert_allclose([x.score for x in got], [w["score"] for w in want], rtol=1e-5, atol=1e-6)

    base = server.models["base"]
    got = client("/?model=base").feature_extraction(["the cat sat", "a dog"])
    np.testing.assert_allclose(got, base.encode(["the cat sat", "a dog"], normalize=True), rtol=1e-4, atol=1e-5)
    got = client("/fill-mask?model=base").fill_mask("the cat [MASK] on the mat", top_k=3)
    want = base.fill_mask(["the cat [MASK] on the mat"], top_k=3)[0][0]
    assert [x.token for x in got] == [w["token_id"] for w in want]
    np.testing.assert_allclose([x.score for x in got], [w["score"] for w in want], rtol=1e-5, atol=1e-6)
