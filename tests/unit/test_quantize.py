"""bertkit.quantize: dynamic int8 Linear layers give outputs close to fp32 (embeddings and task pipelines), and a
quantised model refuses to train or to be saved, naming why."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from tinymodels import FINETUNE_VOCAB, WIDE, finetune_config

from bertkit.quantize import QuantizedModelError, fuse_qkv, is_quantized, pick_engine, quantize_model, resolve_quantize

TEXTS = [
    "the film is good .",
    "carol lives in berlin and works for acme corp .",
    "the cast was grim",
    "the ending was boring , the plot was great .",
]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_encoder_int8_close_to_fp32(wide_dir):
    from bertkit.features import Encoder

    fp32 = Encoder.from_pretrained(wide_dir, precision="fp32")
    int8 = Encoder.from_pretrained(wide_dir, precision="auto", quantize="int8")
    assert int8.precision == "fp32"  # int8 matmuls take fp32 activations: no bf16 autocast around them
    quantized = [m for m in int8.bert.modules() if "quantized.dynamic" in type(m).__module__]
    assert len(quantized) == 2 * 4 + 1  # q+k+v fused, attention out, intermediate, output per layer; the pooler
    assert not any(isinstance(m, torch.nn.Linear) and type(m) is torch.nn.Linear for m in int8.bert.encoder.modules())
    for pooling in ("mean", "cls"):
        a = fp32.encode(TEXTS, pooling=pooling, layers=-1)
        b = int8.encode(TEXTS, pooling=pooling, layers=-1)
        assert not np.array_equal(a, b)  # the int8 path really ran
        assert _cosine(a, b).min() >= 0.99, pooling


def test_fused_qkv_is_the_same_model(wide_dir):
    from bertkit.modeling import BertModel

    model = BertModel.from_pretrained(wide_dir).eval()
    ids = torch.randint(5, 100, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        want = model(ids, mask).last_hidden_state
        assert fuse_qkv(model) == 2 and fuse_qkv(model) == 0  # once per attention; a second call finds none
        attention = model.encoder.layer[0].attention.self
        assert attention.qkv.weight.shape == (3 * 64, 64) and not hasattr(attention, "query")
        got = model(ids, mask).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ["x86", "onednn"])
def test_encoder_int8_engines_close_to_fp32(wide_dir, engine, monkeypatch):
    """Each int8 engine (the default one picked for the CPU, and the other) gives vectors close to fp32's."""
    from bertkit.features import Encoder

    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"no {engine} engine in this PyTorch build")
    monkeypatch.setenv("BERTKIT_INT8_ENGINE", engine)
    fp32 = Encoder.from_pretrained(wide_dir, precision="fp32")
    int8 = Encoder.from_pretrained(wide_dir, quantize="int8")
    assert torch.backends.quantized.engine == engine and int8.bert.encoder.layer[1].attention.self.qkv is not None
    for pooling in ("mean", "cls"):
        a = fp32.encode(TEXTS * 3, pooling=pooling, layers=-1)
        b = int8.encode(TEXTS * 3, pooling=pooling, layers=-1)
        assert not np.array_equal(a, b)
        assert _cosine(a, b).min() >= 0.99, (engine, pooling)


def test_pick_engine(monkeypatch):
    monkeypatch.delenv("BERTKIT_INT8_ENGINE", raising=False)
    assert pick_engine() in torch.backends.quantized.supported_engines
    assert pick_engine("FBGEMM" if "fbgemm" in torch.backends.quantized.supported_engines else None) in (
        "fbgemm",
        pick_engine(),
    )
    monkeypatch.setenv("BERTKIT_INT8_ENGINE", "int4-engine")
    with pytest.raises(ValueError, match="int8 engine must be one of x86, fbgemm, onednn"):
        pick_engine()


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_pipeline_int8_close_to_fp32(arch, tmp_path, fixtures_dir):
    from bertkit.modeling import BertForSequenceClassification
    from bertkit.pipelines import load_pipeline

    labels = {0: "neg", 1: "pos", 2: "neutral"}
    if arch == "bert":
        torch.manual_seed(1)
        model = BertForSequenceClassification(finetune_config(**WIDE, id2label=labels))
        with torch.no_grad():
            model.classifier.weight.mul_(50)  # spread the scores, so that a difference would show
        model.save_pretrained(tmp_path)
        shutil.copy(FINETUNE_VOCAB, tmp_path / "vocab.txt")
    else:  # as transformers writes one (no finetune_config.json): labels from id2label
        from tinymodernbert import fixture_vocab, make_modernbert_dir

        vocab = fixture_vocab(fixtures_dir)
        make_modernbert_dir(tmp_path, vocab, "ModernBertForSequenceClassification", 1, spread=50, id2label=labels)
    fp32 = load_pipeline(tmp_path, precision="fp32")
    int8 = load_pipeline(tmp_path, quantize="int8")
    assert int8.quantize == "int8" and is_quantized(int8.model) and not is_quantized(fp32.model)
    assert fp32.task.labels == int8.task.labels == list(labels.values())
    a = fp32.logits(TEXTS)
    b = int8.logits(TEXTS)
    assert not np.array_equal(a, b)
    assert _cosine(a, b).min() >= 0.99
    assert [x[0]["label"] for x in fp32.predict(TEXTS)] == [x[0]["label"] for x in int8.predict(TEXTS)]


