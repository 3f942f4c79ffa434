"""Span question answering, SQuAD v1.1 and v2.0.

Features (Google's ``run_squad.py`` scheme, with character offsets from the tokenizer instead of its
whitespace re-alignment):
- the question keeps at most ``max_query_length`` tokens; each window is ``[CLS] question [SEP] context-span [SEP]``
  of at most ``max_seq_length`` tokens; windows start every ``doc_stride`` context tokens;
- every context token is flagged as having its *maximum context* in exactly one window (the one where
  ``min(left, right context) + 0.01 * span length`` is largest); a span is scored only in that window;
- training: the answer's token span, or [CLS] (position 0) when the answer is not inside the window or the
  question is unanswerable (v2.0).
Post-processing: the ``n_best_size`` best starts and ends of each window, spans of at most ``max_answer_length``
tokens, ``start + end`` logit scores. Answer text (``answer_text``):
- ``google`` (default): ``run_squad.py``'s ``get_final_text``, ported line for line: the predicted word pieces,
  de-tokenized (``##`` joined), are found in the basic-tokenized original whitespace-separated words that hold the
  span, and projected back character by character (so "Steve Smith's" gives "Steve Smith"); when that alignment
  fails (e.g. an [UNK] piece, or accents the tokenizer strips that change the length), the whole original words;
- ``chars``: the context's characters from the first piece's start to the last piece's end;
- ``words``: ``chars`` widened to whole basic-tokenizer words (a span starting or ending inside a word takes the
  whole word). Not Google's: its published EM/F1 rest on ``google``.
v2.0: the null score is ``start[0] + end[0]`` (minimum over windows); predict "" when
``null - best span > null_score_diff_threshold``.
Outputs: ``predictions.json`` (id -> text), ``nbest_predictions.json`` (id -> list of text, probability,
start_logit, end_logit, and start / end: the character span of the answer's pieces in the context) and, for
v2.0, ``null_odds.json``
(id -> null - best span score).
"""

from __future__ import annotations

import bisect
import collections
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.squad import read_squad
from bertkit.errors import InputError
from bertkit.files import atomic_write
from bertkit.tasks import TaskBase, collate_inputs, run_inference
from bertkit.tasks.metrics import squad_evaluate, squad_v2_best_thresholds

logger = logging.getLogger(__name__)


