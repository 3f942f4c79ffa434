"""The embedding server: concurrency, failure isolation, the API key and the client end to end against a real uvicorn
on 127.0.0.1; every 4xx with its message and the answers' shapes in-process (an ASGI client, no socket)."""

from __future__ import annotations

import base64
import json
import random
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from asgi import asgi_json
from starlette.testclient import TestClient
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import BertClient, Encoder
from bertkit.features import encode_with_masks
from bertkit.serve.app import ServerThread, ServeSettings, create_app
from bertkit.serve.client import BertClientError

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
TIMEOUT = 30  # seconds for any single HTTP call: nothing can hang the suite
BF16 = dict(rtol=2e-2, atol=2e-2)  # batch composition changes bf16 rounding, never more


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("serve-model"), VOCAB)


@pytest.fixture(scope="module")
def encoder(model_dir):
    return Encoder.from_pretrained(model_dir)  # precision auto: bf16 where the CPU has it, as the server runs


SETTINGS = dict(
    max_inputs=16,
    max_input_chars=2000,
    max_payload_bytes=64 * 1024,
    max_batch_tokens=2048,
    max_batch_size=32,
    max_wait_ms=2.0,
    max_request_tokens=500,
)


@pytest.fixture(scope="module")
def server(encoder):
    with ServerThread(create_app(encoder, ServeSettings(**SETTINGS))) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(encoder):
    """The same app in-process: shapes and refusals need no socket."""
    with TestClient(create_app(encoder, ServeSettings(**SETTINGS))) as c:
        yield c


def call(url: str, path: str, body=None, raw: bytes | None = None, headers: dict | None = None, method=None):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        url + path,
        data=data,
        method=method or ("GET" if data is None else "POST"),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            text = resp.read().decode()
            return resp.status, (json.loads(text) if resp.headers.get_content_type() == "application/json" else text)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def random_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55])))


# ------------------------------------------------------------------ concurrency and equality with offline


def test_concurrent_clients_get_their_own_offline_results(server, encoder):
    """32 threads x 50 requests of mixed lengths, endpoints and pooling specs: 0 failures, and every vector equals
    the offline Encoder.encode result (computed in other batches) within bf16 tolerance."""
    rng = random.Random(0)
    kinds = ["encode-mean", "encode-max-last", "embed", "openai"]
    plans = [
        [(rng.choice(kinds), [random_text(rng) for _ in range(rng.randint(1, 4))]) for _ in range(50)]
        for _ in range(32)
    ]
    texts = sorted({t for plan in plans for _, ts in plan for t in ts})
    offline = {
        "encode-mean": encoder.encode(texts),  # server defaults = Encoder defaults: layer -2, mean
        "encode-max-last": encoder.encode(texts, layers=[-1, 0], pooling="max"),
        "embed": encoder.encode(texts, normalize=True),
        "openai": encoder.encode(texts, normalize=True),
    }
    index = {t: i for i, t in enumerate(texts)}
    failures: list[str] = []
    mismatches: list[str] = []
    lock = threading.Lock()

    def worker(plan):
        for kind, batch in plan:
            try:
                if kind == "encode-mean":
                    status, out = call(server.url, "/encode", {"texts": batch})
                    vecs = np.asarray(out["embeddings"], dtype=np.float32) if status == 200 else None
                elif kind == "encode-max-last":
                    status, out = call(
                        server.url,
                        "/encode",
                        {
                            "texts": batch,
                            "pooling_layer": [-1, 0],
                            "pooling_strategy": "REDUCE_MAX",
                            "encoding_format": "base64",
                        },
                    )
                    vecs = (
                        np.frombuffer(base64.b64decode(out["embeddings"]), "<f4").reshape(out["shape"])
                        if status == 200
                        else None
                    )
                elif kind == "embed":
                    status, out = call(server.url, "/embed", {"inputs": batch})
                    vecs = np.asarray(out, dtype=np.float32) if status == 200 else None
                else:
                    status, out = call(server.url, "/v1/embeddings", {"input": batch, "model": "tiny"})
                    vecs = (
                        np.asarray(
                            [d["embedding"] for d in sorted(out["data"], key=lambda d: d["index"])], dtype=np.float32
                        )
                        if status == 200
                        else None
                    )
                if status != 200:
                    with lock:
                        failures.append(f"{kind}: HTTP {status} {out}")
                    continue
                want = offline[kind][[index[t] for t in batch]]
                if vecs.shape != want.shape or not np.allclose(vecs, want, **BF16):
                    with lock:
                        mismatches.append(f"{kind} {batch[:1]}: max diff {np.abs(vecs - want).max()}")
            except Exception as exc:  # noqa: BLE001 - counted as a failure
                with lock:
                    failures.append(f"{kind}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(plan,)) for plan in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert failures == []
    assert mismatches == []
    status, metrics = call(server.url, "/metrics")
    batches = float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith("bertkit_batches_total")))
    served = sum(len(ts) for plan in plans for _, ts in plan)
    assert 0 < batches < served  # requests really were batched together