def test_quantized_model_refuses_training_and_saving(wide_dir, tmp_path):
    from bertkit.modeling import BertForSequenceClassification

    model = quantize_model(BertForSequenceClassification(finetune_config(**WIDE)), "int8")
    with pytest.raises(QuantizedModelError, match="cannot train a int8-quantised model"):
        model.train()
    with pytest.raises(QuantizedModelError, match="cannot save a int8-quantised model.*load the fp32 model"):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    model.eval()  # eval mode stays allowed
    assert quantize_model(model, "int8") is model  # quantising twice is a no-op
    assert not any(p.requires_grad for p in model.parameters())


def test_quantize_names_and_devices():
    from torch import nn

    assert resolve_quantize(None) is None and resolve_quantize("none") is None and resolve_quantize("INT8") == "int8"
    with pytest.raises(ValueError, match="quantize must be one of int8"):
        resolve_quantize("int4")
    with pytest.raises(ValueError, match="CPU only"):
        quantize_model(nn.Sequential(nn.Linear(4, 4)), "int8", device="cuda")
    m = nn.Sequential(nn.Linear(4, 4))
    assert quantize_model(m, None) is m and type(m[0]) is nn.Linear


# --------------------------------------------------------------------------------------------- ONNX export


def test_encoder_onnx_backend_equals_torch(wide_dir):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from bertkit.features import Encoder

    ref = Encoder.from_pretrained(wide_dir, precision="fp32")
    enc = Encoder.from_pretrained(wide_dir, backend="onnx")
    assert enc.backend == "onnx" and enc.precision == "fp32" and enc.onnx_path.endswith("encoder.onnx")
    for layers, pooling in (((-2,), "mean"), ((-1, -2, 0), "max"), (-1, "cls_pooled"), (1, "cls")):
        a = enc.encode(TEXTS, layers=layers, pooling=pooling)
        b = ref.encode(TEXTS, layers=layers, pooling=pooling)
        np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"{layers} {pooling}")
    tokens = enc.encode(TEXTS[:2], layers=-1, pooling="none")
    assert [t.shape for t in tokens] == [t.shape for t in ref.encode(TEXTS[:2], layers=-1, pooling="none")]
    q = Encoder.from_pretrained(wide_dir, backend="onnx", quantize="int8")
    assert q.onnx_path.endswith("encoder.int8.onnx")
    a, b = q.encode(TEXTS, layers=-1), ref.encode(TEXTS, layers=-1)
    assert not np.array_equal(a, b) and _cosine(a, b).min() >= 0.99
    with pytest.raises(ValueError, match="backend must be one of torch, onnx, got 'tvm'"):
        Encoder.from_pretrained(wide_dir, backend="tvm")


def test_encoder_int8_parallel_batches_equal_one_at_a_time(wide_dir):
    """An int8 encoder asked to run whole batches side by side on the CPU threads (opt-in): same vectors, in input
    order, and the caller's thread count comes back."""
    from bertkit.features import Encoder

    int8 = Encoder.from_pretrained(wide_dir, quantize="int8")
    assert not int8.parallel_batches and not Encoder.from_pretrained(wide_dir).parallel_batches  # opt-in
    texts = [f"{t} {n}" for n in range(5) for t in TEXTS]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for pooling in ("mean", "none"):
            int8.parallel_batches = True
            a = int8.encode(texts, pooling=pooling, layers=-1, batch_size=3)
            assert torch.get_num_threads() == 2
            int8.parallel_batches = False
            b = int8.encode(texts, pooling=pooling, layers=-1, batch_size=3)
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)
    finally:
        torch.set_num_threads(threads)
