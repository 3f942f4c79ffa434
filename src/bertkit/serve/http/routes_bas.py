"""bert-as-service's HTTP API (its ``BertClient``'s request shape) plus bertkit's own fields: POST /encode
(``{"id", "texts", "is_tokenized"}`` -> ``{"id", "result"}``; with pairs, pooling_layer, pooling_strategy,
show_tokens or encoding_format -> ``{"embeddings", "shape", ...}``), GET /status/server."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from bertkit import __version__
from bertkit.serve.core.errors import InputRejected, fields
from bertkit.serve.http.answers import b64, json_answer
from bertkit.serve.http.bodies import EncodeRequest
from bertkit.serve.http.routing import BertAsServiceRoute, service_of

router = APIRouter(route_class=BertAsServiceRoute, tags=["bert-as-service"])

BAS_POOLING = {
    "mean": "REDUCE_MEAN",
    "max": "REDUCE_MAX",
    "mean_max": "REDUCE_MEAN_MAX",
    "cls": "CLS_TOKEN",
    "sep": "SEP_TOKEN",
    "none": "NONE",
}


@router.post("/encode")
async def encode(request: Request, body: EncodeRequest):
    """bert-as-service /encode; bertkit's own fields give ``{"embeddings", "shape", "dtype", ...}``."""
    svc = service_of(request)
    bas = "id" in body.model_fields_set or "is_tokenized" in body.model_fields_set
    with fields(inputs="texts", pairs="pairs", layers="pooling_layer", pooling="pooling_strategy"):
        if not body.is_tokenized:
            for i, t in enumerate(body.texts):
                if not isinstance(t, str):
                    raise InputRejected("inputs", i, "'{field}' is a list: set \"is_tokenized\": true to send words")
        encodings = await svc.prepare(body.texts, body.pairs, truncate=body.truncate, words=body.is_tokenized)
        spec = svc.spec(body.pooling_layer, body.pooling_strategy, body.normalize)
        vectors = await svc.embed(encodings, spec)
    size = sum(v.size for v in vectors)
    if bas:
        return await json_answer({"id": body.id, "result": vectors}, size)
    out: dict[str, Any] = {"dtype": "float32", "pooling_layer": list(spec.layers), "pooling_strategy": spec.pooling}
    base64 = body.encoding_format == "base64"
    if spec.pooling == "none":
        out["shape"] = [[int(x) for x in v.shape] for v in vectors]
        out["embeddings"] = [b64(v) for v in vectors] if base64 else vectors
    else:
        arr = np.stack(vectors).astype("<f4")
        out["shape"] = list(arr.shape)
        out["embeddings"] = b64(arr) if base64 else arr
    if body.show_tokens:
        out["tokens"] = [list(e.tokens) for e in encodings]
    return await json_answer(out, size)


@router.get("/status/server")
async def status_server(request: Request):
    """bert-as-service's server status (its field names)."""
    svc = service_of(request)
    s = svc.settings
    requests = request.app.state.metrics.total_requests()
    inputs = sum(one.inputs_total for one in request.app.state.services.values())
    return {
        "ckpt_name": svc.model_id,
        "max_seq_len": svc.max_length,
        "max_batch_size": s.max_batch_size,
        "num_worker": 1,
        "pooling_layer": svc.default_layers,
        "pooling_strategy": BAS_POOLING.get(svc.default_spec.pooling, svc.default_spec.pooling.upper()),
        "server_version": __version__,
        "server_start_time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(svc.started)),
        "num_request": requests,
        "num_total_seq": inputs,
        "num_batches": svc.queue.stats.batches,
        "queue_depth": svc.queue.depth,
        "alive": svc.queue.alive,
    }
