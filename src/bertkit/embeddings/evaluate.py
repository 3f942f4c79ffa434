"""Sentence-embedding evaluation: STS (Pearson / Spearman of the cosine, x 100) and BEIR-layout retrieval.

Retrieval uses exact search (every query against every document, cosine), and the BEIR / pytrec_eval definitions:

    nDCG@10    sum_{i<10} rel_i / log2(i + 2), over the same sum for the ideal order of the judged documents
    MRR@10     1 / rank of the first relevant document in the top 10 (0 if none)
    Recall@k   relevant documents in the top k / relevant documents of the query

averaged over the queries that have at least one relevant (score > 0) judgement. A document's text is its title and
its text joined by a space, as BEIR's sentence-transformers wrapper does.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.tasks.readers import DataError, RowGuard, check_file, jsonl_records, open_text
from bertkit.embeddings.data import TextRows
from bertkit.errors import InputError
from bertkit.files import write_text
from bertkit.tasks.metrics import pearson, spearman

logger = logging.getLogger(__name__)

K_VALUES = (1, 10, 100)


def _encode(encoder, texts: Sequence[str], batch_size: int, **options) -> np.ndarray:
    return encoder.encode(list(texts), batch_size=batch_size, **options)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two [N, D] arrays -> [N]."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(1)


def sts_metrics(encoder, data: TextRows, batch_size: int = 64, **options) -> dict[str, float]:
    """Pearson and Spearman (x 100) between the gold scores and the cosine of each pair's embeddings.
    ``options`` (layers, pooling, normalize, max_length) go to ``encoder.encode``."""
    if data.scores is None or data.width != 2:
        raise InputError("STS evaluation needs (text, text, score) rows")
    texts = list(dict.fromkeys(data.column(0) + data.column(1)))  # each distinct text once
    vectors = _encode(encoder, texts, batch_size, **options)
    index = {t: i for i, t in enumerate(texts)}
    a = vectors[[index[t] for t in data.column(0)]]
    b = vectors[[index[t] for t in data.column(1)]]
    cos = cosine_rows(a, b)
    return {
        "pearson": 100 * pearson(cos, data.scores),
        "spearman": 100 * spearman(cos, data.scores),
        "examples": len(data),
    }


# ------------------------------------------------------------------------------------------------ retrieval


@dataclass
class BeirData:
    corpus_ids: list[str]
    corpus_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]  # query id -> {document id: relevance}


def _read_jsonl_ids(path: Path, guard: RowGuard, with_title: bool) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open_text(path) as f:
        for n, obj in jsonl_records(f):
            if isinstance(obj, str):
                guard.bad(n, obj)
                continue
            if "_id" not in obj or not isinstance(obj.get("text"), str):
                guard.bad(n, 'expected an object with "_id" and a "text" string')
                continue
            text = obj["text"].strip()
            title = str(obj.get("title") or "").strip() if with_title else ""
            text = f"{title} {text}".strip() if title else text
            if not text:
                guard.bad(n, "empty text")
                continue
            ids.append(str(obj["_id"]))
            texts.append(text)
    if not ids:
        raise DataError(path, None, "no usable rows")
    return ids, texts


def read_beir(directory: str | os.PathLike, split: str = "test", skip_bad_rows: bool = False) -> BeirData:
    """A BEIR dataset folder: ``corpus.jsonl`` ({_id, title, text}), ``queries.jsonl`` ({_id, text}) and
    ``qrels/SPLIT.tsv`` (query-id, corpus-id, score; a header row)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(directory, None, "not a BEIR folder (corpus.jsonl, queries.jsonl, qrels/*.tsv)")
    corpus_file, queries_file = check_file(directory / "corpus.jsonl"), check_file(directory / "queries.jsonl")
    qrels_file = directory / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        found = sorted(p.stem for p in (directory / "qrels").glob("*.tsv"))
        raise DataError(qrels_file, None, f"no such qrels file (splits found: {found or 'none'}; choose with --split)")
    corpus_ids, corpus_texts = _read_jsonl_ids(corpus_file, RowGuard(corpus_file, skip_bad_rows), True)
    query_ids, query_texts = _read_jsonl_ids(queries_file, RowGuard(queries_file, skip_bad_rows), False)
    guard = RowGuard(qrels_file, skip_bad_rows)
    qrels: dict[str, dict[str, int]] = {}
    with open_text(qrels_file) as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").split("\t")
            if not line.strip() or (n == 1 and parts[0] in ("query-id", "query_id", "qid")):
                continue
            if len(parts) < 3:
                guard.bad(n, f"expected query-id, corpus-id, score (tab-separated), got {len(parts)} fields")
                continue
            try:
                score = int(float(parts[2]))
            except ValueError:
                guard.bad(n, f"score {parts[2]!r} is not a number")
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = score
    if not qrels:
        raise DataError(qrels_file, None, "no judgements")
    known = set(query_ids)
    missing = [q for q in qrels if q not in known]
    if not any(r > 0 for q, judged in qrels.items() if q in known for r in judged.values()):
        raise DataError(
            qrels_file,
            None,
            "no relevant judgement (score > 0) of a query in queries.jsonl"
            + (f" ({len(missing)} judged queries are not there, e.g. {missing[0]!r})" if missing else ""),
        )
    if missing:
        logger.warning(
            "%s: %d judged queries are not in queries.jsonl (e.g. %r); they are left out",
            qrels_file,
            len(missing),
            missing[0],
        )
    return BeirData(corpus_ids, corpus_texts, query_ids, query_texts, qrels)


