"""STS and retrieval metrics against hand computations; the BEIR reader; exact search."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bertkit.data.tasks.readers import DataError
from bertkit.embeddings.data import TextRows
from bertkit.embeddings.evaluate import (
    exact_search,
    ranking_metrics,
    read_beir,
    retrieval_metrics,
    sts_metrics,
)


class TableEncoder:
    """encode() looks each text up in a table of vectors (a stand-in for a model)."""

    def __init__(self, table):
        self.table = {k: np.asarray(v, dtype=np.float32) for k, v in table.items()}

    def encode(self, texts, batch_size=64, **kwargs):
        return np.stack([self.table[t] for t in texts])


def test_ranking_metrics_by_hand():
    qrels = {"q1": {"d1": 1, "d3": 2}, "q2": {"d2": 1}, "q3": {"d9": 0}}  # q3: nothing relevant, not counted
    rankings = {"q1": ["d3", "d2", "d1"], "q2": ["d1", "d4", "d5"], "q3": ["d9"]}
    m = ranking_metrics(rankings, qrels, k_values=(1, 2, 3))
    dcg1 = 2 / math.log2(2) + 1 / math.log2(4)
    idcg1 = 2 / math.log2(2) + 1 / math.log2(3)
    assert m["queries"] == 2
    assert m["ndcg@10"] == pytest.approx(100 * (dcg1 / idcg1 + 0) / 2)
    assert m["mrr@10"] == pytest.approx(100 * (1.0 + 0.0) / 2)
    assert m["recall@1"] == pytest.approx(100 * (0.5 + 0) / 2)
    assert m["recall@3"] == pytest.approx(100 * (1.0 + 0) / 2)


def test_exact_search_orders_by_cosine():
    corpus = np.array([[1, 0], [0, 1], [1, 1], [-1, 0]], dtype=np.float32)
    top = exact_search(np.array([[2, 0.1], [0, -1]], dtype=np.float32), corpus, 3, chunk=1)
    assert top[0].tolist() == [0, 2, 1]
    assert top[1][:1].tolist() == [3] or top[1][:1].tolist() == [0]  # equal cosines (0): any
    assert top.shape == (2, 3)


def test_sts_metrics_scale_and_sign():
    data = TextRows([("a", "b"), ("a", "c"), ("a", "d")], scores=[5.0, 2.0, 0.0])
    enc = TableEncoder({"a": [1, 0], "b": [1, 0.1], "c": [1, 1], "d": [0, 1]})
    m = sts_metrics(enc, data)
    assert m["spearman"] == pytest.approx(100.0)
    assert 90 < m["pearson"] <= 100
    reverse = sts_metrics(enc, TextRows(data.rows, scores=[0.0, 2.0, 5.0]))
    assert reverse["spearman"] == pytest.approx(-100.0)


def _beir(tmp_path, qrels_text="query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td1\t1\n"):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps(d)
            for d in [{"_id": "d1", "title": "cats", "text": "a cat"}, {"_id": "d2", "title": "", "text": "a dog"}]
        )
        + "\n"
    )
    (root / "queries.jsonl").write_text(
        "\n".join(
            json.dumps(q)
            for q in [{"_id": "q1", "text": "dog?"}, {"_id": "q2", "text": "cat?"}, {"_id": "q3", "text": "unjudged"}]
        )
        + "\n"
    )
    (root / "qrels" / "test.tsv").write_text(qrels_text)
    return root


def test_beir_reader_and_retrieval(tmp_path):
    data = read_beir(_beir(tmp_path))
    assert data.corpus_texts == ["cats a cat", "a dog"] and data.qrels == {"q1": {"d2": 1}, "q2": {"d1": 1}}
    good = TableEncoder({"dog?": [0, 1], "cat?": [1, 0], "cats a cat": [1, 0.1], "a dog": [0.1, 1]})
    assert retrieval_metrics(good, data)["ndcg@10"] == pytest.approx(100.0)
    bad = TableEncoder({"dog?": [1, 0], "cat?": [0, 1], "cats a cat": [1, 0.1], "a dog": [0.1, 1]})
    m = retrieval_metrics(bad, data)
    assert m["recall@1"] == 0.0 and m["mrr@10"] == pytest.approx(50.0)


def test_beir_errors(tmp_path):
    root = _beir(tmp_path, "query-id\tcorpus-id\tscore\nq1\td2\tyes\n")
    with pytest.raises(DataError, match=r"test\.tsv:2: score 'yes' is not a number"):
        read_beir(root)
    with pytest.raises(DataError, match="splits found: \\['test'\\]"):
        read_beir(root, split="dev")
