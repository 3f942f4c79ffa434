"""The downstream meter (``bertkit downstream``): both routes fine-tune the same way, so a model that cannot have
learned anything (its weights are the meter's own random initialisation) gains exactly 0 on every task; the files
and the table; resume; bad input."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from bertkit.errors import InputError
from bertkit.experiments import downstream
from bertkit.experiments.downstream import DownstreamMeter, MeterConfig, random_init, resolve_meter_tasks
from bertkit.experiments.runner import ChildResult
from bertkit.modeling import BertModel
from tests.tinymodels import FINETUNE_FIXTURES, finetune_base

FAST = ["--batch-size", "8", "--precision", "fp32", "--threads", "1"]


def in_process(args, log=None, max_time=None, stop=None, **_):
    """``run_bertkit`` without a child process (seconds instead of an interpreter start per run)."""
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = main([str(a) for a in args])
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(buf.getvalue(), encoding="utf-8")
    return ChildResult(code, False, False, time.perf_counter() - t0, log)


def meter(tmp_path: Path, model: Path, **kw) -> MeterConfig:
    base = dict(tasks=["sst2", "conll"], seeds=[1, 2], lrs=[1e-3], max_train_examples=16, epochs=1.0)
    base.update(kw)
    return MeterConfig(model=model, data_dir=FINETUNE_FIXTURES, output=tmp_path / "meter", finetune_args=FAST, **base)


def test_a_model_that_is_the_random_init_gains_exactly_nothing(tmp_path):
    base = finetune_base(tmp_path / "base", seed=5)
    # "pre-trained" weights that are the very initialisation the meter compares against (same config, seed 0)
    fake = random_init(base, tmp_path / "fake", seed=0)
    random_again = random_init(base, tmp_path / "again", seed=0)
    a, b = BertModel.from_pretrained(fake).state_dict(), BertModel.from_pretrained(random_again).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the init is a function of config and seed
    report = DownstreamMeter(meter(tmp_path, fake, tasks=["sst2", "mrpc", "conll", "cola"]), run_child=in_process).run()
    assert [g.task.name for g in report.gains] == ["sst2", "mrpc", "conll", "cola"]
    for g in report.gains:
        assert g.pretrained.scores == g.random.scores, g.task.name
        assert g.gain == 0.0
    assert report.mean_gain == 0.0


def test_meter_files_table_and_resume(tmp_path):
    model = finetune_base(tmp_path / "model", seed=7)  # a different seed: weights unlike the meter's random init
    cfg = meter(tmp_path, model, lrs=[1e-3, 3e-3])
    report = DownstreamMeter(cfg, run_child=in_process).run()
    out = cfg.output
    assert report.cells_run == 2 * 2 * 2 * 2  # routes x tasks x lrs x seeds
    for name in ("downstream.csv", "downstream.md", "downstream.png", "cells.csv", "random-init/config.json"):
        assert (out / name).is_file(), name
    rows = list(csv.DictReader((out / "downstream.csv").open(encoding="utf-8")))
    assert [r["task"] for r in rows] == ["SST-2", "CoNLL-2003", "mean gain"]
    for r, g in zip(rows, report.gains):
        assert float(r["gain"]) == pytest.approx(float(r["pretrained"]) - float(r["random"]), abs=0.011)
        assert float(r["pretrained"]) == pytest.approx(g.pretrained.median, abs=0.006)
        assert r["pretrained_lr"] in ("0.001", "0.003") and r["random_lr"] in ("0.001", "0.003")
    assert float(rows[-1]["gain"]) == pytest.approx(sum(g.gain for g in report.gains) / 2, abs=0.011)
    # each route's figure is the median of its best lr's seeds, read back from the cells
    cells = list(csv.DictReader((out / "cells.csv").open(encoding="utf-8")))
    assert len(cells) == 16
    lrs = ("0.001", "0.003")
    for g in report.gains:
        for route in ("pretrained", "random"):
            summary = getattr(g, route)
            mine = [c for c in cells if c["route"] == route and c["task"] == g.task.column]
            medians = {lr: statistics.median(float(c["score"]) for c in mine if c["lr"] == lr) for lr in lrs}
            assert summary.median == pytest.approx(max(medians.values()), abs=1e-3)
            assert medians[f"{summary.lr:g}"] == pytest.approx(max(medians.values()), abs=1e-3)
    for c in cells:  # the score is the official metric in points: finetune's fraction x 100, conlleval's percent
        metrics = json.loads(
            (out / "runs" / c["route"] / ("sst2" if c["task"] == "SST-2" else "conll"))
            .joinpath(f"lr{c['lr']}_seed{c['seed']}", "metrics.json")
            .read_text()
        )
        points = metrics["accuracy"] * 100 if c["task"] == "SST-2" else metrics["f1"]
        assert float(c["score"]) == pytest.approx(points, abs=1e-3) and 0 <= points <= 100
    assert not any((out / "runs").rglob("model.safetensors"))  # weights are not kept
    again = DownstreamMeter(cfg, run_child=in_process).run()  # resume: nothing to redo
    assert (again.cells_run, again.cells_kept) == (0, 16)
    assert [g.gain for g in again.gains] == [g.gain for g in report.gains]
    with pytest.raises(InputError, match="other settings"):
        DownstreamMeter(meter(tmp_path, model, lrs=[1e-3]), run_child=in_process).run()


def test_cli_and_bad_input(tmp_path, monkeypatch, capsys):
    model = finetune_base(tmp_path / "model", seed=7)
    monkeypatch.setattr(downstream, "run_bertkit", in_process)
    argv = ["downstream", "--model", str(model), "--data-dir", str(FINETUNE_FIXTURES), "--output", str(tmp_path / "o")]
    argv += ["--tasks", "sst2", "--seeds", "1", "--lr", "1e-3", "--sst2-examples", "16", "--epochs", "1"]
    assert main([*argv, "--finetune-args", " ".join(FAST)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(summary["gains"]) == {"sst2"}
    assert summary["gains"]["sst2"] == pytest.approx(
        summary["tasks"]["sst2"]["pretrained"] - summary["tasks"]["sst2"]["random"], abs=0.01
    )
    # the SST-2 subset reached finetune: 16 of the fixture's 64 examples, one epoch of batches of 8
    metrics = (tmp_path / "o" / "runs" / "random" / "sst2" / "lr0.001_seed1" / "metrics.json").read_text()
    assert json.loads(metrics)["step"] == 2
    assert main(["downstream", *argv[1:6], str(tmp_path / "p"), "--tasks", "sst2,nope"]) != 0
    assert "unknown task 'nope'" in capsys.readouterr().err
    (tmp_path / "no-data").mkdir()
    no_data = ["--data-dir", str(tmp_path / "no-data")]
    assert main(["downstream", *argv[1:3], *no_data, "--output", str(tmp_path / "q"), "--tasks", "mrpc"]) != 0
    assert "no MRPC files" in capsys.readouterr().err


def test_resolve_meter_tasks():
    assert resolve_meter_tasks("SST-2, conll2003,cola,sst2") == ["sst2", "conll", "cola"]
    with pytest.raises(InputError, match="names no task"):
        resolve_meter_tasks(" , ")


def test_default_lr_grid_follows_the_models_width(tmp_path):
    """Narrow models fine-tune best at larger learning rates: the grid is chosen from config.json's hidden_size,
    and a directory without a readable one gets the wide models' grid."""
    for hidden, grid in ((128, [3e-4, 1e-3, 3e-3]), (256, [1e-4, 3e-4, 1e-3]), (768, [5e-5, 1e-4, 3e-4])):
        d = tmp_path / str(hidden)
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"hidden_size": hidden}), encoding="utf-8")
        assert downstream.default_lrs(d) == grid
    assert downstream.default_lrs(tmp_path / "missing") == [5e-5, 1e-4, 3e-4]


