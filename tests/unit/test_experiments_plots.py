"""Figures and TensorBoard files of the experiments package: valid PNGs, event files TensorBoard's own reader
accepts (scalars, steps and wall times intact), the crc32c they rely on."""

from __future__ import annotations

import json

import pytest

from bertkit.experiments import plots
from bertkit.training import tensorboard as tb

PNG = b"\x89PNG\r\n\x1a\n"


def _size(path):
    data = path.read_bytes()
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_crc32c_known_values():
    assert tb.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tb.crc32c(b"") == 0
    assert tb.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


def test_event_writer_streams_records_tensorboard_reads(tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    records = [
        {"step": s, "loss": 8.0 - s, "mlm_acc": 0.01 * s, "lr": 1e-4, "elapsed_s": 2.0 * s, "epoch": 0}
        for s in range(1, 6)
    ]
    records.append({"step": 5, "eval_loss": 3.5, "eval_mlm_acc": 0.2})
    records.append({"step": 5, "accuracy": 0.75, "train_loss": 0.4})  # a finetune dev record
    with tb.EventWriter(tmp_path, start_time=1000.0) as w:
        for r in records:
            w.add_record(r)
    acc = ea.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {
        "train/loss",
        "train/mlm_acc",
        "train/lr",
        "eval/loss",
        "eval/mlm_acc",
        "dev/accuracy",
    }
    loss = acc.Scalars("train/loss")
    assert [(e.step, e.value) for e in loss[:5]] == [(s, 8.0 - s) for s in range(1, 6)]
    assert [e.wall_time for e in loss[:5]] == [1000.0 + 2.0 * s for s in range(1, 6)]
    assert loss[5].value == pytest.approx(0.4)  # finetune's train_loss lands on the same curve
    assert acc.Scalars("eval/mlm_acc")[0].value == pytest.approx(0.2)
    assert acc.Scalars("dev/accuracy")[0].value == pytest.approx(0.75)


def test_bar_line_heatmap_pngs(tmp_path):
    a = plots.bar_chart(tmp_path / "bar.png", ["CoLA", "SST-2"], [50.0, 90.0], [45.0, 88.0], [55.0, 91.0])
    b = plots.line_chart(
        tmp_path / "line.png",
        [1, 2, 3],
        {"SST-2": [80.0, 85.0, None]},
        "steps",
        "score",
        low={"SST-2": [79, 84, 0]},
        high={"SST-2": [81, 86, 0]},
    )
    c = plots.heatmap(tmp_path / "heat.png", [[1.0, None], [0.5, 0.25]], ["embeddings", "1"], ["cls", "mean"])
    d = plots.bar_chart(tmp_path / "groups.png", ["SST-2", "MRPC"], [], groups={"a": [1.0, 2.0], "b": [3.0, None]})
    for p in (a, b, c, d):
        w, h = _size(p)
        assert w > 100 and h > 100
    assert not list(tmp_path.glob(".*tmp*"))  # written atomically, no temp file left


def test_held_out_records_get_interpolated_wall_time(tmp_path):
    # pretrain logs every 50 steps with elapsed_s, and evaluates at other steps without it
    lines = [
        {"step": 50, "loss": 6.0, "elapsed_s": 100.0},
        {"step": 100, "loss": 5.0, "elapsed_s": 300.0},
        {"step": 60, "eval_mlm_acc": 0.1},
        {"step": 100, "eval_mlm_acc": 0.2},
        {"step": 120, "eval_mlm_acc": 0.3},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    run = plots.read_run(tmp_path)
    assert run.series["eval_mlm_acc"] == [(60.0, 140.0, 0.1), (100.0, 300.0, 0.2), (120.0, None, 0.3)]