def doc_spans(n_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over ``n_tokens`` context tokens (Google's sliding window)."""
    spans = []
    start = 0
    while True:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= n_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_flags(spans: list[tuple[int, int]]) -> list[list[bool]]:
    """For each window, whether each of its tokens has its maximum context there (Google's
    ``_check_is_max_context``: score = min(left, right) + 0.01 * length; the first best window wins)."""
    best: dict[int, tuple[float, int]] = {}
    for w, (start, length) in enumerate(spans):
        for pos in range(start, start + length):
            score = min(pos - start, start + length - 1 - pos) + 0.01 * length
            if pos not in best or score > best[pos][0]:
                best[pos] = (score, w)
    return [[best[pos][1] == w for pos in range(start, start + length)] for w, (start, length) in enumerate(spans)]


def whitespace_words(context: str) -> tuple[list[str], list[int]]:
    """Google's ``read_squad_examples`` split of a context: words separated by space, tab, CR, LF or U+202F
    (``doc_tokens``), and the word index of every character (``char_to_word_offset``)."""
    words: list[str] = []
    char_to_word: list[int] = []
    prev_is_whitespace = True
    for c in context:
        if c in " \t\r\n\u202f":
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                words.append(c)
            else:
                words[-1] += c
            prev_is_whitespace = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def get_final_text(pred_text: str, orig_text: str, basic_tokenize: Callable[[str], list[str]]) -> str:
    """Google's ``run_squad.py`` ``get_final_text``, line for line: project the de-tokenized prediction
    ``pred_text`` back onto ``orig_text``, the original whitespace-separated words that hold it.

    ``orig_text`` is basic-tokenized (``basic_tokenize``: the model's, Google's ``BasicTokenizer(do_lower_case)``),
    ``pred_text`` is found in it, and with spaces removed from both, characters are aligned one to one. When
    ``pred_text`` is not found or the lengths differ, the whole ``orig_text`` is returned, as Google's does."""

    def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
        ns_chars = []
        ns_to_s_map = {}
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        return "".join(ns_chars), ns_to_s_map

    tok_text = " ".join(basic_tokenize(orig_text))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1
    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text
    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}

    def to_orig(position: int) -> int | None:  # a position in the tokenized text -> the same one in orig_text
        ns_position = tok_s_to_ns_map.get(position)
        return None if ns_position is None else orig_ns_to_s_map.get(ns_position)

    orig_start_position = to_orig(start_position)
    if orig_start_position is None:
        return orig_text
    orig_end_position = to_orig(end_position)
    if orig_end_position is None:
        return orig_text
    return orig_text[orig_start_position : orig_end_position + 1]


ANSWER_TEXT_MODES = ("google", "chars", "words")


def encode_questions_and_contexts(examples: Sequence, tokenizer) -> tuple[list, dict[str, Any]]:
    """(the questions' encodings, context -> its encoding): no special tokens, no truncation, and each distinct
    context encoded once (its questions share it). Google's windows and transformers' start from the same."""
    questions = tokenizer.encode_batch([e.question for e in examples], truncation=False, add_special_tokens=False)
    unique = list(dict.fromkeys(e.context for e in examples))
    return questions, dict(zip(unique, tokenizer.encode_batch(unique, truncation=False, add_special_tokens=False)))


def window(
    cls: int, sep: int, q_ids: list[int], ctx_ids: list[int], start: int, length: int
) -> tuple[list[int], list[int]]:
    """(input ids, token types) of ``[CLS] question [SEP] context[start:start + length] [SEP]``."""
    offset = len(q_ids) + 2
    return [cls] + q_ids + [sep] + ctx_ids[start : start + length] + [sep], [0] * offset + [1] * (length + 1)


class SquadTask(TaskBase):
    family = "squad"
    head = "BertForQuestionAnswering"

    def __init__(
        self,
        name: str = "squad",
        max_seq_length: int = 384,
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best_size: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float = 0.0,
        version: str | None = None,
        answer_text: str | None = None,
        **_: Any,
    ):
        self.name = name
        self.max_seq_length = max_seq_length or 384
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.null_score_diff_threshold = null_score_diff_threshold
        self.version = version or ("2.0" if name == "squad_v2" else "1.1")
        self.answer_text = answer_text or "google"
        if self.answer_text not in ANSWER_TEXT_MODES:
            raise InputError(f"--answer-text must be one of {ANSWER_TEXT_MODES}, got {self.answer_text!r}")
        self._words: tuple[str, tuple[list[str], list[int]]] | None = None  # the last context's whitespace words
        self.main_metric = "f1"
        if self.max_seq_length - self.max_query_length - 3 < 1:
            raise InputError(
                f"--max-seq-length ({self.max_seq_length}) leaves no room for context after a "
                f"{self.max_query_length}-token question"
            )

    def task_config(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "max_seq_length": self.max_seq_length,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
            "n_best_size": self.n_best_size,
            "max_answer_length": self.max_answer_length,
            "null_score_diff_threshold": self.null_score_diff_threshold,
            "version": self.version,
            "answer_text": self.answer_text,
        }

    def read(self, path: str | os.PathLike, labelled: bool = True, skip_bad_rows: bool = False):
        examples, version = read_squad(path, skip_bad_rows=skip_bad_rows, require_answers=labelled)
        if version == "2.0" and self.version != "2.0":
            logger.warning(
                f"bertkit: {path} has unanswerable questions (SQuAD 2.0): use --task squad_v2 to predict null answers"
            )
        return examples

    # ------------------------------------------------------------------ features
    def featurize(self, examples: Sequence, tokenizer, training: bool = False) -> list[dict]:
        questions, encoded = encode_questions_and_contexts(examples, tokenizer)
        cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        features = []
        for i, (e, q) in enumerate(zip(examples, questions)):
            q_ids = q.ids[: self.max_query_length]
            ctx = encoded[e.context]
            offsets = ctx.offsets
            max_tokens = self.max_seq_length - len(q_ids) - 3
            spans = doc_spans(len(ctx.ids), max_tokens, self.doc_stride)
            flags = max_context_flags(spans)
            tok_start = tok_end = None
            if training and e.answers and not e.is_impossible:
                text, char_start = e.answers[0]
                char_end = char_start + len(text)
                ends = [o[1] for o in offsets]
                starts = [o[0] for o in offsets]
                tok_start = bisect.bisect_right(ends, char_start)  # first token ending after the answer start
                tok_end = bisect.bisect_left(starts, char_end) - 1  # last token starting before the answer end
                if tok_start >= len(offsets) or tok_end < tok_start:
                    tok_start = tok_end = None  # the answer is not covered by any token (e.g. only spaces)
            offset = len(q_ids) + 2  # [CLS] question [SEP]
            for (start, length), flag in zip(spans, flags):
                ids, types = window(cls, sep, q_ids, ctx.ids, start, length)
                f: dict[str, Any] = {
                    "input_ids": ids,
                    "token_type_ids": types,
                    "example": i,
                    "span_start": start,
                    "offset": offset,
                    "max_context": flag,
                    # the context's pieces, their character offsets and word indices (shared by its windows)
                    "offsets": offsets,
                    "tokens": ctx.tokens,
                    "word_ids": ctx.word_ids,
                    # get_final_text projects answers with the same; None: not WordPiece (answers are the context's
                    # characters under the pieces, as answer_text "chars")
                    "basic_tokenize": getattr(tokenizer, "basic_tokenize", None),
                }
                if training:
                    if tok_start is not None and start <= tok_start and tok_end < start + length:
                        f["start_position"] = tok_start - start + offset
                        f["end_position"] = tok_end - start + offset
                    else:
                        f["start_position"] = f["end_position"] = 0
                features.append(f)
        return features

    def collate(self, features: Sequence[dict]) -> dict:
        import torch

        batch = collate_inputs(features)
        if all("start_position" in f for f in features):
            batch["start_positions"] = torch.tensor([f["start_position"] for f in features])
            batch["end_positions"] = torch.tensor([f["end_position"] for f in features])
        return batch

    # ------------------------------------------------------------------ inference
    def predict(
        self,
        model,
        examples: Sequence,
        features: Sequence[dict],
        batch_size: int = 64,
        precision: str = "fp32",
        device: str = "cpu",
        progress: bool = False,
    ) -> list[dict]:
        logits: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(features)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            start = out.start_logits.float().cpu().numpy()
            end = out.end_logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                logits[i] = (start[row, :n], end[row, :n])
        return self.postprocess(examples, features, logits)

    def postprocess(self, examples: Sequence, features: Sequence[dict], logits: Sequence) -> list[dict]:
        """Predictions from each feature's (start logits [T], end logits [T]), grouped by example."""
        by_example: dict[int, list[int]] = collections.defaultdict(list)
        for i, f in enumerate(features):
            by_example[f["example"]].append(i)
        return [
            self._postprocess(e, [features[i] for i in by_example[k]], [logits[i] for i in by_example[k]])
            for k, e in enumerate(examples)
        ]

    def answer_span_text(self, context: str, feature: dict, first: int, last: int) -> str:
        """The answer text of context pieces ``first..last`` (indices into the context's pieces), by
        ``self.answer_text`` (see the module docstring)."""
        offsets = feature["offsets"]
        if self.answer_text == "words":
            word_ids = feature["word_ids"]
            while first > 0 and word_ids[first - 1] == word_ids[first]:
                first -= 1
            while last + 1 < len(word_ids) and word_ids[last + 1] == word_ids[last]:
                last += 1
        if self.answer_text != "google":
            return context[offsets[first][0] : offsets[last][1]]
        if feature["basic_tokenize"] is None:  # a tokenizer.json tokenizer: no wordpieces to de-tokenize
            return context[offsets[first][0] : offsets[last][1]].strip()
        tok_text = " ".join(feature["tokens"][first : last + 1])
        tok_text = tok_text.replace(" ##", "").replace("##", "")  # de-tokenize word pieces
        tok_text = " ".join(tok_text.strip().split())
        if self._words is None or self._words[0] != context:  # once per example, not per candidate
            self._words = (context, whitespace_words(context))
        words, char_to_word = self._words[1]
        orig_text = " ".join(words[char_to_word[offsets[first][0]] : char_to_word[offsets[last][1] - 1] + 1])
        return get_final_text(tok_text, orig_text, feature["basic_tokenize"])

    def _postprocess(self, example, feats: list[dict], logits: list) -> dict:
        candidates = []  # (score, start_logit, end_logit, feature, first piece, last piece)
        null_score, null_logits = math.inf, (0.0, 0.0)
        for f, (start, end) in zip(feats, logits):
            null = float(start[0] + end[0])
            if null < null_score:
                null_score, null_logits = null, (float(start[0]), float(end[0]))
            starts = np.argsort(-start, kind="stable")[: self.n_best_size]
            ends = np.argsort(-end, kind="stable")[: self.n_best_size]
            offset, span_start, n_ctx = f["offset"], f["span_start"], len(f["max_context"])
            for s in starts.tolist():
                if not offset <= s < offset + n_ctx or not f["max_context"][s - offset]:
                    continue
                for e in ends.tolist():
                    if not offset <= e < offset + n_ctx or e < s or e - s + 1 > self.max_answer_length:
                        continue
                    candidates.append(
                        (
                            float(start[s] + end[e]),
                            float(start[s]),
                            float(end[e]),
                            f,
                            span_start + s - offset,
                            span_start + e - offset,
                        )
                    )
        candidates.sort(key=lambda c: -c[0])
        nbest, seen = [], set()
        for score, sl, el, f, first, last in candidates:
            text = self.answer_span_text(example.context, f, first, last)
            if text in seen:
                continue
            seen.add(text)
            nbest.append(
                {
                    "text": text,
                    "start_logit": sl,
                    "end_logit": el,
                    "score": score,
                    "start": f["offsets"][first][0],
                    "end": f["offsets"][last][1],
                }
            )  # the pieces' characters
            if len(nbest) >= self.n_best_size:
                break
        best_non_null = nbest[0] if nbest else None
        if self.version == "2.0" and not any(n["text"] == "" for n in nbest):
            nbest.append({"text": "", "start_logit": null_logits[0], "end_logit": null_logits[1], "score": null_score})
            nbest.sort(key=lambda n: -n["score"])
        if not nbest:
            nbest = [{"text": "", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0}]
        scores = np.array([n["score"] for n in nbest])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        for n, p in zip(nbest, probs.tolist()):
            n["probability"] = p
            del n["score"]
        if self.version == "2.0":
            best_score = best_non_null["start_logit"] + best_non_null["end_logit"] if best_non_null else -math.inf
            null_odds = null_score - best_score
            text = "" if best_non_null is None or null_odds > self.null_score_diff_threshold else best_non_null["text"]
            return {
                "text": text,
                "nbest": nbest,
                "null_odds": null_odds,
                "best_non_null": best_non_null["text"] if best_non_null else "",
            }
        return {"text": best_non_null["text"] if best_non_null else "", "nbest": nbest, "null_odds": None}

    # ------------------------------------------------------------------ metric and output
    def metrics(self, examples: Sequence, preds: Sequence[dict]) -> dict[str, float]:
        gold = {e.qas_id: ([] if e.is_impossible else e.answer_texts) for e in examples}
        out = squad_evaluate(gold, {e.qas_id: p["text"] for e, p in zip(examples, preds)}, self.version)
        if self.version == "2.0" and preds and all(p.get("null_odds") is not None for p in preds):
            out.update(
                squad_v2_best_thresholds(
                    gold,
                    {e.qas_id: p["best_non_null"] for e, p in zip(examples, preds)},
                    {e.qas_id: p["null_odds"] for e, p in zip(examples, preds)},
                )
            )
        return {k: float(v) for k, v in out.items()}

    def write_predictions(self, directory: str | os.PathLike, examples: Sequence, preds: Sequence[dict]) -> list[Path]:
        directory = Path(directory)
        files = {
            "predictions.json": {e.qas_id: p["text"] for e, p in zip(examples, preds)},
            "nbest_predictions.json": {e.qas_id: p["nbest"] for e, p in zip(examples, preds)},
        }
        if self.version == "2.0":
            files["null_odds.json"] = {e.qas_id: p["null_odds"] for e, p in zip(examples, preds)}
        written = []
        for name, data in files.items():
            path = directory / name
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
            atomic_write(path, lambda t, text=text: t.write_text(text, encoding="utf-8"))
            written.append(path)
        return written


# --------------------------------------------------------------------------------------------- the HF convention
# transformers' QuestionAnsweringPipeline (4.x; what users of the HF inference API get): windows overlap by
# ``doc_stride`` tokens, each window's start and end logits are turned into probabilities over its context tokens
# (and [CLS]), a span scores start_prob x end_prob, spans may start in any window (no max-context rule), an answer is
# widened to whole words (``align_to_words``) and read from the context, and equal answers (case-insensitive) from
# several windows add up their scores. Ported from ``transformers.pipelines.question_answering`` (4.57):
# ``preprocess`` (fast-tokenizer path), ``select_starts_ends``, ``decode_spans`` and ``postprocess``.

HF_MAX_SEQ_LEN = 384
HF_MAX_QUESTION_LEN = 64
HF_MAX_ANSWER_LEN = 15


def hf_features(
    examples: Sequence,
    tokenizer,
    max_seq_len: int = HF_MAX_SEQ_LEN,
    doc_stride: int | None = None,
    max_question_len: int = HF_MAX_QUESTION_LEN,
) -> list[dict]:
    """Windows ``[CLS] question [SEP] context-part [SEP]`` of at most ``max_seq_len`` tokens whose context parts
    overlap by ``doc_stride`` tokens (default ``min(max_seq_len // 2, 128)``, as transformers). The question keeps
    at most ``max_question_len`` tokens (transformers' fast path does not cut it and fails on a longer one).
    Raises InputError naming ``doc_stride`` / ``max_seq_len`` when no window fits."""
    if doc_stride is None:
        doc_stride = min(max_seq_len // 2, 128)
    if doc_stride > max_seq_len:
        raise InputError(f"doc_stride ({doc_stride}) is larger than max_seq_len ({max_seq_len})")
    questions, encoded = encode_questions_and_contexts(examples, tokenizer)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    features = []
    for i, (e, q) in enumerate(zip(examples, questions)):
        q_ids = q.ids[:max_question_len]
        ctx = encoded[e.context]
        budget = max_seq_len - len(q_ids) - 3
        if budget < 1:
            raise InputError(
                f"max_seq_len ({max_seq_len}) leaves no room for context after a {len(q_ids)}-token question"
            )
        if doc_stride >= budget:
            raise InputError(
                f"doc_stride ({doc_stride}) must be smaller than the context tokens of a window "
                f"({budget} = max_seq_len {max_seq_len} - question {len(q_ids)} - 3 special tokens)"
            )
        offset = len(q_ids) + 2
        for start, length in doc_spans(len(ctx.ids), budget, budget - doc_stride):
            ids, types = window(cls, sep, q_ids, ctx.ids, start, length)
            features.append(
                {
                    "input_ids": ids,
                    "token_type_ids": types,
                    "example": i,
                    "span_start": start,
                    "offset": offset,
                    "n_ctx": length,
                    "offsets": ctx.offsets,
                    "word_ids": ctx.word_ids,
                }
            )
    return features


def _decode_spans(start: np.ndarray, end: np.ndarray, topk: int, max_answer_len: int, desired: np.ndarray):
    """transformers' ``decode_spans``: the ``topk`` best (start, end, start_prob x end_prob) with
    ``start <= end < start + max_answer_len``, then those whose both ends are ``desired`` positions."""
    outer = np.matmul(start[:, None], end[None, :])
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    flat = candidates.flatten()
    if topk == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) < topk:
        order = np.argsort(-flat)
    else:
        idx = np.argpartition(-flat, topk)[0:topk]
        order = idx[np.argsort(-flat[idx])]
    starts, ends = np.unravel_index(order, candidates.shape)
    keep = np.isin(starts, desired.nonzero()) & np.isin(ends, desired.nonzero())
    starts, ends = starts[keep], ends[keep]
    return starts, ends, candidates[starts, ends]


def hf_answers(
    examples: Sequence,
    features: Sequence[dict],
    logits: Sequence,
    top_k: int = 1,
    handle_impossible_answer: bool = False,
    max_answer_len: int = HF_MAX_ANSWER_LEN,
    align_to_words: bool = True,
) -> list[list[dict]]:
    """For each example, its ``top_k`` best ``{"score", "start", "end", "answer"}`` (best first; fewer when the
    context has fewer spans), from each window's (start logits [T], end logits [T]), as transformers' pipeline:
    see the comment above. ``handle_impossible_answer`` adds ``{"answer": "", "start": 0, "end": 0}`` scored with
    the smallest [CLS] start x end probability over the windows."""
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for i, f in enumerate(features):
        by_example[f["example"]].append(i)
    out = []
    pre_topk = top_k * 2 + 10 if align_to_words else top_k  # widening to words may merge candidates
    for k, example in enumerate(examples):
        context = example.context
        answers: list[dict] = []
        min_null_score = 1000000.0
        for i in by_example[k]:
            f = features[i]
            offset, n_ctx, span_start = f["offset"], f["n_ctx"], f["span_start"]
            start, end = (np.asarray(x, dtype=np.float32) for x in logits[i])
            desired = np.zeros(len(start), dtype=np.int64)
            desired[offset : offset + n_ctx] = 1
            desired[0] = 1  # [CLS] (transformers' p_mask leaves it selectable)
            start = np.where(desired == 0, np.float32(-10000.0), start)
            end = np.where(desired == 0, np.float32(-10000.0), end)
            start = np.exp(start - start.max())
            start = start / start.sum()
            end = np.exp(end - end.max())
            end = end / end.sum()
            if handle_impossible_answer:
                min_null_score = min(min_null_score, float(start[0] * end[0]))
            start[0] = end[0] = 0.0
            offsets, word_ids = f["offsets"], f["word_ids"]
            for s, e, score in zip(*_decode_spans(start, end, pre_topk, max_answer_len, desired)):
                s, e = int(s), int(e)
                if s == 0 or e == 0:  # [CLS]: no word, offsets (0, 0) (transformers' get_indices fallback)
                    begin = 0 if s == 0 else offsets[span_start + s - offset][0]
                    stop = 0 if e == 0 else offsets[span_start + e - offset][1]
                else:
                    first, last = span_start + s - offset, span_start + e - offset
                    if align_to_words:
                        while first > 0 and word_ids[first - 1] == word_ids[first]:
                            first -= 1
                        while last + 1 < len(word_ids) and word_ids[last + 1] == word_ids[last]:
                            last += 1
                    begin, stop = offsets[first][0], offsets[last][1]
                text = context[begin:stop]
                same = next((a for a in answers if a["answer"].lower() == text.lower()), None)
                if same is not None:
                    same["score"] += float(score)
                else:
                    answers.append({"score": float(score), "start": begin, "end": stop, "answer": text})
        if handle_impossible_answer:
            answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
        out.append(sorted(answers, key=lambda a: a["score"], reverse=True)[:top_k])
    return out
