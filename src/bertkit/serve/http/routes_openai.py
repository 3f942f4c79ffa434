"""OpenAI's embeddings API (what the ``openai`` package and LangChain's ``OpenAIEmbeddings`` send): POST
/v1/embeddings (and /embeddings, as TEI serves it); GET /v1/models, /v1/models/{id}. Errors take OpenAI's shape
(``bertkit.serve.http.errors.OpenAIDialect``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from bertkit.serve.core.errors import fields
from bertkit.serve.core.service import Service, as_batch, resize
from bertkit.serve.http.answers import b64, json_answer
from bertkit.serve.http.bodies import OpenAIEmbeddingsRequest
from bertkit.serve.http.routing import OpenAIRoute, service_of

router = APIRouter(route_class=OpenAIRoute, tags=["OpenAI"])


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def embeddings(request: Request, body: OpenAIEmbeddingsRequest):
    """POST /v1/embeddings: ``{"data": [{"embedding", "index"}], "model", "usage"}``; unit-length vectors."""
    svc = service_of(request, body.model, lenient=True)
    with fields(inputs="input"):
        encodings = await svc.prepare(as_batch(body.input)[0], truncate=body.truncate)
        spec = svc.spec(normalize=body.dimensions is None)  # OpenAI embeddings are unit length
        vectors = await svc.embed(encodings, spec)
    vectors = resize(vectors, body.dimensions, True, svc.encoder.output_dim(spec))
    data = [
        {"object": "embedding", "index": i, "embedding": b64(v) if body.encoding_format == "base64" else v}
        for i, v in enumerate(vectors)
    ]
    n_tokens = sum(len(e.ids) for e in encodings)
    return await json_answer(
        {
            "object": "list",
            "data": data,
            "model": body.model or svc.model_id,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        },
        sum(v.size for v in vectors),
    )


def _model_card(svc: Service) -> dict[str, Any]:
    return {"id": svc.model_id, "object": "model", "created": int(svc.started), "owned_by": "bertkit"}


@router.get("/v1/models")
async def models(request: Request):
    return {"object": "list", "data": [_model_card(svc) for svc in request.app.state.services.values()]}


@router.get("/v1/models/{model:path}")
async def model(request: Request, model: str):
    return _model_card(service_of(request, model))
