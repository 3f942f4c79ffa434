"""The task routes, in TEI's and the Hugging Face inference API's shapes (what huggingface_hub's
``InferenceClient`` sends): POST /predict, /rerank (TEI), /ner, /qa, /fill-mask. Each maps its request onto the
model's task pipeline (``bertkit.pipelines``), after :meth:`~bertkit.serve.core.service.Service.prepare` has checked the
inputs against the server's limits."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from bertkit.features import encode_with_masks
from bertkit.serve.core.errors import ApiError, fields
from bertkit.serve.core.service import Service, as_batch
from bertkit.serve.http.answers import json_answer
from bertkit.serve.http.bodies import (
    ClassificationParameters,
    FillMaskRequest,
    NerParameters,
    NerRequest,
    PredictRequest,
    QAPair,
    QARequest,
    RerankRequest,
)
from bertkit.serve.http.routing import TEIRoute, service_of

router = APIRouter(route_class=TEIRoute, tags=["tasks"])

ENCODER_ROUTES = ("/embed", "/embed_all", "/v1/embeddings", "/encode", "/tokenize")
ROUTES_OF_KIND = {
    "classification": ("/predict",),
    "regression": ("/predict", "/rerank"),
    "rerank": ("/predict", "/rerank"),
    "ner": ("/ner",),
    "qa": ("/qa",),
}


def head(svc: Service, kinds: tuple[str, ...], what: str) -> Any:
    """The model's task pipeline when it is one of ``kinds``; else a 422 naming every route the model serves."""
    pipe = svc.pipeline
    if pipe is None or pipe.kind not in kinds:
        has = f"a {pipe.kind} head" if pipe is not None else "no task head (config.json 'architectures')"
        serves = (*ROUTES_OF_KIND.get(pipe.kind, ()), "POST /") if pipe is not None else ()
        raise ApiError(
            None,
            f"model '{svc.model_id}' has {has}: {what} needs {' or '.join(kinds)}; this model serves "
            f"{', '.join((*serves, *ENCODER_ROUTES))}",
        )
    return pipe


def _limit(svc: Service, pipe: Any) -> int:
    return getattr(pipe, "max_length", svc.max_length)


@router.post("/predict")
async def predict(request: Request, body: PredictRequest):
    """TEI /predict: ``[{"label", "score"}]`` best first, for a text or a [text, pair]; a list of those for a batch."""
    svc = service_of(request)
    pipe = head(svc, ("classification", "regression", "rerank"), "/predict")
    inputs = body.inputs
    if isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs):  # one [text, pair]
        if len(inputs) > 2:
            raise ApiError(
                None,
                f"'inputs' is a list of {len(inputs)} texts: send a text, a [text, pair], or a "
                "batch of [text] / [text, pair] lists",
                param="inputs",
            )
        inputs = tuple(inputs) if len(inputs) == 2 else inputs[0]
    single = not isinstance(inputs, list)
    items = [inputs] if single else [x[0] if len(x) == 1 else tuple(x) for x in inputs]
    for i, x in enumerate(items):
        if isinstance(x, tuple) and len(x) != 2:
            raise ApiError(None, f"'inputs[{i}]' must be [text] or [text, pair]", param=f"inputs[{i}]")
    texts = [x[0] if isinstance(x, tuple) else x for x in items]
    pairs = [x[1] if isinstance(x, tuple) else None for x in items]
    names = (
        {"inputs": "inputs[0]" if pairs[0] else "inputs", "pairs": "inputs[1]"}
        if single and items
        else {"inputs": "inputs[{i}]", "pairs": "inputs[{i}][1]"}
    )
    with fields(single=single, **names):
        await svc.prepare(texts, pairs, truncate=body.truncate, max_length=_limit(svc, pipe))
    params = body.parameters or ClassificationParameters()
    if body.raw_scores and params.function_to_apply not in (None, "none"):
        raise ApiError(
            None,
            f"'raw_scores' asks for the logits but 'parameters.function_to_apply' asks for "
            f"{params.function_to_apply}: send one of them",
            param="raw_scores",
        )
    kwargs: dict[str, Any] = {
        "raw_scores": body.raw_scores,
        "return_all_scores": body.return_all_scores,
        "top_k": params.top_k if params.top_k is not None else body.top_k,
        "truncate": svc.settings.auto_truncate if body.truncate is None else body.truncate,
    }
    if params.function_to_apply is not None:
        kwargs["function_to_apply"] = params.function_to_apply
    size = svc.bound_answer(len(items) * len(getattr(pipe, "labels", ())) * 2, f"{len(items)} inputs x their labels")
    result = await svc.call(lambda _: pipe.predict(items[0] if single else items, **kwargs))
    if single and body.parameters is not None:  # the inference API nests a single input's answer: [[...]]
        result = [result]
    return await json_answer(result, size)


@router.post("/rerank")
async def rerank(request: Request, body: RerankRequest):
    """TEI /rerank: ``[{"index", "score"[, "text"]}]`` best first."""
    svc = service_of(request)
    pipe = head(svc, ("rerank", "regression"), "/rerank")
    with fields(inputs="query", single=True):
        await svc.prepare([body.query], can_truncate=False, max_length=None)
    with fields(inputs="texts", pairs="texts"):
        await svc.prepare(
            [body.query] * len(body.texts), body.texts, truncate=body.truncate, max_length=_limit(svc, pipe)
        )
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    size = svc.bound_answer(len(body.texts) * 3, f"{len(body.texts)} texts x (index, score, text)")
    return await json_answer(
        await svc.call(
            lambda _: pipe.rerank(
                body.query, body.texts, return_text=body.return_text, raw_scores=body.raw_scores, truncate=truncate
            )
        ),
        size,
    )


