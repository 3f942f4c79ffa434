"""``bertkit finetune / evaluate`` on a tiny ModernBERT (classification, span QA, token tagging, multiple choice):
the task's BERT head is swapped for ModernBERT's (``models.for_directory``), the output directory is a
transformers ModernBERT of that head with the same logits, and ``evaluate`` reproduces the dev metrics."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from tinymodels import finetune_metrics

from bertkit.cli import main


@pytest.fixture(scope="module")
def modern_dir(tmp_path_factory, ft):
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

    vocab = [line for line in (ft / "vocab.txt").read_text(encoding="utf-8").splitlines() if line]
    d = tmp_path_factory.mktemp("mb-tiny")
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=8,
        max_position_embeddings=128,
        pad_token_id=vocab.index("[PAD]"),
        cls_token_id=vocab.index("[CLS]"),
        sep_token_id=vocab.index("[SEP]"),
        bos_token_id=vocab.index("[CLS]"),
        eos_token_id=vocab.index("[SEP]"),
    )
    ModernBertForMaskedLM(config).save_pretrained(d)
    shutil.copy(ft / "vocab.txt", d / "vocab.txt")
    return d


def _same_as_transformers(out, name, inputs):
    transformers = pytest.importorskip("transformers")
    from bertkit import modeling_modernbert as mb

    assert json.loads((out / "config.json").read_text())["architectures"] == [name]
    hf = getattr(transformers, name).from_pretrained(out, attn_implementation="eager").eval()
    ours = getattr(mb, name).from_pretrained(out).eval()
    with torch.no_grad():
        a, b = hf(**inputs), ours(**inputs)
    for field in ("logits", "start_logits", "end_logits"):
        if getattr(b, field, None) is not None:
            torch.testing.assert_close(getattr(a, field), getattr(b, field), atol=1e-5, rtol=1e-4)


def test_classification_then_evaluate(modern_dir, ft, tmp_path):
    out = tmp_path / "sst2"
    metrics = finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", modern_dir, out)
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["step"] == 2
    _same_as_transformers(
        out,
        "ModernBertForSequenceClassification",
        {"input_ids": torch.tensor([[5, 20, 30, 6, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 0]])},
    )
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--precision",
                "fp32",
                "--output",
                str(tmp_path / "ev"),
            ]
        )
        == 0
    )
    again = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert again["accuracy"] == pytest.approx(metrics["accuracy"])


@pytest.mark.parametrize(
    "task, train, dev, head, inputs, extra",
    [
        (
            "squad",
            "squad_train.json",
            "squad_dev.json",
            "ModernBertForQuestionAnswering",
            {"input_ids": torch.tensor([[5, 20, 30, 6, 40, 41, 6]])},
            ["--max-seq-length", "64", "--doc-stride", "24", "--max-query-length", "16"],
        ),
        (
            "conll2003",
            "conll_train.txt",
            "conll_dev.txt",
            "ModernBertForTokenClassification",
            {"input_ids": torch.tensor([[5, 20, 30, 6]])},
            [],
        ),
        (
            "swag",
            "swag_train.csv",
            "swag_dev.csv",
            "ModernBertForMultipleChoice",
            {"input_ids": torch.tensor([[[5, 20, 6, 30, 6], [5, 20, 6, 31, 6]]])},
            [],
        ),
    ],
)
def test_other_heads(modern_dir, ft, tmp_path, task, train, dev, head, inputs, extra):
    out = tmp_path / task
    metrics = finetune_metrics(task, ft / train, ft / dev, modern_dir, out, *extra)
    assert metrics["step"] >= 1
    _same_as_transformers(out, head, inputs)


def test_pipeline_and_predict_on_a_finetuned_modernbert(modern_dir, ft, tmp_path):
    """``load_pipeline`` (what ``bertkit predict`` and the server's task routes run) on the fine-tuned ModernBERT
    classifier: its probabilities are the model's softmax; a transformers-written ModernBERT classifier (no
    finetune_config.json) loads too, with its label names; int8 loads too."""
    from bertkit.modeling_modernbert import ModernBertForSequenceClassification
    from bertkit.pipelines import load_pipeline

    out = tmp_path / "sst2"
    finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", modern_dir, out)
    pipe = load_pipeline(out, precision="fp32")
    texts = ["a fine film", "dull and slow"]
    logits = pipe.logits(texts)
    model = ModernBertForSequenceClassification.from_pretrained(out)
    enc = pipe.tokenizer.encode_batch(texts)
    for row, e in zip(logits, enc):
        with torch.no_grad():
            want = model(torch.tensor([e.ids])).logits[0]
        torch.testing.assert_close(torch.as_tensor(row, dtype=torch.float32), want, atol=1e-5, rtol=1e-4)
    assert (
        main(
            [
                "predict",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--precision",
                "fp32",
                "--output",
                str(tmp_path / "pred"),
            ]
        )
        == 0
    )
    assert any((tmp_path / "pred").iterdir())
    int8 = load_pipeline(out, quantize="int8")  # int8 as BERT's (tests/integration/test_modernbert_onnx.py)
    assert int8.quantize == "int8" and int8.logits(texts).shape == logits.shape

    transformers = pytest.importorskip("transformers")
    hf_dir = tmp_path / "hf"
    config = transformers.ModernBertConfig.from_pretrained(
        modern_dir, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    transformers.ModernBertForSequenceClassification(config).save_pretrained(hf_dir)
    shutil.copy(ft / "vocab.txt", hf_dir / "vocab.txt")
    hf_pipe = load_pipeline(hf_dir, precision="fp32")
    assert hf_pipe.kind == "classification" and hf_pipe.task.labels == ["neg", "pos"]
    assert len(hf_pipe.logits(texts)) == 2
