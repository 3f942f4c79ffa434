"""Named entities over a fine-tuned token head, grouped as transformers' ``aggregation_strategy`` does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertkit.errors import InputError
from bertkit.pipelines.base import AGGREGATIONS, Pipeline, _check_text
from bertkit.tasks.tagging import group_entities, tokens_to_string


class TokenClassificationPipeline(Pipeline):
    """Named entities: each word piece is classified; adjacent pieces are grouped into entities as transformers'
    ``aggregation_strategy="simple"`` does, with character offsets into the input text."""

    kind = "ner"

    def __init__(self, model, tokenizer, task, **kwargs):
        super().__init__(model, tokenizer, task, **kwargs)
        labels = getattr(task, "labels", None) or getattr(model, "labels", None)
        id2label = self.config.id2label or {}
        n = len(labels) if labels else int(self.config.num_labels or 2)
        self.labels = [str(x) for x in labels] if labels else [id2label.get(i, f"LABEL_{i}") for i in range(n)]

    def token_scores(self, texts: Sequence[str]) -> list[tuple[Any, Any]]:
        """For each text: (its Encoding without specials, [T, num_labels] fp32 softmax scores). A text longer than
        ``max_seq_length`` is cut into consecutive windows, each ``[CLS] piece [SEP]``, so every token is tagged."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts), truncation=False, add_special_tokens=False)
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        width = self.max_length - 2
        features, where = [], []  # where: (text index, first token) of each window
        for t, enc in enumerate(encodings):
            for start in range(0, max(len(enc.ids), 1), width):
                piece = enc.ids[start : start + width]
                features.append({"input_ids": [cls] + piece + [sep], "token_type_ids": [0] * (len(piece) + 2)})
                where.append((t, start))
        scores = [np.zeros((len(e.ids), len(self.labels)), dtype=np.float32) for e in encodings]
        for idx, out in self._run(features):
            logits = out.logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                t, start = where[i]
                n = len(features[i]["input_ids"]) - 2
                x = logits[row, 1 : n + 1]
                e = np.exp(x - x.max(-1, keepdims=True))
                scores[t][start : start + n] = e / e.sum(-1, keepdims=True)
        return list(zip(encodings, scores))

    def ner(
        self,
        inputs: str | list[str],
        aggregation_strategy: str = "simple",
        ignore_labels: Sequence[str] | None = ("O",),
    ) -> list[dict] | list[list[dict]]:
        """Entities of a text (or of each text of a list), as transformers' token-classification pipeline.

        ``aggregation_strategy``:

        - ``simple`` (default): ``[{"entity_group", "score", "word", "start", "end"}]``: adjacent tokens with the
          same entity type are grouped (a ``B-`` tag starts a new group), the score is the mean of their label
          probabilities, ``word`` joins the word pieces, ``start``/``end`` are character offsets into the text;
        - ``none``: one ``{"entity", "score", "index", "word", "start", "end"}`` per token (``index`` counts [CLS]);
        - ``first`` / ``max`` / ``average``: each word (a token and the ``##`` pieces after it) gets one label first
          (its first token's; the one of its most confident token; the best of its tokens' averaged
          probabilities), then words are grouped as ``simple``.

        Entities whose label (``none``: the full label, e.g. ``B-LOC``; else the type, e.g. ``LOC``) is in
        ``ignore_labels`` are left out (None: ``["O"]``)."""
        if aggregation_strategy not in AGGREGATIONS:
            raise InputError(
                f"aggregation_strategy must be one of {', '.join(AGGREGATIONS)}, got {aggregation_strategy!r}"
            )
        if ignore_labels is None:
            ignore_labels = ("O",)
        if (
            isinstance(ignore_labels, str)
            or not isinstance(ignore_labels, (list, tuple, set, frozenset))
            or not all(isinstance(x, str) for x in ignore_labels)
        ):
            raise InputError(f"ignore_labels must be a list of label names, got {ignore_labels!r}")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs) if isinstance(inputs, list) else None
        if texts is None:
            raise InputError(f"inputs must be a text or a list of texts, got {type(inputs).__name__}")
        if not texts:
            raise InputError("inputs is empty: give at least one text")
        texts = [_check_text(t, f"inputs[{i}]") for i, t in enumerate(texts)]
        # a tokenizer.json tokenizer: its decoder joins tokens, and without a sub-word mark (byte-level BPE) a
        # token continues a word when no space is next to its start (transformers' heuristic)
        join = getattr(self.tokenizer, "convert_tokens_to_string", tokens_to_string)
        word_aware = getattr(self.tokenizer, "continuing_subword_prefix", "##") is not None
        results = []
        for text, (enc, scores) in zip(texts, self.token_scores(texts)):
            tokens = []
            for j, (token_id, token, (start, end)) in enumerate(zip(enc.ids, enc.tokens, enc.offsets)):
                best = int(scores[j].argmax())
                unknown = token_id == self.tokenizer.unk_token_id
                word = text[start:end] if unknown else token
                if unknown:
                    subword = False
                elif word_aware:  # transformers' test for a word-piece tokenizer: the piece's text is not the token
                    subword = len(token) != end - start
                else:
                    subword = start > 0 and " " not in text[start - 1 : start + 1]
                tokens.append(
                    {
                        "entity": self.labels[best],
                        "score": float(scores[j, best]),
                        "index": j + 1,
                        "word": word,
                        "start": start,
                        "end": end,
                        "scores": scores[j],
                        "is_subword": subword,
                    }
                )
            if aggregation_strategy == "none":
                groups = [{k: t[k] for k in ("entity", "score", "index", "word", "start", "end")} for t in tokens]
            elif aggregation_strategy == "simple":
                groups = group_entities(tokens, join)
            else:
                groups = group_entities(self._words(tokens, aggregation_strategy, join), join)
            key = "entity" if aggregation_strategy == "none" else "entity_group"
            results.append([g for g in groups if g[key] not in ignore_labels])
        return results[0] if single else results

    def _words(self, tokens: list[dict], strategy: str, join=tokens_to_string) -> list[dict]:
        """transformers' ``aggregate_words``: one entity per word (a token and the sub-word pieces after it)."""
        import numpy as np

        words: list[list[dict]] = []
        for t in tokens:
            if words and t["is_subword"]:
                words[-1].append(t)
            else:
                words.append([t])
        out = []
        for w in words:
            if strategy == "first":
                scores = w[0]["scores"]
            elif strategy == "max":
                scores = max(w, key=lambda t: t["scores"].max())["scores"]
            else:
                scores = np.nanmean(np.stack([t["scores"] for t in w]), axis=0)
            best = int(scores.argmax())
            out.append(
                {
                    "entity": self.labels[best],
                    "score": float(scores[best]),
                    "word": join([t["word"] for t in w]),
                    "start": w[0]["start"],
                    "end": w[-1]["end"],
                }
            )
        return out

    __call__ = ner
