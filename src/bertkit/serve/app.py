"""The HTTP embedding service (FastAPI): the APIs clients already speak, on a dynamic-batching worker.

Routes (docs/serving.md has a curl example for each, and which client reaches it):

    text-embeddings-inference (TEI)   POST /embed, /embed_all, /similarity, /tokenize, /decode, POST / (embed, or
                                      similarity for {"inputs": {"source_sentence", ...}}); GET /, /ping, /health, /info
    OpenAI                            POST /v1/embeddings (and /embeddings); GET /v1/models, /v1/models/{id}
    bert-as-service                   POST /encode ({"id", "texts", "is_tokenized"} -> {"id", "result"}, plus bertkit's
                                      fields), GET /status/server
    bertkit                           POST /fill-mask; GET /metrics (Prometheus text)

The pieces with no model in them (errors, the Guard middleware, body reading, input checks, answers) live in
:mod:`bertkit.serve.http`; the uvicorn side (header timeout, limits) in :mod:`bertkit.serve.server`. Here:
:class:`ServeSettings`, :class:`Service` (the model-bound steps every route shares: tokenize, check, embed) and one
function per route; :func:`create_app` only wires them. The model belongs to one worker thread
(:mod:`bertkit.serve.batching`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from bertkit import __version__
from bertkit.features import POOLINGS, Encoder, PoolSpec, parse_layers
from bertkit.options import option
from bertkit.serve.batching import BatchQueue, QueueFull
from bertkit.serve.http import (
    ApiError,
    Guard,
    Metrics,
    check_count,
    check_ids,
    check_output_size,
    check_text,
    error_response,
    json_answer,
    parse_json,
    read_body,
)
from bertkit.serve.server import ServerThread  # noqa: F401  (public here: tests and docs import it from app)

logger = logging.getLogger("bertkit.serve")


@dataclass
class ServeSettings:
    """Server options: each is the ``bertkit serve`` flag of the same name (``bertkit.options``)."""

    model_id: str | None = option(None, help="name reported by /info, /v1/models and /v1/embeddings (default: the "
                                  "model directory's name)")
    layers: tuple | None = option(None, parse=parse_layers, help="default layer(s) for /embed, /v1/embeddings, "
                                  "/encode (comma-separated, concatenated; default: the model's saved setting, "
                                  "else -2)")
    pooling: str | None = option(None, help=f"default pooling ({', '.join(POOLINGS)}; default: the model's saved "
                                 "pooling, else mean)")
    max_length: int | None = option(None, help="tokens per input, specials included (capped by the model; default: "
                                    "the model's max_seq_length, else 512)")
    auto_truncate: bool = option(False, help="truncate over-long inputs on /embed and /v1/embeddings instead of 422")
    max_inputs: int = option(2048, help="inputs per request (more: 422)")
    max_input_chars: int = option(50_000, help="characters per input (more: 422, or cut when truncating)")
    max_request_tokens: int = option(300_000, help="tokens per request, all inputs together (more: 422)")
    max_output_values: int = option(4 * 1024 * 1024, help="numbers in one answer, checked before computing it "
                                    "(token-level outputs: tokens x width; more: 422)")
    max_predictions: int = option(10_000, help="fill-mask predictions per request: [MASK]s x top_k (more: 422)")
    max_payload_bytes: int = option(4 * 1024 * 1024, help="request body size (more: 413)")
    max_batch_tokens: int = option(8192, help="padded tokens per forward pass")
    max_batch_size: int = option(128, help="inputs per forward pass")
    max_wait_ms: float = option(2.0, help="linger for more inputs before a batch")
    max_pending: int = option(20_000, help="queued inputs beyond which requests get 429")
    request_timeout_s: float = option(60.0, flag="--request-timeout", help="seconds a request may wait (then 429)")
    header_timeout_s: float = option(10.0, flag="--header-timeout", help="seconds a client has to send a request's "
                                     "headers (then the connection is closed)")
    body_timeout_s: float = option(30.0, flag="--body-timeout", help="seconds a client has to send a request's body "
                                   "(then 408 and the connection is closed)")
    keep_alive_timeout_s: float = option(5.0, flag="--keep-alive-timeout", help="seconds an idle keep-alive "
                                         "connection stays open")
    limit_concurrency: int = option(512, help="connections or requests in flight beyond which new requests get 503")
    malloc_trim_interval_s: float = option(5.0, flag="--malloc-trim-interval", help="after work, hand freed memory "
                                           "back to the OS at most this often (glibc malloc_trim; 0: never)")
    api_key: str | None = field(default=None, repr=False, metadata={"skip": True})


# --------------------------------------------------------------------------------------------- request bodies

Ids = list[StrictInt]
Inputs = StrictStr | Ids | list[StrictStr | Ids]  # TEI and OpenAI: a text, token ids, or a list of either


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Body):  # TEI /embed and POST /
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None
    dimensions: StrictInt | None = None


class EmbedAllRequest(_Body):  # TEI /embed_all
    inputs: Inputs
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None


class SimilarityInput(_Body):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(_Body):
    truncate: StrictBool | None = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: None = None


class SimilarityRequest(_Body):  # TEI /similarity (huggingface_hub's sentence_similarity)
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class OpenAIEmbeddingsRequest(_Body):
    input: Inputs
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    truncate: StrictBool | None = None  # bertkit's extension: cut over-long inputs instead of 422


class EncodeRequest(_Body):  # bert-as-service, plus bertkit's fields
    texts: list[StrictStr | list[StrictStr]]
    id: StrictInt | StrictStr | None = None
    is_tokenized: StrictBool = False
    pairs: list[StrictStr] | None = None
    pooling_layer: StrictInt | StrictStr | list[StrictInt | StrictStr] | None = None
    pooling_strategy: StrictStr | None = None
    normalize: StrictBool = False
    show_tokens: StrictBool = False
    truncate: StrictBool = True  # bert-as-service cut inputs to max_seq_len silently
    encoding_format: Literal["float", "base64"] = "float"


class TokenizeRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    pairs: StrictStr | list[StrictStr] | None = None
    add_special_tokens: StrictBool = True
    prompt_name: None = None


class DecodeRequest(_Body):
    ids: Ids | list[Ids]
    skip_special_tokens: StrictBool = True


class HFParameters(_Body):  # the Hugging Face inference API's "parameters" (InferenceClient.text_classification)
    top_k: StrictInt | None = None
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None


class PredictRequest(_Body):  # TEI /predict: a text, a [text, pair], or a list of [text] / [text, pair]
    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_all_scores: StrictBool = True  # TEI answers every label, best first
    top_k: StrictInt | None = None
    parameters: HFParameters | None = None


class RerankRequest(_Body):  # TEI /rerank
    query: StrictStr
    texts: list[StrictStr]
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    raw_scores: StrictBool = False
    return_text: StrictBool = False


class NerRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    aggregation_strategy: Literal["simple", "none"] = "simple"
    parameters: dict[str, Any] | None = None


class QAPair(_Body):
    question: StrictStr
    context: StrictStr


class QARequest(_Body):  # {"question", "context"}, or the inference API's {"inputs": {"question", "context"}}
    question: StrictStr | None = None
    context: StrictStr | None = None
    inputs: QAPair | list[QAPair] | None = None
    parameters: dict[str, Any] | None = None


class FillMaskRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    top_k: StrictInt = 5


# --------------------------------------------------------------------------------------------- the service


@dataclass
class _Tokens:
    """An encoding built from token ids or word lists (what the batching worker reads: ids, type_ids; tokens)."""

    ids: list[int]
    type_ids: list[int]
    tokens: list[str]


def as_batch(value: Any) -> tuple[list[Any], bool]:
    """TEI/OpenAI ``inputs``: a text, one token-id list, or a list of either -> (items, was it a single input)."""
    if isinstance(value, str):
        return [value], True
    if value and all(isinstance(x, int) for x in value):
        return [value], True
    return list(value), False


class Service:
    """One served model: its encoder (and task pipeline, when the directory has a fine-tuned head), its batching
    queue, and the steps from checked inputs to vectors (tokenize with limits, bound the answer, embed, refuse
    non-finite output). Settings and metrics are shared by all the server's models.

    ``pipeline``: a task pipeline (``bertkit.pipelines``: ``.kind`` classification / regression / rerank / ner / qa
    and ``.predict`` / ``.rerank`` / ``.ner`` / ``.answer``), run on the model's worker thread; None serves
    embeddings only."""

    def __init__(self, encoder: Encoder, settings: ServeSettings, name: str | None = None, pipeline: Any = None,
                 metrics: Metrics | None = None):
        self.encoder, self.settings, self.pipeline = encoder, settings, pipeline
        self.model_id = name or settings.model_id or "bertkit"
        # None: the model's own (a sentence-embedding model's saved pooling; Encoder.defaults); fails early if bad
        self.default_spec = encoder.spec(settings.layers, settings.pooling)
        # the default layers as the user gave them, else the model's own counted from the top (-1 = last, 0 = the
        # embeddings), as bert-as-service reports them
        self.default_layers = (list(settings.layers) if settings.layers is not None else
                               [i - encoder.num_layers - 1 if i else 0 for i in self.default_spec.layers])
        self.max_length = encoder.max_tokens(settings.max_length or encoder.defaults.max_length)
        self.queue = BatchQueue(encoder, settings.max_batch_tokens, settings.max_batch_size, settings.max_wait_ms,
                                settings.max_pending, settings.malloc_trim_interval_s)
        self.metrics = metrics or Metrics()
        self.started = time.time()

    # ------------------------------------------------------------------ from a request to encodings

    def spec(self, layers: Any = None, pooling: Any = None, normalize: bool = False,
             field_layers: str = "pooling_layer", field_pooling: str = "pooling_strategy") -> PoolSpec:
        try:
            return self.encoder.spec(self.default_spec.layers if layers is None else layers,
                                     self.default_spec.pooling if pooling is None else pooling, normalize)
        except (ValueError, TypeError) as exc:
            param = field_pooling if "pool" in str(exc) and pooling is not None else field_layers
            raise ApiError(None, f"'{param}': {exc}", param=param) from None

    async def encodings(self, items: list[Any], name: str, truncate: bool, direction: str = "right",
                        can_truncate: bool = True) -> list[Any]:
        """Checked, tokenized (or id) inputs for the model: count, emptiness, characters, vocabulary, tokens per
        input (422 past ``max_length`` unless ``truncate``; ``direction`` left keeps the end) and per request."""
        s = self.settings
        check_count(items, name, s.max_inputs)
        self.metrics.inputs[name] += len(items)
        hint = truncate if can_truncate else None
        texts, where = [], []
        out: list[Any] = [None] * len(items)
        vocab = self.encoder.config.vocab_size
        for i, item in enumerate(items):
            if isinstance(item, str):
                texts.append(check_text(item, f"{name}[{i}]", s.max_input_chars, hint))
                where.append(i)
            else:
                ids = check_ids(item, f"{name}[{i}]", vocab)
                out[i] = _Tokens(ids, [0] * len(ids), [])
        left = direction.lower() == "left"
        if texts:
            for i, e in zip(where, await self.tokenize(texts, None, truncate and not left)):
                out[i] = e
        for i, e in enumerate(out):
            if len(e.ids) > self.max_length:
                if not truncate:
                    tip = "; shorten it or set \"truncate\": true" if can_truncate else ": shorten it"
                    raise ApiError(None, f"'{name}[{i}]' is {len(e.ids)} tokens long, over the model's limit of "
                                   f"{self.max_length}{tip}", param=f"{name}[{i}]")
                out[i] = cut(e, self.max_length, left, isinstance(items[i], str))
        total = sum(len(e.ids) for e in out)
        if total > s.max_request_tokens:
            raise ApiError(None, f"'{name}' holds {total} tokens, over the limit of {s.max_request_tokens} per request "
                           "(--max-request-tokens): split it", param=name)
        return out

    async def tokenize(self, texts: list[str], pairs: list[str] | None, truncate: bool,
                       add_special_tokens: bool = True) -> list[Any]:
        kwargs = dict(max_length=self.max_length if truncate else None, truncation=truncate,
                      add_special_tokens=add_special_tokens)
        tok = self.encoder.tokenizer
        if sum(map(len, texts)) + sum(map(len, pairs or ())) < 20_000:  # small: a thread hop costs more
            return tok.encode_batch(texts, pairs, **kwargs)
        return await run_in_threadpool(tok.encode_batch, texts, pairs, **kwargs)  # keep the event loop free

    def words(self, texts: list[Any], truncate: bool) -> list[_Tokens]:
        """bert-as-service's ``is_tokenized``: each input is a list of words, each word WordPiece'd on its own."""
        tok, out, limit = self.encoder.tokenizer, [], self.settings.max_input_chars
        for i, words in enumerate(texts):
            if not isinstance(words, list) or not words:
                raise ApiError(None, f"'texts[{i}]' must be a non-empty list of words when is_tokenized is true",
                               param=f"texts[{i}]")
            pieces = [p for w in words for p in tok.tokenize(check_text(w, f"texts[{i}]", limit, None))]
            if len(pieces) > self.max_length - 2:
                if not truncate:
                    raise ApiError(None, f"'texts[{i}]' is {len(pieces) + 2} tokens long, over the model's limit of "
                                   f"{self.max_length}; shorten it or set \"truncate\": true", param=f"texts[{i}]")
                pieces = pieces[: self.max_length - 2]
            tokens = [tok.convert_ids_to_tokens(tok.cls_token_id), *pieces, tok.convert_ids_to_tokens(tok.sep_token_id)]
            out.append(_Tokens(tok.convert_tokens_to_ids(tokens), [0] * len(tokens), tokens))
        return out

    # ------------------------------------------------------------------ running the model

    async def embed(self, encodings: list[Any], spec: PoolSpec, name: str) -> list[np.ndarray]:
        """Vectors for ``encodings`` (bounded first: inputs x width, or tokens x width for pooling none)."""
        dim = self.encoder.output_dim(spec)
        rows = sum(len(e.ids) for e in encodings) if spec.pooling == "none" else len(encodings)
        what = f"{rows} tokens x {dim}" if spec.pooling == "none" else f"{rows} inputs x {dim}"
        check_output_size(rows * dim, self.settings.max_output_values, what)
        try:
            future = self.queue.submit(encodings, spec)
        except QueueFull as exc:
            raise ApiError(None, str(exc), "Overloaded") from None
        except RuntimeError as exc:
            raise ApiError(None, str(exc), "Unhealthy") from None
        vectors = await self.wait(future)
        for i, v in enumerate(vectors):
            if not np.isfinite(v).all():
                raise ApiError(None, f"the model produced NaN or infinite values for '{name}[{i}]': its weights or "
                               "config are broken", "Backend")
        return vectors

    async def call(self, fn: Callable[[Encoder], Any]) -> Any:
        """Run ``fn(encoder)`` on the worker thread (between batches)."""
        try:
            future = self.queue.call(fn)
        except RuntimeError as exc:
            raise ApiError(None, str(exc), "Unhealthy") from None
        return await self.wait(future)

    async def wait(self, future: Any) -> Any:
        timeout = self.settings.request_timeout_s
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            future.cancel()
            raise ApiError(None, f"timed out after {timeout} s in the queue (--request-timeout)",
                           "Overloaded") from None
        except ApiError:
            raise
        except (ValueError, TypeError) as exc:
            raise ApiError(None, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the model failed on this request; the server goes on
            raise ApiError(None, f"the model failed on this request: {type(exc).__name__}: {exc}", "Backend") from None


def cut(e: Any, limit: int, left: bool, specials: bool) -> Any:
    """Truncate one encoding to ``limit`` tokens; ``left`` keeps the end. A text keeps its [CLS] and [SEP]."""
    n = len(e.ids)
    if not specials:  # token ids, used as given
        keep = list(range(n - limit, n)) if left else list(range(limit))
    elif left:
        keep = [0, *range(n - limit + 1, n)]
    else:
        keep = [*range(limit - 1), n - 1]
    return _Tokens([e.ids[k] for k in keep], [e.type_ids[k] for k in keep],
                   [e.tokens[k] for k in keep] if len(e.tokens) == n else [])


def resize(vectors: list[np.ndarray], dimensions: int | None, normalize: bool, dim: int) -> list[np.ndarray]:
    """TEI/OpenAI ``dimensions``: keep the first ``dimensions`` numbers (Matryoshka), then L2-normalise if asked."""
    if dimensions is not None:
        if dimensions <= 0 or dimensions > dim:
            raise ApiError(None, f"'dimensions' must be in 1..{dim} (this model's embedding size), got {dimensions}",
                           param="dimensions")
        vectors = [v[:dimensions] for v in vectors]
        if normalize:
            vectors = [v / max(float(np.linalg.norm(v)), 1e-12) for v in vectors]
    return vectors


# --------------------------------------------------------------------------------------------- routes


def service(request: Request, name: str | None = None, lenient: bool = False) -> Service:
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
    raise ApiError(404, f"no model '{name}' here: this server has {', '.join(services)} (pick one with ?model=)",
                   param="model")


async def body_of(request: Request, model: type[BaseModel] | Callable[[dict], type[BaseModel]]) -> Any:
    s = request.app.state.settings
    return parse_json(await read_body(request, s.max_payload_bytes, s.body_timeout_s), model)


async def health(request: Request):
    for svc in request.app.state.services.values():
        if not svc.queue.alive:
            raise ApiError(None, f"the batching worker of '{svc.model_id}' is not running", "Unhealthy")
    return {"status": "ok"}


async def info(request: Request):
    svc = service(request)
    s, enc = svc.settings, svc.encoder
    return {  # TEI's Info fields first, then bertkit's
        "model_id": svc.model_id, "model_sha": None, "served_model_name": svc.model_id,
        "model_dtype": "bfloat16" if enc.precision == "bf16" else "float16" if enc.precision == "fp16" else "float32",
        "model_type": model_type(svc),
        "max_concurrent_requests": s.limit_concurrency, "max_input_length": svc.max_length,
        "max_batch_tokens": s.max_batch_tokens, "max_batch_requests": s.max_batch_size,
        "max_client_batch_size": s.max_inputs, "auto_truncate": s.auto_truncate, "tokenization_workers": 1,
        "version": __version__, "sha": None, "docker_label": None,
        "architecture": "bert", "hidden_size": enc.config.hidden_size, "num_layers": enc.num_layers,
        "vocab_size": enc.config.vocab_size, "embedding_dim": enc.output_dim(svc.default_spec),
        "default_pooling_layer": svc.default_layers, "default_pooling_strategy": svc.default_spec.pooling,
        "poolings": list(POOLINGS), "has_pooler": enc.has_pooler, "has_mlm_head": enc.mlm_head is not None,
        "max_input_chars": s.max_input_chars, "max_request_tokens": s.max_request_tokens,
        "max_output_values": s.max_output_values, "max_payload_bytes": s.max_payload_bytes,
        "max_wait_ms": s.max_wait_ms, "auth": s.api_key is not None,
        "task": svc.pipeline.kind if svc.pipeline is not None else "embedding",
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
    svc = service(request)
    return PlainTextResponse(svc.metrics.render(svc.queue), media_type="text/plain; version=0.0.4")


async def embed(request: Request, body: EmbedRequest | None = None):
    """TEI /embed: [[float, ...], ...]."""
    svc = service(request)
    body = body or await body_of(request, EmbedRequest)
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    items, _ = as_batch(body.inputs)
    encodings = await svc.encodings(items, "inputs", truncate, body.truncation_direction)
    spec = svc.spec(normalize=body.normalize and body.dimensions is None, field_layers="inputs")
    vectors = await svc.embed(encodings, spec, "inputs")
    vectors = resize(vectors, body.dimensions, body.normalize, svc.encoder.output_dim(spec))
    return await json_answer(vectors, sum(v.size for v in vectors))


async def embed_all(request: Request):
    """TEI /embed_all: every token's vector (the default layers), [[[float, ...], ...], ...]."""
    svc = service(request)
    body = await body_of(request, EmbedAllRequest)
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    items, _ = as_batch(body.inputs)
    encodings = await svc.encodings(items, "inputs", truncate, body.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(pooling="none", field_layers="inputs"), "inputs")
    return await json_answer(vectors, sum(v.size for v in vectors))


