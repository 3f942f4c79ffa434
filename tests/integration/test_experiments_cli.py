"""The experiment commands end to end with a tiny random model on the shipped fixtures: the GLUE suite (results,
submission, resume after SIGKILL without recomputing a finished cell, SIGTERM), ablate, plot, and attention (on a BERT
and a ModernBERT)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import tinymodels
from tinymodels import last_json, run_cli

from bertkit.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"
PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, ft):
    from tinymodels import make_model_dir

    vocab = (ft / "vocab.txt").read_text(encoding="utf-8").split()
    return make_model_dir(tmp_path_factory.mktemp("tiny"), vocab, layers=2)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory, ft):
    """A GLUE download layout from the fixtures: SST-2 (with a test file) and MRPC (without)."""
    d = tmp_path_factory.mktemp("glue")
    (d / "SST-2").mkdir()
    (d / "SST-2" / "train.tsv").write_text((ft / "sst2_train.tsv").read_text())
    (d / "SST-2" / "dev.tsv").write_text((ft / "sst2_dev.tsv").read_text())
    sentences = [line.split("\t")[0] for line in (ft / "sst2_dev.tsv").read_text().splitlines()[1:9]]
    (d / "SST-2" / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, s in enumerate(sentences)))
    (d / "MRPC").mkdir()
    (d / "MRPC" / "train.tsv").write_text((ft / "mrpc_train.tsv").read_text(encoding="utf-8-sig"))
    (d / "MRPC" / "dev.tsv").write_text((ft / "mrpc_dev.tsv").read_text(encoding="utf-8-sig"))
    return d


FT_FLAGS = ["--epochs", "1", "--batch-size", "16", "--precision", "fp32", "--device", "cpu"]


def _start(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "bertkit.cli", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.time()
    while not path.exists():
        assert proc.poll() is None, f"the suite ended early: {proc.communicate()}"
        assert time.time() - t0 < timeout, f"{path} did not appear"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def glue_suite(tiny_dir, glue_dir, tmp_path_factory):
    """The GLUE suite on SST-2 (with a test file) and MRPC (without), 2 seeds: started as a child process and killed
    with SIGKILL once its first cell is written, then run again in-process with the same command, which resumes it.
    One suite serves the resume test and the results test (each cell is a child process: seconds of imports).
    Returns (argv, output dir, the resumed run's report, {"task/cell": (cell.json's bytes, its files' mtimes)} of
    the cells finished before the kill)."""
    out = tmp_path_factory.mktemp("glue-suite") / "suite"
    argv = [
        "glue",
        "--model",
        str(tiny_dir),
        "--data",
        str(glue_dir),
        "--output",
        str(out),
        "--seeds",
        "2",
        "--lr",
        "1e-3",
        *FT_FLAGS,
    ]
    proc = _start(argv)
    _wait_for(out / "runs" / "sst2" / "lr0.001_seed1" / "cell.json", proc)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    finished = {}
    for record in (out / "runs").glob("*/*/cell.json"):
        cell = record.parent
        finished[f"{cell.parent.name}/{cell.name}"] = (
            record.read_bytes(),
            {p.name: p.stat().st_mtime_ns for p in cell.iterdir()},
        )
    time.sleep(0.05)
    report = last_json(run_cli(argv))  # asserts exit 0
    return argv, out, report, finished


@pytest.mark.slow
def test_glue_suite_results_and_submission(glue_suite, capsys):
    argv, out, report, finished = glue_suite
    # 2 tasks x 2 seeds: the cells finished before the kill are kept, the others run
    assert report["cells_kept"] == len(finished) and report["cells_run"] == 4 - len(finished)
    assert set(report["tasks"]) == {"sst2", "mrpc"} and not report["complete"]
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0].startswith("task,metric,median,min,max,lr,seeds")
    assert [r.split(",")[0] for r in rows[1:]] == ["SST-2", "MRPC", "GLUE score (partial: 2 of 9)"]
    # how the figures were computed, per task and per run
    header = rows[0].split(",")
    for name in ("precision", "backend", "device"):
        assert name in header and name in (out / "cells.csv").read_text().splitlines()[0].split(",")
    computed = [dict(zip(header, r.split(","))) for r in rows[1:3]]
    assert all((c["precision"], c["backend"], c["device"]) == ("fp32", "pytorch", "cpu") for c in computed)
    # the table's numbers are the cells' numbers: MRPC = mean of F1 and accuracy, median over the 2 seeds
    cells = [json.loads((out / "runs" / "mrpc" / f"lr0.001_seed{s}" / "cell.json").read_text()) for s in (1, 2)]
    per_seed = sorted(100 * (c["metrics"]["f1"] + c["metrics"]["accuracy"]) / 2 for c in cells)
    assert report["tasks"]["mrpc"] == pytest.approx(sum(per_seed) / 2, abs=0.01)
    mrpc_row = rows[2].split(",")
    assert float(mrpc_row[3]) == pytest.approx(per_seed[0], abs=0.01)
    assert float(mrpc_row[4]) == pytest.approx(per_seed[1], abs=0.01)
    assert "| MRPC | f1/accuracy" in (out / "results.md").read_text()
    w, h = png_size(out / "glue.png")
    assert w > 200 and h > 150
    # submission: SST-2 only (MRPC has no test file), 8 test rows, labels 0/1, from the selected run
    with zipfile.ZipFile(out / "submission.zip") as z:
        assert z.namelist() == ["SST-2.tsv"]
        lines = z.read("SST-2.tsv").decode().splitlines()
    assert lines[0] == "index\tprediction" and [x.split("\t")[0] for x in lines[1:]] == [str(i) for i in range(8)]
    assert {x.split("\t")[1] for x in lines[1:]} <= {"0", "1"}
    # weights: only the selected run of each task keeps them
    kept = sorted(p.parent.name for p in (out / "runs").glob("*/*/model.safetensors"))
    assert len(kept) == 2
    # a resumed suite with other settings is refused, naming them
    assert main(argv[: -len(FT_FLAGS)] + ["--epochs", "2", *FT_FLAGS[2:]]) == 2
    assert "finetune_args" in capsys.readouterr().err


@pytest.mark.slow
def test_glue_resume_after_kill_keeps_finished_cells(glue_suite):
    _, out, report, finished = glue_suite
    assert "sst2/lr0.001_seed1" in finished and report["cells_kept"] >= 1
    for name, (record, stamps) in finished.items():
        cell = out / "runs" / name
        assert (cell / "cell.json").read_bytes() == record  # not recomputed
        assert {
            p.name: p.stat().st_mtime_ns for p in cell.iterdir() if p.name in stamps and p.name != "model.safetensors"
        } == {k: v for k, v in stamps.items() if k != "model.safetensors"}
    for task in ("sst2", "mrpc"):
        for seed in (1, 2):
            assert (out / "runs" / task / f"lr0.001_seed{seed}" / "cell.json").is_file()


def test_glue_sigterm_stops_with_a_resume_hint(tiny_dir, glue_dir, tmp_path):
    out = tmp_path / "suite"
    proc = _start(
        [
            "glue",
            "--model",
            str(tiny_dir),
            "--data",
            str(glue_dir),
            "--output",
            str(out),
            "--tasks",
            "sst2",
            "--seeds",
            "2",
            "--lr",
            "1e-3",
            *FT_FLAGS,
        ]
    )
    _wait_for(out / "runs" / "sst2" / "lr0.001_seed1", proc)  # the first fine-tuning has started
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "run the same command again to resume" in err
    assert not (out / "runs" / "sst2" / "lr0.001_seed2" / "cell.json").exists()


# ----------------------------------------------------------------------------------------------- plot, attention

TINY_PRETRAIN = [*tinymodels.TINY_PRETRAIN, "--quiet", "--lr", "1e-3"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A real (tiny) pretrain run: metrics.jsonl with training and held-out lines, a model directory."""
    import gzip

    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    d = tmp_path_factory.mktemp("pretrain")
    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    (d / "alice.txt").write_text(gzip.decompress(alice.read_bytes()).decode("utf-8")[:30_000], encoding="utf-8")
    train_vocab([d / "alice.txt"], vocab_size=500, output=d / "vocab", show_progress=False)
    out = d / "run"
    assert (
        main(
            [
                "pretrain",
                "--corpus",
                str(d / "alice.txt"),
                "--vocab",
                str(d / "vocab" / "vocab.txt"),
                "--output",
                str(out),
                "--max-steps",
                "12",
                "--log-every",
                "2",
                "--eval-every",
                "6",
                "--eval-batches",
                "2",
                *TINY_PRETRAIN,
            ]
        )
        == 0
    )
    return out


