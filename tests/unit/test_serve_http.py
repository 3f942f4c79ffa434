"""The server's HTTP layer on its own (no model, no socket): error shapes per dialect, the Guard middleware, the body
read within its limits and parsed into a 422 naming the field, NaN-safe answers and the Prometheus metrics. The core's
input checks too (they raise the errors the HTTP layer shapes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from fastapi import APIRouter, FastAPI, Request
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, StrictStr
from starlette.testclient import TestClient

from bertkit.serve.core.checks import check_count, check_ids, check_output_size, check_text
from bertkit.serve.core.errors import TEI_ERROR_TYPES, ApiError
from bertkit.serve.core.service import ServeSettings
from bertkit.serve.http.answers import dumps, json_answer
from bertkit.serve.http.errors import BAS, OPENAI, TEI, dialect_of_path
from bertkit.serve.http.guard import Guard, api_key_matches
from bertkit.serve.http.metrics import Metrics
from bertkit.serve.http.routing import BertAsServiceRoute, OpenAIRoute, TEIRoute


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: StrictStr | list[StrictStr]


def test_statuses_follow_tei_error_types():
    assert {t: ApiError(None, "m", t).status for t in TEI_ERROR_TYPES} == {
        "Unhealthy": 503,
        "Backend": 500,
        "Overloaded": 429,
        "Validation": 422,
        "Tokenizer": 422,
        "Empty": 400,
    }
    assert ApiError(413, "m").status == 413
    with pytest.raises(ValueError, match="error_type"):
        ApiError(None, "m", "PayloadTooLarge")


def test_error_shapes_per_dialect():
    error = ApiError(None, "no inputs", "Empty", "inputs")
    assert json.loads(TEI.response(error).body) == {"error": "no inputs", "error_type": "Empty"}
    assert json.loads(BAS.response(error).body) == {"error": "no inputs", "error_type": "Empty"}
    assert json.loads(OPENAI.response(ApiError(None, "bad", param="input")).body) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": 422}
    }
    assert json.loads(OPENAI.response(ApiError(404, "none")).body)["error"]["type"] == "not_found_error"
    assert dialect_of_path("/v1/models/x") is OPENAI and dialect_of_path("/embeddings") is OPENAI
    assert dialect_of_path("/embed") is TEI
    assert TEI.response(ApiError(413, "big"), close=True).headers["connection"] == "close"


def test_api_key_is_compared_as_bytes():
    key = "clé-ключ".encode()
    assert api_key_matches([(b"x-api-key", key)], key)
    assert api_key_matches([(b"authorization", b"Bearer " + key)], key)
    assert api_key_matches([(b"Authorization", b"bearer " + key + b" ")], key)
    assert not api_key_matches([(b"x-api-key", "clé-ключ".encode("latin-1", "replace"))], key)
    assert not api_key_matches([(b"authorization", key)], key)  # no "Bearer "
    assert not api_key_matches([], key)


# ------------------------------------------------------------------ typed bodies, one route class per dialect


def body_app(max_payload_bytes: int = 1000, body_timeout_s: float = 30.0) -> FastAPI:
    """A FastAPI app with one typed route per dialect, no model: what every bertkit route meets first."""
    app = FastAPI(strict_content_type=False)  # as create_app
    app.state.settings = ServeSettings(max_payload_bytes=max_payload_bytes, body_timeout_s=body_timeout_s)
    for route_class, path in ((TEIRoute, "/tei"), (OpenAIRoute, "/v1/x"), (BertAsServiceRoute, "/bas")):
        router = APIRouter(route_class=route_class)

        async def echo(request: Request, body: Body) -> dict:
            if body.inputs == "fail":
                raise RuntimeError("boom")
            return {"inputs": body.inputs}

        router.add_api_route(path, echo, methods=["POST"])
        app.include_router(router)
    return app


@pytest.fixture(scope="module")
def client():
    with TestClient(body_app()) as c:
        yield c


HOSTILE = [
    (b"", "empty request body"),
    (b"{no", "malformed JSON"),
    (b"[1]", "must be a JSON object, got an array"),
    (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100 + b"}", "malformed JSON: nested too deeply"),
    (b'{"inputs": ' + b"9" * 5000 + b"}", "malformed JSON: Exceeds the limit"),  # json.loads' 4300 digits
    (b'{"inputs": 3}', "field 'inputs'"),
    (b'{"inputs": ["a", 3]}', "field 'inputs[1]'"),  # the union's deepest error names the field
    (b'{"inputs": "a", "x": 1}', "field 'x'"),
    (b"\xff\xfe", "malformed JSON"),
]


@pytest.mark.parametrize("raw,message", HOSTILE, ids=range(len(HOSTILE)))
def test_bodies_that_do_not_validate_get_422_naming_the_field(client, raw, message):
    if len(raw) > 1000:  # over this app's payload limit: the deep body goes to an app that takes it
        with TestClient(body_app(max_payload_bytes=10**6)) as big:
            r = big.post("/tei", content=raw, headers={"Content-Type": "application/json"})
    else:
        r = client.post("/tei", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and message in r.json()["error"], (raw[:30], r.text)
    assert r.json()["error_type"] == "Validation"


def test_each_dialect_answers_in_its_shape(client):
    assert client.post("/tei", json={"inputs": ["a"]}).json() == {"inputs": ["a"]}
    assert client.post("/tei", content=b'{"inputs": "a"}').json() == {"inputs": "a"}  # no Content-Type: JSON
    r = client.post("/v1/x", json={"inputs": ["a", 3]})
    assert r.status_code == 422 and r.json()["error"]["param"] == "inputs[1]"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/bas", json={"inputs": 3})
    assert r.status_code == 422 and r.json()["error"].startswith("field 'inputs'")
    r = client.post("/tei", json={"inputs": "fail"})  # an unexpected failure: a 500 in the shape, one log line
    assert r.status_code == 500 and r.json() == {"error": "internal error: RuntimeError: boom", "error_type": "Backend"}
    r = client.post("/v1/x", json={"inputs": "fail"})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"


def test_the_body_is_read_within_its_size_limit(client):
    r = client.post("/tei", content=b'{"inputs": "' + b"a" * 2000 + b'"}')
    assert r.status_code == 413 and "over the limit of 1000 bytes (--max-payload-bytes)" in r.json()["error"]
    assert r.headers["connection"] == "close"

    def chunks():  # no Content-Length: counted while reading
        yield b'{"inputs": "'
        for _ in range(20):
            yield b"a" * 100

    r = client.post("/v1/x", content=chunks())
    assert r.status_code == 413 and "--max-payload-bytes" in r.json()["error"]["message"]


def test_input_checks():
    with pytest.raises(ApiError) as err:
        check_count([], "inputs", 5)
    assert err.value.status == 400 and err.value.error_type == "Empty"
    with pytest.raises(ApiError, match="over the limit of 2 per request"):
        check_count([1, 2, 3], "inputs", 2)
    with pytest.raises(ApiError) as err:
        check_text("  ", "inputs[3]", 10, False)
    assert err.value.status == 400 and err.value.param == "inputs[3]"
    with pytest.raises(ApiError, match='set "truncate": true'):  # the route can truncate: say so
        check_text("x" * 11, "inputs[0]", 10, False)
    with pytest.raises(ApiError) as err:  # the route cannot: no truncate hint
        check_text("x" * 11, "inputs[0]", 10, None)
    assert "truncate" not in err.value.message and err.value.status == 422
    assert check_text("x" * 11, "inputs[0]", 10, True) == "x" * 10
    assert check_ids([0, 5, 9], "input[0]", 10) == [0, 5, 9]
    with pytest.raises(ApiError, match=r"'input\[0\]\[1\]' is token id 10, outside"):
        check_ids([0, 10], "input[0]", 10)
    with pytest.raises(ApiError) as err:
        check_ids([], "input[0]", 10)
    assert err.value.status == 400
    check_output_size(100, 100, "x")
    with pytest.raises(ApiError, match="--max-output-values"):
        check_output_size(101, 100, "1 input x 101")


def test_dumps_equals_json_and_refuses_nan():
    obj = {"a": [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(2)], "b": "é", "c": None, "n": np.int64(3)}
    assert json.loads(dumps(obj)) == {"a": [[[0, 1, 2], [3, 4, 5]], [1, 1]], "b": "é", "c": None, "n": 3}
    with pytest.raises(ValueError):
        dumps([np.array([1.0, np.nan])])
    with pytest.raises(ApiError) as err:
        asyncio.run(json_answer([np.array([np.inf])]))
    assert err.value.status == 500 and err.value.error_type == "Backend"
    for size in (0, 10**6):  # inline and on a worker thread
        response = asyncio.run(json_answer({"v": np.ones((3, 2))}, size))
        assert json.loads(response.body) == {"v": [[1, 1]] * 3}


# ------------------------------------------------------------------ ASGI pieces, driven by hand


def run_asgi(
    app: Any,
    path: str,
    method: str = "POST",
    headers: list | None = None,
    chunks: list | None = None,
    delay: float = 0.0,
) -> tuple[int, dict, list]:
    """Call an ASGI app once; ``chunks`` are the body pieces (each after ``delay`` seconds)."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": headers or [],
        "query_string": b"",
        "client": ("1.2.3.4", 5),
        "server": ("test", 80),
        "scheme": "http",
        "root_path": "",
        "http_version": "1.1",
    }
    pieces = list(chunks or [b""])
    sent: list = []

    async def receive():
        if delay:
            await asyncio.sleep(delay)
        if pieces:
            body = pieces.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pieces)}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body) if body else {}, start["headers"]


