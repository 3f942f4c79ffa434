"""The HTTP embedding service (FastAPI): the APIs clients already speak, on a dynamic-batching worker.

The house follows text-embeddings-inference's layering:

    bertkit.serve.http          no model: errors in each API's shape, the Guard middleware (API key, metrics,
                                concurrency limit), bounded body reading, JSON answers
    bertkit.serve.server        uvicorn with limits on slow and idle clients
    bertkit.serve.batching      the model's one worker thread and its dynamic batches
    bertkit.serve.service       ServeSettings and Service: every input check, truncation and limit, once
    bertkit.serve.schemas       the request bodies of every dialect
    bertkit.serve.routes_tei    TEI: POST /embed, /embed_all, /similarity, /tokenize, /decode, POST / (the model's
                                task); GET /, /ping, /health (and HEAD), /info, /metrics
    bertkit.serve.routes_openai OpenAI: POST /v1/embeddings (and /embeddings); GET /v1/models, /v1/models/{id}
    bertkit.serve.routes_bas    bert-as-service: POST /encode, GET /status/server
    bertkit.serve.routes_tasks  task heads (TEI and the HF inference API): POST /predict, /rerank, /ner, /qa,
                                /fill-mask

Routes only map their dialect's shapes; :func:`create_app` wires them (docs/serving.md has a curl example for each
route, and which client reaches it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request

from bertkit import __version__
from bertkit.features import Encoder
from bertkit.serve import routes_bas, routes_openai, routes_tasks, routes_tei
from bertkit.serve.http import ApiError, Guard, Metrics, error_response
from bertkit.serve.server import ServerThread  # noqa: F401  (public here: tests and docs import it from app)
from bertkit.serve.service import InputRejected, ServeSettings, Service  # noqa: F401  (ServeSettings: public here)

logger = logging.getLogger("bertkit.serve")

ROUTES: list[tuple[str, Callable, list[str]]] = [
    *routes_tei.ROUTES,
    *routes_openai.ROUTES,
    *routes_bas.ROUTES,
    *routes_tasks.ROUTES,
]
KNOWN_PATHS = tuple(dict.fromkeys(path for path, _, _ in ROUTES if "{" not in path))


def guarded(fn: Callable) -> Callable:
    """A route whose unexpected exception becomes a 500 in the API's error shape and one log line (the server goes
    on, and the keep-alive connection stays usable). A refusal the route did not name keeps the service's role
    names (TEI's ``inputs``, ``pairs``)."""

    async def route(request: Request):  # no functools.wraps: FastAPI would read fn's parameters as body fields
        try:
            return await fn(request)
        except InputRejected as exc:
            raise exc.named({}) from None
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001
            logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
            raise ApiError(None, f"internal error: {type(exc).__name__}: {exc}", "Backend") from None

    route.__name__ = route.__qualname__ = fn.__name__
    route.__doc__ = fn.__doc__
    return route


async def _api_error(request: Request, exc: ApiError):
    return error_response(
        request.url.path, exc.status, exc.message, exc.error_type, exc.param, close=exc.status in (408, 413)
    )


async def _not_found(request: Request, exc: Exception):
    return error_response(request.url.path, 404, f"no endpoint {request.url.path}; try one of {', '.join(KNOWN_PATHS)}")


async def _bad_method(request: Request, exc: Exception):
    return error_response(request.url.path, 405, f"method {request.method} is not allowed on {request.url.path}")


def make_services(models: Any, settings: ServeSettings) -> dict[str, Service]:
    """``models``: an Encoder, a task pipeline (its ``.encoder()`` serves the encoder routes), or a dict name -> either
    (the first is the default)."""
    if not isinstance(models, dict):
        models = {settings.model_id or "bertkit": models}
    if not models:
        raise ValueError("no model to serve")
    metrics, out = Metrics(), {}
    for name, model in models.items():
        pipeline = None if isinstance(model, Encoder) else model
        encoder = model if pipeline is None else pipeline.encoder()
        out[name] = Service(encoder, settings, name, pipeline, metrics)
    return out


def create_app(models: Any, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app for one model or several (see :func:`make_services`). The batching workers start and stop
    with the app's lifespan (uvicorn runs it). ``app.state`` holds what the routes read: ``services`` (name ->
    :class:`Service`) and ``settings``."""
    settings = settings or ServeSettings()
    services = make_services(models, settings)
    metrics = next(iter(services.values())).metrics

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
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.services, app.state.settings = services, settings
    for path, fn, methods in ROUTES:
        app.add_api_route(path, guarded(fn), methods=methods)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(404, _not_found)
    app.add_exception_handler(405, _bad_method)
    app.add_middleware(
        Guard,
        metrics=metrics,
        api_key=settings.api_key,
        known_paths=KNOWN_PATHS,
        limit_concurrency=settings.limit_concurrency,
    )
    return app
