"""JSON answers: numpy arrays written row by row (:func:`dumps`), serialised off the event loop when large, and a
non-finite number is a 500 Backend error, never invalid JSON.

Why not FastAPI's JSONResponse: it runs ``jsonable_encoder`` over every float (slow for tens of MB of vectors) and
serialises on the event loop in one call that holds the GIL; ``dumps`` hands the GIL back between rows, so /health
answers within a second while the largest allowed answer is written (tests/integration/test_serve_limits.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
from fastapi.responses import Response

from bertkit.serve.core.errors import ApiError

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
        body = await asyncio.to_thread(dumps, obj) if size > BIG_ANSWER else dumps(obj)
    except ValueError as exc:
        raise ApiError(
            None,
            f"the model produced a value JSON cannot carry ({exc}): the checkpoint's weights or config are broken",
            "Backend",
        ) from None
    return Response(body, status_code=status, media_type="application/json")
