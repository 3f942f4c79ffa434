"""``BertClient``: bert-as-service's one-liner against ``bertkit serve``. Standard library + numpy only: this module
imports neither torch nor FastAPI/uvicorn, so any program can embed text without the model stack.

    from bertkit import BertClient
    bc = BertClient("http://127.0.0.1:8000")
    vecs = bc.encode(["First do it", "then do it right"])            # np.ndarray [2, D]
    vecs, tokens = bc.encode(["hello world"], show_tokens=True)
    vecs = bc.encode(texts, pooling_layer=[-1, -2, -3, -4], pooling_strategy="mean_max")
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np


class BertClientError(RuntimeError):
    """The server refused a request (``status`` is the HTTP code) or could not be reached (``status`` is None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class BertClient:
    """A client for ``bertkit serve``.

    Args:
        url: the server's base URL.
        api_key: sent as ``Authorization: Bearer KEY`` (default: the ``BERTKIT_API_KEY`` environment variable).
        timeout: seconds per HTTP request (connect and read); nothing waits forever.
        batch_size: texts per HTTP request; None = the server's ``max_client_batch_size`` (from /info), at most 256
            (long texts in a request of thousands could pass the server's per-request token budget).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        timeout: float = 60.0,
        batch_size: int | None = None,
    ):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("BERTKIT_API_KEY")
        self.timeout = float(timeout)
        self._batch_size = batch_size
        self._info: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"BertClient({self.url!r})"

    # ------------------------------------------------------------------ HTTP

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            # header text goes out as latin-1: send a non-ASCII key as its UTF-8 bytes, which the server compares
            headers["Authorization"] = f"Bearer {self.api_key}".encode().decode("latin-1")
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                err = json.loads(raw)
                message = err.get("error") if isinstance(err, dict) else None
                if isinstance(message, dict):
                    message = message.get("message")
            except (json.JSONDecodeError, UnicodeDecodeError):
                message = None
            if not isinstance(message, str):
                message = raw[:200].decode("utf-8", "replace")
            raise BertClientError(f"{method} {path}: HTTP {exc.code}: {message}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BertClientError(f"cannot reach {self.url}{path}: {reason}") from None
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return body.decode("utf-8", "replace")

    # ------------------------------------------------------------------ server state

    def health(self) -> bool:
        """True when the server answers /health with status ok."""
        try:
            return self._request("GET", "/health").get("status") == "ok"
        except BertClientError:
            return False

    def info(self) -> dict[str, Any]:
        """The server's /info: model, dimensions, defaults and limits."""
        self._info = self._request("GET", "/info")
        return self._info

    @property
    def batch_size(self) -> int:
        if self._batch_size is None:
            self._batch_size = min(256, int((self._info or self.info()).get("max_client_batch_size", 64)))
        return self._batch_size

    # ------------------------------------------------------------------ the work

    def encode(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        show_tokens: bool = False,
        pooling_layer: int | str | Sequence[int | str] | None = None,
        pooling_strategy: str | None = None,
        normalize: bool = False,
        truncate: bool = True,
    ) -> np.ndarray | list[np.ndarray] | tuple[Any, list[list[str]]]:
        """Embed ``texts`` with the server (its /encode endpoint).

        Args:
            texts: a list of strings (a bare string is refused, as in bert-as-service: wrap it in a list).
            pairs: optional second segments, one per text.
            show_tokens: also return each input's wordpieces.
            pooling_layer / pooling_strategy: the layer(s) and pooling (server defaults when None).
            normalize: L2-normalise the vectors.
            truncate: cut inputs longer than the model's limit (else the server answers 413).

        Returns:
            float32 ``[N, D]`` (a list of ``[T_i, D]`` arrays for pooling ``none``); with ``show_tokens``,
            ``(vectors, tokens)``.
        """
        texts = _check_texts(texts, "texts")
        if pairs is not None:
            pairs = _check_texts(pairs, "pairs")
            if len(pairs) != len(texts):
                raise ValueError(f"pairs has {len(pairs)} items but texts has {len(texts)}")
        vectors: list[np.ndarray] = []
        tokens: list[list[str]] = []
        per_token = False
        step = max(1, self.batch_size)
        for start in range(0, len(texts), step):
            payload: dict[str, Any] = {
                "texts": texts[start : start + step],
                "show_tokens": show_tokens,
                "normalize": normalize,
                "truncate": truncate,
                "encoding_format": "base64",
            }
            if pairs is not None:
                payload["pairs"] = pairs[start : start + step]
            if pooling_layer is not None:
                payload["pooling_layer"] = (
                    list(pooling_layer) if isinstance(pooling_layer, (list, tuple)) else pooling_layer
                )
            if pooling_strategy is not None:
                payload["pooling_strategy"] = pooling_strategy
            out = self._request("POST", "/encode", payload)
            per_token = out["pooling_strategy"] == "none"
            if per_token:
                vectors.extend(_decode(b, shape) for b, shape in zip(out["embeddings"], out["shape"]))
            else:
                vectors.extend(_decode(out["embeddings"], out["shape"]))
            if show_tokens:
                tokens.extend(out["tokens"])
        if per_token:
            result: Any = vectors
        elif vectors:
            result = np.stack(vectors)
        else:
            result = np.zeros((0, int((self._info or self.info())["embedding_dim"])), dtype=np.float32)
        return (result, tokens) if show_tokens else result

    def tokenize(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[list[dict[str, Any]]]:
        """Tokens with ids and character offsets (the server's /tokenize)."""
        payload: dict[str, Any] = {"inputs": _check_texts(texts, "texts")}
        if pairs is not None:
            payload["pairs"] = _check_texts(pairs, "pairs")
        return self._request("POST", "/tokenize", payload)

    def fill_mask(self, texts: Sequence[str], top_k: int = 5) -> list[list[list[dict[str, Any]]]]:
        """For each text, for each [MASK]: the top_k predictions (the server's /fill-mask)."""
        return self._request("POST", "/fill-mask", {"inputs": _check_texts(texts, "texts"), "top_k": int(top_k)})


def _decode(data: Any, shape: Sequence[int]) -> np.ndarray:
    if isinstance(data, str):
        arr = np.frombuffer(base64.b64decode(data), dtype="<f4").astype(np.float32)
    else:
        arr = np.asarray(data, dtype=np.float32)
    return arr.reshape(tuple(int(s) for s in shape))


def _check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, got a single {type(texts).__name__}: wrap it in a list")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(t).__name__}")
    return texts
