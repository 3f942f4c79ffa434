"""``bertkit serve --backend onnx``: a fine-tuned classifier served with ONNX Runtime answers /predict as the
PyTorch pipeline does (fp32 within 1e-4), and its encoder routes run the ONNX every-layer graph; /info says so.
In-process (an ASGI client): the answers are the point, not the socket."""

from __future__ import annotations

import numpy as np
import pytest
from asgi import asgi_json
from starlette.testclient import TestClient
from tinymodels import FINETUNE_FIXTURES, finetune_base, finetune_quickly

from bertkit.cli import main
from bertkit.commands.serve import load_model
from bertkit.serve.app import ServeSettings, create_app

pytest.importorskip("onnxruntime")

TEXTS = ["the film was good .", "the ending was boring , the cast was great ."]


@pytest.fixture(scope="module")
def sst2_dir(tmp_path_factory):
    base = finetune_base(tmp_path_factory.mktemp("base"))
    return finetune_quickly(
        "sst2", FINETUNE_FIXTURES / "sst2_train.tsv", None, base, tmp_path_factory.mktemp("sst2"), "--device", "cpu"
    )


def test_serve_backend_onnx_equals_torch(sst2_dir):
    onnx = load_model(str(sst2_dir), "cpu", "fp32", backend="onnx")
    ref = load_model(str(sst2_dir), "cpu", "fp32")
    assert onnx.backend == "onnx"
    with TestClient(create_app({"onnx": onnx, "torch": ref}, ServeSettings())) as srv:
        a = asgi_json(srv, "/predict?model=onnx", {"inputs": [[t] for t in TEXTS], "raw_scores": True})
        b = asgi_json(srv, "/predict?model=torch", {"inputs": [[t] for t in TEXTS], "raw_scores": True})
        assert a[0] == b[0] == 200
        for x, y in zip(a[1], b[1]):
            assert [s["label"] for s in x] == [s["label"] for s in y]
            assert [s["score"] for s in x] == pytest.approx([s["score"] for s in y], abs=1e-4)
        e = asgi_json(srv, "/embed?model=onnx", {"inputs": TEXTS})
        f = asgi_json(srv, "/embed?model=torch", {"inputs": TEXTS})
        assert e[0] == f[0] == 200
        np.testing.assert_allclose(np.array(e[1]), np.array(f[1]), atol=1e-4)
        status, info = asgi_json(srv, "/info?model=onnx")
        assert status == 200 and info.get("backend") == "onnx", info


def test_serve_an_exported_directory_without_pytorch_weights(sst2_dir, tmp_path):
    """`bertkit export --onnx OUT` (the head's graph) and `--all-layers` (the encoder's) into one directory: it serves
    /predict and /embed with no model.safetensors there, as the fine-tuned directory does."""
    out = tmp_path / "exported"
    assert main(["export", "--onnx", str(sst2_dir), str(out)]) == 0
    assert main(["export", "--onnx", str(sst2_dir), str(out), "--all-layers"]) == 0
    assert not list(out.glob("*.safetensors")) and not list(out.glob("*.bin"))
    onnx, ref = load_model(str(out), "cpu", "fp32", backend="onnx"), load_model(str(sst2_dir), "cpu", "fp32")
    with TestClient(create_app({"onnx": onnx, "torch": ref}, ServeSettings())) as srv:
        a = asgi_json(srv, "/predict?model=onnx", {"inputs": [[t] for t in TEXTS], "raw_scores": True})
        b = asgi_json(srv, "/predict?model=torch", {"inputs": [[t] for t in TEXTS], "raw_scores": True})
        assert a[0] == b[0] == 200
        for x, y in zip(a[1], b[1]):
            assert [s["score"] for s in x] == pytest.approx([s["score"] for s in y], abs=1e-4)
        e = asgi_json(srv, "/embed?model=onnx", {"inputs": TEXTS})
        f = asgi_json(srv, "/embed?model=torch", {"inputs": TEXTS})
        assert e[0] == f[0] == 200
        np.testing.assert_allclose(np.array(e[1]), np.array(f[1]), atol=1e-4)
