"""The :class:`Guard` middleware (pure ASGI, cheaper than ``BaseHTTPMiddleware``): the API key, the concurrency
limit, and each request's status and latency into the metrics.

Why not uvicorn's ``limit_concurrency``: it counts every open connection, so idle keep-alive connections would make
/health answer 503; the Guard counts requests being answered and never refuses a health probe
(tests/integration/test_serve_limits.py: 600 idle connections, /health within a second).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Sequence
from typing import Any

from bertkit.serve.core.errors import ApiError
from bertkit.serve.http.errors import dialect_of_path
from bertkit.serve.http.metrics import Metrics

logger = logging.getLogger("bertkit.serve")


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
    """Args:
    inner: the wrapped ASGI app.
    metrics: where each request's path, status and latency go.
    api_key: the key every request must carry (None: no key), except ``GET`` on ``open_paths`` (health probes).
    known_paths: paths counted under their own name in the metrics (others count as "other").
    limit_concurrency: requests answered at once beyond which a new one gets 503 (None: no limit). Health probes
        are never refused nor counted, and neither are connections with no request in them (idle or still sending
        headers: the header and keep-alive timeouts close those).
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
        probe = scope["method"] in ("GET", "HEAD") and path in self.open  # health probes: no key, never refused
        refusal = None
        if self.key is not None and not probe and not api_key_matches(scope["headers"], self.key):
            refusal = ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
        elif self.limit is not None and not probe and self.in_flight >= self.limit:
            logger.warning("Exceeded concurrency limit.")
            refusal = ApiError(
                503,
                f"{self.in_flight} requests are being answered, the limit (--limit-concurrency): retry later",
                "Overloaded",
            )
        if refusal is not None:
            await dialect_of_path(path).response(refusal, close=refusal.status == 401)(scope, receive, send)
            self.metrics.observe(label, refusal.status, time.perf_counter() - start)
            return
        status = [500]  # what an unhandled exception becomes

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