# ------------------------------------------------------------------ every refusal, with its message


BAD = [
    ("/embed", b"{not json", 422, "malformed JSON"),
    ("/embed", b"", 422, "empty request body"),
    ("/embed", b"[1, 2]", 422, "JSON object"),
    ("/embed", {"inputs": 42}, 422, "inputs"),
    ("/embed", {"inputs": ["ok", 3]}, 422, "inputs"),
    ("/embed", {"inputs": "x", "normalize": "yes"}, 422, "normalize"),
    ("/embed", {"inputs": []}, 400, "cannot be empty"),
    ("/embed", {"inputs": [""]}, 400, "inputs[0]' is empty"),
    ("/embed", {"inputs": ["fine", "   "]}, 400, "inputs[1]' is empty"),
    ("/embed", {"inputs": ["fine", "\u200b"]}, 400, "inputs[1]' is empty"),  # zero-width: nothing to tokenize
    ("/embed", {"inputs": ["\u0001\u0002 \ufeff"]}, 400, "inputs[0]' is empty"),  # control characters only
    ("/v1/embeddings", {"input": ["\u200d"]}, 400, "input[0]' is empty"),
    ("/encode", {"texts": ["a"], "pairs": ["\u200b"]}, 400, "pairs[0]' is empty"),
    ("/embed", {"inputs": "x", "prompt_name": "query"}, 422, "prompt_name"),
    ("/embed", {"inputs": "x", "options": {"use_gpu": True}}, 422, "options.use_gpu"),
    ("/embed", {"inputs": "x", "encoding_format": "base64"}, 422, "encoding_format"),
    ("/fill-mask", {"inputs": "the [MASK]", "parameters": {"targets": ["cat"]}}, 422, "parameters.targets"),
    ("/fill-mask", {"inputs": "the [MASK]", "parameters": {"top_k": 0}}, 422, "parameters.top_k"),
    ("/encode", {"texts": ["the cat"] * 10, "pairs": ["sat on the mat " * 12] * 10}, 422, "--max-request-tokens"),
    ("/embed", {"inputs": ["a"] * 17}, 422, "over the limit of 16"),
    ("/embed", {"inputs": ["the " * 600]}, 422, "characters"),
    ("/embed", {"inputs": ["the " * 100]}, 422, "tokens long"),
    ("/embed", {"inputs": [[2, 5, 999]]}, 422, "vocabulary"),
    ("/embed", {"inputs": "x", "dimensions": 0}, 422, "dimensions"),
    ("/embed", {"inputs": ["x" * 70_000]}, 413, "payload"),
    ("/embed", {"inputs": "x", "colour": "red"}, 422, "colour"),
    ("/v1/embeddings", {"input": []}, 400, "cannot be empty"),
    ("/v1/embeddings", {"input": [[1, 2, 99999]]}, 422, "vocabulary"),
    ("/v1/embeddings", {"input": [[1, 2], "x", [True]]}, 422, "input"),
    ("/v1/embeddings", {"input": "x", "dimensions": 33}, 422, "dimensions"),
    ("/encode", {"texts": "not a list"}, 422, "texts"),
    ("/encode", {"texts": ["a"], "pooling_layer": 9}, 422, "out of range"),
    ("/encode", {"texts": ["a"], "pooling_strategy": "AVERAGE"}, 422, "unknown pooling"),
    ("/encode", {"texts": ["a", "b"], "pairs": ["c"]}, 422, "pairs"),
    ("/tokenize", {"inputs": []}, 400, "cannot be empty"),
    ("/tokenize", {"inputs": ["a"], "pairs": ["x" * 2001]}, 422, "pairs[0]' has 2001 characters"),
    ("/tokenize", {"inputs": ["a"], "pairs": [" "]}, 400, "pairs[0]' is empty"),
    ("/decode", {"ids": []}, 400, "cannot be empty"),
    ("/decode", {"ids": [[2, 500]]}, 422, "vocabulary"),
    ("/fill-mask", {"inputs": "no mask here"}, 422, "[MASK]"),
    ("/fill-mask", {"inputs": "the [MASK]", "top_k": 0}, 422, "top_k"),
    ("/nope", {"inputs": "x"}, 404, "no endpoint"),
]


