"""``bertkit pretrain --objective electra`` end to end on a bundled book with a tiny model: ELECTRA's defaults, the
RTD figures in the log and the held-out meter, the output directory (a BERT that bertkit's heads load, the
generator that fill-mask and the held-out MLM meter read), clear refusals, kill -9 + resume equal to an
uninterrupted run, and torchrun with 2 processes through the same DDP path."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tinymodels import TINY_PRETRAIN, run_cli

BIN = Path(sys.executable).parent
TINY = ["--objective", "electra", *TINY_PRETRAIN, "--quiet"]


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def corpus(alice_corpus) -> tuple[Path, Path]:
    """(the first ~40 KB of the bundled Alice, a 600-token vocab.txt trained on it): conftest.py's."""
    return alice_corpus


def _cmd(corpus, out, *extra) -> list[str]:
    path, vocab = corpus
    return [str(BIN / "bertkit"), "pretrain", "--corpus", str(path), "--vocab", str(vocab), "--output", str(out)] + [
        *TINY,
        *extra,
    ]


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    found = {}
    for name in ("model.safetensors", "rtd_head.safetensors", "generator/model.safetensors"):
        found.update({f"{name}:{k}": v for k, v in load_file(str(directory / name)).items()})
    return found


def test_electra_run_saves_a_bert_its_head_and_generator(corpus, tmp_path, capsys):
    from bertkit import BertForSequenceClassification, BertModel
    from bertkit.cli import main
    from bertkit.recipes.pretrain import held_out_accuracy

    out = tmp_path / "run"
    args = ["--max-steps", "12", "--log-every", "3", "--eval-every", "6", "--eval-batches", "2", "--lr", "1e-3"]
    assert main(_cmd(corpus, out, *args)[1:]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertModel"]
    assert config["num_hidden_layers"] == 2
    generator = json.loads((out / "generator" / "config.json").read_text())
    assert generator["num_hidden_layers"] == 1 and (out / "generator" / "vocab.txt").is_file()
    run = json.loads((out / "run.json").read_text())["config"]
    assert run["objective"] == "electra" and run["mask_prob"] == 0.15 and run["nsp"] is False
    assert run["mask_mix"] == "85/0/15" and run["rtd_weight"] == 50.0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if "loss" in x]
    evals = [x for x in lines if "eval_mlm_acc" in x]
    assert [x["step"] for x in train] == [3, 6, 9, 12] and [x["step"] for x in evals] == [6, 12]
    for x in train:
        assert x["loss"] == pytest.approx(x["mlm_loss"] + 50 * x["rtd_loss"], rel=1e-4)
        assert 0 < x["train_replaced"] < 0.3 and 0 <= x["train_rtd_balanced_acc"] <= 1
    assert {"eval_rtd_auc", "eval_rtd_balanced_acc", "eval_rtd_recall", "eval_rtd_precision"} <= set(evals[-1])
    assert evals[-1]["eval_masked_tokens"] > 0

    score = held_out_accuracy(out)  # the generator's honest figure (the discriminator has no MLM head)
    assert score["masked_tokens"] > 0 and 0 <= score["mlm_acc"] <= 1
    # the model kept loads as a BERT: bare, and under a fine-tuning head (its pooler kept, the classifier new)
    disc = BertModel.from_pretrained(out)
    clf, info = BertForSequenceClassification.from_pretrained(out, output_loading_info=True, num_labels=3)
    assert sorted(info.initialised) == ["classifier.bias", "classifier.weight"]
    assert torch.equal(clf.bert.encoder.layer[1].output.dense.weight, disc.encoder.layer[1].output.dense.weight)
    capsys.readouterr()
    assert main(["fill-mask", "--model", str(out / "generator"), "--top-k", "2", "alice was [MASK] ."]) == 0
    assert len(re.findall(r" \d+\.\d%", capsys.readouterr().out)) == 2  # top 2 of the one [MASK]

    # continued pre-training from the output: the discriminator, its RTD head and the generator carry on (at an lr
    # too small to move them, the continued run saves what it started from)
    more = tmp_path / "more"
    assert main(_cmd(corpus, more, "--init-from", str(out), "--max-steps", "2", "--lr", "1e-12")[1:]) == 0
    before, after = _weights(out), _weights(more)
    assert before.keys() == after.keys()
    assert max(float((before[k] - after[k]).abs().max()) for k in before if "pooler" not in k) < 1e-6

    # refusals, one line each, before anything is written
    bad = tmp_path / "bad"
    assert main(_cmd(corpus, bad, "--max-steps", "2", "--nsp")[1:]) == 2
    err = capsys.readouterr().err.strip()
    assert "--nsp" in err and "electra" in err and len(err.splitlines()) == 1


