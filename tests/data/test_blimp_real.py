"""Real-data tier: ``bertkit evaluate --task blimp`` end to end on the real BLiMP (../shared/data/blimp, 67 files),
three pairs of each paradigm (``--pairs-per-paradigm 3``), with a tiny random BERT on Google's uncased vocabulary:
every paradigm is read and scored under its UID, the pairs are each file's first three, the fields are the data's
own (the paper's four: one paradigm's misspelt field joins its fellows) with each the mean of its paradigms, and the
overall is the mean of the 67 paradigms. A few seconds."""

from __future__ import annotations

import json

import numpy as np
from tinymodels import make_model_dir

from bertkit.cli import main


def test_blimp_on_three_pairs_of_every_paradigm(shared_data, tmp_path):
    blimp = shared_data / "blimp"
    model = make_model_dir(tmp_path / "model", shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", layers=1)
    out = tmp_path / "out"
    argv = ["evaluate", "--task", "blimp", "--model", str(model), "--data", str(blimp), "--output", str(out)]
    assert main([*argv, "--pairs-per-paradigm", "3", "--quiet", "--device", "cpu"]) == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))

    files = sorted(blimp.glob("*.jsonl"))
    assert len(files) == 67 and metrics["pairs"] == 201
    first = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(next(f)) for _ in range(3)]
        first[rows[0]["UID"]] = rows
    assert sorted(metrics["paradigms"]) == sorted(first) == sorted(p.stem for p in files)
    assert {round(v, 6) for v in metrics["paradigms"].values()} <= {0.0, 33.333333, 66.666667, 100.0}  # k of 3 pairs
    assert metrics["overall"] == np.mean(list(metrics["paradigms"].values()))
    fields: dict[str, list[float]] = {}
    for uid, rows in first.items():  # the data spells one paradigm's field "syntax/semantics": the paper's one field
        fields.setdefault(rows[0]["field"].replace("syntax/semantics", "syntax_semantics"), []).append(
            metrics["paradigms"][uid]
        )
    assert metrics["fields"] == {f: np.mean(v) for f, v in fields.items()}
    assert sorted(metrics["fields"]) == ["morphology", "semantics", "syntax", "syntax_semantics"]

    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(pairs) == 201
    for row in pairs:
        source = first[row["UID"]][row["pair"]]
        assert (row["sentence_good"], row["sentence_bad"]) == (source["sentence_good"], source["sentence_bad"])
        assert row["good"] < 0 and row["bad"] < 0 and row["right"] == (row["good"] > row["bad"])
