"""bertkit.pipelines on tiny random heads, no fine-tuning run: label names, truncation, rerank on a one-label head,
directories without a head refused by name, NER grouping equal to transformers' TokenClassificationPipeline
(aggregation_strategy="simple"), long texts windowed. The pipelines against `bertkit predict` on fine-tuned models
are in tests/integration/test_pipelines.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tinymodels import NER_TEXTS, finetune_base, one_by_one_logits

from bertkit.pipelines import (
    InputTooLongError,
    NoHeadError,
    group_entities,
    load_pipeline,
)


def test_unnamed_labels_and_truncate_false(tmp_path):
    from bertkit.modeling import BertForSequenceClassification

    finetune_base(tmp_path, BertForSequenceClassification, seed=1, num_labels=3)  # no label names, no task config
    pipe = load_pipeline(tmp_path, precision="fp32")
    assert pipe.labels == ["LABEL_0", "LABEL_1", "LABEL_2"]
    out = pipe.predict(["the film is good ."], return_all_scores=True)[0]
    assert sorted(x["label"] for x in out) == pipe.labels and sum(x["score"] for x in out) == pytest.approx(1.0)
    long = " ".join(["good"] * 600)
    assert len(pipe.predict([long])[0]) == 1  # truncated to the model's positions by default
    with pytest.raises(InputTooLongError, match="input 0 is 602 tokens long, over the limit of 128"):
        pipe.predict([long], truncate=False)
    with pytest.raises(ValueError, match="rerank needs a one-label model"):
        pipe.rerank("q", ["a"])


def test_rerank_on_a_one_label_head(tmp_path):
    from bertkit.modeling import BertForSequenceClassification

    finetune_base(tmp_path, BertForSequenceClassification, seed=2, num_labels=1)  # a cross-encoder, as HF saves one
    pipe = load_pipeline(tmp_path, precision="fp32", batch_size=2)
    assert pipe.kind == "rerank"
    texts = ["the film is good .", "the cast is grim .", "carol lives in berlin .", "the plot"]
    out = pipe.rerank("where does carol live ?", texts, return_text=True)
    raw = pipe.rerank("where does carol live ?", texts, raw_scores=True)
    logits = one_by_one_logits(tmp_path, pipe.tokenizer, ["where does carol live ?"] * 4, texts, num_labels=1)[:, 0]
    assert [o["index"] for o in out] == list(np.argsort(-logits, kind="stable"))
    assert [o["text"] for o in out] == [texts[o["index"]] for o in out] and "text" not in raw[0]
    for o, r in zip(out, raw):
        assert r["score"] == pytest.approx(logits[r["index"]], abs=1e-5)
        assert o["score"] == pytest.approx(1 / (1 + np.exp(-logits[o["index"]])), abs=1e-6)


def test_no_head_is_named(tiny_dir, tmp_path):
    with pytest.raises(NoHeadError, match=r"architectures \['BertForPreTraining'\].*BertForSequenceClassification"):
        load_pipeline(tiny_dir)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 32}))
    with pytest.raises(NoHeadError, match="no 'architectures' field"):
        load_pipeline(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: no config.json"):
        load_pipeline(tmp_path / "empty")
    with pytest.raises(ValueError, match="quantize must be one of int8"):
        load_pipeline(tmp_path, quantize="int4")


def test_ner_simple_grouping_equals_transformers(random_ner_dir):
    transformers = pytest.importorskip("transformers")
    pipe = load_pipeline(random_ner_dir, precision="fp32")
    ours = pipe.ner(NER_TEXTS)
    hf_model = transformers.BertForTokenClassification.from_pretrained(random_ner_dir).eval()
    hf_tok = transformers.BertTokenizerFast.from_pretrained(random_ner_dir, do_lower_case=pipe.tokenizer.lowercase)
    hf = transformers.TokenClassificationPipeline(model=hf_model, tokenizer=hf_tok, aggregation_strategy="simple")
    theirs = [hf(t) for t in NER_TEXTS]
    assert sum(len(x) for x in ours) >= 4 and any(o["end"] - o["start"] > 5 for x in ours for o in x)  # not vacuous
    for text, a, b in zip(NER_TEXTS, ours, theirs):
        assert [(o["entity_group"], o["word"], o["start"], o["end"]) for o in a] == [
            (o["entity_group"], o["word"], o["start"], o["end"]) for o in b
        ], text
        assert [o["score"] for o in a] == pytest.approx([float(o["score"]) for o in b], abs=1e-5)


def test_ner_long_text_is_windowed(random_ner_dir):
    pipe = load_pipeline(random_ner_dir, precision="fp32")
    pipe.max_length = 8  # windows of 6 tokens
    text = NER_TEXTS[0] + " " + NER_TEXTS[1]
    tokens = pipe.ner(text, aggregation_strategy="none", ignore_labels=())
    enc = pipe.tokenizer.encode(text, add_special_tokens=False)
    assert [t["start"] for t in tokens] == [o[0] for o in enc.offsets]  # every token tagged, none twice
    assert group_entities(tokens) and all(text[g["start"] : g["end"]] for g in group_entities(tokens))


def test_rerank_listwise_loss_is_a_softmax_over_the_group(tiny_dir):
    from bertkit.tasks import get_task

    task = get_task("rerank")
    model = task.load_model(tiny_dir, finetuned=False).eval()
    torch.manual_seed(0)
    ids = torch.randint(8, 100, (3, 4, 9))
    types, mask = torch.zeros_like(ids), torch.ones_like(ids)
    labels = torch.tensor([0, 2, 3])
    out = model(ids, mask, types, labels=labels)
    with torch.no_grad():
        flat = model.model(ids.view(12, 9), mask.view(12, 9), types.view(12, 9)).logits.view(3, 4)
    torch.testing.assert_close(out.logits, flat)
    expected = -torch.log_softmax(flat, -1)[torch.arange(3), labels].mean()
    torch.testing.assert_close(out.loss, expected)


def test_a_config_json_that_is_not_an_object_is_a_clear_error(tmp_path):
    """export and pipelines read config.json through bertkit.config: a JSON list names the file, no AttributeError."""
    from bertkit.config import ConfigError
    from bertkit.export import load_for_export
    from bertkit.pipelines import read_head

    (tmp_path / "config.json").write_text("[1, 2]")
    for read in (read_head, load_for_export):
        with pytest.raises(ConfigError, match=r"config\.json: expected a JSON object"):
            read(tmp_path)