@pytest.mark.parametrize("path,body,status,message", BAD, ids=[f"{p}-{i}" for i, (p, *_) in enumerate(BAD)])
def test_bad_requests_get_4xx_with_a_message(client, path, body, status, message):
    got, out = asgi_json(
        client, path, raw=body if isinstance(body, bytes) else None, body=None if isinstance(body, bytes) else body
    )
    assert got == status, out
    text = out["error"]["message"] if path.startswith("/v1/") else out["error"]
    assert message in text
    assert asgi_json(client, "/health") == (200, {"status": "ok"})


def test_truncation_when_asked(client, encoder):
    long = "the cat " * 100
    status, out = asgi_json(client, "/embed", {"inputs": [long], "truncate": True, "normalize": False})
    assert status == 200
    np.testing.assert_allclose(out[0], encoder.encode([long], max_length=64)[0], **BF16)
    status, out = asgi_json(client, "/encode", {"texts": [long], "pooling_strategy": "NONE", "show_tokens": True})
    assert status == 200 and out["shape"] == [[64, 32]] and len(out["tokens"][0]) == 64


def test_tokenize_fill_mask_info_metrics(client, encoder):
    status, toks = asgi_json(client, "/tokenize", {"inputs": "The cat sat"})
    assert status == 200 and len(toks) == 1  # TEI nests a single input too
    toks = toks[0]
    assert [t["text"] for t in toks] == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert [(t["start"], t["stop"]) for t in toks[1:-1]] == [(0, 3), (4, 7), (8, 11)]
    status, fills = asgi_json(client, "/fill-mask", {"inputs": ["the [MASK] sat on the [MASK]"], "top_k": 3})
    assert status == 200 and len(fills) == 1 and len(fills[0]) == 2 and all(len(m) == 3 for m in fills[0])
    offline = encoder.fill_mask(["the [MASK] sat on the [MASK]"], top_k=3)[0]  # the same computation
    for got, want in zip(fills[0], offline):
        assert [p["token"] for p in got] == [p["token"] for p in want]
        np.testing.assert_allclose([p["score"] for p in got], [p["score"] for p in want], rtol=1e-3)
    status, info = asgi_json(client, "/info")
    assert status == 200 and info["embedding_dim"] == 32 and info["max_client_batch_size"] == 16
    assert info["num_layers"] == 3 and info["max_input_length"] == 64
    status, text = asgi_json(client, "/metrics")
    assert status == 200 and 'bertkit_requests_total{path="/tokenize",status="200"}' in text
    assert "# TYPE bertkit_request_duration_seconds histogram" in text


