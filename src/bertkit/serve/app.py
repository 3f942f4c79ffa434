"""The HTTP embedding service (FastAPI): the APIs clients already speak, on a dynamic-batching worker.

Endpoints (see docs/features.md for request and response shapes):

    POST /embed           text-embeddings-inference compatible: {"inputs", "normalize", "truncate"}
    POST /v1/embeddings   OpenAI compatible: {"input", "model", "encoding_format"}
    POST /encode          bert-as-service style: {"texts", "pooling_layer", "pooling_strategy", "show_tokens"}
    POST /tokenize        tokens with character offsets
    POST /fill-mask       top-k predictions for each [MASK]
    GET  /health, /info, /metrics (Prometheus text)

Protection: binds 127.0.0.1 unless told otherwise; optional API key (``Authorization: Bearer KEY`` or
``X-API-Key``; /health stays open for probes); limits on inputs per request (422), characters per input (413, or
truncated when the request or server says so), tokens per input (413 unless truncating) and payload bytes (413,
counted while reading, so a huge body is never held in memory). Every error is a 4xx/5xx with a message, in the
error shape of the API that was called (OpenAI's ``{"error": {"message", "type", ...}}`` under /v1, TEI's
``{"error", "error_type"}`` elsewhere). The model belongs to one worker thread (:mod:`bertkit.serve.batching`).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool

from bertkit import __version__
from bertkit.features import POOLINGS, Encoder, PoolSpec
from bertkit.serve.batching import BatchQueue, QueueFull


@dataclass
class ServeSettings:
    """Server options (``bertkit serve`` flags of the same names)."""

    model_id: str = "bertkit"
    layers: tuple[int | str, ...] = (-2,)  # default for /embed, /v1/embeddings and /encode
    pooling: str = "mean"
    max_length: int = 512  # tokens per input, specials included
    auto_truncate: bool = False  # truncate over-long inputs for /embed and /v1/embeddings instead of 413
    max_inputs: int = 256  # inputs per request
    max_input_chars: int = 50_000  # characters per input
    max_payload_bytes: int = 4 * 1024 * 1024
    max_batch_tokens: int = 8192
    max_batch_size: int = 128
    max_wait_ms: float = 2.0
    max_pending: int = 20_000
    request_timeout_s: float = 60.0
    api_key: str | None = field(default=None, repr=False)


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str = "Validation", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.error_type, self.param = status, message, error_type, param


# --------------------------------------------------------------------------------------------- request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Body):  # text-embeddings-inference
    inputs: StrictStr | list[StrictStr]
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] = "Right"
    prompt_name: None = None


class OpenAIEmbeddingsRequest(_Body):
    input: StrictStr | list[StrictStr]
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None


class EncodeRequest(_Body):  # bert-as-service
    texts: list[StrictStr]
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


class FillMaskRequest(_Body):
    inputs: StrictStr | list[StrictStr]
    top_k: StrictInt = 5


# --------------------------------------------------------------------------------------------- metrics


class Metrics:
    """Request counters and latency histograms, rendered in the Prometheus text format."""

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter = Counter()  # (path, status) -> n
        self.latency_buckets: dict[str, Counter] = defaultdict(Counter)
        self.latency_sum: Counter = Counter()
        self.latency_count: Counter = Counter()
        self.inputs: Counter = Counter()
        self.started = time.time()

    def observe(self, path: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[(path, status)] += 1
            self.latency_sum[path] += seconds
            self.latency_count[path] += 1
            for b in self.BUCKETS:
                if seconds <= b:
                    self.latency_buckets[path][b] += 1

    def render(self, queue: BatchQueue) -> str:
        lines = []
        with self.lock:
            lines += ["# HELP bertkit_requests_total HTTP requests by path and status.",
                      "# TYPE bertkit_requests_total counter"]
            lines += [f'bertkit_requests_total{{path="{p}",status="{s}"}} {n}'
                      for (p, s), n in sorted(self.requests.items())]
            lines += ["# HELP bertkit_request_duration_seconds Request latency by path.",
                      "# TYPE bertkit_request_duration_seconds histogram"]
            for p in sorted(self.latency_count):
                for b in self.BUCKETS:
                    lines.append(f'bertkit_request_duration_seconds_bucket{{path="{p}",le="{b}"}} '
                                 f"{self.latency_buckets[p][b]}")
                lines.append(f'bertkit_request_duration_seconds_bucket{{path="{p}",le="+Inf"}} {self.latency_count[p]}')
                lines.append(f'bertkit_request_duration_seconds_sum{{path="{p}"}} {self.latency_sum[p]:.6f}')
                lines.append(f'bertkit_request_duration_seconds_count{{path="{p}"}} {self.latency_count[p]}')
            lines += ["# HELP bertkit_inputs_total Texts received, by request field (inputs: TEI, fill-mask, "
                      "tokenize; input: OpenAI; texts/pairs: bert-as-service).", "# TYPE bertkit_inputs_total counter"]
            lines += [f'bertkit_inputs_total{{field="{p}"}} {n}' for p, n in sorted(self.inputs.items())]
        s = queue.stats
        with s.lock:
            lines += [
                "# HELP bertkit_batches_total Forward passes run by the batching worker.",
                "# TYPE bertkit_batches_total counter", f"bertkit_batches_total {s.batches}",
                "# HELP bertkit_batch_failures_total Batches that failed (their requests were retried alone).",
                "# TYPE bertkit_batch_failures_total counter", f"bertkit_batch_failures_total {s.failed_batches}",
                "# HELP bertkit_batch_inputs_total Inputs embedded.", "# TYPE bertkit_batch_inputs_total counter",
                f"bertkit_batch_inputs_total {s.batch_inputs}",
                "# HELP bertkit_tokens_total Real tokens run through the model.", "# TYPE bertkit_tokens_total counter",
                f"bertkit_tokens_total {s.batch_tokens}",
                "# HELP bertkit_padded_tokens_total Tokens run including padding.",
                "# TYPE bertkit_padded_tokens_total counter", f"bertkit_padded_tokens_total {s.padded_tokens}",
                "# HELP bertkit_forward_seconds_total Time spent in forward passes.",
                "# TYPE bertkit_forward_seconds_total counter",
                f"bertkit_forward_seconds_total {s.forward_seconds:.6f}",
                "# HELP bertkit_batch_size Inputs per forward pass.", "# TYPE bertkit_batch_size histogram",
            ]
            cumulative = 0
            for b in s.BUCKETS:
                cumulative += s.batch_size_buckets.get(b, 0)
                lines.append(f'bertkit_batch_size_bucket{{le="{b}"}} {cumulative}')
            lines.append(f'bertkit_batch_size_bucket{{le="+Inf"}} {s.batches}')
            lines.append(f"bertkit_batch_size_sum {s.batch_inputs}")
            lines.append(f"bertkit_batch_size_count {s.batches}")
        lines += ["# HELP bertkit_queue_depth Inputs waiting for a batch.", "# TYPE bertkit_queue_depth gauge",
                  f"bertkit_queue_depth {queue.depth}",
                  "# HELP bertkit_uptime_seconds Seconds since start.", "# TYPE bertkit_uptime_seconds gauge",
                  f"bertkit_uptime_seconds {time.time() - self.started:.1f}"]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- the app


KNOWN_PATHS = ("/embed", "/v1/embeddings", "/encode", "/tokenize", "/fill-mask", "/health", "/info", "/metrics")


def create_app(encoder: Encoder, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app. The batching worker starts and stops with the app's lifespan (uvicorn runs it)."""
    import contextlib

    settings = settings or ServeSettings()
    default_spec = encoder.spec(settings.layers, settings.pooling)  # fails early on bad defaults
    max_length = encoder.max_tokens(settings.max_length)
    queue = BatchQueue(encoder, settings.max_batch_tokens, settings.max_batch_size, settings.max_wait_ms,
                       settings.max_pending)
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        queue.start()
        try:
            yield
        finally:
            queue.stop()

    app = FastAPI(title="bertkit embedding server", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.queue, app.state.encoder, app.state.settings, app.state.metrics = queue, encoder, settings, metrics

    # ------------------------------------------------------------------ errors, auth, metrics

    def error_response(path: str, status: int, message: str, error_type: str, param: str | None = None):
        if path.startswith("/v1/"):
            kind = {401: "authentication_error", 413: "invalid_request_error", 422: "invalid_request_error",
                    503: "server_error", 500: "server_error"}.get(status, "invalid_request_error")
            body: dict[str, Any] = {"error": {"message": message, "type": kind, "param": param, "code": status}}
        else:
            body = {"error": message, "error_type": error_type}
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(request.url.path, exc.status, exc.message, exc.error_type, exc.param)

    @app.exception_handler(404)
    async def _not_found(request: Request, exc: Exception):
        return error_response(request.url.path, 404,
                              f"no endpoint {request.url.path}; try one of {', '.join(KNOWN_PATHS)}", "NotFound")

    @app.exception_handler(405)
    async def _bad_method(request: Request, exc: Exception):
        return error_response(request.url.path, 405, f"method {request.method} is not allowed on {request.url.path}",
                              "MethodNotAllowed")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # the request fails; the server goes on
        return error_response(request.url.path, 500, f"internal error: {type(exc).__name__}: {exc}", "Backend")

    class Guard:
        """Pure ASGI middleware (cheaper than BaseHTTPMiddleware): API key check, latency and status metrics."""

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            start = time.perf_counter()
            label = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            status = [500]  # what an unhandled exception becomes
            if settings.api_key is not None and scope["path"] != "/health":
                headers = dict(scope["headers"])
                given = headers.get(b"x-api-key", b"").decode("latin-1") or None
                auth = headers.get(b"authorization", b"").decode("latin-1")
                if given is None and auth.lower().startswith("bearer "):
                    given = auth[7:].strip()
                if given is None or not hmac.compare_digest(given.encode(), settings.api_key.encode()):
                    response = error_response(scope["path"], 401, "missing or wrong API key: send 'Authorization: "
                                              "Bearer KEY' or 'X-API-Key: KEY'", "Unauthorized")
                    await response(scope, receive, send)
                    metrics.observe(label, 401, time.perf_counter() - start)
                    return

            async def send_and_record(message):
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            try:
                await self.inner(scope, receive, send_and_record)
            finally:
                metrics.observe(label, status[0], time.perf_counter() - start)

    app.add_middleware(Guard)

    async def read_body(request: Request, model: type[BaseModel]) -> Any:
        """Read at most max_payload_bytes (413 past it), parse JSON (422) and validate (422, naming the field)."""
        limit = settings.max_payload_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"payload of {declared} bytes is over the limit of {limit} bytes", "PayloadTooLarge")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"payload is over the limit of {limit} bytes", "PayloadTooLarge")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            raise ApiError(422, "empty request body: send a JSON object")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(422, f"malformed JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(422, f"the body must be a JSON object, got {type(data).__name__}")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith(("str", "list"))))
            raise ApiError(422, f"field '{loc or '(body)'}': {err['msg']}", param=loc or None) from None

    # ------------------------------------------------------------------ shared steps

    def check_texts(texts: Any, name: str, truncate: bool) -> list[str]:
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise ApiError(422, f"'{name}' is an empty list: send at least one text", param=name)
        if len(texts) > settings.max_inputs:
            raise ApiError(422, f"'{name}' has {len(texts)} inputs, over the limit of {settings.max_inputs} per "
                           "request: split it", param=name)
        metrics.inputs[name] += len(texts)
        out = []
        for i, t in enumerate(texts):
            if not t.strip():
                raise ApiError(422, f"'{name}[{i}]' is empty", param=f"{name}[{i}]")
            if len(t) > settings.max_input_chars:
                if not truncate:
                    raise ApiError(413, f"'{name}[{i}]' has {len(t)} characters, over the limit of "
                                   f"{settings.max_input_chars}; shorten it or set truncate", "PayloadTooLarge",
                                   f"{name}[{i}]")
                t = t[: settings.max_input_chars]
            out.append(t)
        return out

    async def tokenize(texts: list[str], pairs: list[str] | None, truncate: bool, name: str) -> list[Any]:
        kwargs = dict(max_length=max_length if truncate else None, truncation=truncate)
        if sum(map(len, texts)) + sum(map(len, pairs or ())) < 20_000:  # small: a thread hop costs more
            encodings = encoder.tokenizer.encode_batch(texts, pairs, **kwargs)
        else:  # large: keep the event loop free for other requests
            encodings = await run_in_threadpool(encoder.tokenizer.encode_batch, texts, pairs, **kwargs)
        if not truncate:
            for i, e in enumerate(encodings):
                if len(e.ids) > max_length:
                    raise ApiError(413, f"'{name}[{i}]' is {len(e.ids)} tokens long, over the model's limit of "
                                   f"{max_length}; shorten it or set truncate", "PayloadTooLarge", f"{name}[{i}]")
        return encodings

    async def embed(encodings: list[Any], spec: PoolSpec) -> list[np.ndarray]:
        try:
            future = queue.submit(encodings, spec)
        except QueueFull as exc:
            raise ApiError(503, str(exc), "Overloaded") from None
        except RuntimeError as exc:
            raise ApiError(503, str(exc), "Unhealthy") from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), settings.request_timeout_s)
        except asyncio.TimeoutError:
            future.cancel()
            raise ApiError(503, f"timed out after {settings.request_timeout_s} s in the queue", "Overloaded") from None

    def make_spec(layers: Any, pooling: Any, normalize: bool, field_layers: str, field_pooling: str) -> PoolSpec:
        try:
            return encoder.spec(default_spec.layers if layers is None else layers,
                                default_spec.pooling if pooling is None else pooling, normalize)
        except (ValueError, TypeError) as exc:
            param = field_pooling if "pool" in str(exc) and pooling is not None else field_layers
            raise ApiError(422, f"'{param}': {exc}", param=param) from None

    # ------------------------------------------------------------------ endpoints

    @app.get("/health")
    async def health():
        if not queue.alive:
            raise ApiError(503, "the batching worker is not running", "Unhealthy")
        return {"status": "ok"}

    @app.get("/info")
    async def info():
        cfg = encoder.config
        return {
            "model_id": settings.model_id,
            "model_type": "bert",
            "model_dtype": "bfloat16" if encoder.precision == "bf16" else "float32",
            "version": __version__,
            "hidden_size": cfg.hidden_size,
            "num_layers": encoder.num_layers,
            "vocab_size": cfg.vocab_size,
            "embedding_dim": encoder.output_dim(default_spec),
            "default_pooling_layer": list(settings.layers),
            "default_pooling_strategy": default_spec.pooling,
            "poolings": list(POOLINGS),
            "has_pooler": encoder.has_pooler,
            "has_mlm_head": encoder.mlm_head is not None,
            "max_input_length": max_length,
            "auto_truncate": settings.auto_truncate,
            "max_client_batch_size": settings.max_inputs,
            "max_input_chars": settings.max_input_chars,
            "max_payload_bytes": settings.max_payload_bytes,
            "max_batch_tokens": settings.max_batch_tokens,
            "max_batch_requests": settings.max_batch_size,
            "max_wait_ms": settings.max_wait_ms,
            "auth": settings.api_key is not None,
        }

    @app.get("/metrics")
    async def metrics_endpoint():
        return PlainTextResponse(metrics.render(queue), media_type="text/plain; version=0.0.4")

    @app.post("/embed")
    async def embed_tei(request: Request):
        body = await read_body(request, EmbedRequest)
        truncate = settings.auto_truncate if body.truncate is None else body.truncate
        texts = check_texts(body.inputs, "inputs", truncate)
        spec = make_spec(None, None, body.normalize, "inputs", "inputs")
        vectors = await embed(await tokenize(texts, None, truncate, "inputs"), spec)
        return Response(json.dumps([v.tolist() for v in vectors]), media_type="application/json")

    @app.post("/v1/embeddings")
    async def embed_openai(request: Request):
        body = await read_body(request, OpenAIEmbeddingsRequest)
        texts = check_texts(body.input, "input", settings.auto_truncate)
        spec = make_spec(None, None, True, "input", "input")  # OpenAI embeddings are unit length
        dim = encoder.output_dim(spec)
        if body.dimensions is not None and body.dimensions != dim:
            raise ApiError(422, f"'dimensions' must be {dim} for this model (no truncated embeddings)",
                           param="dimensions")
        encodings = await tokenize(texts, None, settings.auto_truncate, "input")
        vectors = await embed(encodings, spec)
        data = []
        for i, v in enumerate(vectors):
            emb: Any = (base64.b64encode(v.astype("<f4").tobytes()).decode() if body.encoding_format == "base64"
                        else v.tolist())
            data.append({"object": "embedding", "index": i, "embedding": emb})
        n_tokens = sum(len(e.ids) for e in encodings)
        return Response(json.dumps({"object": "list", "data": data, "model": body.model or settings.model_id,
                                    "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}),
                        media_type="application/json")

    @app.post("/encode")
    async def encode_bas(request: Request):
        body = await read_body(request, EncodeRequest)
        texts = check_texts(body.texts, "texts", body.truncate)
        pairs = None
        if body.pairs is not None:
            pairs = check_texts(body.pairs, "pairs", body.truncate)
            if len(pairs) != len(texts):
                raise ApiError(422, f"'pairs' has {len(pairs)} items but 'texts' has {len(texts)}", param="pairs")
        spec = make_spec(body.pooling_layer, body.pooling_strategy, body.normalize, "pooling_layer",
                         "pooling_strategy")
        encodings = await tokenize(texts, pairs, body.truncate, "texts")
        vectors = await embed(encodings, spec)
        out: dict[str, Any] = {"dtype": "float32", "pooling_layer": list(spec.layers), "pooling_strategy": spec.pooling}
        if spec.pooling == "none":
            out["shape"] = [[int(x) for x in v.shape] for v in vectors]
            out["embeddings"] = ([base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
                                 if body.encoding_format == "base64" else [v.tolist() for v in vectors])
        else:
            arr = np.stack(vectors).astype("<f4")
            out["shape"] = list(arr.shape)
            out["embeddings"] = (base64.b64encode(arr.tobytes()).decode() if body.encoding_format == "base64"
                                 else arr.tolist())
        if body.show_tokens:
            out["tokens"] = [list(e.tokens) for e in encodings]
        return Response(json.dumps(out), media_type="application/json")

    @app.post("/tokenize")
    async def tokenize_endpoint(request: Request):
        body = await read_body(request, TokenizeRequest)
        single = isinstance(body.inputs, str)
        texts = check_texts(body.inputs, "inputs", truncate=False)
        pairs = None
        if body.pairs is not None:
            pairs = [body.pairs] if isinstance(body.pairs, str) else list(body.pairs)
            if len(pairs) != len(texts):
                raise ApiError(422, f"'pairs' has {len(pairs)} items but 'inputs' has {len(texts)}", param="pairs")
        encodings = await run_in_threadpool(encoder.tokenizer.encode_batch, texts, pairs, max_length=None,
                                            truncation=False, add_special_tokens=body.add_special_tokens)
        result = []
        for e in encodings:
            seq_ids = e.sequence_ids or [None] * len(e.ids)
            result.append([
                {"id": i, "text": t, "special": bool(s), "start": None if s else o[0], "stop": None if s else o[1],
                 "sequence": q}
                for i, t, s, o, q in zip(e.ids, e.tokens, e.special_tokens_mask, e.offsets, seq_ids)
            ])
        return result[0] if single else result

    @app.post("/fill-mask")
    async def fill_mask(request: Request):
        body = await read_body(request, FillMaskRequest)
        single = isinstance(body.inputs, str)
        texts = check_texts(body.inputs, "inputs", truncate=False)
        if not 1 <= body.top_k <= 100:
            raise ApiError(422, f"'top_k' must be in 1..100, got {body.top_k}", param="top_k")
        if encoder.mlm_head is None:
            raise ApiError(422, "this model has no MLM head (cls.predictions): fill-mask is unavailable",
                           "Unsupported")
        mask_token = encoder.tokenizer.convert_ids_to_tokens(encoder.tokenizer.mask_token_id)
        for i, t in enumerate(texts):
            if mask_token not in t:
                raise ApiError(422, f"'inputs[{i}]' has no {mask_token} token", param=f"inputs[{i}]")
        try:
            future = queue.call(lambda enc: enc.fill_mask(texts, top_k=body.top_k, max_length=max_length))
        except RuntimeError as exc:
            raise ApiError(503, str(exc), "Unhealthy") from None
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), settings.request_timeout_s)
        except asyncio.TimeoutError:
            future.cancel()
            raise ApiError(503, f"timed out after {settings.request_timeout_s} s", "Overloaded") from None
        except ValueError as exc:
            raise ApiError(413 if "over the limit" in str(exc) else 422, str(exc)) from None
        for per_text in result:
            for per_mask in per_text:
                for p in per_mask:
                    p["token_str"] = p["token"]
        return result[0] if single else result

    return app


# --------------------------------------------------------------------------------------------- running it


class ServerThread:
    """Run the app under uvicorn in a background thread (tests, notebooks). Binds its own socket (port 0 = a free
    one), so there is no race for the port. Use as a context manager; ``url`` is the base URL."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import socket

        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = self.socket.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_keep_alive=30,
                                timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                       name="bertkit-uvicorn", daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url} within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def settings_dict(settings: ServeSettings) -> dict[str, Any]:
    d = asdict(settings)
    d.pop("api_key", None)
    return d


def parse_layers(text: str | Sequence[Any]) -> tuple[int | str, ...]:
    """"-1,-2,-3" -> (-1, -2, -3); "embeddings" stays a name."""
    if not isinstance(text, str):
        return tuple(text)
    out: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            out.append(part)
    return tuple(out)
