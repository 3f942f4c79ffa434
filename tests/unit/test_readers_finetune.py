"""Task readers: the synthetic fixtures parse; every kind of bad row stops with the file and line, or is skipped
and counted with skip_bad_rows; empty files are a clear error."""

from __future__ import annotations

import json

import pytest

from bertkit.data.tasks.conll import read_conll
from bertkit.data.tasks.glue import read_glue
from bertkit.data.tasks.readers import DataError, read_table
from bertkit.data.tasks.squad import read_squad
from bertkit.data.tasks.swag import read_swag


def test_glue_fixtures(ft):
    sst = read_glue(ft / "sst2_train.tsv", "sst2", require_label=True)
    assert len(sst) == 64 and {e.label for e in sst} == {"0", "1"} and sst[0].text_b is None
    cola = read_glue(ft / "cola_train.tsv", "cola", require_label=True)  # no header
    assert len(cola) == 48 and cola[0].line == 1
    mrpc = read_glue(ft / "mrpc_dev.tsv", "mrpc", require_label=True)  # BOM + unbalanced quote in text
    assert len(mrpc) == 16 and mrpc[0].text_b.startswith('" ')
    stsb = read_glue(ft / "stsb_dev.tsv", "stsb", require_label=True)
    assert all(isinstance(e.label, float) for e in stsb)


def test_glue_test_file_without_labels(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_text("index\tsentence1\tsentence2\n0\ta\tb\n1\tc\td\n")
    ex = read_glue(p, "rte")
    assert [e.guid for e in ex] == ["0", "1"] and ex[0].label is None
    with pytest.raises(DataError, match="no label column"):
        read_glue(p, "rte", require_label=True)


def test_glue_bad_rows(tmp_path):
    p = tmp_path / "bad.tsv"
    p.write_text("sentence\tlabel\ngood one\t1\ntoo\tmany\tcols\nfine\t0\nweird\t7\n")
    with pytest.raises(DataError, match=r"bad\.tsv:3: expected 2 tab-separated columns, got 3"):
        read_glue(p, "sst2")
    ex = read_glue(p, "sst2", skip_bad_rows=True)
    assert len(ex) == 2 and ex.skipped == 2
    s = tmp_path / "sts.tsv"
    s.write_text("sentence1\tsentence2\tscore\na\tb\t4.5\nc\td\thigh\n")
    with pytest.raises(DataError, match=r"sts\.tsv:3: label 'high' is not a finite number"):
        read_glue(s, "stsb")
    q = tmp_path / "qnli.tsv"
    q.write_text("index\tquestion\tsentence\tlabel\n0\tq\ts\tmaybe\n")
    with pytest.raises(DataError, match=r"qnli\.tsv:2: unknown label 'maybe'"):
        read_glue(q, "qnli")


def test_empty_files_are_clear_errors(tmp_path):
    e = tmp_path / "empty.tsv"
    e.write_text("")
    with pytest.raises(DataError, match="empty"):
        read_glue(e, "sst2")
    e2 = tmp_path / "blank.txt"
    e2.write_text("\n\n  \n")
    with pytest.raises(DataError, match="empty"):
        read_conll(e2)
    h = tmp_path / "header_only.tsv"
    h.write_text("sentence\tlabel\n")
    with pytest.raises(DataError, match="no usable rows"):
        read_glue(h, "sst2")
    with pytest.raises(DataError, match="no such file"):
        read_glue(tmp_path / "missing.tsv", "sst2")


def test_tabular_csv_and_jsonl(ft, tmp_path):
    csv_ex = read_table(ft / "generic_train.csv", "review", label_column="sentiment")
    jsonl_ex = read_table(ft / "generic_train.jsonl", "review", label_column="sentiment")
    assert len(csv_ex) == len(jsonl_ex) == 48
    assert [e.text_a for e in csv_ex] == [e.text_a for e in jsonl_ex]
    assert {e.label for e in csv_ex} == {"neg", "pos"}
    pair = read_table(ft / "generic_train.csv", "review", pair_column="topic", label_column="sentiment")
    assert pair[0].text_b == "movies, films"  # quoted comma kept
    with pytest.raises(DataError, match="no column 'nope'"):
        read_table(ft / "generic_train.csv", "nope", label_column="sentiment")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "y": 1}\n{"text": "b", "y": "x"}\nnot json\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: label 'x' in column 'y' is not a finite number"):
        read_table(bad, "text", label_column="y", regression=True)
    ex = read_table(bad, "text", label_column="y", regression=True, skip_bad_rows=True)
    assert len(ex) == 1 and ex.skipped == 2
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,label\na,1\nb,0,extra\n")
    with pytest.raises(DataError, match=r"bad\.csv:3: expected 2 columns"):
        read_table(bad_csv, "text")


def test_squad_reader(ft, tmp_path):
    ex, version = read_squad(ft / "squad_train.json")
    assert version == "1.1" and len(ex) == 12
    for e in ex:
        for text, start in e.answers:
            assert e.context[start : start + len(text)] == text
    ex2, version2 = read_squad(ft / "squad_v2_dev.json")
    assert version2 == "2.0" and sum(e.is_impossible for e in ex2) == 4
    data = json.loads((ft / "squad_train.json").read_text())
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data, indent=1))
    with pytest.raises(DataError, match=r"bad\.json:\d+: .*\(id q1\): answer '.*' does not occur at offset"):
        read_squad(bad)
    ex3, _ = read_squad(bad, skip_bad_rows=True)
    assert len(ex3) == 11 and ex3.skipped == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"paragraphs": ]}')
    with pytest.raises(DataError, match=r"broken\.json:2: not valid JSON"):
        read_squad(broken)


def test_conll_reader(ft, tmp_path):
    sents = read_conll(ft / "conll_train.txt")
    assert len(sents) == 24 and sents[0].tags[:2] == ["B-PER", "O"] and sents[0].line == 3
    bad = tmp_path / "bad.txt"
    bad.write_text("Alice NNP B-NP B-PER\nworks VBZ B-VP O\n\nBob NNP B-NP B-FOO\n\nCarol NNP B-PER\n\nx y z Q-PER\n")
    with pytest.raises(DataError, match=r"bad\.txt:4: unknown tag 'B-FOO'"):
        read_conll(bad, labels=["O", "B-PER", "I-PER"])
    with pytest.raises(DataError, match=r"bad\.txt:6: expected 4 columns"):
        read_conll(bad)
    ex = read_conll(bad, labels=["O", "B-PER", "I-PER"], skip_bad_rows=True)
    assert len(ex) == 1 and ex.skipped == 3  # unknown tag, column count, malformed tag 'Q-PER'
    words_only = tmp_path / "words.txt"
    words_only.write_text("Alice\nworks\n\nBob\n")
    assert [s.tags for s in read_conll(words_only, require_tags=False)] == [None, None]
    with pytest.raises(DataError, match="no tags"):
        read_conll(words_only)


def test_swag_reader(ft, tmp_path):
    ex = read_swag(ft / "swag_train.csv")
    assert len(ex) == 32 and all(len(e.endings) == 4 for e in ex)
    assert all(e.endings[e.label].split()[0] == e.context.split()[0] for e in ex)  # sent2 (the name) leads
    text = (ft / "swag_train.csv").read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([text[0], text[1], text[2].rsplit(",", 1)[0] + ",9"]) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv:3: label '9' is not an ending index"):
        read_swag(bad)