def test_guard_checks_the_key_and_records_metrics():
    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    metrics = Metrics({})
    guard = Guard(inner, metrics, api_key="ключ", known_paths=("/embed", "/health"))
    status, body, headers = run_asgi(guard, "/v1/embeddings")
    assert status == 401 and body["error"]["type"] == "authentication_error" and (b"connection", b"close") in headers
    assert run_asgi(guard, "/embed", headers=[(b"x-api-key", "ключ".encode())])[0] == 200
    assert run_asgi(guard, "/health", method="GET")[0] == 200  # probes need no key
    assert run_asgi(guard, "/", method="POST")[0] == 401  # POST / is work, not a probe
    assert calls == ["/embed", "/health"]
    assert metrics.requests.labels("/embed", "200")._value.get() == 1
    assert metrics.requests.labels("other", "401")._value.get() == 2


def test_a_body_not_sent_in_time_gets_408():
    app = body_app(body_timeout_s=0.5)
    with TestClient(app):  # runs the lifespan; the request itself is driven by hand, its body late
        status, out, headers = run_asgi(
            app, "/tei", headers=[(b"content-length", b"9")], chunks=[b"{", b"}"], delay=0.4
        )
    assert status == 408 and "within 0.5 s (--body-timeout)" in out["error"] and (b"connection", b"close") in headers