def test_electra_with_a_modernbert_discriminator_saves_a_modernbert(corpus, tmp_path):
    """--arch modernbert: the discriminator saved as a ModernBERT encoder, its generator a ModernBERT masked LM that
    the honest held-out meter reads."""
    from bertkit.cli import main
    from bertkit.modeling_modernbert import ModernBertModel
    from bertkit.recipes.pretrain import held_out_accuracy

    out = tmp_path / "mb"
    assert main(_cmd(corpus, out, "--max-steps", "4", "--arch", "modernbert")[1:]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "modernbert"
    assert len(ModernBertModel.from_pretrained(out).layers) == 3  # modernbert-tiny
    assert json.loads((out / "generator" / "config.json").read_text())["num_hidden_layers"] == 1
    assert held_out_accuracy(out)["masked_tokens"] > 0


def test_kill_9_then_resume_matches_uninterrupted(corpus, tmp_path):
    steps, seed = 24, 5
    args = ["--max-steps", str(steps), "--save-every", "3", "--log-every", "1", "--seed", str(seed), "--lr", "1e-3"]
    args += [
        "--eval-every",
        "4",
        "--eval-batches",
        "2",
    ]  # held-out evaluations between saves: seeded, not the run's RNG
    from bertkit.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the subprocesses, so the sums agree bit for bit
    try:
        assert main(_cmd(corpus, tmp_path / "ref", *args)[1:]) == 0
    finally:
        torch.set_num_threads(threads)

    run = tmp_path / "killed"
    kill_at = random.Random().randint(4, steps - 6)
    proc = subprocess.Popen(_cmd(corpus, run, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    metrics, deadline = run / "metrics.jsonl", time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if metrics.is_file() and any(
            json.loads(x).get("step", 0) >= kill_at for x in metrics.read_text().splitlines() if x.endswith("}")
        ):
            break
        time.sleep(0.005)
    assert proc.poll() is None, f"the run ended before the kill at step {kill_at}: {proc.stderr.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "model.safetensors").exists()
    run_cli(_cmd(corpus, run, *args, "--resume")[1:])  # in-process, single-threaded like the killed run
    a, b = _weights(tmp_path / "ref"), _weights(run)
    assert a.keys() == b.keys() and any(k.startswith("generator/") for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= 1e-6, f"killed at step >= {kill_at}: max |diff| {worst}"
    ref_lines = [json.loads(x) for x in (tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()]
    run_lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    pick = ("step", "rtd_loss", "train_rtd_acc", "eval_rtd_auc", "eval_mlm_acc")
    assert [{k: x.get(k) for k in pick} for x in ref_lines] == [{k: x.get(k) for k in pick} for x in run_lines]
    # the weights did move: the comparison is not trivially true
    from bertkit import BertConfig, BertModel

    torch.manual_seed(seed)
    fresh = BertModel(BertConfig.from_pretrained(tmp_path / "ref")).state_dict()
    moved = max(float((fresh[k] - a[f"model.safetensors:{k}"]).abs().max()) for k in fresh if "pooler" not in k)
    assert moved > 1e-3


@pytest.mark.timeout(120)
def test_torchrun_two_processes(corpus, tmp_path):
    out = tmp_path / "ddp"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "bertkit.cli"]
    cmd += _cmd(corpus, out, "--max-steps", "6", "--save-every", "3", "--log-every", "2")[1:]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=110, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["world_size"] == 2
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == [2, 4, 6]
    assert all("train_rtd_balanced_acc" in x for x in lines if "loss" in x)
    from bertkit import BertForMaskedLM, BertModel

    BertModel.from_pretrained(out)
    BertForMaskedLM.from_pretrained(out / "generator")
