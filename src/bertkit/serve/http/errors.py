"""Errors in each dialect's shape, one handler per dialect: TEI's ``{"error", "error_type"}``, OpenAI's ``{"error":
{"message", "type", "param", "code"}}`` and bert-as-service's (TEI's keys: ``BertClient`` reads ``error``).

:meth:`Dialect.refusal` turns whatever a route raised into that dialect's answer: FastAPI's
``RequestValidationError`` (a typed body that did not validate) becomes a 422 naming the field (``inputs[2]``), the
core's :class:`~bertkit.serve.core.errors.ApiError` keeps its status and message, and anything unexpected is a 500
with one log line (the server goes on).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from bertkit.serve.core.errors import ApiError, InputRejected

logger = logging.getLogger("bertkit.serve")

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


class BodyRefused(HTTPException):
    """A body refused while it is read or parsed (413, 408, malformed JSON): an HTTPException, which FastAPI's body
    reading passes on unchanged, carrying the core's :class:`ApiError`."""

    def __init__(self, error: ApiError, close: bool = False):
        super().__init__(error.status, error.message)
        self.error, self.close = error, close


class Dialect:
    """TEI's error shape (the default dialect): ``{"error": message, "error_type": TEI's type}``."""

    name = "tei"

    def error_body(self, status: int, message: str, error_type: str, param: str | None) -> dict[str, Any]:
        return {"error": message, "error_type": error_type}

    def response(self, error: ApiError, close: bool = False) -> JSONResponse:
        """``close``: also ask the client to close the connection (the request's body was not read to its end)."""
        return JSONResponse(
            self.error_body(error.status, error.message, error.error_type, error.param),
            status_code=error.status,
            headers={"Connection": "close"} if close else None,
        )

    def refusal(self, method: str, path: str, exc: Exception) -> JSONResponse:
        """The answer to a route's exception, in this dialect's shape."""
        if isinstance(exc, RequestValidationError):
            return self.response(validation_error(exc.errors()))
        if isinstance(exc, BodyRefused):
            return self.response(exc.error, close=exc.close)
        if isinstance(exc, InputRejected):  # a refusal the route did not name keeps the role (TEI's ``inputs``)
            return self.response(exc.named({}))
        if isinstance(exc, ApiError):
            return self.response(exc)
        if isinstance(exc, HTTPException):
            return self.response(ApiError(exc.status_code, str(exc.detail), _type_of(exc.status_code)))
        logger.error("%s %s failed: %s: %s", method, path, type(exc).__name__, exc)
        return self.response(ApiError(None, f"internal error: {type(exc).__name__}: {exc}", "Backend"))


class OpenAIDialect(Dialect):
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    name = "openai"

    def error_body(self, status: int, message: str, error_type: str, param: str | None) -> dict[str, Any]:
        return {
            "error": {
                "message": message,
                "type": OPENAI_TYPE_OF.get(status, "invalid_request_error"),
                "param": param,
                "code": status,
            }
        }


class BertAsServiceDialect(Dialect):
    """bert-as-service's HTTP server answered ``{"error": message}``; TEI's ``error_type`` rides along."""

    name = "bert-as-service"


TEI, OPENAI, BAS = Dialect(), OpenAIDialect(), BertAsServiceDialect()


def dialect_of_path(path: str) -> Dialect:
    """The dialect of a request no route took (404, 405, and the Guard's 401 and 503): OpenAI's under ``/v1/`` and
    at ``/embeddings`` (TEI serves OpenAI's route under both names), else TEI's."""
    return OPENAI if path.startswith("/v1/") or path == "/embeddings" else TEI


def _type_of(status: int) -> str:
    return {400: "Empty", 429: "Overloaded", 503: "Unhealthy"}.get(status, "Backend" if status >= 500 else "Validation")


# --------------------------------------------------------------------------------------------- validation errors


def validation_error(errors: Sequence[dict[str, Any]]) -> ApiError:
    """FastAPI's validation errors of a JSON body as one 422 naming the field: for a union, the error that got deepest
    into the value names the field best (``inputs[1]``, not ``inputs``). (Malformed JSON never gets here:
    :class:`~bertkit.serve.http.routing.BoundedRequest` refuses it while parsing.)"""
    body_level = [e for e in errors if tuple(e["loc"]) == ("body",)]
    for e in body_level:
        if e["type"] == "missing":
            return ApiError(422, "empty request body: send a JSON object")
        if isinstance(e.get("input"), (bytes, str)):
            return ApiError(422, "the body is not JSON: send a JSON object (Content-Type: application/json)")
        return ApiError(422, f"the body must be a JSON object, got {_json_type(e.get('input'))}")
    err = max(errors, key=lambda e: len(field_path(e["loc"][1:]).replace("[", ".").split(".")))
    loc = field_path(err["loc"][1:])
    return ApiError(422, f"field '{loc or '(body)'}': {err['msg']}", param=loc or None)


def _json_type(value: Any) -> str:
    return {list: "an array", int: "a number", float: "a number", bool: "a boolean"}.get(type(value), "null")


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
