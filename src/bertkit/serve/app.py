"""The HTTP embedding service: the APIs clients already speak, on a dynamic-batching worker.

The house follows text-embeddings-inference's split (docs/serving.md, "Where the code lives"):

    bertkit.serve.core          no web framework: ServeSettings and Service (every input check, truncation and
                                limit, once), the checks, the refusals, BatchQueue (the model's one worker thread)
    bertkit.serve.http          FastAPI: typed request bodies (bodies.py), one route class and error shape per
                                dialect (routing.py, errors.py), the Guard middleware (API key, concurrency limit),
                                prometheus_client metrics, JSON answers, uvicorn with its limits (server.py), and
                                one module of routes per dialect that only maps shapes:
        routes_tei              TEI: POST /embed, /embed_all, /similarity, /tokenize, /decode, POST / (the model's
                                task); GET /, /ping, /health (and HEAD), /info, /metrics
        routes_openai           OpenAI: POST /v1/embeddings (and /embeddings); GET /v1/models, /v1/models/{id}
        routes_bas              bert-as-service: POST /encode, GET /status/server
        routes_tasks            task heads (TEI and the HF inference API): POST /predict, /rerank, /ner, /qa,
                                /fill-mask

:func:`create_app` wires them; OpenAPI is served at /openapi.json and /docs.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from bertkit import __version__
from bertkit.features import Encoder
from bertkit.serve.core.errors import ApiError
from bertkit.serve.core.service import ServeSettings, Service
from bertkit.serve.http import routes_bas, routes_openai, routes_tasks, routes_tei
from bertkit.serve.http.errors import dialect_of_path
from bertkit.serve.http.guard import Guard
from bertkit.serve.http.metrics import Metrics
from bertkit.serve.http.server import ServerThread

__all__ = ["ServeSettings", "ServerThread", "Service", "create_app", "make_services"]

ROUTERS = (routes_tei.router, routes_openai.router, routes_bas.router, routes_tasks.router)
KNOWN_PATHS = tuple(
    dict.fromkeys(r.path for router in ROUTERS for r in router.routes if isinstance(r, APIRoute) and "{" not in r.path)
) + ("/openapi.json", "/docs")
# GET without the API key, never refused: health probes, and the API's description (it shows no model or data)
OPEN_PATHS = ("/health", "/ping", "/", "/openapi.json", "/docs")


def make_services(models: Any, settings: ServeSettings) -> dict[str, Service]:
    """``models``: an Encoder, a task pipeline (its ``.encoder()`` serves the encoder routes), or a dict name -> either
    (the first is the default)."""
    if not isinstance(models, dict):
        models = {settings.model_id or "bertkit": models}
    if not models:
        raise ValueError("no model to serve")
    out = {}
    for name, model in models.items():
        pipeline = None if isinstance(model, Encoder) else model
        encoder = model if pipeline is None else pipeline.encoder()
        out[name] = Service(encoder, settings, name, pipeline)
    return out


async def _no_route(request: Request, exc: HTTPException):
    """404 and 405 (no route took the request), in the dialect its path belongs to."""
    path = request.url.path
    if exc.status_code == 405:
        error = ApiError(405, f"method {request.method} is not allowed on {path}")
    elif exc.status_code == 404:
        error = ApiError(404, f"no endpoint {path}; try one of {', '.join(KNOWN_PATHS)}")
    else:
        error = ApiError(exc.status_code, str(exc.detail))
    return dialect_of_path(path).response(error)


def create_app(models: Any, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app for one model or several (see :func:`make_services`). The batching workers start and stop
    with the app's lifespan (uvicorn runs it). ``app.state`` holds what the routes read: ``services`` (name ->
    :class:`Service`), ``settings`` and ``metrics``."""
    settings = settings or ServeSettings()
    services = make_services(models, settings)
    metrics = Metrics(services)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        for one in services.values():
            one.queue.start()
        try:
            yield
        finally:
            for one in services.values():
                one.queue.stop()

    app = FastAPI(
        title="bertkit embedding server",
        version=__version__,
        lifespan=lifespan,
        redoc_url=None,
        strict_content_type=False,  # a JSON body without a Content-Type header is read as JSON (curl -d, clients)
    )
    app.state.services, app.state.settings, app.state.metrics = services, settings, metrics
    for router in ROUTERS:
        app.include_router(router)
    app.add_exception_handler(HTTPException, _no_route)
    app.add_middleware(
        Guard,
        metrics=metrics,
        api_key=settings.api_key,
        known_paths=KNOWN_PATHS,
        open_paths=OPEN_PATHS,
        limit_concurrency=settings.limit_concurrency,
    )
    return app