async def similarity(request: Request, body: SimilarityRequest | None = None):
    """TEI /similarity: cosine of ``source_sentence`` with each of ``sentences``."""
    svc = service(request)
    body = body or await body_of(request, SimilarityRequest)
    p = body.parameters or SimilarityParameters()
    truncate = svc.settings.auto_truncate if p.truncate is None else p.truncate
    if not body.inputs.sentences:
        raise ApiError(None, "'inputs.sentences' cannot be empty", "Empty", "inputs.sentences")
    items = [body.inputs.source_sentence, *body.inputs.sentences]
    encodings = await svc.encodings(items, "inputs", truncate, p.truncation_direction)
    vectors = await svc.embed(encodings, svc.spec(normalize=True, field_layers="inputs"), "inputs")
    return await json_answer([float(np.dot(vectors[0], v)) for v in vectors[1:]])


def _root_body(data: dict) -> type[BaseModel]:
    return SimilarityRequest if isinstance(data.get("inputs"), dict) else EmbedRequest


async def root(request: Request):
    """TEI's POST /: the model's own task: the head's route (predict, rerank, ner, qa), else embed (similarity when
    ``inputs`` is a source sentence and others)."""
    svc = service(request)
    if svc.pipeline is not None:
        route = {"classification": predict, "regression": predict, "rerank": rerank, "ner": ner, "qa": qa}
        return await route[svc.pipeline.kind](request)
    body = await body_of(request, _root_body)
    return await (similarity(request, body) if isinstance(body, SimilarityRequest) else embed(request, body))


