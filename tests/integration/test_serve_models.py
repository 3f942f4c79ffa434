"""Several models on one server (`?model=`, OpenAI's `model` field, /v1/models) and the task-head routes' refusal on
an embeddings-only model, in-process; the head routes' HTTP contract (TEI shapes, POST / dispatch, InferenceClient
.text_classification) with a stand-in pipeline on a real server. The pipelines' own answers against `bertkit predict`
are tested with `bertkit.pipelines` itself."""

from __future__ import annotations

import numpy as np
import pytest
from asgi import asgi_json
from starlette.testclient import TestClient
from tinymodels import http_json, make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.commands.serve import parse_model_specs
from bertkit.errors import InputError
from bertkit.serve.app import ServerThread, ServeSettings, create_app

WORDS = "the a cat dog sat on mat bank river money went to i we big small red blue hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
FP32 = dict(rtol=1e-4, atol=1e-5)
TIMEOUT = 60


def raw(url: str, path: str, body=None, method=None):
    return http_json(url, path, body, method, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    return {
        name: Encoder.from_pretrained(make_model_dir(tmp_path_factory.mktemp(name), VOCAB, seed=seed), precision="fp32")
        for name, seed in (("alpha", 0), ("beta", 1))
    }


def test_several_models_on_one_server(encoders):
    texts = ["the cat sat", "a big red dog"]
    want = {name: enc.encode(texts, normalize=True) for name, enc in encoders.items()}
    assert not np.allclose(want["alpha"], want["beta"], atol=1e-3)  # two really different models
    app = create_app(encoders, ServeSettings())
    assert set(vars(app.state)["_state"]) == {"services", "settings", "metrics"}  # what routes and ServerThread read
    with TestClient(app) as srv:
        status, out = asgi_json(srv, "/embed", {"inputs": texts})
        np.testing.assert_allclose(out, want["alpha"], **FP32)  # the first is the default
        status, out = asgi_json(srv, "/embed?model=beta", {"inputs": texts})
        np.testing.assert_allclose(out, want["beta"], **FP32)
        status, out = asgi_json(srv, "/v1/embeddings", {"input": texts, "model": "beta"})
        assert out["model"] == "beta"
        np.testing.assert_allclose([d["embedding"] for d in out["data"]], want["beta"], **FP32)
        status, out = asgi_json(srv, "/v1/embeddings", {"input": texts, "model": "text-embedding-ada-002"})
        assert status == 404 and "alpha, beta" in out["error"]["message"]  # several models: the name must match
        status, out = asgi_json(srv, "/embed?model=gamma", {"inputs": texts})
        assert status == 404 and "alpha, beta" in out["error"]
        status, out = asgi_json(srv, "/v1/models")
        assert [m["id"] for m in out["data"]] == ["alpha", "beta"]
        assert asgi_json(srv, "/v1/models/beta")[1]["id"] == "beta"
        assert asgi_json(srv, "/info?model=beta")[1]["model_id"] == "beta"
        assert asgi_json(srv, "/info")[1]["models"] == ["alpha", "beta"]


def test_head_routes_on_an_embeddings_only_model_say_why(encoders):
    with TestClient(create_app(encoders["alpha"], ServeSettings(model_id="alpha"))) as srv:
        for path, body in [
            ("/predict", {"inputs": "the cat"}),
            ("/rerank", {"query": "a", "texts": ["b"]}),
            ("/ner", {"inputs": "the cat"}),
            ("/qa", {"question": "who?", "context": "the cat"}),
        ]:
            status, out = asgi_json(srv, path, body)
            assert status == 422 and "no task head" in out["error"] and "/embed" in out["error"], (path, out)
        assert asgi_json(srv, "/", {"inputs": "the cat"})[0] == 200  # POST / still embeds


def test_model_specs():
    assert parse_model_specs(["runs/a"]) == {"a": "runs/a"}
    assert parse_model_specs(["runs/a"], "mine") == {"mine": "runs/a"}
    assert parse_model_specs(["x=runs/a", "y=runs/b"]) == {"x": "runs/a", "y": "runs/b"}
    with pytest.raises(InputError, match="already taken"):
        parse_model_specs(["one/a", "two/a"])


class StandIn:
    """The pipeline interface the server routes to (bertkit.pipelines), answering from a fixed table."""

    kind = "classification"
    labels = ["negative", "positive"]

    def __init__(self, encoder):
        self._encoder, self.calls = encoder, []

    def encoder(self):
        return self._encoder

    def predict(self, inputs, raw_scores=False, return_all_scores=False, top_k=None, truncate=True):
        self.calls.append((inputs, raw_scores, return_all_scores, top_k, truncate))
        one = [{"label": "positive", "score": 0.75}, {"label": "negative", "score": 0.25}]
        one = one[:top_k] if top_k else one if return_all_scores else one[:1]
        return one if not isinstance(inputs, list) else [one for _ in inputs]


def test_head_route_contract(encoders):
    pipe = StandIn(encoders["alpha"])
    huggingface_hub = pytest.importorskip("huggingface_hub")
    with ServerThread(create_app({"clf": pipe}, ServeSettings())) as srv:
        status, out = raw(srv.url, "/predict", {"inputs": "the cat"})
        assert status == 200 and [p["label"] for p in out] == ["positive", "negative"]  # TEI: every label
        status, out = raw(srv.url, "/predict", {"inputs": ["the cat", "a dog"]})  # TEI: two strings = one pair
        assert status == 200 and pipe.calls[-1][0] == ("the cat", "a dog") and isinstance(out[0], dict)
        status, out = raw(srv.url, "/predict", {"inputs": [["the cat"], ["a dog", "sat"]], "top_k": 1})
        assert status == 200 and pipe.calls[-1][0] == ["the cat", ("a dog", "sat")] and len(out) == 2
        assert out[0] == [{"label": "positive", "score": 0.75}]
        assert raw(srv.url, "/", {"inputs": "the cat", "raw_scores": True})[0] == 200  # POST / = the head's route
        assert pipe.calls[-1][1] is True
        status, out = raw(srv.url, "/predict", {"inputs": []})
        assert status == 400 and out["error_type"] == "Empty"
        status, out = raw(srv.url, "/predict", {"inputs": ["a", "b", "c"]})
        assert status == 422 and "[text, pair]" in out["error"]
        status, out = raw(srv.url, "/ner", {"inputs": "the cat"})
        assert status == 422 and "classification head" in out["error"]
        info = raw(srv.url, "/info")[1]
        assert info["model_type"] == {
            "classifier": {"id2label": {"0": "negative", "1": "positive"}, "label2id": {"negative": 0, "positive": 1}}
        }
        assert raw(srv.url, "/embed", {"inputs": "the cat"})[0] == 200  # the encoder routes stay
        client = huggingface_hub.InferenceClient(base_url=srv.url, timeout=TIMEOUT)
        got = client.text_classification("the cat sat")
        assert [(x.label, x.score) for x in got] == [("positive", 0.75), ("negative", 0.25)]