def test_fill_mask_refusals_name_the_request_field_and_the_flag(client, encoder):
    """/fill-mask's field is ``inputs`` (``inputs[1]`` in a list), never the library's ``texts[0]``; a limit names its
    flag."""
    long = "the [MASK] " + "cat " * 70
    n = len(encode_with_masks(encoder.tokenizer, long))  # as the model reads it: [MASK] is one token
    cases = [
        ({"inputs": long}, f"'inputs' is {n} tokens long, over the limit of 64", "--max-length"),
        ({"inputs": ["the [MASK]", long]}, f"'inputs[1]' is {n} tokens long", "--max-length"),
        ({"inputs": "a " * 1001 + "[MASK]"}, "'inputs' has 2008 characters", "--max-input-chars"),
        ({"inputs": ["the [MASK]", "the cat"]}, "'inputs[1]' has no [MASK] token", ""),
    ]
    for body, message, flag in cases:
        status, out = asgi_json(client, "/fill-mask", body)
        assert status == 422 and message in out["error"] and flag in out["error"], out
        assert "texts" not in out["error"]


def test_fill_mask_at_the_bare_url_of_an_embedding_model_points_to_fill_mask(client):
    """huggingface_hub's ``InferenceClient(base_url=URL).fill_mask(text)`` posts ``{"inputs", "parameters": {}}``
    (``top_k=2``: ``{"top_k": 2}``) to the URL itself, which embeds on a model without a task head; a [MASK] in the
    text without ``parameters`` is one too (issue 60, item 13: it was embedded, 200)."""
    for parameters in ({}, {"top_k": 2}, {"targets": ["cat"]}, None):
        body = {"inputs": "the [MASK] sat"} | ({} if parameters is None else {"parameters": parameters})
        status, out = asgi_json(client, "/", body)
        assert status == 422 and "send the request to /fill-mask" in out["error"], out
        assert "Extra inputs" not in out["error"]
    status, out = asgi_json(client, "/", {"inputs": "the cat sat"})  # an embedding request there still embeds
    assert status == 200 and len(out[0]) == 32
    status, out = asgi_json(client, "/", {"inputs": "the cat sat", "colour": "red"})  # and other fields are still named
    assert status == 422 and "field 'colour'" in out["error"]


def test_openai_base64_equals_float(client):
    _, a = asgi_json(client, "/v1/embeddings", {"input": ["the cat", "a dog"], "encoding_format": "base64"})
    _, b = asgi_json(client, "/v1/embeddings", {"input": ["the cat", "a dog"]})
    for da, db in zip(a["data"], b["data"]):
        np.testing.assert_allclose(np.frombuffer(base64.b64decode(da["embedding"]), "<f4"), db["embedding"], rtol=1e-6)
    assert a["object"] == "list" and a["usage"]["prompt_tokens"] == 8