@router.post("/ner")
async def ner(request: Request, body: NerRequest):
    """/ner: entities grouped from word pieces, ``[{"entity_group", "score", "word", "start", "end"}]`` (per input for
    a list)."""
    svc = service_of(request)
    pipe = head(svc, ("ner",), "/ner")
    items, single = as_batch(body.inputs)
    encodings = await svc.prepare(items, can_truncate=False, max_length=None)  # long texts are tagged in windows
    n_tokens = sum(len(e.ids) for e in encodings)
    size = svc.bound_answer(n_tokens * 6, f"up to one entity of 6 values per token, {n_tokens} tokens")
    params = body.parameters or NerParameters()
    kwargs: dict[str, Any] = {"aggregation_strategy": params.aggregation_strategy or body.aggregation_strategy}
    if params.ignore_labels is not None:
        kwargs["ignore_labels"] = params.ignore_labels
    result = await svc.call(lambda _: pipe.ner(items[0] if single else items, **kwargs))
    return await json_answer(result, size)


@router.post("/qa")
async def qa(request: Request, body: QARequest):
    """/qa: ``{"question", "context"}`` -> ``{"answer", "score", "start", "end"}`` (a list for a list of inputs)."""
    svc = service_of(request)
    pipe = head(svc, ("qa",), "/qa")
    if body.inputs is not None:
        pairs = body.inputs if isinstance(body.inputs, list) else [body.inputs]
        single = not isinstance(body.inputs, list)
        names = {"inputs": "inputs[{i}].question", "pairs": "inputs[{i}].context"}
    elif body.question is not None and body.context is not None:
        pairs, single = [QAPair(question=body.question, context=body.context)], True
        names = {"inputs": "question", "pairs": "context"}
    else:
        raise ApiError(None, 'send {"question", "context"} (or "inputs": a list of them)', param="question")
    with fields(single=single, **names):
        await svc.prepare([p.question for p in pairs], [p.context for p in pairs], can_truncate=False, max_length=None)
    kwargs = body.parameters.model_dump(exclude_none=True) if body.parameters is not None else {}
    top_k = kwargs.get("top_k", 1)
    size = svc.bound_answer(len(pairs) * max(top_k, 1) * 4, f"{len(pairs)} questions x top_k {top_k} answers")
    items = [{"question": p.question, "context": p.context} for p in pairs]
    result = await svc.call(lambda _: pipe.answer(items, **kwargs))
    return await json_answer(result[0] if single else result, size)


@router.post("/fill-mask")
async def fill_mask(request: Request, body: FillMaskRequest):
    """/fill-mask: per input, per [MASK], the top-k ``{"token", "token_id", "token_str", "score"}``; in the inference
    API's shape (a request with ``parameters``, as huggingface_hub's fill_mask sends): per input, the top-k
    ``{"score", "token" (the id), "token_str", "sequence"}``, a list of them per [MASK] when there are several."""
    svc = service_of(request)
    hf = body.parameters is not None
    top_k = body.parameters.top_k if hf and body.parameters.top_k is not None else body.top_k
    items, single = as_batch(body.inputs)
    top_k_field = "parameters.top_k" if hf and body.parameters.top_k is not None else "top_k"
    with fields(single=single, inputs="inputs", top_k=top_k_field):  # the request's own field names
        masks = svc.masks(items, top_k)  # first: [MASK]s x top_k is known before tokenizing
        await svc.prepare(items, can_truncate=False, max_length=None)  # count, characters, tokens per request
        await svc.mask_lengths(items)  # over the limit: refused, never cut
    result = await svc.call(lambda enc: enc.fill_mask(items, top_k=top_k, max_length=svc.max_length))
    result = (
        _inference_api_fills(svc, items, result)
        if hf
        else [[[{**p, "token_str": p["token"]} for p in per_mask] for per_mask in per_text] for per_text in result]
    )
    return await json_answer(result[0] if single else result, masks * top_k * 4)


def _inference_api_fills(svc: Service, texts: list[str], result: list) -> list:
    """transformers' fill-mask answer: ``token`` is the id, ``sequence`` the input with that prediction in place
    (special tokens, [UNK] included, left out when the input has one [MASK]); one [MASK] gives a flat list."""
    tok = svc.encoder.tokenizer
    mask = tok.convert_ids_to_tokens(tok.mask_token_id)
    specials = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.unk_token_id, tok.mask_token_id}
    out = []
    for text, per_text in zip(texts, result):
        ids = encode_with_masks(tok, text, mask)
        where = [j for j, i in enumerate(ids) if i == tok.mask_token_id]
        one = len(where) == 1
        fills = []
        for j, per_mask in zip(where, per_text):
            row = []
            for p in per_mask:
                filled = ids[:j] + [p["token_id"]] + ids[j + 1 :]
                if one:  # transformers skips its special tokens, [UNK] included
                    filled = [i for i in filled if i not in specials]
                row.append(
                    {
                        "score": p["score"],
                        "token": p["token_id"],
                        "token_str": tok.decode([p["token_id"]], skip_special_tokens=False),
                        "sequence": tok.decode(filled, skip_special_tokens=False),
                    }
                )
            fills.append(row)
        out.append(fills[0] if one else fills)
    return out


BY_KIND = {  # a task model's POST /: its route and that route's body
    "classification": (predict, PredictRequest),
    "regression": (predict, PredictRequest),
    "rerank": (rerank, RerankRequest),
    "ner": (ner, NerRequest),
    "qa": (qa, QARequest),
}