async def openai_embeddings(request: Request):
    """OpenAI POST /v1/embeddings."""
    body = await body_of(request, OpenAIEmbeddingsRequest)
    svc = service(request, body.model, lenient=True)
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    items, _ = as_batch(body.input)
    encodings = await svc.encodings(items, "input", truncate)
    spec = svc.spec(normalize=body.dimensions is None, field_layers="input")  # OpenAI embeddings are unit length
    vectors = await svc.embed(encodings, spec, "input")
    vectors = resize(vectors, body.dimensions, True, svc.encoder.output_dim(spec))
    data = []
    for i, v in enumerate(vectors):
        emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if body.encoding_format == "base64" else v
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n_tokens = sum(len(e.ids) for e in encodings)
    return await json_answer({"object": "list", "data": data, "model": body.model or svc.model_id,
                              "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}},
                             sum(v.size for v in vectors))


def _model_card(svc: Service) -> dict[str, Any]:
    return {"id": svc.model_id, "object": "model", "created": int(svc.started), "owned_by": "bertkit"}


async def openai_models(request: Request):
    return {"object": "list", "data": [_model_card(svc) for svc in request.app.state.services.values()]}


async def openai_model(request: Request):
    return _model_card(service(request, request.path_params["model"]))


async def encode(request: Request):
    """bert-as-service /encode: ``{"id", "texts", "is_tokenized"}`` -> ``{"id", "result"}``; bertkit's own fields
    (pairs, pooling_layer, pooling_strategy, show_tokens, encoding_format) -> ``{"embeddings", "shape", ...}``."""
    svc = service(request)
    body = await body_of(request, EncodeRequest)
    bas = "id" in body.model_fields_set or "is_tokenized" in body.model_fields_set
    check_count(body.texts, "texts", svc.settings.max_inputs)
    if body.is_tokenized:
        if body.pairs is not None:
            raise ApiError(None, "'pairs' cannot be used with is_tokenized", param="pairs")
        encodings: list[Any] = svc.words(body.texts, body.truncate)
    else:
        for i, t in enumerate(body.texts):
            if not isinstance(t, str):
                raise ApiError(None, f"'texts[{i}]' is a list: set \"is_tokenized\": true to send words",
                               param=f"texts[{i}]")
        texts = [check_text(t, f"texts[{i}]", svc.settings.max_input_chars, body.truncate)
                 for i, t in enumerate(body.texts)]
        pairs = None
        if body.pairs is not None:
            pairs = [check_text(t, f"pairs[{i}]", svc.settings.max_input_chars, body.truncate)
                     for i, t in enumerate(body.pairs)]
            if len(pairs) != len(texts):
                raise ApiError(None, f"'pairs' has {len(pairs)} items but 'texts' has {len(texts)}", param="pairs")
        encodings = await svc.tokenize(texts, pairs, body.truncate)
        for i, e in enumerate(encodings):
            if len(e.ids) > svc.max_length:
                raise ApiError(None, f"'texts[{i}]' is {len(e.ids)} tokens long, over the model's limit of "
                               f"{svc.max_length}; shorten it or set \"truncate\": true", param=f"texts[{i}]")
    svc.metrics.inputs["texts"] += len(encodings)
    spec = svc.spec(body.pooling_layer, body.pooling_strategy, body.normalize)
    vectors = await svc.embed(encodings, spec, "texts")
    size = sum(v.size for v in vectors)
    if bas:
        return await json_answer({"id": body.id, "result": vectors}, size)
    out: dict[str, Any] = {"dtype": "float32", "pooling_layer": list(spec.layers), "pooling_strategy": spec.pooling}
    if spec.pooling == "none":
        out["shape"] = [[int(x) for x in v.shape] for v in vectors]
        out["embeddings"] = ([base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
                             if body.encoding_format == "base64" else vectors)
    else:
        arr = np.stack(vectors).astype("<f4")
        out["shape"] = list(arr.shape)
        out["embeddings"] = base64.b64encode(arr.tobytes()).decode() if body.encoding_format == "base64" else arr
    if body.show_tokens:
        out["tokens"] = [list(e.tokens) for e in encodings]
    return await json_answer(out, size)


# --------------------------------------------------------------------------------------------- task heads


def head(svc: Service, kinds: tuple[str, ...], what: str) -> Any:
    """The model's task pipeline when it is one of ``kinds``; else a 422 saying what the model serves."""
    pipe = svc.pipeline
    if pipe is None or pipe.kind not in kinds:
        has = f"a {pipe.kind} head" if pipe is not None else "no task head (config.json 'architectures')"
        raise ApiError(None, f"model '{svc.model_id}' has {has}: {what} needs {' or '.join(kinds)}; this model serves "
                       "/embed, /v1/embeddings and /encode")
    return pipe


def check_texts(svc: Service, items: list[Any], name: str) -> None:
    check_count(items, name, svc.settings.max_inputs)
    for i, t in enumerate(items):
        for j, x in enumerate([t] if isinstance(t, str) else t):
            check_text(x, f"{name}[{i}]" if isinstance(t, str) else f"{name}[{i}][{j}]", svc.settings.max_input_chars,
                       None)
    svc.metrics.inputs[name] += len(items)


async def predict(request: Request):
    """TEI /predict: ``[{"label", "score"}]`` best first, for a text or a [text, pair]; a list of those for a batch."""
    svc = service(request)
    body = await body_of(request, PredictRequest)
    pipe = head(svc, ("classification", "regression", "rerank"), "/predict")
    inputs = body.inputs
    if isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs):  # one [text, pair]
        if len(inputs) > 2:
            raise ApiError(None, f"'inputs' is a list of {len(inputs)} texts: send a text, a [text, pair], or a "
                           "batch of [text] / [text, pair] lists", param="inputs")
        inputs = tuple(inputs) if len(inputs) == 2 else inputs[0]
    single = not isinstance(inputs, list)
    items = [inputs] if single else [x[0] if len(x) == 1 else tuple(x) for x in inputs]
    for i, x in enumerate(items):
        if isinstance(x, tuple) and len(x) != 2:
            raise ApiError(None, f"'inputs[{i}]' must be [text] or [text, pair]", param=f"inputs[{i}]")
    check_texts(svc, items, "inputs")
    params = body.parameters
    top_k = params.top_k if params and params.top_k is not None else body.top_k
    raw = body.raw_scores or (params is not None and params.function_to_apply == "none")
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    result = await svc.call(lambda _: pipe.predict(items[0] if single else items, raw_scores=raw,
                                                   return_all_scores=body.return_all_scores, top_k=top_k,
                                                   truncate=truncate))
    if single and params is not None:  # the inference API nests a single input's answer: [[...]]
        result = [result]
    return await json_answer(result)


async def rerank(request: Request):
    """TEI /rerank: ``[{"index", "score"[, "text"]}]`` best first."""
    svc = service(request)
    body = await body_of(request, RerankRequest)
    pipe = head(svc, ("rerank", "regression"), "/rerank")
    check_text(body.query, "query", svc.settings.max_input_chars, None)
    check_texts(svc, body.texts, "texts")
    truncate = svc.settings.auto_truncate if body.truncate is None else body.truncate
    return await json_answer(await svc.call(lambda _: pipe.rerank(body.query, body.texts, return_text=body.return_text,
                                                                  raw_scores=body.raw_scores, truncate=truncate)))


async def ner(request: Request):
    """/ner: entities grouped from word pieces, ``[{"entity_group", "score", "word", "start", "end"}]`` (per input for
    a list)."""
    svc = service(request)
    body = await body_of(request, NerRequest)
    pipe = head(svc, ("ner",), "/ner")
    items, single = as_batch(body.inputs)
    check_texts(svc, items, "inputs")
    strategy = (body.parameters or {}).get("aggregation_strategy", body.aggregation_strategy)
    result = await svc.call(lambda _: pipe.ner(items[0] if single else items, aggregation_strategy=strategy))
    return await json_answer(result)


async def qa(request: Request):
    """/qa: ``{"question", "context"}`` -> ``{"answer", "score", "start", "end"}`` (a list for a list of inputs)."""
    svc = service(request)
    body = await body_of(request, QARequest)
    pipe = head(svc, ("qa",), "/qa")
    if body.inputs is not None:
        pairs = body.inputs if isinstance(body.inputs, list) else [body.inputs]
        single = not isinstance(body.inputs, list)
    elif body.question is not None and body.context is not None:
        pairs, single = [QAPair(question=body.question, context=body.context)], True
    else:
        raise ApiError(None, "send {\"question\", \"context\"} (or \"inputs\": a list of them)", param="question")
    check_count(pairs, "inputs", svc.settings.max_inputs)
    items = []
    for i, p in enumerate(pairs):
        where = "" if single and body.inputs is None else f"inputs[{i}]."
        items.append({"question": check_text(p.question, f"{where}question", svc.settings.max_input_chars, None),
                      "context": check_text(p.context, f"{where}context", svc.settings.max_input_chars, None)})
    svc.metrics.inputs["inputs"] += len(items)
    result = await svc.call(lambda _: pipe.answer(items))
    return await json_answer(result[0] if single else result)


BAS_POOLING = {"mean": "REDUCE_MEAN", "max": "REDUCE_MAX", "mean_max": "REDUCE_MEAN_MAX", "cls": "CLS_TOKEN",
               "sep": "SEP_TOKEN", "none": "NONE"}


async def status_server(request: Request):
    """bert-as-service's server status (its field names)."""
    svc = service(request)
    s = svc.settings
    with svc.metrics.lock:
        requests = sum(svc.metrics.requests.values())
        inputs = sum(svc.metrics.inputs.values())
    return {"ckpt_name": svc.model_id, "max_seq_len": svc.max_length, "max_batch_size": s.max_batch_size,
            "num_worker": 1, "pooling_layer": svc.default_layers,
            "pooling_strategy": BAS_POOLING.get(svc.default_spec.pooling, svc.default_spec.pooling.upper()),
            "server_version": __version__,
            "server_start_time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(svc.started)),
            "num_request": requests, "num_total_seq": inputs, "num_batches": svc.queue.stats.batches,
            "queue_depth": svc.queue.depth, "alive": svc.queue.alive}


async def tokenize(request: Request):
    """TEI /tokenize: per input, ``[{"id", "text", "special", "start", "stop"}]`` (always a list of lists); with
    ``pairs`` each token also says its ``sequence``."""
    svc = service(request)
    s = svc.settings
    body = await body_of(request, TokenizeRequest)
    items, _ = as_batch(body.inputs)
    check_count(items, "inputs", s.max_inputs)
    texts = [check_text(t, f"inputs[{i}]", s.max_input_chars, None) for i, t in enumerate(items)]
    pairs = None
    if body.pairs is not None:
        pairs = [body.pairs] if isinstance(body.pairs, str) else list(body.pairs)
        if len(pairs) != len(texts):
            raise ApiError(None, f"'pairs' has {len(pairs)} items but 'inputs' has {len(texts)}", param="pairs")
        pairs = [check_text(t, f"pairs[{i}]", s.max_input_chars, None) for i, t in enumerate(pairs)]
    svc.metrics.inputs["inputs"] += len(texts)
    encodings = await svc.tokenize(texts, pairs, False, body.add_special_tokens)
    total = sum(len(e.ids) for e in encodings)
    if total > s.max_request_tokens:
        raise ApiError(None, f"the inputs hold {total} tokens, over the limit of {s.max_request_tokens} per request "
                       "(--max-request-tokens): split them", param="inputs")
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
    svc = service(request)
    body = await body_of(request, DecodeRequest)
    items, _ = as_batch(body.ids)
    check_count(items, "ids", svc.settings.max_inputs)
    vocab = svc.encoder.config.vocab_size
    lists = [check_ids(ids, f"ids[{i}]", min(vocab, len(svc.encoder.tokenizer))) for i, ids in enumerate(items)]
    if sum(map(len, lists)) > svc.settings.max_request_tokens:
        raise ApiError(None, f"'ids' holds over {svc.settings.max_request_tokens} tokens (--max-request-tokens)",
                       param="ids")
    tok = svc.encoder.tokenizer
    return await json_answer([tok.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in lists])


async def fill_mask(request: Request):
    """bertkit /fill-mask: per input, per [MASK], the top-k ``{"token", "token_id", "token_str", "score"}``."""
    svc = service(request)
    s = svc.settings
    body = await body_of(request, FillMaskRequest)
    items, single = as_batch(body.inputs)
    check_count(items, "inputs", s.max_inputs)
    texts = [check_text(t, f"inputs[{i}]", s.max_input_chars, None) for i, t in enumerate(items)]
    if not 1 <= body.top_k <= 100:
        raise ApiError(None, f"'top_k' must be in 1..100, got {body.top_k}", param="top_k")
    encoder = svc.encoder
    if encoder.mlm_head is None:
        raise ApiError(None, "this model has no MLM head (cls.predictions): fill-mask is unavailable")
    mask_token = encoder.tokenizer.convert_ids_to_tokens(encoder.tokenizer.mask_token_id)
    masks = 0
    for i, t in enumerate(texts):
        if mask_token not in t:
            raise ApiError(None, f"'inputs[{i}]' has no {mask_token} token", param=f"inputs[{i}]")
        masks += t.count(mask_token)
    if masks * body.top_k > s.max_predictions:
        raise ApiError(None, f"{masks} {mask_token} tokens x top_k {body.top_k} = {masks * body.top_k} predictions, "
                       f"over the limit of {s.max_predictions} per request (--max-predictions)", param="top_k")
    svc.metrics.inputs["inputs"] += len(texts)
    result = await svc.call(lambda enc: enc.fill_mask(texts, top_k=body.top_k, max_length=svc.max_length))
    for per_text in result:
        for per_mask in per_text:
            for p in per_mask:
                p["token_str"] = p["token"]
    return await json_answer(result[0] if single else result, masks * body.top_k * 4)


# --------------------------------------------------------------------------------------------- the app

ROUTES: list[tuple[str, Callable, list[str]]] = [
    ("/health", health, ["GET"]), ("/ping", health, ["GET"]), ("/", health, ["GET"]), ("/", root, ["POST"]),
    ("/info", info, ["GET"]), ("/metrics", metrics, ["GET"]),
    ("/embed", embed, ["POST"]), ("/embed_all", embed_all, ["POST"]), ("/similarity", similarity, ["POST"]),
    ("/tokenize", tokenize, ["POST"]), ("/decode", decode, ["POST"]),
    ("/v1/embeddings", openai_embeddings, ["POST"]), ("/embeddings", openai_embeddings, ["POST"]),
    ("/v1/models", openai_models, ["GET"]), ("/v1/models/{model:path}", openai_model, ["GET"]),
    ("/encode", encode, ["POST"]), ("/status/server", status_server, ["GET"]), ("/fill-mask", fill_mask, ["POST"]),
    ("/predict", predict, ["POST"]), ("/rerank", rerank, ["POST"]), ("/ner", ner, ["POST"]), ("/qa", qa, ["POST"]),
]
KNOWN_PATHS = tuple(dict.fromkeys(path for path, _, _ in ROUTES if "{" not in path))


def guarded(fn: Callable) -> Callable:
    """A route whose unexpected exception becomes a 500 in the API's error shape and one log line (the server goes
    on, and the keep-alive connection stays usable)."""

    async def route(request: Request):  # no functools.wraps: FastAPI would read fn's parameters as body fields
        try:
            return await fn(request)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001
            logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
            raise ApiError(None, f"internal error: {type(exc).__name__}: {exc}", "Backend") from None

    route.__name__ = route.__qualname__ = fn.__name__
    route.__doc__ = fn.__doc__
    return route


async def _api_error(request: Request, exc: ApiError):
    return error_response(request.url.path, exc.status, exc.message, exc.error_type, exc.param,
                          close=exc.status in (408, 413))


async def _not_found(request: Request, exc: Exception):
    return error_response(request.url.path, 404, f"no endpoint {request.url.path}; try one of "
                          f"{', '.join(KNOWN_PATHS)}")


async def _bad_method(request: Request, exc: Exception):
    return error_response(request.url.path, 405, f"method {request.method} is not allowed on {request.url.path}")


def make_services(models: Any, settings: ServeSettings) -> dict[str, Service]:
    """``models``: an Encoder, a task pipeline (its ``.encoder()`` serves the encoder routes), or a dict name -> either
    (the first is the default)."""
    if not isinstance(models, dict):
        models = {settings.model_id or "bertkit": models}
    if not models:
        raise ValueError("no model to serve")
    metrics, out = Metrics(), {}
    for name, model in models.items():
        pipeline = None if isinstance(model, Encoder) else model
        encoder = model if pipeline is None else pipeline.encoder()
        out[name] = Service(encoder, settings, name, pipeline, metrics)
    return out


def create_app(models: Any, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app for one model or several (see :func:`make_services`). The batching workers start and stop
    with the app's lifespan (uvicorn runs it)."""
    settings = settings or ServeSettings()
    services = make_services(models, settings)
    svc = next(iter(services.values()))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        for one in services.values():
            one.queue.start()
        try:
            yield
        finally:
            for one in services.values():
                one.queue.stop()

    app = FastAPI(title="bertkit embedding server", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.services, app.state.service = services, svc
    app.state.queue, app.state.encoder, app.state.settings, app.state.metrics = (svc.queue, svc.encoder, settings,
                                                                                 svc.metrics)
    for path, fn, methods in ROUTES:
        app.add_api_route(path, guarded(fn), methods=methods)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(404, _not_found)
    app.add_exception_handler(405, _bad_method)
    app.add_middleware(Guard, metrics=svc.metrics, api_key=svc.settings.api_key, known_paths=KNOWN_PATHS)
    return app
