"""text-embeddings-inference's routes (what huggingface_hub's ``InferenceClient`` and LlamaIndex's TEI class send):
POST /embed, /embed_all, /similarity, /tokenize, /decode, and POST / (the model's own task); GET and HEAD /, /ping,
/health; GET /info, /metrics. Each maps TEI's request and answer shapes onto :class:`~bertkit.serve.service.Service`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from bertkit import __version__
from bertkit.features import POOLINGS
from bertkit.serve import routes_tasks
from bertkit.serve.http import ApiError, json_answer
from bertkit.serve.schemas import (
    DecodeRequest,
    EmbedAllRequest,
    EmbedRequest,
    SimilarityParameters,
    SimilarityRequest,
    TokenizeRequest,
)
from bertkit.serve.service import Service, as_batch, body_of, fields, resize, service_of


async def health(request: Request):
    for svc in request.app.state.services.values():
        if not svc.queue.alive:
            raise ApiError(None, f"the batching worker of '{svc.model_id}' is not running", "Unhealthy")
    return {"status": "ok"}


async def info(request: Request):
    svc = service_of(request)
    s, enc, pipe = svc.settings, svc.encoder, svc.pipeline
    return {  # TEI's Info fields first, then bertkit's
        "model_id": svc.model_id,
        "model_sha": None,
        "served_model_name": svc.model_id,
        "model_dtype": "bfloat16" if enc.precision == "bf16" else "float16" if enc.precision == "fp16" else "float32",
        "model_type": model_type(svc),
        "max_concurrent_requests": s.limit_concurrency,
        "max_input_length": svc.max_length,
        "max_batch_tokens": s.max_batch_tokens,
        "max_batch_requests": s.max_batch_size,
        "max_client_batch_size": s.max_inputs,
        "auto_truncate": s.auto_truncate,
        "tokenization_workers": 1,
        "version": __version__,
        "sha": None,
        "docker_label": None,
        "architecture": "bert",
        "hidden_size": enc.config.hidden_size,
        "num_layers": enc.num_layers,
        "vocab_size": enc.config.vocab_size,
        "embedding_dim": enc.output_dim(svc.default_spec),
        "default_pooling_layer": svc.default_layers,
        "default_pooling_strategy": svc.default_spec.pooling,
        "poolings": list(POOLINGS),
        "has_pooler": enc.has_pooler,
        "has_mlm_head": enc.mlm_head is not None,
        "max_input_chars": s.max_input_chars,
        "max_request_tokens": s.max_request_tokens,
        "max_output_values": s.max_output_values,
        "max_payload_bytes": s.max_payload_bytes,
        "max_wait_ms": s.max_wait_ms,
        "auth": s.api_key is not None,
        "task": pipe.kind if pipe is not None else "embedding",
        "precision": enc.precision,
        "backend": getattr(pipe or enc, "backend", "torch"),
        "device": str(enc.device),
        "quantize": getattr(pipe or enc, "quantize", None),
        "models": list(request.app.state.services),
    }


def model_type(svc: Service) -> dict[str, Any]:
    """TEI's ``model_type``: {"embedding": {"pooling"}}, or {"classifier" | "reranker": {"id2label", "label2id"}}."""
    pipe = svc.pipeline
    if pipe is None or pipe.kind in ("ner", "qa"):
        return {"embedding": {"pooling": svc.default_spec.pooling}}
    labels = list(getattr(pipe, "labels", []))
    ids = {"id2label": {str(i): x for i, x in enumerate(labels)}, "label2id": {x: i for i, x in enumerate(labels)}}
    return {"reranker" if pipe.kind == "rerank" else "classifier": ids}


async def metrics(request: Request):
    svc = service_of(request)
    return PlainTextResponse(svc.metrics.render(svc.queue), media_type="text/plain; version=0.0.4")


async def embed(request: Request, body: EmbedRequest | None = None):
    """TEI /embed: [[float, ...], ...]."""
    svc = service_of(request)
    body = body or await body_of(request, EmbedRequest)
    encodings = await svc.prepare(as_batch(body.inputs)[0], truncate=body.truncate, direction=body.truncation_direction)
    spec = svc.spec(normalize=body.normalize and body.dimensions is None)
    vectors = await svc.embed(encodings, spec)
    vectors = resize(vectors, body.dimensions, body.normalize, svc.encoder.output_dim(spec))
    return await json_answer(vectors, sum(v.size for v in vectors))


