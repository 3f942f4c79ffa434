"""Text classification, regression and cross-encoder reranking over a fine-tuned sequence head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertkit.errors import InputError
from bertkit.pipelines.base import FUNCTIONS, InputTooLongError, Pipeline, _check_bool, _check_text


class TextClassificationPipeline(Pipeline):
    """Sequence classification / regression (and cross-encoder reranking) on texts or text pairs."""

    def __init__(self, model, tokenizer, task, **kwargs):
        super().__init__(model, tokenizer, task, **kwargs)
        labels = getattr(task, "labels", None)
        self.num_labels = int(self.config.num_labels or (len(labels) if labels else model.classifier.out_features))
        id2label = self.config.id2label or {}
        if labels and len(labels) == self.num_labels:
            self.labels = [str(x) for x in labels]
        else:
            self.labels = [str(id2label.get(i, f"LABEL_{i}")) for i in range(self.num_labels)]
        if getattr(task, "family", "") == "rerank":
            self.kind = "rerank"
        elif self.num_labels == 1:
            self.kind = "regression" if getattr(task, "regression", False) else "rerank"
        else:
            self.kind = "classification"

    # ------------------------------------------------------------------ shared
    def _split(self, inputs: Any) -> tuple[bool, list[str], list[str] | None]:
        """(single, texts, pairs) from a text, a (text, pair) tuple, or a list of either."""

        def one(x: Any, where: str) -> tuple[str, str | None]:
            if isinstance(x, str):
                return x, None
            if isinstance(x, (tuple, list)) and len(x) == 2:
                return _check_text(x[0], f"{where}[0]"), _check_text(x[1], f"{where}[1]")
            raise InputError(
                f"{where} must be a text or a (text, pair) of two texts, got {type(x).__name__}"
                + (f" of {len(x)} items" if isinstance(x, (tuple, list)) else "")
            )

        if isinstance(inputs, (str, tuple)):
            items, single = [one(inputs, "inputs")], True
        elif isinstance(inputs, list):
            if not inputs:
                raise InputError("inputs is empty: give at least one text")
            items, single = [one(x, f"inputs[{i}]") for i, x in enumerate(inputs)], False
        else:
            raise InputError(
                f"inputs must be a text, a (text, pair) tuple or a list of them, got {type(inputs).__name__}"
            )
        texts = [a for a, _ in items]
        has_pairs = [b is not None for _, b in items]
        if any(has_pairs) and not all(has_pairs):
            raise InputError("inputs mixes single texts and pairs: give all texts or all (text, pair) pairs")
        return single, texts, ([b for _, b in items] if all(has_pairs) else None)

    def logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, truncate: bool = True):
        """[N, num_labels] fp32 numpy logits of ``texts`` (with ``pairs``), tokenised as the fine-tuning was
        (``[CLS] text [SEP] pair [SEP]``, at most ``max_seq_length`` tokens, longer segment cut first)."""
        import numpy as np

        if not truncate:
            full = self.tokenizer.encode_batch(list(texts), None if pairs is None else list(pairs), truncation=False)
            for i, e in enumerate(full):
                if len(e.ids) > self.max_length:
                    raise InputTooLongError(i, len(e.ids), self.max_length)
        encodings = self.tokenizer.encode_batch(
            list(texts), None if pairs is None else list(pairs), max_length=self.max_length
        )
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encodings]
        out = np.zeros((len(features), self.num_labels), dtype=np.float32)
        for idx, result in self._run(features):
            out[idx] = result.logits.float().cpu().numpy()
        return out

    def default_function(self) -> str:
        """transformers' default ``function_to_apply``: none for a regression model (``problem_type`` regression,
        or fine-tuned with ``--regression``), sigmoid for one label or ``multi_label_classification``, else
        softmax."""
        problem = getattr(self.config, "problem_type", None) or getattr(self.config, "extra", {}).get("problem_type")
        if problem == "regression" or self.kind == "regression":
            return "none"
        if problem == "multi_label_classification" or self.num_labels == 1:
            return "sigmoid"
        return "softmax"

    def scores(self, logits, raw_scores: bool = False, function_to_apply: str | None = None):
        """Logits -> scores by ``function_to_apply`` ("softmax", "sigmoid" or "none"; None: :meth:`default_function`:
        softmax over several labels, the sigmoid of a one-label reranker, the value of a regression model);
        ``raw_scores`` is "none"."""
        import numpy as np

        function = "none" if raw_scores else (function_to_apply or self.default_function())
        if function not in FUNCTIONS:
            raise InputError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {function_to_apply!r}")
        if function == "none":
            return logits
        if function == "sigmoid":
            return 1.0 / (1.0 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        return shifted / shifted.sum(-1, keepdims=True)

    # ------------------------------------------------------------------ the public calls
    def predict(
        self,
        inputs: str | tuple[str, str] | list,
        raw_scores: bool = False,
        return_all_scores: bool = False,
        top_k: int | None = None,
        truncate: bool = True,
        function_to_apply: str | None = None,
    ) -> list[dict] | list[list[dict]]:
        """Classify a text, a ``(text, pair)`` tuple, or a list of either.

        Returns, for each input, ``[{"label", "score"}]`` sorted by score (best first): the best label only, all of
        them with ``return_all_scores``, or the ``top_k`` best. A single input gives one such list; a list of
        inputs a list of lists. ``function_to_apply``: "softmax", "sigmoid" or "none" (the logits), as transformers'
        text-classification pipeline (default: :meth:`default_function`). ``truncate=False`` raises
        :class:`InputTooLongError` for an over-long input."""
        if function_to_apply is not None and function_to_apply not in FUNCTIONS:
            raise InputError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {function_to_apply!r}")
        for name, value in (
            ("raw_scores", raw_scores),
            ("return_all_scores", return_all_scores),
            ("truncate", truncate),
        ):
            _check_bool(name, value)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be a positive integer, got {top_k!r}")
        single, texts, pairs = self._split(inputs)
        k = top_k if top_k is not None else (self.num_labels if return_all_scores else 1)
        scores = self.scores(self.logits(texts, pairs, truncate), raw_scores, function_to_apply)
        results = []
        for row in scores.tolist():
            order = sorted(range(self.num_labels), key=lambda j: -row[j])[:k]
            results.append([{"label": self.labels[j], "score": float(row[j])} for j in order])
        return results[0] if single else results

    __call__ = predict

    def rerank(
        self,
        query: str,
        texts: Sequence[str],
        return_text: bool = False,
        raw_scores: bool = False,
        truncate: bool = True,
    ) -> list[dict]:
        """Score each of ``texts`` against ``query`` as a ``[CLS] query [SEP] text [SEP]`` pair (a cross-encoder).

        Returns ``[{"index", "score"[, "text"]}]`` best first; ``score`` is the sigmoid of the model's one logit
        (the logit itself with ``raw_scores``). Needs a one-label model (a reranker or a regression model)."""
        _check_text(query, "query")
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InputError(f"texts must be a list of texts, got {type(texts).__name__}")
        if not texts:
            raise InputError("texts is empty: give at least one text to rank")
        texts = [_check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        if self.num_labels != 1:
            raise InputError(
                f"{self.directory}: rerank needs a one-label model (a cross-encoder), this one has "
                f"{self.num_labels} labels {self.labels}: use predict"
            )
        scores = self.scores(self.logits([query] * len(texts), texts, truncate), raw_scores)[:, 0].tolist()
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        out = []
        for i in order:
            item: dict[str, Any] = {"index": i, "score": float(scores[i])}
            if return_text:
                item["text"] = texts[i]
            out.append(item)
        return out
