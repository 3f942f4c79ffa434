"""Fine-tuning end to end on the real files in ../shared/data (skipped when absent): every row of each file
parses, and a tiny model runs finetune -> metrics -> official outputs -> loadable model on small subsets.
This checks the pipeline, not accuracy."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.cli import main

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def tiny_uncased(tmp_path_factory, shared_data):
    import shutil

    from bertkit import BertConfig
    from bertkit.modeling import BertForPreTraining

    d = tmp_path_factory.mktemp("tiny_uncased")
    torch.manual_seed(0)
    BertForPreTraining(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    ).save_pretrained(d)
    shutil.copy(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return d


@pytest.mark.parametrize(
    "task,file,rows",
    [
        ("sst2", "SST-2/train.tsv", 67349),
        ("sst2", "SST-2/dev.tsv", 872),
        ("cola", "CoLA/train.tsv", 8551),
        ("cola", "CoLA/dev.tsv", 1043),
        ("mrpc", "MRPC/train.tsv", 3667),
        ("mrpc", "MRPC/dev.tsv", 408),
        ("qnli", "QNLI/dev.tsv", 5463),
        ("wnli", "WNLI/train.tsv", 635),
        ("wnli", "WNLI/dev.tsv", 71),
    ],
)
def test_glue_readers_parse_every_row(shared_data, task, file, rows):
    from bertkit.data.tasks.glue import read_glue

    path = shared_data / "glue" / file
    ex = read_glue(path, task, require_label=True)
    n_lines = sum(1 for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip())
    header = 0 if task == "cola" else 1
    assert ex.skipped == 0 and len(ex) == n_lines - header == rows


def test_squad_and_conll_readers_parse_every_row(shared_data):
    from bertkit.data.tasks.conll import read_conll
    from bertkit.data.tasks.squad import read_squad

    ex, version = read_squad(shared_data / "squad" / "dev-v1.1.json")
    assert version == "1.1" and len(ex) == 10570 and ex.skipped == 0
    train = read_conll(shared_data / "ner" / "conll2003" / "train.txt")
    valid = read_conll(shared_data / "ner" / "conll2003" / "valid.txt")
    assert len(train) == 14041 and len(valid) == 3250 and train.skipped == valid.skipped == 0


def _run(task, train, dev, model, out, *extra):
    argv = [
        "finetune",
        "--task",
        task,
        "--train",
        str(train),
        "--dev",
        str(dev),
        "--model",
        str(model),
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--lr",
        "1e-3",
        "--quiet",
        "--max-train-examples",
        "256",
        "--max-eval-examples",
        "160",
        "--precision",
        "fp32",
        *extra,
    ]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize(
    "task,folder,keys",
    [("sst2", "SST-2", {"accuracy"}), ("cola", "CoLA", {"mcc"}), ("mrpc", "MRPC", {"f1", "accuracy"})],
)
def test_glue_end_to_end(shared_data, tiny_uncased, tmp_path, task, folder, keys):
    out = tmp_path / task
    m = _run(
        task,
        shared_data / "glue" / folder / "train.tsv",
        shared_data / "glue" / folder / "dev.tsv",
        tiny_uncased,
        out,
        "--max-seq-length",
        "64",
    )
    assert keys <= set(m)
    lines = (out / "predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 161
    from bertkit.modeling import BertForSequenceClassification

    assert BertForSequenceClassification.from_pretrained(out).num_labels == 2


def test_squad_split_by_article(shared_data, tiny_uncased, tmp_path):
    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    train = {"version": "1.1", "data": data["data"][:2]}
    dev = {"version": "1.1", "data": data["data"][40:41]}
    (tmp_path / "train.json").write_text(json.dumps(train))
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    out = tmp_path / "squad"
    m = _run(
        "squad",
        tmp_path / "train.json",
        tmp_path / "dev.json",
        tiny_uncased,
        out,
        "--max-seq-length",
        "128",
        "--doc-stride",
        "64",
        "--max-train-examples",
        "128",
    )
    assert 0 <= m["exact_match"] <= m["f1"] <= 100
    preds = json.loads((out / "predictions.json").read_text())
    n_dev = sum(len(p["qas"]) for p in dev["data"][0]["paragraphs"])
    assert len(preds) == min(n_dev, 160) and all(isinstance(v, str) for v in preds.values())
    assert len(json.loads((out / "nbest_predictions.json").read_text())) == len(preds)
    from bertkit.modeling import BertForQuestionAnswering

    BertForQuestionAnswering.from_pretrained(out)


def test_conll_end_to_end(shared_data, tiny_uncased, tmp_path):
    out = tmp_path / "ner"
    m = _run(
        "conll2003",
        shared_data / "ner" / "conll2003" / "train.txt",
        shared_data / "ner" / "conll2003" / "valid.txt",
        tiny_uncased,
        out,
    )
    assert {"precision", "recall", "f1"} <= set(m)
    blocks = (out / "predictions.txt").read_text().strip().split("\n\n")
    assert len(blocks) == 160


def test_squad_answer_text_projection_keeps_em_f1(shared_data):
    """On the first 1000 questions of the SQuAD v1.1 dev set, logits peaked at each gold answer's pieces, then at
    spans cut one piece into the answer's first and last words (as an under-trained model predicts): Google's
    get_final_text projection (the default) scores no lower EM / F1 than the raw character spans, on both; whole-word
    widening (`words`) recovers the cut spans."""
    import numpy as np

    from bertkit import BertTokenizer
    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks.squad import SquadTask

    tok = BertTokenizer.from_pretrained(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", lowercase=True)
    examples, _ = read_squad(shared_data / "squad" / "dev-v1.1.json")
    del examples[1000:]
    task = SquadTask("squad")
    features = task.featurize(examples, tok, training=True)  # the gold span of each window that holds the answer

    def logits(cut: bool):
        out = []
        for f in features:
            start, end = np.zeros(len(f["input_ids"]), np.float32), np.zeros(len(f["input_ids"]), np.float32)
            s, e = f["start_position"], f["end_position"]
            pieces, base = f["tokens"], f["span_start"] - f["offset"]
            if s and cut:
                s += s < e and pieces[base + s + 1].startswith("##")  # start inside the first word
                e -= e > s and pieces[base + e].startswith("##")  # end inside the last word
            start[s], end[e] = 10.0, 10.0
            out.append((start, end))
        return out

    scores = {}
    for spans in ("gold", "cut"):
        window_logits = logits(spans == "cut")
        for mode in ("google", "chars", "words"):
            task.answer_text = mode
            m = task.metrics(examples, task.postprocess(examples, features, window_logits))
            scores[spans, mode] = (m["exact_match"], m["f1"])
    print({f"{s}/{m}": v for (s, m), v in scores.items()})
    for spans in ("gold", "cut"):
        assert (
            scores[spans, "google"][0] >= scores[spans, "chars"][0]
            and scores[spans, "google"][1] >= scores[spans, "chars"][1]
        )
    assert scores["gold", "google"][0] > 98.0
    assert scores["cut", "chars"][0] < 90.0 < 98.0 < scores["cut", "words"][0]
