"""bert-as-service's HTTP API (its ``BertClient``'s request shape) plus bertkit's own fields: POST /encode
(``{"id", "texts", "is_tokenized"}`` -> ``{"id", "result"}``; with pairs, pooling_layer, pooling_strategy,
show_tokens or encoding_format -> ``{"embeddings", "shape", ...}``), GET /status/server."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from fastapi import Request

from bertkit import __version__
from bertkit.serve.http import b64, json_answer
from bertkit.serve.schemas import EncodeRequest
from bertkit.serve.service import InputRejected, body_of, fields, service_of

BAS_POOLING = {
    "mean": "REDUCE_MEAN",
    "max": "REDUCE_MAX",
    "mean_max": "REDUCE_MEAN_MAX",
    "cls": "CLS_TOKEN",
    "sep": "SEP_TOKEN",
    "none": "NONE",
}


async def encode(request: Request):
    """bert-as-service /encode; bertkit's own fields give ``{"embeddings", "shape", "dtype", ...}``."""
    svc = service_of(request)
    body = await body_of(request, EncodeRequest)
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


async def status_server(request: Request):
    """bert-as-service's server status (its field names)."""
    svc = service_of(request)
    s = svc.settings
    with svc.metrics.lock:
        requests = sum(svc.metrics.requests.values())
        inputs = sum(svc.metrics.inputs.values())
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


ROUTES = [("/encode", encode, ["POST"]), ("/status/server", status_server, ["GET"])]
