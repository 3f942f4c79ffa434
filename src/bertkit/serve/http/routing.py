"""How a route meets its request: FastAPI's route class, once per dialect, reading the body within the server's
limits and answering every refusal in the dialect's error shape (:mod:`~bertkit.serve.http.errors`).

The body is read by :class:`BoundedRequest` (FastAPI's documented hook: a route class with its own ``Request``):
at most ``--max-payload-bytes`` (413, counted while reading, so a chunked body is refused before it is held) within
``--body-timeout`` seconds (408: a client that declares a body and sends less cannot hold the connection), and parsed
as JSON with a 422 for what ``json.loads`` refuses (malformed, nested too deeply, a number of 5,000 digits), where
FastAPI would answer 400 "There was an error parsing the body". Starlette's own body limit
(``RequestBodyLimitMiddleware``) answers its 413 in plain text, outside any dialect's shape: hence this one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from bertkit.serve.core.errors import ApiError
from bertkit.serve.core.service import Service
from bertkit.serve.http.errors import BAS, OPENAI, TEI, BodyRefused, Dialect

logger = logging.getLogger("bertkit.serve")


class BoundedRequest(Request):
    """A request whose body is read within the server's size and time limits and parsed into a 422 when it is not
    JSON (see the module's docstring)."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            settings = self.app.state.settings
            self._body = await self._read(settings.max_payload_bytes, settings.body_timeout_s)
        return self._body

    async def _read(self, limit: int, timeout: float) -> bytes:
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            over = ApiError(
                413, f"payload of {declared} bytes is over the limit of {limit} bytes (--max-payload-bytes)"
            )
            raise BodyRefused(over, close=True)
        chunks: list[bytes] = []
        size = 0

        async def gather() -> None:
            nonlocal size
            async for chunk in self.stream():
                size += len(chunk)
                if size > limit:
                    over = ApiError(413, f"payload is over the limit of {limit} bytes (--max-payload-bytes)")
                    raise BodyRefused(over, close=True)
                chunks.append(chunk)

        try:
            if hasattr(asyncio, "timeout"):  # Python 3.11+: no task per request
                async with asyncio.timeout(timeout):
                    await gather()
            else:
                await asyncio.wait_for(gather(), timeout)
        except ClientDisconnect:
            raise BodyRefused(ApiError(400, "the client went away before sending the whole body")) from None
        except asyncio.TimeoutError:
            client = self.client.host if self.client else "?"
            logger.warning(
                "refused a request from %s: body not received within %s s (%d bytes read)", client, timeout, size
            )
            late = ApiError(408, f"the request body was not received within {timeout} s (--body-timeout)")
            raise BodyRefused(late, close=True) from None
        return b"".join(chunks)

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = json.loads(await self.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BodyRefused(ApiError(422, f"malformed JSON: {exc}")) from None
            except RecursionError:
                raise BodyRefused(ApiError(422, "malformed JSON: nested too deeply")) from None
            except ValueError as exc:  # e.g. an integer of more than 4300 digits
                raise BodyRefused(ApiError(422, f"malformed JSON: {exc}")) from None
        return self._json


class DialectRoute(APIRoute):
    """A route of one dialect: its body read by :class:`BoundedRequest`, its refusals in the dialect's shape."""

    dialect: Dialect = TEI

    def get_route_handler(self) -> Callable:
        handler, dialect = super().get_route_handler(), self.dialect

        async def route(request: Request) -> Response:
            try:
                return await handler(BoundedRequest(request.scope, request.receive))
            except Exception as exc:  # noqa: BLE001 - every refusal and failure answers in the dialect's shape
                return dialect.refusal(request.method, request.url.path, exc)

        return route


class TEIRoute(DialectRoute):
    dialect = TEI


class OpenAIRoute(DialectRoute):
    dialect = OPENAI


class BertAsServiceRoute(DialectRoute):
    dialect = BAS


def validate(model: type[BaseModel], data: Any) -> Any:
    """``data`` (a parsed body) as ``model``, for a route that picks its body's type from the body (TEI's POST /);
    a refusal is FastAPI's own ``RequestValidationError``, so it reads as any typed body's does."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def service_of(request: Request, name: str | None = None, lenient: bool = False) -> Service:
    """The model a request is for: ``name`` (OpenAI's ``model`` field) or ``?model=``, else the first one served.
    An unknown name is a 404 naming the served ones; ``lenient`` (OpenAI's field, which clients fill with their
    own defaults) falls back to the only model when there is one."""
    services: dict[str, Service] = request.app.state.services
    name = name or request.query_params.get("model")
    if name is None:
        return next(iter(services.values()))
    if name in services:
        return services[name]
    if lenient and len(services) == 1:
        return next(iter(services.values()))
    raise ApiError(
        404, f"no model '{name}' here: this server has {', '.join(services)} (pick one with ?model=)", param="model"
    )
