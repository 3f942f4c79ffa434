"""ONNX that cannot surprise: ``bertkit export --onnx DIR OUT --quantize int8`` writes the int8 graph under its own
name beside the fp32 one; ``backend="onnx"`` runs the fp32 graph unless int8 is asked for, and refuses a graph of
the other precision; an exported directory (no PyTorch weights) loads in ``load_pipeline`` and ``bertkit predict /
evaluate --backend onnx``, which record the backend (a BERT and a ModernBERT alike); the Encoder holds its ONNX
runner (no patched method); a graph exported at load time leaves no temporary files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import InputError
from bertkit.pipelines import load_pipeline

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

TEXTS = ["the film was good .", "the ending was boring , the cast was great .", "a grim plot"]


@pytest.fixture(scope="module")
def tuned_of(sst2_tuned_of, tmp_path_factory):
    """``tuned_of(arch)``: (a tiny ``arch`` fine-tuned on SST-2, its ``export --onnx --quantize int8`` directory)."""
    made = {}

    def get(arch: str):
        if arch not in made:
            tuned = sst2_tuned_of(arch)
            out = tmp_path_factory.mktemp(f"{arch}-export") / "onnx"
            assert main(["export", "--onnx", str(tuned), str(out), "--quantize", "int8"]) == 0
            made[arch] = tuned, out
        return made[arch]

    return get


@pytest.fixture(scope="module")
def sst2_dir(tuned_of):
    return tuned_of("bert")[0]


@pytest.fixture(scope="module")
def exported(tuned_of):
    return tuned_of("bert")[1]


ARCHS = pytest.mark.parametrize("arch", ["bert", "modernbert"])


@ARCHS
def test_int8_export_gets_its_own_name(arch, tuned_of):
    from bertkit.export import graph_is_quantized

    exported = tuned_of(arch)[1]
    names = sorted(p.name for p in exported.iterdir())
    assert "model.onnx" in names and "model.int8.onnx" in names
    assert not any(n.endswith((".safetensors", ".bin")) for n in names)  # no PyTorch weights
    assert not graph_is_quantized(exported / "model.onnx") and graph_is_quantized(exported / "model.int8.onnx")


@ARCHS
def test_exported_directory_runs_fp32_unless_int8_is_asked(arch, tuned_of):
    sst2_dir, exported = tuned_of(arch)
    ref = load_pipeline(sst2_dir, precision="fp32")
    fp32 = load_pipeline(exported, backend="onnx")
    assert fp32.model.path == str(exported / "model.onnx") and fp32.precision == "fp32" and fp32.quantize is None
    np.testing.assert_allclose(fp32.logits(TEXTS), ref.logits(TEXTS), atol=1e-4)
    assert [x[0]["label"] for x in fp32.predict(TEXTS)] == [x[0]["label"] for x in ref.predict(TEXTS)]
    int8 = load_pipeline(exported, backend="onnx", quantize="int8")
    assert int8.model.path == str(exported / "model.int8.onnx") and int8.quantize == "int8"
    got, want = int8.logits(TEXTS), ref.logits(TEXTS)
    assert 0 < np.abs(got - want).max() < 0.1 and (got.argmax(-1) == want.argmax(-1)).all()
    with pytest.raises(InputError, match="exported ONNX directory.*backend='onnx'"):
        load_pipeline(exported)  # the PyTorch backend has no weights there: says what to do


def test_a_graph_of_the_other_precision_is_refused(exported, tmp_path):
    d = tmp_path / "old"
    shutil.copytree(exported, d)
    (d / "model.onnx").unlink()
    shutil.copy(exported / "model.int8.onnx", d / "model.onnx")  # what `export --quantize` used to write
    with pytest.raises(InputError, match="model.onnx is an int8 graph but fp32 was asked for"):
        load_pipeline(d, backend="onnx")
    (d / "model.onnx").unlink()
    (d / "model.int8.onnx").unlink()
    with pytest.raises(InputError, match="no model.onnx and no PyTorch weights"):
        load_pipeline(d, backend="onnx")


@ARCHS
def test_predict_and_evaluate_on_an_exported_directory(arch, tuned_of, fixtures_dir, tmp_path):
    """`bertkit predict --backend onnx` on the exported directory (no PyTorch weights) writes the PyTorch model's
    predictions, and `bertkit evaluate --backend onnx --quantize int8` scores it."""
    sst2_dir, exported = tuned_of(arch)
    assert not list(exported.glob("*.safetensors"))
    data = fixtures_dir / "finetune" / "sst2_dev.tsv"
    common = ["--data", str(data), "--quiet", "--precision", "fp32", "--device", "cpu"]
    assert main(["predict", "--model", str(sst2_dir), "--output", str(tmp_path / "torch"), *common]) == 0
    assert (
        main(["predict", "--model", str(exported), "--backend", "onnx", "--output", str(tmp_path / "onnx"), *common])
        == 0
    )
    a = (tmp_path / "torch" / "predictions.tsv").read_text()
    b = (tmp_path / "onnx" / "predictions.tsv").read_text()
    assert a == b and len(a.splitlines()) > 5
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(exported),
                "--backend",
                "onnx",
                "--quantize",
                "int8",
                "--output",
                str(tmp_path / "eval"),
                *common,
            ]
        )
        == 0
    )
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["backend"] == "onnxruntime" and metrics["quantize"] == "int8" and metrics["device"] == "cpu"
    assert 0 <= metrics["accuracy"] <= 1
    assert main(["evaluate", "--model", str(sst2_dir), "--output", str(tmp_path / "eval2"), *common]) == 0
    metrics = json.loads((tmp_path / "eval2" / "metrics.json").read_text())
    assert (metrics["backend"], metrics["precision"], metrics["quantize"]) == ("pytorch", "fp32", None)


def test_predict_on_an_exported_directory_needs_no_backend_flag(sst2_dir, exported, fixtures_dir, tmp_path, capsys):
    """Issue 31: `bertkit predict --model OUT` on an ONNX-only directory runs ONNX Runtime without being asked (was
    "no model.safetensors, pytorch_model.bin or TensorFlow checkpoint")."""
    data = fixtures_dir / "finetune" / "sst2_dev.tsv"
    common = ["--data", str(data), "--quiet", "--precision", "fp32", "--device", "cpu"]
    assert main(["predict", "--model", str(exported), "--output", str(tmp_path / "auto"), *common]) == 0
    captured = capsys.readouterr()
    assert "only model.onnx: running it with ONNX Runtime (--backend onnx)" in captured.err
    assert json.loads(captured.out)["backend"] == "onnxruntime"
    assert main(["predict", "--model", str(sst2_dir), "--output", str(tmp_path / "torch"), *common]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "pytorch"  # weights there: PyTorch, as before
    a = (tmp_path / "torch" / "predictions.tsv").read_text()
    assert a == (tmp_path / "auto" / "predictions.tsv").read_text() and len(a.splitlines()) > 5


def test_encoder_holds_an_onnx_runner(sst2_dir):
    from bertkit.features import Encoder
    from bertkit.runtime import OnnxRuntimeModel

    enc = Encoder.from_pretrained(sst2_dir, backend="onnx")
    assert isinstance(enc.runner.model, OnnxRuntimeModel) and "forward" not in vars(enc)  # no patched method
    assert enc.runner.backend == enc.backend == "onnx"
    ref = Encoder.from_pretrained(sst2_dir, precision="fp32")
    assert ref.runner.model is ref.bert and ref.backend == "torch" and ref.onnx_path is None
    np.testing.assert_allclose(enc.encode(TEXTS, layers=(0, -1)), ref.encode(TEXTS, layers=(0, -1)), atol=1e-4)


def test_a_graph_exported_at_load_time_leaves_no_temporary_files(sst2_dir, tmp_path, monkeypatch):
    """A directory without the graph asked for gets one exported into a temporary directory that goes as soon as
    ONNX Runtime holds the graph (such directories used to pile up in /tmp, one per load); the model runs on."""
    import tempfile
    from pathlib import Path

    from bertkit.features import Encoder

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    clf = load_pipeline(sst2_dir, backend="onnx")
    enc = Encoder.from_pretrained(sst2_dir, backend="onnx")
    for path in (clf.model.path, enc.onnx_path):
        assert Path(path).parent.name.startswith("bertkit-onnx-") and Path(path).parent.parent == temp
        assert not Path(path).exists()
    assert list(temp.iterdir()) == []
    ref = load_pipeline(sst2_dir, precision="fp32")
    np.testing.assert_allclose(clf.logits(TEXTS), ref.logits(TEXTS), atol=1e-4)
    np.testing.assert_allclose(enc.encode(TEXTS, layers=-1), ref.encoder().encode(TEXTS, layers=-1), atol=1e-4)
