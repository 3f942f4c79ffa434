"""The server's HTTP layer, with no model in it: errors in each API's shape, the :class:`Guard` middleware (API key,
metrics), bounded body reading and JSON parsing, input checks, and JSON answers serialised off the event loop.

Everything here is module-level so that it can be tested on its own (tests/unit/test_serve_http.py); the routes in
:mod:`bertkit.serve.app` are thin on top of it.

Error statuses follow text-embeddings-inference (TEI): ``error_type`` is one of :data:`TEI_ERROR_TYPES` and sets the
status (Empty 400, Validation/Tokenizer 422, Overloaded 429, Unhealthy 503), except that a failure of the model
(Backend) is a 500 (TEI says 424) so that load balancers see a server fault, and 413 is kept for payload bytes only.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import threading
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

logger = logging.getLogger("bertkit.serve")

TEI_ERROR_TYPES = ("Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty")
STATUS_OF = {"Empty": 400, "Validation": 422, "Tokenizer": 422, "Overloaded": 429, "Unhealthy": 503, "Backend": 500}
OPENAI_TYPE_OF = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(Exception):
    """A refused or failed request: ``status`` (default from ``error_type``), a message naming the field and the
    limit, TEI's ``error_type`` and OpenAI's ``param``."""

    def __init__(self, status: int | None, message: str, error_type: str = "Validation", param: str | None = None):
        super().__init__(message)
        if error_type not in TEI_ERROR_TYPES:
            raise ValueError(f"error_type must be one of {TEI_ERROR_TYPES}, got {error_type!r}")
        self.status = STATUS_OF[error_type] if status is None else status
        self.message, self.error_type, self.param = message, error_type, param


def error_body(
    path: str, status: int, message: str, error_type: str = "Validation", param: str | None = None
) -> dict[str, Any]:
    """The error in the called API's shape: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` under
    ``/v1/``, TEI's ``{"error", "error_type"}`` elsewhere."""
    if path.startswith("/v1/") or path == "/embeddings":  # TEI serves OpenAI's route under both names
        return {
            "error": {
                "message": message,
                "type": OPENAI_TYPE_OF.get(status, "invalid_request_error"),
                "param": param,
                "code": status,
            }
        }
    return {"error": message, "error_type": error_type}


def error_response(
    path: str, status: int, message: str, error_type: str = "Validation", param: str | None = None, close: bool = False
) -> JSONResponse:
    """``close``: also ask the client to close the connection (the request's body was not read to its end)."""
    return JSONResponse(
        error_body(path, status, message, error_type, param),
        status_code=status,
        headers={"Connection": "close"} if close else None,
    )


# --------------------------------------------------------------------------------------------- metrics


