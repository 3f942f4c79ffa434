"""ModernBERT's own ONNX and int8 paths: ``bertkit export --onnx`` of its heads and of its every-layer encoder gives
graphs equal to PyTorch within 1e-4 on inputs long enough for PyTorch's blocked sliding-window path (which the graph
replaces by a band mask), with no ``token_type_ids`` input; the Encoder's ONNX backend and int8 (ONNX Runtime's and
PyTorch's dynamic int8 of the fused Wqkv layout) stay close to fp32 on such inputs. What a ModernBERT shares with
BERT runs parametrized over both: pipelines and int8 (tests/unit/test_quantize.py, tests/integration/test_pipelines.py),
exported directories (test_onnx_directories.py), ``bertkit serve --backend onnx / --quantize int8``
(test_serve_onnx.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture: one torch thread)
from tinymodernbert import fixture_vocab, make_modernbert_dir

from bertkit.cli import main
from bertkit.features import Encoder

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TEXTS = [
    "the film is very good .",
    "the ending was boring , the plot was great and the cast was grim .",
    "a grim plot",
    "the scene is very great . the film is good . the plot was boring .",
]


@pytest.fixture(scope="module")
def vocab(fixtures_dir):
    return fixture_vocab(fixtures_dir)


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory, vocab):
    return make_modernbert_dir(tmp_path_factory.mktemp("mb-mlm"), vocab)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _batch(vocab_size: int, lengths=(20, 13, 6)):
    """A padded batch whose longest row (20 tokens) is past 4 windows (local_attention 4: W = 2), so PyTorch runs
    its blocked sliding-window path there and the band mask on the shorter rows."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(8, vocab_size, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return ids * mask, mask


@pytest.mark.parametrize(
    "head, outputs",
    [
        ("ModernBertForSequenceClassification", ("logits",)),
        ("ModernBertForTokenClassification", ("logits",)),
        ("ModernBertForQuestionAnswering", ("start_logits", "end_logits")),
        ("ModernBertForMaskedLM", ("last_hidden_state",)),  # no task head: the bare encoder's output
    ],
)
def test_exported_graph_equals_pytorch(tmp_path, vocab, head, outputs, capsys):
    from bertkit import modeling_modernbert as mb

    d = make_modernbert_dir(tmp_path / "model", vocab, head, seed=2)
    out = tmp_path / "onnx"
    assert main(["export", "--onnx", str(d), str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs"] == list(outputs) and report["max_abs_diff"] < 1e-4
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]  # no segments in ModernBERT
    ids, mask = _batch(len(vocab))
    got = session.run(list(outputs), {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    model = (mb.ModernBertModel if head == "ModernBertForMaskedLM" else getattr(mb, head)).from_pretrained(d).eval()
    with torch.no_grad():
        want = model(ids, attention_mask=mask)
    m = mask.bool()
    for name, value in zip(outputs, got):
        ref, value = getattr(want, name), torch.from_numpy(value)
        if ref.dim() >= 2 and ref.shape[1] == m.shape[1]:  # per token: padding is not an output anyone reads
            ref, value = ref[m], value[m]
        torch.testing.assert_close(value, ref, atol=1e-4, rtol=1e-4, msg=name)


def test_encoder_onnx_backend_and_int8_equal_torch(mlm_dir, tmp_path):
    """Encoder(backend="onnx") on the every-layer graph (exported on the fly, and from `export --all-layers`),
    fp32 within 1e-4 and int8 (ONNX Runtime's and PyTorch's) close; fill-mask keeps working on PyTorch int8."""
    ref = Encoder.from_pretrained(mlm_dir, precision="fp32")
    enc = Encoder.from_pretrained(mlm_dir, backend="onnx")
    assert enc.backend == "onnx" and enc.onnx_path.endswith("encoder.onnx")
    for layers, pooling in (((-1,), "mean"), ((1, -1), "max"), (0, "cls")):
        np.testing.assert_allclose(
            enc.encode(TEXTS, layers=layers, pooling=pooling),
            ref.encode(TEXTS, layers=layers, pooling=pooling),
            atol=1e-4,
            err_msg=f"{layers} {pooling}",
        )
    fp32 = ref.encode(TEXTS, layers=-1)
    for q in (
        Encoder.from_pretrained(mlm_dir, backend="onnx", quantize="int8"),
        Encoder.from_pretrained(mlm_dir, quantize="int8"),
    ):
        got = q.encode(TEXTS, layers=-1)
        assert not np.array_equal(got, fp32)  # the int8 path really ran
        assert _cosine(got, fp32).min() >= 0.99, q.backend
    int8 = Encoder.from_pretrained(mlm_dir, quantize="int8")
    linears = [m for m in int8.bert.modules() if "quantized.dynamic" in type(m).__module__]
    assert len(linears) == 3 * 4  # Wqkv, attention Wo, MLP Wi and Wo per layer
    assert int8.mlm_head is not None and len(int8.fill_mask(["the film is [MASK] ."], top_k=3)[0][0]) == 3

    exported = tmp_path / "exported"  # an exported directory: no PyTorch weights, the Encoder runs the graph
    assert main(["export", "--onnx", str(mlm_dir), str(exported), "--all-layers"]) == 0
    assert not list(exported.glob("*.safetensors"))
    alone = Encoder.from_pretrained(exported, backend="onnx")
    np.testing.assert_allclose(alone.encode(TEXTS, layers=(1, -1)), ref.encode(TEXTS, layers=(1, -1)), atol=1e-4)