def test_plot_pretrain_and_finetune_runs(pretrained, tiny_dir, ft, tmp_path, capsys):
    fine = tmp_path / "sst2"
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(ft / "sst2_train.tsv"),
                "--dev",
                str(ft / "sst2_dev.tsv"),
                "--model",
                str(tiny_dir),
                "--output",
                str(fine),
                "--epochs",
                "2",
                "--batch-size",
                "16",
                "--quiet",
                "--precision",
                "fp32",
                "--eval-every",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    png = tmp_path / "curves.png"
    assert main(["plot", str(pretrained), str(fine), "--output", str(png), "--names", "pre,fine"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {
        "loss",
        "train_mlm_acc",
        "eval_mlm_acc",
        "eval_mlm_baseline",
        "nsp_acc",
        "lr",
        "tokens_per_s",
        "accuracy",
        "train_loss",
    } <= set(report["metrics"])
    w, h = png_size(png)
    assert w > 1000 and h > 400  # a row of panels per x axis: steps, and wall time (pretrain records carry it)
    import csv

    rows = list(csv.DictReader((tmp_path / "curves.csv").open()))
    lines = [json.loads(x) for x in (pretrained / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in lines if "loss" in r]
    got = [(float(r["step"]), float(r["value"])) for r in rows if r["run"] == "pre" and r["metric"] == "loss"]
    assert got == [(float(s), pytest.approx(v)) for s, v in losses] and len(got) == 6
    history = json.loads((fine / "train_log.json").read_text())["history"]
    got = [float(r["value"]) for r in rows if r["run"] == "fine" and r["metric"] == "accuracy"]
    assert got == [pytest.approx(r["accuracy"]) for r in history] and len(got) >= 2
    assert main(["plot", str(tmp_path / "nope")]) == 2


def test_plot_tensorboard_reads_back_with_tensorboard(pretrained, tmp_path, capsys):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    assert main(["plot", "--tensorboard", str(pretrained), "--output", str(tmp_path / "tb")]) == 0
    path = Path(json.loads(capsys.readouterr().out)["event_files"][0])
    acc = ea_mod.EventAccumulator(str(path.parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/mlm_acc", "train/lr", "eval/mlm_acc"} <= tags
    lines = [json.loads(x) for x in (pretrained / "metrics.jsonl").read_text().splitlines()]
    want = [(r["step"], r["loss"]) for r in lines if "loss" in r]
    got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert got == [(s, pytest.approx(v, rel=1e-6)) for s, v in want]
    evals = [(r["step"], r["eval_mlm_acc"]) for r in lines if "eval_mlm_acc" in r]
    assert [(e.step, e.value) for e in acc.Scalars("eval/mlm_acc")] == [(s, pytest.approx(v)) for s, v in evals]
    # wall times follow elapsed_s
    walls = [e.wall_time for e in acc.Scalars("train/loss")]
    assert walls == sorted(walls)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_attention_one_head_and_grid(arch, pretrained, finetune_base_of, tmp_path, capsys):
    """``bertkit attention`` on the pre-trained BERT and on a random ModernBERT (layers 2 and 3 attend within 2
    positions): every layer's probabilities, equal to transformers' eager ``output_attentions``; one head's figure
    and the grid; a layer out of range refused by name."""
    import numpy as np
    import torch

    model = pretrained if arch == "bert" else finetune_base_of("modernbert")
    n_layers, n_heads = {"bert": (2, 2), "modernbert": (3, 4)}[arch]
    png = tmp_path / "attn.png"
    text, pair = "alice was very tired", "she sat down"
    assert (
        main(
            [
                "attention",
                "--model",
                str(model),
                text,
                "--pair",
                pair,
                "--layer",
                "2",
                "--head",
                "1",
                "--output",
                str(png),
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    tokens = report["tokens"]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    assert (report["layers"], report["heads"]) == (n_layers, n_heads)
    data = np.load(tmp_path / "attn.npz")
    a = data["attention"]
    T = len(tokens)
    assert a.shape == (n_layers, n_heads, T, T)  # [L, N, T, T]
    assert list(data["tokens"]) == tokens and int(data["layer"]) == 2 and int(data["head"]) == 1
    assert abs(a.sum(-1) - 1).max() < 1e-4  # rows are distributions
    assert not np.allclose(a[0], a[1])  # layers differ
    if arch == "modernbert":  # local_attention 4: sliding-window layers see 2 positions either side
        far = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) > 2
        assert far.any() and a[1:, :, far].max() == 0 and a[0, :, far].min() > 0  # layer 1 is global

    transformers = pytest.importorskip("transformers")
    vocab = (model / "vocab.txt").read_text(encoding="utf-8").splitlines()
    ids = torch.tensor([[vocab.index(t) for t in tokens]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if arch == "bert":
        first = tokens.index("[SEP]")
        inputs["token_type_ids"] = torch.tensor([[0 if i <= first else 1 for i in range(T)]])
    hf = transformers.AutoModel.from_pretrained(model, attn_implementation="eager").eval()
    with torch.no_grad():
        out = hf(**inputs, output_attentions=True)
    np.testing.assert_allclose(a, torch.stack([x[0] for x in out.attentions]).float().numpy(), atol=1e-5)

    one = png_size(png)
    grid = tmp_path / "grid.png"
    assert main(["attention", "--model", str(model), text, "--output", str(grid)]) == 0
    assert png_size(grid)[0] > one[0] * 0.8 and (tmp_path / "grid.npz").is_file()
    bad = n_layers + 1
    assert main(["attention", "--model", str(model), "x", "--layer", str(bad), "--output", str(grid)]) == 2
    assert f"--layer {bad}: the model has layers 1..{n_layers}" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- ablate

ABLATE_PRETRAIN = (
    "--model-size bert-tiny --config-override hidden_size=32 --config-override num_attention_heads=2 "
    "--config-override intermediate_size=64 --seq-len 32 --batch-size 4 --precision fp32 --workers 1 "
    "--lr 1e-3 --eval-batches 2"
)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    import gzip

    from bertkit.commands.quickstart import bundled_corpus

    d = tmp_path_factory.mktemp("ablate-corpus")
    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    (d / "alice.txt").write_text(gzip.decompress(alice.read_bytes()).decode("utf-8")[:20_000], encoding="utf-8")
    return d / "alice.txt"


@pytest.mark.slow
def test_ablate_nsp_study_and_resume(corpus_file, glue_dir, tmp_path, capsys):
    out = tmp_path / "nsp"
    argv = [
        "ablate",
        "--corpus",
        str(corpus_file),
        "--output",
        str(out),
        "--study",
        "nsp",
        "--steps",
        "4",
        "--vocab-size",
        "400",
        "--glue",
        str(glue_dir),
        "--tasks",
        "sst2",
        "--seeds",
        "1",
        "--lr",
        "1e-3",
        "--pretrain-args",
        ABLATE_PRETRAIN,
        "--finetune-args",
        "--epochs 1 --batch-size 16 --precision fp32",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    import csv

    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["variant"] for r in rows] == ["MLM + NSP", "MLM only (no NSP)"]
    for r, key in zip(rows, ("mlm-nsp", "mlm-only")):
        lines = [json.loads(x) for x in (out / "pretrain" / key / "metrics.jsonl").read_text().splitlines()]
        held = [x for x in lines if "eval_mlm_acc" in x][-1]
        assert float(r["heldout_mlm_acc"]) == pytest.approx(held["eval_mlm_acc"], abs=1e-4)
        assert float(r["heldout_mlm_baseline"]) == pytest.approx(held["eval_mlm_baseline"], abs=1e-4)
        assert r["pretrain_steps"] == "4" and r["SST-2_median"] != ""
        run = json.loads((out / "pretrain" / key / "run.json").read_text())
        assert run["config"]["nsp"] is (key == "mlm-nsp")
        assert Path(run["config"]["vocab"]).resolve() == (out / "vocab" / "vocab.txt").resolve()  # one vocabulary
    assert rows[0]["heldout_nsp_acc"] != "" and rows[1]["heldout_nsp_acc"] == ""
    md = (out / "results.md").read_text()
    assert md.startswith("| Pre-training tasks | held-out MLM acc (best constant) | held-out NSP acc | SST-2 (dev) |")
    assert png_size(out / "nsp.png")[0] > 200
    # resume: nothing is pre-trained or fine-tuned again
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.name in ("variant.json", "cell.json")}
    assert len(stamps) == 4
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


@pytest.mark.slow
def test_ablate_steps_study_exports_checkpoints(corpus_file, alice_corpus, tmp_path, capsys):
    """The steps study on one run's checkpoints, with a given --vocab (the nsp study trains its own: the vocabulary
    child process is not run twice)."""
    out = tmp_path / "steps"
    assert (
        main(
            [
                "ablate",
                "--corpus",
                str(corpus_file),
                "--output",
                str(out),
                "--study",
                "steps",
                "--steps",
                "6",
                "--checkpoints",
                "3",
                "--vocab",
                str(alice_corpus[1]),
                "--pretrain-args",
                ABLATE_PRETRAIN,
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert [v["variant"] for v in report["variants"]] == ["2 steps", "4 steps", "6 steps"]
    run = json.loads((out / "pretrain" / "run" / "run.json").read_text())
    assert Path(run["config"]["vocab"]).resolve() == alice_corpus[1].resolve() and not (out / "vocab").exists()
    from bertkit.modeling import BertForPreTraining
    from bertkit.training.checkpointing import load_checkpoint

    ckpt = load_checkpoint(out / "pretrain" / "run" / "checkpoints" / "step-00000004.pt")
    model = BertForPreTraining.from_pretrained(out / "pretrain" / "steps" / "step-4")
    for k, v in model.state_dict().items():
        assert __import__("torch").equal(v, ckpt["model"][k]), k
    lines = [json.loads(x) for x in (out / "pretrain" / "run" / "metrics.jsonl").read_text().splitlines()]
    held = {x["step"]: x["eval_mlm_acc"] for x in lines if "eval_mlm_acc" in x}
    assert [v["heldout_mlm_acc"] for v in report["variants"]] == [pytest.approx(held[s]) for s in (2, 4, 6)]
    assert png_size(out / "steps.png")[0] > 200


def test_glue_and_export_refuse_an_unwritable_output_before_the_work(tiny_dir, glue_dir, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert (
        main(
            [
                "glue",
                "--model",
                str(tiny_dir),
                "--data",
                str(glue_dir),
                "--output",
                str(blocker / "suite"),
                "--seeds",
                "1",
                "--lr",
                "1e-3",
            ]
        )
        == 2
    )
    assert f"--output {blocker / 'suite'}: cannot write there" in capsys.readouterr().err
    assert not (tmp_path / "suite").exists()
    assert main(["export", "--onnx", str(tiny_dir), str(blocker / "model.onnx")]) == 2
    assert f"--onnx {blocker}: cannot write there" in capsys.readouterr().err