class Metrics:
    """Request counters and latency histograms, rendered in the Prometheus text format."""

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter = Counter()  # (path, status) -> n
        self.latency_buckets: dict[str, Counter] = defaultdict(Counter)
        self.latency_sum: Counter = Counter()
        self.latency_count: Counter = Counter()
        self.inputs: Counter = Counter()
        self.started = time.time()

    def observe(self, path: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[(path, status)] += 1
            self.latency_sum[path] += seconds
            self.latency_count[path] += 1
            for b in self.BUCKETS:
                if seconds <= b:
                    self.latency_buckets[path][b] += 1

    def render(self, queue: Any) -> str:
        """Prometheus text; ``queue`` is the :class:`~bertkit.serve.batching.BatchQueue` (its stats and depth)."""
        lines = []
        with self.lock:
            lines += [
                "# HELP bertkit_requests_total HTTP requests by path and status.",
                "# TYPE bertkit_requests_total counter",
            ]
            lines += [
                f'bertkit_requests_total{{path="{p}",status="{s}"}} {n}' for (p, s), n in sorted(self.requests.items())
            ]
            lines += [
                "# HELP bertkit_request_duration_seconds Request latency by path.",
                "# TYPE bertkit_request_duration_seconds histogram",
            ]
            for p in sorted(self.latency_count):
                for b in self.BUCKETS:
                    lines.append(
                        f'bertkit_request_duration_seconds_bucket{{path="{p}",le="{b}"}} {self.latency_buckets[p][b]}'
                    )
                lines.append(f'bertkit_request_duration_seconds_bucket{{path="{p}",le="+Inf"}} {self.latency_count[p]}')
                lines.append(f'bertkit_request_duration_seconds_sum{{path="{p}"}} {self.latency_sum[p]:.6f}')
                lines.append(f'bertkit_request_duration_seconds_count{{path="{p}"}} {self.latency_count[p]}')
            lines += ["# HELP bertkit_inputs_total Inputs received, by model.", "# TYPE bertkit_inputs_total counter"]
            lines += [f'bertkit_inputs_total{{model="{p}"}} {n}' for p, n in sorted(self.inputs.items())]
        s = queue.stats
        with s.lock:
            lines += [
                "# HELP bertkit_batches_total Forward passes run by the batching worker.",
                "# TYPE bertkit_batches_total counter",
                f"bertkit_batches_total {s.batches}",
                "# HELP bertkit_batch_failures_total Batches that failed (their requests were retried alone).",
                "# TYPE bertkit_batch_failures_total counter",
                f"bertkit_batch_failures_total {s.failed_batches}",
                "# HELP bertkit_batch_inputs_total Inputs embedded.",
                "# TYPE bertkit_batch_inputs_total counter",
                f"bertkit_batch_inputs_total {s.batch_inputs}",
                "# HELP bertkit_tokens_total Real tokens run through the model.",
                "# TYPE bertkit_tokens_total counter",
                f"bertkit_tokens_total {s.batch_tokens}",
                "# HELP bertkit_padded_tokens_total Tokens run including padding.",
                "# TYPE bertkit_padded_tokens_total counter",
                f"bertkit_padded_tokens_total {s.padded_tokens}",
                "# HELP bertkit_forward_seconds_total Time spent in forward passes.",
                "# TYPE bertkit_forward_seconds_total counter",
                f"bertkit_forward_seconds_total {s.forward_seconds:.6f}",
                "# HELP bertkit_malloc_trims_total Times freed memory was handed back to the OS (malloc_trim).",
                "# TYPE bertkit_malloc_trims_total counter",
                f"bertkit_malloc_trims_total {s.trims}",
                "# HELP bertkit_batch_size Inputs per forward pass.",
                "# TYPE bertkit_batch_size histogram",
            ]
            cumulative = 0
            for b in s.BUCKETS:
                cumulative += s.batch_size_buckets.get(b, 0)
                lines.append(f'bertkit_batch_size_bucket{{le="{b}"}} {cumulative}')
            lines.append(f'bertkit_batch_size_bucket{{le="+Inf"}} {s.batches}')
            lines.append(f"bertkit_batch_size_sum {s.batch_inputs}")
            lines.append(f"bertkit_batch_size_count {s.batches}")
        lines += [
            "# HELP bertkit_queue_depth Inputs waiting for a batch.",
            "# TYPE bertkit_queue_depth gauge",
            f"bertkit_queue_depth {queue.depth}",
            "# HELP bertkit_uptime_seconds Seconds since start.",
            "# TYPE bertkit_uptime_seconds gauge",
            f"bertkit_uptime_seconds {time.time() - self.started:.1f}",
        ]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- the middleware


def api_key_matches(headers: Sequence[tuple[bytes, bytes]], key: bytes) -> bool:
    """Whether the raw request headers carry ``key`` (the UTF-8 bytes of ``--api-key``) as ``X-API-Key: KEY`` or
    ``Authorization: Bearer KEY``. Compared as bytes in constant time: no text decoding, so a non-ASCII key sent
    as UTF-8 matches."""
    given = None
    for name, value in headers:
        name = name.lower()
        if name == b"x-api-key":
            given = value.strip()
            break
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            given = value[7:].strip()
    return given is not None and hmac.compare_digest(given, key)


class Guard:
    """Pure ASGI middleware (cheaper than BaseHTTPMiddleware): the API key check, the concurrency limit and
    latency/status metrics.

    Args:
        inner: the wrapped ASGI app.
        metrics: where each request's path, status and latency go.
        api_key: the key every request must carry (None: no key), except ``GET`` on ``open_paths`` (health probes).
        known_paths: paths counted under their own name in the metrics (others count as "other").
        limit_concurrency: requests answered at once beyond which a new one gets 503 (None: no limit). Health
            probes are never refused nor counted, and neither are connections with no request in them (idle or
            still sending headers: the header and keep-alive timeouts close those).
    """

    def __init__(
        self,
        inner: Any,
        metrics: Metrics,
        api_key: str | None = None,
        known_paths: Sequence[str] = (),
        open_paths: Sequence[str] = ("/health", "/ping", "/"),
        limit_concurrency: int | None = None,
    ):
        self.inner, self.metrics = inner, metrics
        self.key = None if api_key is None else api_key.encode("utf-8")
        self.known, self.open = set(known_paths), set(open_paths)
        self.limit, self.in_flight = limit_concurrency, 0  # requests being answered (one event loop: a plain int)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        start = time.perf_counter()
        path = scope["path"]
        label = path if path in self.known else "other"
        status = [500]  # what an unhandled exception becomes
        probe = scope["method"] in ("GET", "HEAD") and path in self.open  # health probes: no key, never refused
        if self.key is not None and not probe and not api_key_matches(scope["headers"], self.key):
            response = error_response(
                path, 401, "missing or wrong API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'", close=True
            )
            await response(scope, receive, send)
            self.metrics.observe(label, 401, time.perf_counter() - start)
            return
        if self.limit is not None and not probe and self.in_flight >= self.limit:
            logger.warning("Exceeded concurrency limit.")
            response = error_response(
                path,
                503,
                f"{self.in_flight} requests are being answered, the limit (--limit-concurrency): retry later",
                "Overloaded",
            )
            await response(scope, receive, send)
            self.metrics.observe(label, 503, time.perf_counter() - start)
            return

        async def send_and_record(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        counted = not probe
        self.in_flight += counted
        try:
            await self.inner(scope, receive, send_and_record)
        finally:
            self.in_flight -= counted
            self.metrics.observe(label, status[0], time.perf_counter() - start)


# --------------------------------------------------------------------------------------------- reading a body


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body: at most ``limit`` bytes (413 past it, counted while reading, so a huge body is never held) and
    within ``timeout`` seconds (408: a client that declares a body and sends less cannot hold the connection)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"payload of {declared} bytes is over the limit of {limit} bytes (--max-payload-bytes)")
    chunks, size = [], 0

    async def gather() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"payload is over the limit of {limit} bytes (--max-payload-bytes)")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(gather(), timeout)
    except ClientDisconnect:
        raise ApiError(400, "the client went away before sending the whole body") from None
    except asyncio.TimeoutError:
        client = request.client.host if request.client else "?"
        logger.warning(
            "refused a request from %s: body not received within %s s (%d bytes read)", client, timeout, size
        )
        raise ApiError(408, f"the request body was not received within {timeout} s (--body-timeout)") from None
    return b"".join(chunks)


