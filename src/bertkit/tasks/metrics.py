"""The official metrics of each task family, in plain numpy (no scipy / sklearn at run time).

- GLUE: accuracy, binary F1, Matthews correlation (MCC), Pearson and Spearman correlation.
- SQuAD: exact match and F1 exactly as the official v1.1 / v2.0 evaluation scripts compute them (answer
  normalisation, maximum over the gold answers, empty strings for unanswerable questions).
- CoNLL: entity-level precision / recall / F1 as ``conlleval`` computes them (chunk boundaries from its
  ``startOfChunk`` / ``endOfChunk`` rules, so IOB1 and IOB2 both work).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Sequence

import numpy as np

# --------------------------------------------------------------------------------------------- classification


def accuracy(preds: Sequence, labels: Sequence) -> float:
    preds, labels = np.asarray(preds), np.asarray(labels)
    _check_lengths(preds, labels)
    return float((preds == labels).mean()) if len(labels) else 0.0


def f1_binary(preds: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """F1 of the positive class (GLUE's MRPC / QQP F1; sklearn's ``f1_score`` default)."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    _check_lengths(preds, labels)
    tp = int(((preds == positive) & (labels == positive)).sum())
    fp = int(((preds == positive) & (labels != positive)).sum())
    fn = int(((preds != positive) & (labels == positive)).sum())
    denom = 2 * tp + fp + fn
    return 2 * tp / denom if denom else 0.0


def matthews_corrcoef(preds: Sequence[int], labels: Sequence[int]) -> float:
    """Multiclass MCC (Gorodkin's R_K), equal to sklearn's ``matthews_corrcoef``; 0.0 when undefined."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    _check_lengths(preds, labels)
    classes = np.union1d(preds, labels)
    index = {c: i for i, c in enumerate(classes.tolist())}
    k = len(classes)
    cm = np.zeros((k, k), dtype=np.float64)
    for p, y in zip(preds.tolist(), labels.tolist()):
        cm[index[y], index[p]] += 1
    t_sum, p_sum = cm.sum(axis=1), cm.sum(axis=0)
    n_correct, n = np.trace(cm), cm.sum()
    cov_ytyp = n_correct * n - np.dot(t_sum, p_sum)
    cov_ypyp = n * n - np.dot(p_sum, p_sum)
    cov_ytyt = n * n - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    _check_lengths(x, y)
    xm, ym = x - x.mean(), y - y.mean()
    denom = np.sqrt((xm * xm).sum() * (ym * ym).sum())
    return float((xm * ym).sum() / denom) if denom > 0 else 0.0


def _rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (scipy's ``rankdata(method='average')``)."""
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    ranks = np.empty(len(a), dtype=np.float64)
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    _check_lengths(x, y)
    return pearson(_rankdata(x), _rankdata(y))


def _check_lengths(a: np.ndarray, b: np.ndarray) -> None:
    if len(a) != len(b):
        raise ValueError(f"predictions ({len(a)}) and labels ({len(b)}) differ in length")


