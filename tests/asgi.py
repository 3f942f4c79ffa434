"""The server in-process: ``asgi_json`` asks an app through Starlette's ``TestClient`` (no socket, no uvicorn), as
``tinymodels.http_json`` asks a real server. Shapes, refusals and answers need no socket; connection limits,
concurrency and the official clients do (those tests start ``ServerThread`` or ``bertkit serve``)."""

from __future__ import annotations

import json
from typing import Any

from starlette.testclient import TestClient


def asgi_json(client: TestClient, path: str, body: Any = None, method: str | None = None, raw: bytes | None = None):
    """``(status, parsed JSON answer, or the text of another answer)`` for ``body`` sent as JSON (or ``raw`` bytes);
    GET without either."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    r = client.request(
        method or ("GET" if data is None else "POST"), path, content=data, headers={"Content-Type": "application/json"}
    )
    return r.status_code, r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