def test_jobs_run_cells_at_once_with_the_same_results(tmp_path):
    """--jobs N: the same cells and figures as one at a time, N fine-tunings in flight; a failed one stops the
    meter with its error. The fine-tunings are faked (a score from the cell's lr, seed and route), since what is
    tested is the scheduling."""
    import threading

    model = finetune_base(tmp_path / "model", seed=7)
    live, most, lock = [0], [0], threading.Lock()

    def fake(args, log=None, **_):
        get = dict(zip(args, args[1:]))  # each flag with the word after it
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        time.sleep(0.05)
        route = 1.0 if "random-init" in get["--model"] else 2.0
        score = (float(get["--lr"]) * 100 + int(get["--seed"]) + route) / 10
        Path(get["--output"], "metrics.json").write_text(json.dumps({"accuracy": score, "f1": score * 100}))
        with lock:
            live[0] -= 1
        return ChildResult(0, False, False, 0.05, log)

    one = DownstreamMeter(meter(tmp_path / "one", model, lrs=[1e-3, 3e-3]), run_child=fake).run()
    assert most[0] == 1
    cfg = meter(tmp_path / "many", model, lrs=[1e-3, 3e-3], jobs=4)
    many = DownstreamMeter(cfg, run_child=fake).run()
    assert most[0] == 4 and many.cells_run == one.cells_run == 16
    assert [(g.pretrained.scores, g.random.scores) for g in many.gains] == [
        (g.pretrained.scores, g.random.scores) for g in one.gains
    ]
    cells = lambda m: (m.output / "cells.csv").read_text().replace(str(m.output), "")  # noqa: E731
    assert cells(one) == cells(many)

    def broken(args, log=None, **kw):
        return ChildResult(1, False, False, 0.0, log) if "3e-3" in args or "0.003" in args else fake(args, log)

    with pytest.raises(downstream.RunError, match="lr 0.003"):
        DownstreamMeter(meter(tmp_path / "broken", model, lrs=[1e-3, 3e-3], jobs=3), run_child=broken).run()