# --------------------------------------------------------------------------------------------- SQuAD (official)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (the official scripts' function)."""

    def remove_articles(text: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def squad_exact(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def squad_f1_v1(prediction: str, ground_truth: str) -> float:
    """v1.1's token F1 (an empty normalised side gives 0, as in the v1.1 script)."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_f1_v2(prediction: str, ground_truth: str) -> float:
    """v2.0's token F1: if either side has no tokens, F1 is 1 when both are empty, else 0."""
    gold_toks, pred_toks = _tokens(ground_truth), _tokens(prediction)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return float(gold_toks == pred_toks)
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def squad_evaluate(gold: dict[str, list[str]], predictions: dict[str, str], version: str = "1.1") -> dict[str, float]:
    """EM and F1 in percent over every gold question, as the official scripts report them.

    ``gold`` maps question id -> gold answer texts (an unanswerable v2 question has ``[]``).
    v1.1: max over the gold answers; a question without a prediction scores 0 (the script warns).
    v2.0: an unanswerable question's gold is ``[""]``; adds HasAns_/NoAns_ breakdowns.
    """
    em, f1 = squad_raw_scores(gold, predictions, version)
    total = len(gold)
    out = {
        "exact_match": 100.0 * sum(em.values()) / total if total else 0.0,
        "f1": 100.0 * sum(f1.values()) / total if total else 0.0,
        "total": total,
    }
    if version == "2.0":
        has_ans = [q for q, a in gold.items() if any(normalize_answer(x) for x in a)]
        no_ans = [q for q in gold if q not in set(has_ans)]
        for name, ids in (("HasAns", has_ans), ("NoAns", no_ans)):
            if ids:
                out[f"{name}_exact"] = 100.0 * sum(em[q] for q in ids) / len(ids)
                out[f"{name}_f1"] = 100.0 * sum(f1[q] for q in ids) / len(ids)
                out[f"{name}_total"] = len(ids)
    return out


def squad_raw_scores(
    gold: dict[str, list[str]], predictions: dict[str, str], version: str = "1.1"
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question exact match and F1 (0..1), as ``get_raw_scores`` of the official scripts."""
    if version not in ("1.1", "2.0"):
        raise ValueError(f"SQuAD version must be '1.1' or '2.0', got {version!r}")
    em: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in gold.items():
        if version == "2.0":
            answers = [a for a in answers if normalize_answer(a)] or [""]
            pred = predictions.get(qid, "")
            em[qid] = max(float(normalize_answer(a) == normalize_answer(pred)) for a in answers)
            f1[qid] = max(squad_f1_v2(pred, a) for a in answers)
        else:
            if qid not in predictions:
                em[qid] = f1[qid] = 0.0
                continue
            pred = predictions[qid]
            em[qid] = max(squad_exact(pred, a) for a in answers)
            f1[qid] = max(squad_f1_v1(pred, a) for a in answers)
    return em, f1


def squad_v2_best_thresholds(
    gold: dict[str, list[str]], answers: dict[str, str], na_probs: dict[str, float]
) -> dict[str, float]:
    """The SQuAD 2.0 script's ``find_all_best_thresh``: the null-answer threshold that maximises EM (and F1).

    ``answers`` are the best non-null answers, ``na_probs`` the no-answer scores (bertkit: null_odds = null score
    minus best span score); a question is answered when its score is <= the threshold. Returns ``best_exact``,
    ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (percent and score), as the official script does."""
    em, f1 = squad_raw_scores(gold, answers, "2.0")
    has_ans = {q: any(normalize_answer(x) for x in a) for q, a in gold.items()}
    out = {}
    for name, scores in (("exact", em), ("f1", f1)):
        cur = best = float(sum(1 for q in has_ans if not has_ans[q]))
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            cur += scores[qid] if has_ans[qid] else (-1.0 if answers.get(qid) else 0.0)
            if cur > best:
                best, best_thresh = cur, na_probs[qid]
        out[f"best_{name}"] = 100.0 * best / len(scores) if scores else 0.0
        out[f"best_{name}_thresh"] = float(best_thresh)
    return out


# --------------------------------------------------------------------------------------------- conlleval


def _split_tag(tag: str) -> tuple[str, str]:
    if tag in ("O", ""):
        return "O", ""
    if "-" in tag:
        prefix, _, kind = tag.partition("-")
        return prefix, kind
    return tag, ""


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's endOfChunk, rule for rule: does a chunk end between the previous and the current token?"""
    pairs = {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
    if (prev_tag, tag) in pairs:
        return True
    if prev_tag not in ("O", ".") and prev_type != type_:
        return True
    return prev_tag in ("]", "[")


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's startOfChunk, rule for rule: does a chunk start at the current token?"""
    pairs = {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}
    if (prev_tag, tag) in pairs:
        return True
    if tag not in ("O", ".") and prev_type != type_:
        return True
    return tag in ("[", "]")


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks ``(type, first, last)`` (inclusive token indices) as conlleval finds them in one sentence."""
    chunks = []
    prev_tag, prev_type, start = "O", "", None
    for i, full in enumerate(list(tags) + ["O"]):
        tag, type_ = _split_tag(full)
        if start is not None and _end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, start, i - 1))
            start = None
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return chunks


def conlleval(gold: Iterable[Sequence[str]], pred: Iterable[Sequence[str]]) -> dict[str, float]:
    """Entity-level P / R / F1 (percent) and token accuracy over sentences, as ``conlleval`` reports them.

    ``gold`` and ``pred`` are per-sentence tag lists of equal lengths. Like conlleval, sentences are
    scored one at a time (a chunk never crosses a sentence boundary). Per-type figures are under ``per_type``.
    """
    correct_chunks = found_gold = found_pred = 0
    correct_tokens = total_tokens = 0
    per_type: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])  # correct, gold, pred
    for n, (g, p) in enumerate(zip(gold, pred, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {n}: {len(g)} gold tags but {len(p)} predicted tags")
        g_chunks, p_chunks = set(get_entities(g)), set(get_entities(p))
        correct = g_chunks & p_chunks
        correct_chunks += len(correct)
        found_gold += len(g_chunks)
        found_pred += len(p_chunks)
        for t, *_ in correct:
            per_type[t][0] += 1
        for t, *_ in g_chunks:
            per_type[t][1] += 1
        for t, *_ in p_chunks:
            per_type[t][2] += 1
        correct_tokens += sum(a == b for a, b in zip(g, p))
        total_tokens += len(g)

    def prf(c: int, gold_n: int, pred_n: int) -> tuple[float, float, float]:
        precision = 100.0 * c / pred_n if pred_n else 0.0
        recall = 100.0 * c / gold_n if gold_n else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1

    precision, recall, f1 = prf(correct_chunks, found_gold, found_pred)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": 100.0 * correct_tokens / total_tokens if total_tokens else 0.0,
        "found_gold": found_gold,
        "found_pred": found_pred,
        "correct": correct_chunks,
        "per_type": {t: dict(zip(("precision", "recall", "f1"), prf(*v))) for t, v in sorted(per_type.items())},
    }