def parse_json(raw: bytes, model: type[BaseModel] | Callable[[dict], type[BaseModel]]) -> Any:
    """Parse JSON (422 on anything malformed, too deeply nested, or with an over-long number) and validate it into
    ``model`` (422 naming the field); ``model`` may be a function choosing the model from the parsed object."""
    if not raw.strip():
        raise ApiError(422, "empty request body: send a JSON object")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(422, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise ApiError(422, "malformed JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ApiError(422, f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object, got {type(data).__name__}")
    if not isinstance(model, type):
        model = model(data)
    try:
        return model.model_validate(data)
    except RecursionError:
        raise ApiError(422, "malformed request: nested too deeply") from None
    except ValidationError as exc:
        errors = exc.errors()  # for a union, the error that got deepest into the value names the field best
        err = max(errors, key=lambda e: len(field_path(e["loc"]).replace("[", ".").split(".")))
        loc = field_path(err["loc"])
        raise ApiError(422, f"field '{loc or '(body)'}': {err['msg']}", param=loc or None) from None


def field_path(loc: Sequence[Any]) -> str:
    """pydantic's error location as a field path: ``("inputs", 2)`` -> ``inputs[2]`` (union member names dropped)."""
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        elif isinstance(p, str) and not _union_member(p):
            out += ("." if out else "") + p
    return out


def _union_member(name: str) -> bool:
    """pydantic's name for a member of a union (``str``, ``list[int]``, ``function-after[...]``, a model's class
    name), as opposed to a field (lower-case, as every request field is; ``stride`` is a field)."""
    return (
        name in ("str", "int", "bool", "float", "none", "list", "dict")
        or "[" in name
        or name[:1].isupper()
        or name.startswith(("function-", "tagged-union", "literal"))
    )


# --------------------------------------------------------------------------------------------- input checks


def check_count(items: Sequence[Any], name: str, max_inputs: int) -> None:
    """400 Empty for no inputs, 422 past ``max_inputs``."""
    if not items:
        raise ApiError(None, f"'{name}' cannot be empty: send at least one input", "Empty", name)
    if len(items) > max_inputs:
        raise ApiError(
            None,
            f"'{name}' has {len(items)} inputs, over the limit of {max_inputs} per request (--max-inputs): split it",
            param=name,
        )


def check_text(text: str, name: str, max_chars: int, truncate: bool | None) -> str:
    """One text: 400 Empty when blank (:func:`is_blank`); past ``max_chars``, cut when ``truncate`` else 422 (with a
    hint to set ``truncate`` when the route takes it: ``truncate`` is False; None means the route cannot truncate)."""
    if is_blank(text):
        raise ApiError(None, f"'{name}' is empty", "Empty", name)
    if len(text) > max_chars:
        if truncate:
            return text[:max_chars]
        hint = '; shorten it or set "truncate": true' if truncate is False else ": shorten it"
        raise ApiError(
            None,
            f"'{name}' has {len(text)} characters, over the limit of {max_chars} (--max-input-chars)" + hint,
            param=name,
        )
    return text


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing a BERT tokenizer keeps: only whitespace, control, format (zero-width) or
    unassigned characters, which the normalizer drops (Google's ``_clean_text``)."""
    return not any(not c.isspace() and not unicodedata.category(c).startswith("C") and c != "\ufffd" for c in text)


def check_ids(ids: Sequence[int], name: str, vocab_size: int) -> list[int]:
    """Token-id input: non-empty, each id in the model's vocabulary."""
    if not ids:
        raise ApiError(None, f"'{name}' is an empty token list", "Empty", name)
    for j, i in enumerate(ids):
        if not 0 <= i < vocab_size:
            raise ApiError(
                None,
                f"'{name}[{j}]' is token id {i}, outside the model's vocabulary (0..{vocab_size - 1})",
                param=f"{name}[{j}]",
            )
    return list(ids)


def check_output_size(values: int, limit: int, what: str) -> None:
    """Refuse (422, naming the limit) an answer of more than ``limit`` numbers before it is computed."""
    if values > limit:
        raise ApiError(
            None,
            f"the answer would hold {values:,} values ({what}), over the limit of {limit:,} "
            "(--max-output-values): send fewer or shorter inputs, or a pooled output",
            param=None,
        )


# --------------------------------------------------------------------------------------------- answers

BIG_ANSWER = 20_000  # numbers past which an answer is serialised on a worker thread


def dumps(obj: Any) -> bytes:
    """JSON of ``obj`` (dicts, lists, numpy arrays, scalars) as many small ``json.dumps`` calls, row by row, so a
    thread serialising a large answer hands the GIL back between rows. NaN or infinity raise ValueError (JSON has
    no such numbers)."""
    out: list[str] = []
    _pieces(obj, out)
    return "".join(out).encode("utf-8")


def _pieces(obj: Any, out: list[str]) -> None:
    if isinstance(obj, np.ndarray):
        if obj.ndim <= 1:
            out.append(json.dumps(obj.tolist(), allow_nan=False))
        else:
            _pieces(list(obj), out)
    elif isinstance(obj, dict):
        out.append("{")
        for k, (key, value) in enumerate(obj.items()):
            out.append(("," if k else "") + json.dumps(str(key)) + ":")
            _pieces(value, out)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for k, value in enumerate(obj):
            if k:
                out.append(",")
            _pieces(value, out)
        out.append("]")
    elif isinstance(obj, np.generic):
        out.append(json.dumps(obj.item(), allow_nan=False))
    else:
        out.append(json.dumps(obj, allow_nan=False))


def b64(vector: np.ndarray) -> str:
    """An array as base64 of its little-endian float32 bytes (OpenAI's and bertkit's ``encoding_format: base64``)."""
    return base64.b64encode(np.asarray(vector).astype("<f4").tobytes()).decode()


async def json_answer(obj: Any, size: int = 0, status: int = 200) -> Response:
    """A JSON response; ``size`` (how many numbers it holds) past :data:`BIG_ANSWER` moves the serialising off the
    event loop. Non-finite numbers become a 500 Backend error, never invalid JSON."""
    try:
        body = await run_in_threadpool(dumps, obj) if size > BIG_ANSWER else dumps(obj)
    except ValueError as exc:
        raise ApiError(
            None,
            f"the model produced a value JSON cannot carry ({exc}): the checkpoint's weights or config are broken",
            "Backend",
        ) from None
    return Response(body, status_code=status, media_type="application/json")
