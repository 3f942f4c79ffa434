"""`bertkit export --onnx`: a head's graph equals the PyTorch model on a batch of another shape (dynamic axes and
mask), the encoder's graphs (fp32 and int8) come with their report, a non-model directory is refused naming what
is missing, and an `--all-layers` graph is the one the Encoder's ONNX backend then reads."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from tinymodels import WIDE, finetune_base

TEXTS = [
    "the film is good .",
    "carol lives in berlin and works for acme corp .",
    "the cast was grim",
    "the ending was boring , the plot was great .",
]


def test_export_onnx_heads_and_encoder(tmp_path, wide_dir):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from bertkit.cli import main
    from bertkit.modeling import BertForQuestionAnswering

    qa_dir = finetune_base(tmp_path / "qa", BertForQuestionAnswering, seed=4, **WIDE)
    assert main(["export", "--onnx", str(qa_dir), str(tmp_path / "qa-onnx")]) == 0
    assert {p.name for p in (tmp_path / "qa-onnx").iterdir()} >= {"model.onnx", "config.json", "vocab.txt"}
    # a batch of another size and length than the traced one, with padding: dynamic axes and the mask both work
    session = ort.InferenceSession(str(tmp_path / "qa-onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.tensor([[5, 20, 30, 40, 6, 50, 51, 6], [5, 21, 6, 22, 6, 0, 0, 0], [5, 6, 7, 6, 0, 0, 0, 0]])
    mask, types = (ids != 0).long(), torch.tensor([[0] * 5 + [1] * 3] * 3) * (ids != 0)
    start, end = session.run(
        ["start_logits", "end_logits"],
        {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()},
    )
    ref = BertForQuestionAnswering.from_pretrained(qa_dir).eval()
    with torch.no_grad():
        want = ref(ids, mask, types)
    m = mask.bool()
    torch.testing.assert_close(torch.from_numpy(start)[m], want.start_logits[m], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.from_numpy(end)[m], want.end_logits[m], atol=1e-4, rtol=1e-4)

    from bertkit.export import export_onnx

    before = {p.name: p.read_bytes() for p in wide_dir.iterdir() if p.is_file()}
    report = export_onnx(wide_dir, tmp_path / "enc.onnx")  # no head: the encoder's outputs
    assert report.outputs == ["last_hidden_state", "pooler_output"] and report.max_abs_diff < 1e-4
    assert report.files == [str(tmp_path / "enc.onnx")]
    import logging

    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers.clear()  # as in `bertkit embed`: ONNX Runtime's quantiser's logging.basicConfig then adds one
    try:
        q = export_onnx(wide_dir, tmp_path / "enc-int8.onnx", quantize="int8")
        assert root.handlers == []  # none left behind: every later warning was printed twice
    finally:
        root.handlers[:] = handlers
    assert q.quantized == "int8" and 0 < q.max_abs_diff < 0.5
    assert (tmp_path / "enc-int8.onnx").stat().st_size < 0.6 * (tmp_path / "enc.onnx").stat().st_size
    assert {p.name: p.read_bytes() for p in wide_dir.iterdir() if p.is_file()} == before  # it writes only OUT


def test_export_refuses_a_non_model_directory(tmp_path, capsys):
    from bertkit.cli import main

    assert main(["export", "--onnx", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_export_all_layers_is_what_the_encoder_backend_reads(wide_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from bertkit.cli import main
    from bertkit.features import Encoder

    d = tmp_path / "m"
    shutil.copytree(wide_dir, d)
    assert main(["export", "--onnx", str(d), str(d / "encoder.onnx"), "--all-layers"]) == 0
    enc = Encoder.from_pretrained(d, backend="onnx")
    assert enc.onnx_path == str(d / "encoder.onnx")  # used as it is, not exported again
    np.testing.assert_allclose(
        enc.encode(TEXTS, layers=(1, -1)),
        Encoder.from_pretrained(d, precision="fp32").encode(TEXTS, layers=(1, -1)),
        atol=1e-4,
    )