async def embed_all(request: Request):
    """TEI /embed_all: every token's vector (the default layers), [[[float, ...], ...], ...]."""
    svc = service_of(request)
    body = await body_of(request, EmbedAllRequest)
    encodings = await svc.prepare(as_batch(body.inputs)[0], truncate=body.truncate, direction=body.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(pooling="none"))
    return await json_answer(vectors, sum(v.size for v in vectors))


async def similarity(request: Request, body: SimilarityRequest | None = None):
    """TEI /similarity: cosine of ``source_sentence`` with each of ``sentences``."""
    svc = service_of(request)
    body = body or await body_of(request, SimilarityRequest)
    p = body.parameters or SimilarityParameters()
    if not body.inputs.sentences:
        raise ApiError(None, "'inputs.sentences' cannot be empty", "Empty", "inputs.sentences")
    items = [body.inputs.source_sentence, *body.inputs.sentences]  # refusals name inputs[0] the source sentence
    encodings = await svc.prepare(items, truncate=p.truncate, direction=p.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(normalize=True))
    return await json_answer([float(np.dot(vectors[0], v)) for v in vectors[1:]])


def _root_body(data: dict) -> type[BaseModel]:
    return SimilarityRequest if isinstance(data.get("inputs"), dict) else EmbedRequest


async def root(request: Request):
    """TEI's POST /: the model's own task: the head's route (predict, rerank, ner, qa), else embed (similarity when
    ``inputs`` is a source sentence and others)."""
    svc = service_of(request)
    if svc.pipeline is not None:
        return await routes_tasks.BY_KIND[svc.pipeline.kind](request)
    body = await body_of(request, _root_body)
    return await (similarity(request, body) if isinstance(body, SimilarityRequest) else embed(request, body))


async def tokenize(request: Request):
    """TEI /tokenize: per input, ``[{"id", "text", "special", "start", "stop"}]`` (always a list of lists); with
    ``pairs`` each token also says its ``sequence``."""
    svc = service_of(request)
    body = await body_of(request, TokenizeRequest)
    pairs = None if body.pairs is None else [body.pairs] if isinstance(body.pairs, str) else list(body.pairs)
    encodings = await svc.prepare(
        as_batch(body.inputs)[0],
        pairs,
        truncate=False,
        can_truncate=False,
        add_special_tokens=body.add_special_tokens,
        max_length=None,
    )
    total = sum(len(e.ids) for e in encodings)
    return await json_answer(await run_in_threadpool(_token_lists, encodings, pairs is not None), total * 5)


def _token_lists(encodings: list[Any], with_sequence: bool) -> list[list[dict[str, Any]]]:
    out = []
    for e in encodings:
        seq_ids = e.sequence_ids or [None] * len(e.ids)
        rows = []
        for i, t, s, o, q in zip(e.ids, e.tokens, e.special_tokens_mask, e.offsets, seq_ids):
            row = {"id": i, "text": t, "special": bool(s), "start": None if s else o[0], "stop": None if s else o[1]}
            if with_sequence:
                row["sequence"] = q
            rows.append(row)
        out.append(rows)
    return out


async def decode(request: Request):
    """TEI /decode: ``{"ids": [...] | [[...]], "skip_special_tokens"}`` -> ``["text", ...]``."""
    svc = service_of(request)
    body = await body_of(request, DecodeRequest)
    with fields(inputs="ids"):
        lists = svc.token_ids(as_batch(body.ids)[0])
    tok = svc.encoder.tokenizer
    return await json_answer([tok.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in lists])


ROUTES = [
    ("/health", health, ["GET", "HEAD"]),
    ("/ping", health, ["GET", "HEAD"]),
    ("/", health, ["GET", "HEAD"]),
    ("/", root, ["POST"]),
    ("/info", info, ["GET"]),
    ("/metrics", metrics, ["GET"]),
    ("/embed", embed, ["POST"]),
    ("/embed_all", embed_all, ["POST"]),
    ("/similarity", similarity, ["POST"]),
    ("/tokenize", tokenize, ["POST"]),
    ("/decode", decode, ["POST"]),
]
