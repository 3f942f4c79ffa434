"""Embedding data readers: formats, column choice, and the bad-row errors (file:line, --skip-bad-rows)."""

from __future__ import annotations

import json

import pytest

from bertkit.data.tasks.readers import DataError
from bertkit.embeddings.data import read_nli, read_pairs, read_scored, read_squad_pairs, read_texts


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_text_and_columns(tmp_path):
    rows = read_texts(_write(tmp_path / "a.txt", "one line\n\n  two line  \n"))
    assert rows.column(0) == ["one line", "two line"] and rows.lines == [1, 3]
    rows = read_texts(_write(tmp_path / "a.jsonl", '{"text": "x"}\n{"body": "y", "text": "z"}\n'))
    assert rows.column(0) == ["x", "z"]
    rows = read_texts(_write(tmp_path / "a.csv", 'id,body\n1,"a, b"\n'), text_column="body")
    assert rows.column(0) == ["a, b"]


def test_pairs_with_and_without_negatives(tmp_path):
    rows = read_pairs(_write(tmp_path / "p.tsv", "anchor\tpositive\tnegative\nq1\tp1\tn1\nq2\tp2\tn2\n"))
    assert rows.rows == [("q1", "p1", "n1"), ("q2", "p2", "n2")]
    rows = read_pairs(_write(tmp_path / "p2.tsv", "q\td\nq1\tp1\n"), text_column="q", pair_column="d")
    assert rows.rows == [("q1", "p1")]
    rows = read_pairs(_write(tmp_path / "p.jsonl", '{"anchor": "a", "positive": "b"}\n'))
    assert rows.rows == [("a", "b")]


def test_bad_rows_name_file_and_line(tmp_path):
    path = _write(tmp_path / "p.tsv", "anchor\tpositive\nq1\tp1\nq2\t\nq3\tp3\n")
    with pytest.raises(DataError, match=r"p\.tsv:3: missing or empty text in column 'positive'"):
        read_pairs(path)
    rows = read_pairs(path, skip_bad_rows=True)
    assert rows.rows == [("q1", "p1"), ("q3", "p3")] and rows.skipped == 1
    sts = _write(tmp_path / "s.csv", "sentence1,sentence2,score\na,b,1.5\nc,d,high\n")
    with pytest.raises(DataError, match=r"s\.csv:3: score 'high' in column 'score' is not a finite number"):
        read_scored(sts)
    bad_json = _write(tmp_path / "t.jsonl", '{"text": "a"}\n{"text": \n')
    with pytest.raises(DataError, match=r"t\.jsonl:2: not valid JSON"):
        read_texts(bad_json)
    with pytest.raises(DataError, match=r"p\.tsv:1: no column 'question'"):
        read_pairs(path, text_column="question")


def test_one_column_file_given_to_pairs(tmp_path):
    with pytest.raises(DataError, match="plain-text file with one text per line.*--task simcse"):
        read_pairs(_write(tmp_path / "t.txt", "a\nb\n"))
    with pytest.raises(DataError, match="one column.*--task simcse"):
        read_pairs(_write(tmp_path / "t.tsv", "text\na\nb\n"))


def test_glue_stsb_file(fixtures_dir):
    rows = read_scored(fixtures_dir / "finetune" / "stsb_dev.tsv")
    assert rows.width == 2 and len(rows.scores) == len(rows) > 0
    assert all(0.0 <= s <= 5.0 for s in rows.scores)


def test_nli_contradictions_become_hard_negatives(tmp_path):
    path = _write(
        tmp_path / "nli.jsonl",
        "\n".join(
            json.dumps(r)
            for r in [
                {"premise": "p1", "hypothesis": "e1", "label": "entailment"},
                {"premise": "p1", "hypothesis": "c1", "label": "contradiction"},
                {"premise": "p1", "hypothesis": "n1", "label": "neutral"},
                {"premise": "p2", "hypothesis": "e2", "label": 0},
                {"premise": "p2", "hypothesis": "c2", "label": 2},
                {"premise": "p3", "hypothesis": "e3", "label": "entailment"},  # no contradiction: left out
            ]
        )
        + "\n",
    )
    assert read_nli(path).rows == [("p1", "e1", "c1"), ("p2", "e2", "c2")]
    bad = _write(tmp_path / "nli.tsv", "premise\thypothesis\tlabel\np\th\tmaybe\n")
    with pytest.raises(DataError, match=r"nli\.tsv:2: label 'maybe'"):
        read_nli(bad)


def test_squad_pairs(tmp_path):
    context = "The cat sat on the mat. The dog ran to the river. It was cold."
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "1",
                                "question": "Where did the dog run?",
                                "answers": [{"text": "river", "answer_start": 43}],
                            },
                            {"id": "2", "question": "Who sat?", "answers": [{"text": "cat", "answer_start": 4}]},
                        ],
                    }
                ],
            }
        ],
    }
    path = _write(tmp_path / "squad.json", json.dumps(data))
    assert read_squad_pairs(path, "sentence").rows == [
        ("Where did the dog run?", "The dog ran to the river."),
        ("Who sat?", "The cat sat on the mat."),
    ]
    assert read_squad_pairs(path, "paragraph").rows[0] == ("Where did the dog run?", context)
