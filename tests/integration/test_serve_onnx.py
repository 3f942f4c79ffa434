"""``bertkit serve --backend onnx`` and ``--quantize int8`` (``commands.serve.load_model``, what the command runs), on a
fine-tuned BERT and ModernBERT classifier: ONNX Runtime answers /predict as the PyTorch model does (fp32 within
1e-4), its encoder routes run the ONNX every-layer graph, /info says so; PyTorch's int8 stays close; an exported
directory without PyTorch weights serves both routes. In-process (an ASGI client): the answers are the point, not the
socket."""

from __future__ import annotations

import numpy as np
import pytest
from asgi import asgi_json
from starlette.testclient import TestClient

from bertkit.cli import main
from bertkit.commands.serve import load_model
from bertkit.serve.app import ServeSettings, create_app

pytest.importorskip("onnxruntime")

TEXTS = [
    "the film was good .",
    "the ending was boring , the cast was great .",
    "the scene is very great . the film is good . the plot was boring .",  # past ModernBERT's windows (W = 2)
]
ARCHS = pytest.mark.parametrize("arch", ["bert", "modernbert"])


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _answers(srv, name: str) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    """(labels, scores in label order, /embed vectors) of model ``name``."""
    status, out = asgi_json(srv, f"/predict?model={name}", {"inputs": [[t] for t in TEXTS], "raw_scores": True})
    assert status == 200, (name, out)
    labels = [[s["label"] for s in x] for x in out]
    scores = np.array([[s["score"] for s in sorted(x, key=lambda s: s["label"])] for x in out])
    status, vectors = asgi_json(srv, f"/embed?model={name}", {"inputs": TEXTS})
    assert status == 200, (name, vectors)
    return labels, scores, np.array(vectors)


@ARCHS
def test_serve_backend_onnx_and_int8_equal_torch(arch, sst2_tuned_of):
    d = str(sst2_tuned_of(arch))
    models = {
        "onnx": load_model(d, "cpu", "fp32", backend="onnx"),
        "int8": load_model(d, "cpu", "fp32", quantize="int8"),
        "torch": load_model(d, "cpu", "fp32"),
    }
    assert models["onnx"].backend == "onnx"
    with TestClient(create_app(models, ServeSettings())) as srv:
        got = {name: _answers(srv, name) for name in models}
        status, info = asgi_json(srv, "/info?model=onnx")
        assert status == 200 and info.get("backend") == "onnx" and info["architecture"] == arch, info
    labels, scores, vectors = got["torch"]
    assert got["onnx"][0] == labels
    np.testing.assert_allclose(got["onnx"][1], scores, atol=1e-4)
    np.testing.assert_allclose(got["onnx"][2], vectors, atol=1e-4)
    _, int8_scores, int8_vectors = got["int8"]
    assert not np.array_equal(int8_vectors, vectors)  # the int8 model really ran
    assert _cosine(int8_vectors, vectors).min() >= 0.99 and _cosine(int8_scores, scores).min() >= 0.99


@ARCHS
def test_serve_an_exported_directory_without_pytorch_weights(arch, sst2_tuned_of, tmp_path):
    """`bertkit export --onnx OUT` (the head's graph) and `--all-layers` (the encoder's) into one directory: it serves
    /predict and /embed with no model.safetensors there, as the fine-tuned directory does."""
    tuned = sst2_tuned_of(arch)
    out = tmp_path / "exported"
    assert main(["export", "--onnx", str(tuned), str(out)]) == 0
    assert main(["export", "--onnx", str(tuned), str(out), "--all-layers"]) == 0
    assert not list(out.glob("*.safetensors")) and not list(out.glob("*.bin"))
    onnx, ref = load_model(str(out), "cpu", "fp32", backend="onnx"), load_model(str(tuned), "cpu", "fp32")
    with TestClient(create_app({"onnx": onnx, "torch": ref}, ServeSettings())) as srv:
        a, b = _answers(srv, "onnx"), _answers(srv, "torch")
    assert a[0] == b[0]
    np.testing.assert_allclose(a[1], b[1], atol=1e-4)
    np.testing.assert_allclose(a[2], b[2], atol=1e-4)
