"""The served model and every rule a request meets before the model sees it (TEI's ``core``): the server's settings,
and :class:`Service`, whose :meth:`Service.prepare` owns every input check, truncation and limit. Routes (one module
per dialect, in :mod:`bertkit.serve.http`) only map their request and answer shapes onto it. A refusal names the
input by its role (:class:`~bertkit.serve.core.errors.InputRejected`); the route names the field.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertkit.features import POOLINGS, Encoder, PoolSpec, encode_with_masks, flag_spec, layers_arg
from bertkit.options import option
from bertkit.serve.core.batching import BatchQueue, QueueFull
from bertkit.serve.core.checks import check_count, check_ids, check_output_size, check_text
from bertkit.serve.core.errors import FIELD, ApiError, InputRejected, by_role


@dataclass(frozen=True)
class ServeSettings:
    """Server options: each is the ``bertkit serve`` flag of the same name (``bertkit.options``)."""

    model_id: str | None = option(
        None, help="name reported by /info, /v1/models and /v1/embeddings (default: the model directory's name)"
    )
    layers: tuple | None = option(
        None,
        parse=layers_arg,
        help="default layer(s) for /embed, /v1/embeddings, "
        "/encode (comma-separated, concatenated; default: the model's saved setting, "
        "else -2)",
    )
    pooling: str | None = option(
        None, help=f"default pooling ({', '.join(POOLINGS)}; default: the model's saved pooling, else mean)"
    )
    max_length: int | None = option(
        None,
        help="tokens per input, specials included (capped by the model; default: "
        "the model's max_seq_length, else its max_position_embeddings)",
    )
    auto_truncate: bool = option(False, help="truncate over-long inputs on /embed and /v1/embeddings instead of 422")
    max_inputs: int = option(2048, help="inputs per request (more: 422)")
    max_input_chars: int = option(50_000, help="characters per input (more: 422, or cut when truncating)")
    max_request_tokens: int = option(
        300_000, help="tokens per request, all inputs together, on every route (more: 422)"
    )
    max_output_values: int = option(
        4 * 1024 * 1024,
        help="numbers in one answer, checked before computing it (token-level outputs: tokens x width; more: 422)",
    )
    max_predictions: int = option(10_000, help="fill-mask predictions per request: [MASK]s x top_k (more: 422)")
    max_payload_bytes: int = option(4 * 1024 * 1024, help="request body size (more: 413)")
    max_batch_tokens: int = option(8192, help="padded tokens per forward pass")
    max_batch_size: int = option(128, help="inputs per forward pass")
    max_wait_ms: float = option(2.0, help="linger for more inputs before a batch")
    max_pending: int = option(20_000, help="queued inputs beyond which requests get 429")
    request_timeout_s: float = option(60.0, flag="--request-timeout", help="seconds a request may wait (then 429)")
    header_timeout_s: float = option(
        10.0,
        flag="--header-timeout",
        help="seconds a client has to send a request's headers (then the connection is closed)",
    )
    body_timeout_s: float = option(
        30.0,
        flag="--body-timeout",
        help="seconds a client has to send a request's body (then 408 and the connection is closed)",
    )
    keep_alive_timeout_s: float = option(
        5.0, flag="--keep-alive-timeout", help="seconds an idle keep-alive connection stays open"
    )
    limit_concurrency: int = option(
        512,
        help="requests in flight beyond which new ones get 503 (/health, /ping and idle connections are not counted)",
    )
    malloc_trim_interval_s: float = option(
        5.0,
        flag="--malloc-trim-interval",
        help="after work, hand freed memory back to the OS at most this often (glibc malloc_trim; 0: never)",
    )
    api_key: str | None = field(default=None, repr=False, metadata={"skip": True})


# --------------------------------------------------------------------------------------------- inputs


@dataclass
class Tokens:
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


def cut(e: Any, limit: int, left: bool, specials: bool) -> Any:
    """Truncate one encoding to ``limit`` tokens; ``left`` keeps the end. A text keeps its [CLS] and [SEP]."""
    n = len(e.ids)
    if not specials:  # token ids, used as given
        keep = list(range(n - limit, n)) if left else list(range(limit))
    elif left:
        keep = [0, *range(n - limit + 1, n)]
    else:
        keep = [*range(limit - 1), n - 1]
    return Tokens(
        [e.ids[k] for k in keep],
        [e.type_ids[k] for k in keep],
        [e.tokens[k] for k in keep] if len(e.tokens) == n else [],
    )


def too_long(i: int, n: int, limit: int, server_limit: bool, can_truncate: bool) -> InputRejected:
    """The refusal of input ``i``, ``n`` tokens long, past ``limit``: the server's (``--max-length``) or a task
    model's own; ``can_truncate``: the route takes ``truncate`` (so the refusal says to set it)."""
    whose = "the model's maximum or the server's --max-length" if server_limit else "the model's"
    tip = '; shorten it or set "truncate": true' if can_truncate else ": shorten it"
    return InputRejected("inputs", i, f"'{{field}}' is {n} tokens long, over the limit of {limit} ({whose}){tip}")


