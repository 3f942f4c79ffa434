"""OpenAI's embeddings API (what the ``openai`` package and LangChain's ``OpenAIEmbeddings`` send): POST
/v1/embeddings (and /embeddings, as TEI serves it); GET /v1/models, /v1/models/{id}. Errors take OpenAI's shape
(``bertkit.serve.http.error_body``)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from bertkit.serve.http import b64, json_answer
from bertkit.serve.schemas import OpenAIEmbeddingsRequest
from bertkit.serve.service import Service, as_batch, body_of, fields, resize, service_of


async def embeddings(request: Request):
    """POST /v1/embeddings: ``{"data": [{"embedding", "index"}], "model", "usage"}``; unit-length vectors."""
    body = await body_of(request, OpenAIEmbeddingsRequest)
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


async def models(request: Request):
    return {"object": "list", "data": [_model_card(svc) for svc in request.app.state.services.values()]}


async def model(request: Request):
    return _model_card(service_of(request, request.path_params["model"]))


ROUTES = [
    ("/v1/embeddings", embeddings, ["POST"]),
    ("/embeddings", embeddings, ["POST"]),
    ("/v1/models", models, ["GET"]),
    ("/v1/models/{model:path}", model, ["GET"]),
]