def exact_search(
    queries: np.ndarray, corpus: np.ndarray, top_k: int, chunk: int = 1024, with_scores: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Indices [Nq, min(top_k, Nc)] of the highest-cosine documents per query, best first (ties: lower index);
    with ``with_scores``, (indices, their cosines)."""
    import torch

    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    c = torch.from_numpy(np.ascontiguousarray(corpus, dtype=np.float32))
    q = q / q.norm(dim=1, keepdim=True).clamp(min=1e-12)
    c = c / c.norm(dim=1, keepdim=True).clamp(min=1e-12)
    k = min(top_k, c.size(0))
    out, values = [], []
    for start in range(0, q.size(0), chunk):
        scores = q[start : start + chunk] @ c.T  # [n, Nc]
        top = torch.topk(scores, k, dim=1, sorted=True)
        out.append(top.indices)
        values.append(top.values)
    indices = torch.cat(out).numpy() if out else np.zeros((0, k), dtype=np.int64)
    if not with_scores:
        return indices
    return indices, torch.cat(values).numpy() if values else np.zeros((0, k), dtype=np.float32)


def write_run_file(path: str | os.PathLike, rankings: dict[str, list[tuple[str, float]]], tag: str = "bertkit") -> None:
    """A TREC run file (``qid Q0 docid rank score tag``, one line per retrieved document, ranks from 1), written
    atomically. Scores keep float32's 9 significant digits, so trec_eval's order (by score) is the ranking's."""

    if not tag or any(c.isspace() for c in tag):
        raise InputError(f"run tag {tag!r}: one word with no spaces")
    lines = []
    for qid, ranked in rankings.items():
        for rank, (doc, score) in enumerate(ranked, 1):
            if any(c.isspace() for c in qid + doc):
                raise InputError(f"query {qid!r} / document {doc!r}: an id with a space cannot go in a TREC run file")
            lines.append(f"{qid} Q0 {doc} {rank} {float(score):.9g} {tag}\n")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(lines))


def ranking_metrics(
    rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], k_values: Sequence[int] = K_VALUES
) -> dict[str, float]:
    """nDCG@10, MRR@10 and Recall@k (x 100) of ``rankings`` (query id -> document ids, best first)."""
    ndcg, mrr, recall = [], [], {k: [] for k in k_values}
    for qid, judged in qrels.items():
        relevant = {d: r for d, r in judged.items() if r > 0}
        if not relevant or qid not in rankings:
            continue
        ranked = rankings[qid]
        dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
        ideal = sorted(relevant.values(), reverse=True)[:10]
        idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
        ndcg.append(dcg / idcg)
        first = next((i for i, d in enumerate(ranked[:10]) if d in relevant), None)
        mrr.append(0.0 if first is None else 1.0 / (first + 1))
        for k in k_values:
            recall[k].append(sum(1 for d in ranked[:k] if d in relevant) / len(relevant))
    if not ndcg:
        raise InputError("no judged query with a relevant document was ranked")
    out = {"ndcg@10": 100 * float(np.mean(ndcg)), "mrr@10": 100 * float(np.mean(mrr))}
    out.update({f"recall@{k}": 100 * float(np.mean(v)) for k, v in recall.items()})
    out["queries"] = len(ndcg)
    return out


def retrieval_metrics(
    encoder,
    data: BeirData,
    batch_size: int = 64,
    k_values: Sequence[int] = K_VALUES,
    run_file: str | os.PathLike | None = None,
    run_tag: str = "bertkit",
    **options,
) -> dict[str, float]:
    """Embed the judged queries and the corpus, search exactly, and score the rankings; with ``run_file``, also
    write them as a TREC run file (the top max(k_values) documents of each judged query, with their cosines)."""
    judged = [i for i, q in enumerate(data.query_ids) if q in data.qrels]
    if not judged:
        raise InputError("none of the queries has judgements in the qrels file")
    if run_file is not None:  # before the work: a TREC run file's fields are split on spaces
        for name in [data.query_ids[i] for i in judged] + data.corpus_ids:
            if not name or any(c.isspace() for c in name):
                raise InputError(f"--run-file {run_file}: the id {name!r} holds a space, which a TREC run cannot")
    q_vec = _encode(encoder, [data.query_texts[i] for i in judged], batch_size, **options)
    c_vec = _encode(encoder, data.corpus_texts, batch_size, **options)
    top, scores = exact_search(q_vec, c_vec, max(k_values), with_scores=True)
    rankings = {data.query_ids[i]: [data.corpus_ids[j] for j in row] for i, row in zip(judged, top)}
    if run_file is not None:
        write_run_file(
            run_file,
            {
                data.query_ids[i]: [(data.corpus_ids[j], s) for j, s in zip(row, values)]
                for i, row, values in zip(judged, top, scores)
            },
            run_tag,
        )
    return ranking_metrics(rankings, data.qrels, k_values)
