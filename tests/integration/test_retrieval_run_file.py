"""`bertkit evaluate --task retrieval --run-file PATH` writes the ranking as a TREC run file: read back, it is the
ranking bertkit scored, and scored by ir_measures / pytrec_eval (the reference implementations) it gives bertkit's
own figures."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import tinymodels
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import BertForPreTraining
from bertkit.cli import main


@pytest.fixture(scope="module")
def fx(fixtures_dir) -> Path:
    return fixtures_dir / "embeddings"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, fx):
    vocab = (fx / "vocab.txt").read_text(encoding="utf-8").split()
    root = tmp_path_factory.mktemp("run")
    model = tinymodels.make_model_dir(root / "model", vocab, cls=BertForPreTraining, layers=2)
    run = root / "runs" / "test.run"  # a directory that does not exist yet
    assert (
        main(
            [
                "evaluate",
                "--task",
                "retrieval",
                "--model",
                str(model),
                "--data",
                str(fx / "beir"),
                "--output",
                str(root / "eval"),
                "--precision",
                "fp32",
                "--run-file",
                str(run),
            ]
        )
        == 0
    )
    return run, json.loads((root / "eval" / "metrics.json").read_text())


def _read_run(path: Path) -> dict[str, list[tuple[int, str, float]]]:
    out = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        assert q0 == "Q0" and tag == "bertkit"
        out[qid].append((int(rank), doc, float(score)))
    return out


def test_run_file_reads_back_as_the_ranking(evaluated, fx):
    from bertkit.embeddings.evaluate import ranking_metrics, read_beir

    run, metrics = evaluated
    assert metrics["run_file"] == str(run)
    ranked = _read_run(run)
    data = read_beir(fx / "beir")
    assert set(ranked) == {q for q in data.query_ids if q in data.qrels}
    for rows in ranked.values():
        assert [r for r, _, _ in rows] == list(range(1, len(data.corpus_ids) + 1))  # every document, ranks from 1
        scores = [s for _, _, s in rows]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)  # no ties to break
        assert {d for _, d, _ in rows} == set(data.corpus_ids)
    again = ranking_metrics({q: [d for _, d, _ in rows] for q, rows in ranked.items()}, data.qrels)
    assert again == {k: v for k, v in metrics.items() if k in again}


def test_run_file_scored_by_ir_measures_and_pytrec_eval(evaluated, fx):
    ir_measures = pytest.importorskip("ir_measures", reason="dev extra: pip install -e '.[dev]'")
    pytrec_eval = pytest.importorskip("pytrec_eval", reason="dev extra: pip install -e '.[dev]'")
    run, metrics = evaluated
    rows = [line.split("\t") for line in (fx / "beir" / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qrels = [ir_measures.Qrel(q, d, int(r)) for q, d, r in rows]  # BEIR's qrels TSV: query-id, corpus-id, score
    measures = {
        "ndcg@10": ir_measures.nDCG @ 10,
        "mrr@10": ir_measures.RR @ 10,
        "recall@1": ir_measures.R @ 1,
        "recall@10": ir_measures.R @ 10,
        "recall@100": ir_measures.R @ 100,
    }
    theirs = ir_measures.calc_aggregate(list(measures.values()), qrels, ir_measures.read_trec_run(str(run)))
    for name, measure in measures.items():
        assert 100 * theirs[measure] == pytest.approx(metrics[name], abs=1e-9), name
    # pytrec_eval directly, on the run file's text
    judged = defaultdict(dict)
    for q in qrels:
        judged[q.query_id][q.doc_id] = q.relevance
    ranking = defaultdict(dict)
    for qid, rows in _read_run(run).items():
        for _, doc, score in rows:
            ranking[qid][doc] = score
    per_query = pytrec_eval.RelevanceEvaluator(dict(judged), {"ndcg_cut.10", "recall.100"}).evaluate(dict(ranking))
    ndcg = 100 * sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)
    assert ndcg == pytest.approx(metrics["ndcg@10"], abs=1e-9) and len(per_query) == metrics["queries"]


def test_run_file_only_for_retrieval(fx, tmp_path, capsys):
    assert (
        main(
            [
                "evaluate",
                "--task",
                "sts",
                "--model",
                str(tmp_path),
                "--data",
                str(fx / "sts_dev.tsv"),
                "--run-file",
                str(tmp_path / "x.run"),
            ]
        )
        == 2
    )
    assert "--run-file is for --task retrieval" in capsys.readouterr().err


def test_run_file_refuses_ids_with_spaces(tmp_path):
    from bertkit.embeddings.evaluate import write_run_file

    with pytest.raises(ValueError, match="an id with a space"):
        write_run_file(tmp_path / "x.run", {"q 1": [("d1", 0.5)]})
    assert not (tmp_path / "x.run").exists()


def test_an_id_with_a_space_is_refused_before_the_work():
    """retrieval_metrics checks the ids a --run-file will hold before it embeds anything (the encoder here cannot)."""
    from bertkit.embeddings.evaluate import BeirData, retrieval_metrics
    from bertkit.errors import InputError

    data = BeirData(["d 1"], ["text"], ["q1"], ["query"], {"q1": {"d 1": 1}})
    with pytest.raises(InputError, match=r"--run-file x.run: the id 'd 1' holds a space"):
        retrieval_metrics(None, data, run_file="x.run")