def test_metrics_are_prometheus_text_with_bertkit_names():
    class Queue:
        depth = 3
        stats = type("Stats", (), {})()

    from bertkit.serve.core.batching import Stats

    stats = Stats()
    stats.record(4, 30, 40, 0.5)
    stats.record(2, 10, 12, 0.25)
    service = type("Svc", (), {"queue": Queue, "inputs_total": 6})()
    Queue.stats = stats
    metrics = Metrics({"m": service})
    metrics.observe("/embed", 200, 0.02)
    metrics.observe("/embed", 422, 0.001)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render(service).decode())}
    value = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert value[("bertkit_requests_total", (("path", "/embed"), ("status", "200")))] == 1
    assert value[("bertkit_request_duration_seconds_count", (("path", "/embed"),))] == 2
    assert value[("bertkit_request_duration_seconds_bucket", (("le", "0.005"), ("path", "/embed")))] == 1
    assert value[("bertkit_inputs_total", (("model", "m"),))] == 6
    assert value[("bertkit_batches_total", ())] == 2 and value[("bertkit_batch_inputs_total", ())] == 6
    assert value[("bertkit_padded_tokens_total", ())] == 52 and value[("bertkit_queue_depth", ())] == 3
    assert (
        value[("bertkit_batch_size_bucket", (("le", "2"),))] == 1
        and value[("bertkit_batch_size_bucket", (("le", "4"),))] == 2
    )
    assert families["bertkit_batch_size"].type == "histogram" and value[("bertkit_batch_size_count", ())] == 2
    assert metrics.total_requests() == 2
