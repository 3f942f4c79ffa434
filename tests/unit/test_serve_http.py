"""The server's HTTP layer on its own (no model, no socket): error shapes and statuses, the Guard middleware, body
reading limits, JSON parsing of hostile bodies, input checks and NaN-safe answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, StrictStr
from starlette.requests import Request

from bertkit.serve.http import (
    TEI_ERROR_TYPES,
    ApiError,
    Guard,
    Metrics,
    api_key_matches,
    check_count,
    check_ids,
    check_output_size,
    check_text,
    dumps,
    error_body,
    json_answer,
    parse_json,
    read_body,
)


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


def test_error_shapes():
    assert error_body("/embed", 400, "no inputs", "Empty") == {"error": "no inputs", "error_type": "Empty"}
    assert error_body("/v1/embeddings", 422, "bad", param="input") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": 422}
    }
    assert error_body("/v1/models/x", 404, "none")["error"]["type"] == "not_found_error"


def test_api_key_is_compared_as_bytes():
    key = "clé-ключ".encode()
    assert api_key_matches([(b"x-api-key", key)], key)
    assert api_key_matches([(b"authorization", b"Bearer " + key)], key)
    assert api_key_matches([(b"Authorization", b"bearer " + key + b" ")], key)
    assert not api_key_matches([(b"x-api-key", "clé-ключ".encode("latin-1", "replace"))], key)
    assert not api_key_matches([(b"authorization", key)], key)  # no "Bearer "
    assert not api_key_matches([], key)


def test_parse_json_refuses_hostile_bodies_with_422():
    cases = [
        (b"", "empty request body"),
        (b"{no", "malformed JSON"),
        (b"[1]", "JSON object"),
        (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed JSON"),
        (b'{"inputs": ' + b"9" * 5000 + b"}", "malformed JSON"),
        (b'{"inputs": 3}', "field 'inputs'"),
        (b'{"inputs": ["a", 3]}', "field 'inputs[1]'"),
        (b'{"inputs": "a", "x": 1}', "field 'x'"),
        (b"\xff\xfe", "malformed JSON"),
    ]
    for raw, message in cases:
        with pytest.raises(ApiError) as err:
            parse_json(raw, Body)
        assert err.value.status == 422 and message in err.value.message, (raw[:30], err.value.message)
    assert parse_json(b'{"inputs": ["a"]}', Body).inputs == ["a"]
    assert parse_json(b'{"inputs": "a"}', lambda data: Body).inputs == "a"  # a chooser function


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

    metrics = Metrics()
    guard = Guard(inner, metrics, api_key="ключ", known_paths=("/embed", "/health"))
    status, body, headers = run_asgi(guard, "/v1/embeddings")
    assert status == 401 and body["error"]["type"] == "authentication_error" and (b"connection", b"close") in headers
    assert run_asgi(guard, "/embed", headers=[(b"x-api-key", "ключ".encode())])[0] == 200
    assert run_asgi(guard, "/health", method="GET")[0] == 200  # probes need no key
    assert run_asgi(guard, "/", method="POST")[0] == 401  # POST / is work, not a probe
    assert calls == ["/embed", "/health"]
    assert metrics.requests[("/embed", 200)] == 1 and metrics.requests[("other", 401)] == 2


def reader_app(limit: int, timeout: float):
    async def app(scope, receive, send):
        try:
            raw = await read_body(Request(scope, receive), limit, timeout)
            status, out = 200, {"n": len(raw)}
        except ApiError as exc:
            status, out = exc.status, {"error": exc.message}
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(out).encode()})

    return app


def test_read_body_limits_size_and_time():
    app = reader_app(limit=10, timeout=0.5)
    assert run_asgi(app, "/x", chunks=[b"12345", b"678"])[:2] == (200, {"n": 8})
    status, out, _ = run_asgi(app, "/x", chunks=[b"123456", b"789012"])
    assert status == 413 and "over the limit of 10 bytes" in out["error"]
    status, out, _ = run_asgi(app, "/x", headers=[(b"content-length", b"11")], chunks=[b"1"])
    assert status == 413 and "11 bytes" in out["error"]  # refused from the header, before reading
    status, out, _ = run_asgi(app, "/x", headers=[(b"content-length", b"9")], chunks=[b"1", b"2"], delay=0.4)
    assert status == 408 and "within 0.5 s" in out["error"]