def resize(vectors: list[np.ndarray], dimensions: int | None, normalize: bool, dim: int) -> list[np.ndarray]:
    """TEI/OpenAI ``dimensions``: keep the first ``dimensions`` numbers (Matryoshka), then L2-normalise if asked."""
    if dimensions is not None:
        if dimensions <= 0 or dimensions > dim:
            raise ApiError(
                None,
                f"'dimensions' must be in 1..{dim} (this model's embedding size), got {dimensions}",
                param="dimensions",
            )
        vectors = [v[:dimensions] for v in vectors]
        if normalize:
            vectors = [v / max(float(np.linalg.norm(v)), 1e-12) for v in vectors]
    return vectors


# --------------------------------------------------------------------------------------------- the service


class Service:
    """One served model: its encoder (and task pipeline, when the directory has a fine-tuned head), its batching
    queue, and the steps from a request's inputs to the model's answer. Settings are shared by all the server's
    models.

    ``pipeline``: a task pipeline (``bertkit.pipelines``: ``.kind`` classification / regression / rerank / ner / qa
    and ``.predict`` / ``.rerank`` / ``.ner`` / ``.answer``), run on the model's worker thread; None serves
    embeddings only."""

    def __init__(
        self,
        encoder: Encoder,
        settings: ServeSettings,
        name: str | None = None,
        pipeline: Any = None,
    ):
        self.encoder, self.settings, self.pipeline = encoder, settings, pipeline
        self.model_id = name or settings.model_id or "bertkit"
        # the limits first: a refusal there comes before the default layers are fitted (and said) for the model
        self.max_length = encoder.max_tokens(settings.max_length or encoder.defaults.max_length)
        self.queue = BatchQueue(
            encoder,
            settings.max_batch_tokens,
            settings.max_batch_size,
            settings.max_wait_ms,
            settings.max_pending,
            settings.malloc_trim_interval_s,
            self.max_length,
        )
        # None: the model's own (a sentence-embedding model's saved pooling; Encoder.defaults); fails early if bad
        self.default_spec = flag_spec(encoder, settings.layers, settings.pooling)  # refusals name the flag
        # the default layers as the user gave them, else the model's own counted from the top (-1 = last, 0 = the
        # embeddings), as bert-as-service reports them
        self.default_layers = (
            list(settings.layers)
            if settings.layers is not None
            else [i - encoder.num_layers - 1 if i else 0 for i in self.default_spec.layers]
        )
        self.inputs_total = 0  # inputs received (/metrics' bertkit_inputs_total; one event loop: a plain int)
        self.started = time.time()

    # ------------------------------------------------------------------ every input check, truncation and limit

    async def prepare(
        self,
        items: list[Any],
        pairs: list[str] | None = None,
        truncate: bool | None = None,
        direction: str = "right",
        can_truncate: bool = True,
        words: bool = False,
        add_special_tokens: bool = True,
        max_length: int | None = 0,
    ) -> list[Any]:
        """Check a request's inputs and turn them into what the model reads, refusing (:class:`InputRejected`) what
        breaks a rule: the count (400 when none, 422 past ``--max-inputs``), each text (400 when it holds nothing the
        tokenizer keeps, 422 past ``--max-input-chars`` unless truncating), token ids (inside the vocabulary), tokens
        per input (422 past ``max_length`` unless truncating) and tokens per request (``--max-request-tokens``).

        ``items``: texts, token-id lists, or (``words``) lists of words, each WordPiece'd on its own (bert-as-service's
        ``is_tokenized``); ``pairs``: second texts. ``truncate``: None takes ``--auto-truncate``; ``direction`` left
        keeps the end. ``can_truncate=False``: the route has no truncate option (so the refusal gives no hint to set
        it). ``max_length``: 0 is the server's limit, None none (``/tokenize``), else the task model's own (its
        pipeline cuts what it runs). Returns one encoding per input (ids, type_ids, tokens)."""
        s = self.settings
        truncate = s.auto_truncate if truncate is None else truncate
        self._check_count(items)
        if pairs is not None:
            if len(pairs) != len(items):
                raise InputRejected(
                    "pairs", None, f"'{{field}}' has {len(pairs)} items but there are {len(items)} inputs"
                )
            if words:
                raise InputRejected("pairs", None, "'{field}' cannot be sent with word lists (is_tokenized)")
        self.inputs_total += len(items)
        limit = self.max_length if max_length == 0 else max_length
        hint = truncate if can_truncate else None
        left = direction.lower() == "left"
        out: list[Any] = [None] * len(items)
        texts, where = [], []
        for i, item in enumerate(items):
            if words:
                out[i] = self._words(item, i, hint)
            elif isinstance(item, str):
                texts.append(self._text(item, "inputs", i, hint))
                where.append(i)
            else:
                out[i] = self._ids(item, i)
        if pairs is not None:  # None: that input has no pair
            pairs = [None if t is None else self._text(t, "pairs", i, hint) for i, t in enumerate(pairs)]
        if texts:
            cap = limit if truncate and not left and limit is not None else None
            encodings = await self.tokenize(texts, pairs, cap, add_special_tokens)
            for i, e in zip(where, encodings):
                out[i] = e
        if limit is not None:
            for i, e in enumerate(out):
                if len(e.ids) <= limit:
                    continue
                if not truncate:
                    raise too_long(i, len(e.ids), limit, max_length == 0, can_truncate)
                if max_length == 0:  # the server's own limit: cut here (a task pipeline cuts its own)
                    out[i] = cut(e, limit, left, not isinstance(items[i], list) or words)
        total = sum(len(e.ids) for e in out)
        if total > s.max_request_tokens:
            raise InputRejected(
                "inputs",
                None,
                f"'{{field}}' holds {total} tokens, over the limit of "
                f"{s.max_request_tokens} per request (--max-request-tokens): split it",
            )
        return out

    def _check_count(self, items: list[Any]) -> None:
        """400 for none, 422 for more than a request may hold: --max-inputs, or --max-pending when lower (such a
        request could never be queued, even on an idle server: a 429 "busy" would have the client retry forever)."""
        s = self.settings
        limit, flag = (
            (s.max_inputs, "--max-inputs") if s.max_inputs <= s.max_pending else (s.max_pending, "--max-pending")
        )
        with by_role("inputs"):
            check_count(items, FIELD, limit, flag)

    def _text(self, text: str, role: str, i: int, truncate: bool | None) -> str:
        """One text (:func:`~bertkit.serve.core.checks.check_text`): 400 when it holds nothing the tokenizer keeps; past
        ``--max-input-chars``, cut when ``truncate``, else 422."""
        with by_role(role, i):
            return check_text(text, FIELD, self.settings.max_input_chars, truncate)

    def _ids(self, ids: list[int], i: int, vocab: int | None = None) -> Tokens:
        """Token-id input: non-empty, each id in the model's vocabulary."""
        with by_role("inputs", i):
            ids = check_ids(ids, FIELD, vocab or self.encoder.config.vocab_size)
        return Tokens(ids, [0] * len(ids), [])

    def _words(self, words: Any, i: int, truncate: bool | None) -> Tokens:
        """bert-as-service's ``is_tokenized``: a list of words, each WordPiece'd on its own, in [CLS] ... [SEP]."""
        tok = self.encoder.tokenizer
        if not isinstance(words, list) or not words:
            raise InputRejected("inputs", i, "'{field}' must be a non-empty list of words when is_tokenized is true")
        pieces = [p for w in words for p in tok.tokenize(self._text(w, "inputs", i, None))]
        if truncate and len(pieces) > self.max_length - 2:
            pieces = pieces[: self.max_length - 2]
        tokens = [tok.convert_ids_to_tokens(tok.cls_token_id), *pieces, tok.convert_ids_to_tokens(tok.sep_token_id)]
        return Tokens(tok.convert_tokens_to_ids(tokens), [0] * len(tokens), tokens)

    async def tokenize(
        self, texts: list[str], pairs: list[str] | None, max_length: int | None, add_special_tokens: bool = True
    ) -> list[Any]:
        """Encodings of texts (and pairs), cut to ``max_length`` when given; large requests off the event loop."""
        if pairs is not None and None in pairs:  # some inputs with a pair, some without: two calls
            alone = [i for i, p in enumerate(pairs) if p is None]
            paired = [i for i, p in enumerate(pairs) if p is not None]
            out = [None] * len(texts)
            for group, with_pairs in ((alone, None), (paired, [pairs[i] for i in paired])):
                if group:
                    done = await self.tokenize([texts[i] for i in group], with_pairs, max_length, add_special_tokens)
                    for i, e in zip(group, done):
                        out[i] = e
            return out
        kwargs = dict(max_length=max_length, truncation=max_length is not None, add_special_tokens=add_special_tokens)
        tok = self.encoder.tokenizer
        if sum(map(len, texts)) + sum(map(len, pairs or ())) < 20_000:  # small: a thread hop costs more
            return tok.encode_batch(texts, pairs, **kwargs)
        return await asyncio.to_thread(tok.encode_batch, texts, pairs, **kwargs)  # keep the event loop free

    def token_ids(self, items: list[list[int]]) -> list[list[int]]:
        """``/decode``'s token-id lists: count, ids inside the tokenizer's vocabulary, tokens per request."""
        self._check_count(items)
        vocab = min(self.encoder.config.vocab_size, len(self.encoder.tokenizer))
        lists = [self._ids(ids, i, vocab).ids for i, ids in enumerate(items)]
        if sum(map(len, lists)) > self.settings.max_request_tokens:
            raise InputRejected(
                "inputs",
                None,
                f"'{{field}}' holds over {self.settings.max_request_tokens} tokens (--max-request-tokens)",
            )
        return lists

    def spec(self, layers: Any = None, pooling: Any = None, normalize: bool = False) -> PoolSpec:
        """Layers and pooling (None: the server's defaults) as a :class:`PoolSpec`; a bad one is refused."""
        try:
            return self.encoder.spec(
                self.default_spec.layers if layers is None else layers,
                self.default_spec.pooling if pooling is None else pooling,
                normalize,
            )
        except (ValueError, TypeError) as exc:
            role = "pooling" if "pool" in str(exc) and pooling is not None else "layers"
            raise InputRejected(role, None, "'{field}': " + str(exc).replace("{", "{{").replace("}", "}}")) from None

    def masks(self, texts: list[str], top_k: int) -> int:
        """Fill-mask's own checks on the request's texts, before tokenizing them: an MLM head, a [MASK] in each text,
        ``top_k`` in 1..100 and [MASK]s x ``top_k`` within ``--max-predictions``. Returns the number of [MASK]s."""
        if self.encoder.mlm_head is None:
            raise ApiError(
                None, f"this model has no MLM head ({self.encoder.mlm_head_names}): fill-mask is unavailable"
            )
        if not 1 <= top_k <= 100:
            raise InputRejected("top_k", None, f"'{{field}}' must be in 1..100, got {top_k}")
        tok = self.encoder.tokenizer
        mask = tok.convert_ids_to_tokens(tok.mask_token_id)
        for i, t in enumerate(texts):
            if mask not in t:
                raise InputRejected("inputs", i, f"'{{field}}' has no {mask} token")
        n = sum(t.count(mask) for t in texts)
        if n * top_k > self.settings.max_predictions:
            raise InputRejected(
                "top_k",
                None,
                f"{n} {mask} tokens x {{field}} {top_k} = {n * top_k} predictions, "
                f"over the limit of {self.settings.max_predictions} per request (--max-predictions)",
            )
        return n

    async def mask_lengths(self, texts: list[str]) -> None:
        """Fill-mask's tokens per input as the model reads them (each [MASK] one token, where the WordPiece normaliser
        would split it in three): 422 past the server's limit. Large requests off the event loop."""
        tok = self.encoder.tokenizer
        mask = tok.convert_ids_to_tokens(tok.mask_token_id)

        def lengths() -> list[int]:
            return [len(encode_with_masks(tok, t, mask)) for t in texts]

        for i, n in enumerate(await asyncio.to_thread(lengths) if sum(map(len, texts)) > 20_000 else lengths()):
            if n > self.max_length:
                raise too_long(i, n, self.max_length, True, False)

    def bound_answer(self, values: int, what: str) -> int:
        """Refuse (422, naming ``--max-output-values``) an answer of more than the limit's numbers before computing.
        Returns ``values`` (for the HTTP layer's ``json_answer``: a large answer is serialised off the loop)."""
        check_output_size(values, self.settings.max_output_values, what)
        return values

    # ------------------------------------------------------------------ running the model

    async def embed(self, encodings: list[Any], spec: PoolSpec) -> list[np.ndarray]:
        """Vectors for ``encodings`` (bounded first: inputs x width, or tokens x width for pooling none)."""
        dim = self.encoder.output_dim(spec)
        rows = sum(len(e.ids) for e in encodings) if spec.pooling == "none" else len(encodings)
        self.bound_answer(rows * dim, f"{rows} tokens x {dim}" if spec.pooling == "none" else f"{rows} inputs x {dim}")
        try:
            future = self.queue.submit(encodings, spec)
        except QueueFull as exc:
            raise ApiError(None, str(exc), "Overloaded") from None
        except RuntimeError as exc:
            raise ApiError(None, str(exc), "Unhealthy") from None
        vectors = await self.wait(future)
        for i, v in enumerate(vectors):
            if not np.isfinite(v).all():
                raise InputRejected(
                    "inputs",
                    i,
                    "the model produced NaN or infinite values for '{field}': its weights or config are broken",
                    "Backend",
                )
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
            raise ApiError(
                None, f"timed out after {timeout} s in the queue (--request-timeout)", "Overloaded"
            ) from None
        except ApiError:
            raise
        except (ValueError, TypeError) as exc:
            raise ApiError(None, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the model failed on this request; the server goes on
            raise ApiError(None, f"the model failed on this request: {type(exc).__name__}: {exc}", "Backend") from None
