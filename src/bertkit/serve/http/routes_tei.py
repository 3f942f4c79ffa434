"""text-embeddings-inference's routes (what huggingface_hub's ``InferenceClient`` and LlamaIndex's TEI class send):
POST /embed, /embed_all, /similarity, /tokenize, /decode, and POST / (the model's own task); GET and HEAD /, /ping,
/health; GET /info, /metrics. Each maps TEI's request and answer shapes onto
:class:`~bertkit.serve.core.service.Service`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Request
from fastapi.responses import Response

from bertkit import __version__, models
from bertkit.features import POOLINGS
from bertkit.serve.core.errors import ApiError, fields
from bertkit.serve.core.service import Service, as_batch, resize
from bertkit.serve.http import routes_tasks
from bertkit.serve.http.answers import json_answer
from bertkit.serve.http.bodies import (
    DecodeRequest,
    EmbedAllRequest,
    EmbedRequest,
    SimilarityParameters,
    SimilarityRequest,
    TokenizeRequest,
)
from bertkit.serve.http.metrics import CONTENT_TYPE
from bertkit.serve.http.routing import TEIRoute, service_of, validate

router = APIRouter(route_class=TEIRoute, tags=["TEI"])


@router.get("/health")
@router.get("/ping")
@router.get("/")
@router.head("/health", include_in_schema=False)  # HEAD apart: OpenAPI gives one route's methods one operation id
@router.head("/ping", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def health(request: Request):
    """Health probe: 200 while every model's batching worker runs, else 503 (no API key needed)."""
    for svc in request.app.state.services.values():
        if not svc.queue.alive:
            raise ApiError(None, f"the batching worker of '{svc.model_id}' is not running", "Unhealthy")
    return {"status": "ok"}


@router.get("/info")
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
        **models.of_config(enc.config).info(),  # "architecture" and what else the registry reports
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


@router.get("/metrics")
async def metrics(request: Request):
    """Prometheus metrics (``?model=`` picks the model whose batching statistics are shown)."""
    return Response(request.app.state.metrics.render(service_of(request)), media_type=CONTENT_TYPE)


@router.post("/embed")
async def embed(request: Request, body: EmbedRequest):
    """TEI /embed: [[float, ...], ...]."""
    svc = service_of(request)
    encodings = await svc.prepare(as_batch(body.inputs)[0], truncate=body.truncate, direction=body.truncation_direction)
    spec = svc.spec(normalize=body.normalize and body.dimensions is None)
    vectors = await svc.embed(encodings, spec)
    vectors = resize(vectors, body.dimensions, body.normalize, svc.encoder.output_dim(spec))
    return await json_answer(vectors, sum(v.size for v in vectors))


@router.post("/embed_all")
async def embed_all(request: Request, body: EmbedAllRequest):
    """TEI /embed_all: every token's vector (the default layers), [[[float, ...], ...], ...]."""
    svc = service_of(request)
    encodings = await svc.prepare(as_batch(body.inputs)[0], truncate=body.truncate, direction=body.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(pooling="none"))
    return await json_answer(vectors, sum(v.size for v in vectors))


@router.post("/similarity")
async def similarity(request: Request, body: SimilarityRequest):
    """TEI /similarity: cosine of ``source_sentence`` with each of ``sentences``."""
    svc = service_of(request)
    p = body.parameters or SimilarityParameters()
    if not body.inputs.sentences:
        raise ApiError(None, "'inputs.sentences' cannot be empty", "Empty", "inputs.sentences")
    items = [body.inputs.source_sentence, *body.inputs.sentences]  # refusals name inputs[0] the source sentence
    encodings = await svc.prepare(items, truncate=p.truncate, direction=p.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(normalize=True))
    return await json_answer([float(np.dot(vectors[0], v)) for v in vectors[1:]])


@router.post("/")
async def root(request: Request, body: Annotated[dict[str, Any], Body(description="the model's own route's body")]):
    """TEI's POST /: the model's own task: the head's route (predict, rerank, ner, qa), else embed (similarity when
    ``inputs`` is a source sentence and others)."""
    svc = service_of(request)
    if svc.pipeline is not None:
        route, model = routes_tasks.BY_KIND[svc.pipeline.kind]
        return await route(request, validate(model, body))
    if isinstance(body.get("inputs"), dict):
        return await similarity(request, validate(SimilarityRequest, body))
    refuse_fill_mask(svc, body)
    return await embed(request, validate(EmbedRequest, body))


def refuse_fill_mask(svc: Service, body: dict[str, Any]) -> None:
    """An embedding model's POST / takes no ``parameters``: a fill-mask request (huggingface_hub's ``fill_mask``
    on the server's bare URL: ``parameters.top_k``, or a [MASK] in the text, with or without ``parameters``) is told
    where fill-mask is served (docs/serving.md)."""
    tok = svc.encoder.tokenizer
    mask = tok.convert_ids_to_tokens(tok.mask_token_id) if tok.mask_token_id is not None else None
    texts = body.get("inputs") if isinstance(body.get("inputs"), list) else [body.get("inputs")]
    params = body["parameters"] if isinstance(body.get("parameters"), dict) else {}
    if {"top_k", "targets"} & set(params) or (mask and any(isinstance(t, str) and mask in t for t in texts)):
        raise ApiError(
            None,
            f"'parameters': POST / embeds texts on model '{svc.model_id}' (it has no task head); for fill-mask, "
            "send the request to /fill-mask (huggingface_hub: InferenceClient(base_url=URL + '/fill-mask'))",
            param="parameters",
        )


@router.post("/tokenize")
async def tokenize(request: Request, body: TokenizeRequest):
    """TEI /tokenize: per input, ``[{"id", "text", "special", "start", "stop"}]`` (always a list of lists); with
    ``pairs`` each token also says its ``sequence``."""
    svc = service_of(request)
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
    return await json_answer(await asyncio.to_thread(_token_lists, encodings, pairs is not None), total * 5)


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


@router.post("/decode")
async def decode(request: Request, body: DecodeRequest):
    """TEI /decode: ``{"ids": [...] | [[...]], "skip_special_tokens"}`` -> ``["text", ...]``."""
    svc = service_of(request)
    with fields(inputs="ids"):
        lists = svc.token_ids(as_batch(body.ids)[0])
    tok = svc.encoder.tokenizer
    return await json_answer([tok.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in lists])