def test_openapi_describes_every_route_and_body(encoder):
    """/openapi.json lists the routes with their typed bodies; it and /docs need no key (they show no model data)."""
    with TestClient(create_app(encoder, ServeSettings(api_key="s3cret"))) as c:
        status, spec = asgi_json(c, "/openapi.json")
        assert status == 200 and {"/embed", "/v1/embeddings", "/encode", "/fill-mask", "/predict"} <= set(spec["paths"])
        body = spec["paths"]["/embed"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert (
            body["$ref"].endswith("/EmbedRequest")
            and "inputs" in spec["components"]["schemas"]["EmbedRequest"]["properties"]
        )
        status, page = asgi_json(c, "/docs")
        assert status == 200 and "swagger" in page.lower()
        assert asgi_json(c, "/embed", {"inputs": "the cat"})[0] == 401  # the routes themselves keep the key


# ------------------------------------------------------------------ the API key


def test_api_key(encoder):
    with ServerThread(create_app(encoder, ServeSettings(api_key="s3cret"))) as srv:
        assert call(srv.url, "/embed", {"inputs": "the cat"})[0] == 401
        status, out = call(srv.url, "/v1/embeddings", {"input": "the cat"}, headers={"Authorization": "Bearer no"})
        assert status == 401 and "API key" in out["error"]["message"]
        assert call(srv.url, "/embed", {"inputs": "the cat"}, headers={"X-API-Key": "s3cret"})[0] == 200
        assert call(srv.url, "/info", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert call(srv.url, "/health") == (200, {"status": "ok"})  # probes need no key
        with pytest.raises(BertClientError) as err:
            BertClient(srv.url, api_key="wrong", timeout=TIMEOUT).encode(["the cat"])
        assert err.value.status == 401
        vec = BertClient(srv.url, api_key="s3cret", timeout=TIMEOUT).encode(["the cat"])
        np.testing.assert_allclose(vec, encoder.encode(["the cat"]), **BF16)


# ------------------------------------------------------------------ a failing request is isolated


def test_a_failing_request_fails_alone(model_dir):
    """A request whose inputs break the model gets a 500; requests batched with it still get their own results,
    and the server stays healthy."""
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    poison = enc.tokenizer.convert_tokens_to_ids("money")
    forward = enc.forward

    def fragile_forward(input_ids, *args, **kwargs):
        if bool((input_ids == poison).any()):
            raise RuntimeError("poisoned input")
        return forward(input_ids, *args, **kwargs)

    enc.forward = fragile_forward
    reference = Encoder.from_pretrained(model_dir, precision="fp32")
    texts = [f"the {w} sat on the mat" for w in ("cat", "dog", "red", "big", "small", "blue")]
    want = reference.encode(texts)
    results: dict[int, tuple[int, object]] = {}
    with ServerThread(create_app(enc, ServeSettings(max_wait_ms=50.0))) as srv:

        def go(i):
            body = {"texts": ["we went to the bank for money"]} if i == 0 else {"texts": [texts[i - 1]]}
            results[i] = call(srv.url, "/encode", body)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(7)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        assert results[0][0] == 500 and "poisoned input" in results[0][1]["error"]
        for i in range(1, 7):
            assert results[i][0] == 200, results[i]
            np.testing.assert_allclose(results[i][1]["embeddings"][0], want[i - 1], rtol=1e-4, atol=1e-5)
        assert call(srv.url, "/health") == (200, {"status": "ok"})
        _, metrics = call(srv.url, "/metrics")
        assert "bertkit_batch_failures_total 1" in metrics  # they really shared the failing batch


# ------------------------------------------------------------------ BertClient end to end


def test_client_encode_matches_offline(server, encoder):
    bc = BertClient(server.url, timeout=TIMEOUT, batch_size=3)  # forces several HTTP requests
    rng = random.Random(1)
    texts = [random_text(rng) for _ in range(10)]
    vecs = bc.encode(texts)
    assert vecs.shape == (10, 32) and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs, encoder.encode(texts), **BF16)
    vecs, tokens = bc.encode(texts[:2], show_tokens=True, pooling_layer=[-1, -2, -3, 0], pooling_strategy="mean_max")
    assert vecs.shape == (2, 256) and tokens[0][0] == "[CLS]"
    np.testing.assert_allclose(vecs, encoder.encode(texts[:2], layers=[-1, -2, -3, 0], pooling="mean_max"), **BF16)
    per_token, tokens = bc.encode(["the cat sat"], pooling_strategy="none", show_tokens=True)
    assert per_token[0].shape == (5, 32) and tokens == [["[CLS]", "the", "cat", "sat", "[SEP]"]]
    pairs = bc.encode(["the cat"], pairs=["sat on the mat"])
    np.testing.assert_allclose(pairs, encoder.encode(["the cat"], pairs=["sat on the mat"]), **BF16)
    assert bc.health() and bc.info()["hidden_size"] == 32
    assert bc.tokenize(["a dog"])[0][1]["text"] == "a"
    with pytest.raises(BertClientError, match="out of range"):
        bc.encode(["a"], pooling_layer=12)


def test_chunked_body_over_the_limit_is_refused_while_reading(server):
    """No Content-Length to trust: the size is counted as the body streams in."""
    import http.client

    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    try:
        conn.putrequest("POST", "/embed")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        piece = b'{"inputs": ["' + b"a " * 8000
        try:
            for _ in range(8):  # 128 KB against a 64 KB limit
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before the whole body is sent
        response = conn.getresponse()
        assert response.status == 413
        assert "over the limit" in json.loads(response.read())["error"]
    finally:
        conn.close()
    assert call(server.url, "/health") == (200, {"status": "ok"})


# ------------------------------------------------------------------ NaN output and a non-ASCII key


def test_a_model_that_outputs_nan_gets_500_in_the_api_shape(model_dir):
    """Never [[NaN, ...]] (invalid JSON): a 500 Backend error, in each API's shape; the server stays healthy."""
    import math

    import torch

    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    with torch.no_grad():
        enc.bert.embeddings.LayerNorm.weight[0] = math.nan  # a broken checkpoint (load-time checks bypassed)
    with TestClient(create_app(enc, ServeSettings())) as srv:
        for path, body in [
            ("/embed", {"inputs": "the cat"}),
            ("/encode", {"texts": ["the cat"]}),
            ("/embed_all", {"inputs": "the cat"}),
            ("/encode", {"id": 1, "texts": ["the cat"]}),
        ]:
            status, out = asgi_json(srv, path, body)  # a JSON answer parses: never NaN in it
            assert status == 500 and out["error_type"] == "Backend" and "NaN" in out["error"], (path, out)
        status, out = asgi_json(srv, "/v1/embeddings", {"input": "the cat"})
        assert status == 500 and out["error"]["type"] == "server_error" and "NaN" in out["error"]["message"]
        status, out = asgi_json(srv, "/fill-mask", {"inputs": "the [MASK] sat"})
        assert status == 500 and out["error_type"] == "Backend"
        assert asgi_json(srv, "/health") == (200, {"status": "ok"})


def test_non_ascii_api_key(encoder):
    key = "clé-ключ-鍵"
    with ServerThread(create_app(encoder, ServeSettings(api_key=key))) as srv:
        as_sent = key.encode("utf-8").decode("latin-1")  # http.client sends header text as latin-1 bytes
        assert call(srv.url, "/embed", {"inputs": "the cat"}, headers={"X-API-Key": as_sent})[0] == 200
        assert call(srv.url, "/embed", {"inputs": "the cat"}, headers={"Authorization": "Bearer " + as_sent})[0] == 200
        assert call(srv.url, "/embed", {"inputs": "the cat"}, headers={"X-API-Key": "cl?-????-?"})[0] == 401
        vec = BertClient(srv.url, api_key=key, timeout=TIMEOUT).encode(["the cat"])
        assert vec.shape == (1, 32)


def test_a_request_larger_than_the_queue_is_refused_not_told_to_retry(encoder):
    """--max-pending below --max-inputs: a request the queue can never hold gets 422 naming the flag on an idle
    server, not a retryable 429 "busy"."""
    with TestClient(create_app(encoder, ServeSettings(max_pending=4, max_inputs=16))) as c:
        status, out = asgi_json(c, "/embed", {"inputs": ["a"] * 5})
        assert status == 422 and "over the limit of 4 per request (--max-pending)" in out["error"], out
        assert asgi_json(c, "/embed", {"inputs": ["a"] * 4})[0] == 200


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",  # past h11's header limit
        "GET /emb\u00e9d HTTP/1.1\r\nHost: x\r\n\r\n".encode("utf-8"),  # raw non-ASCII in the target
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
    ids=["200KB-header", "non-ascii-url", "garbage"],
)
def test_malformed_http_gets_the_json_error_every_refusal_has(server, request_bytes):
    import socket

    with socket.create_connection((server.host, server.port), timeout=TIMEOUT) as s:
        s.sendall(request_bytes)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), head
    out = json.loads(body)
    assert out["error_type"] == "Validation" and out["error"].startswith("malformed HTTP request"), out
    assert call(server.url, "/health")[0] == 200
