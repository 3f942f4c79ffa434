"""`bertkit finetune / evaluate / predict` end to end on the synthetic fixtures with a tiny random model:
output files in the official formats, the best checkpoint loading with transformers' BertFor* and bertkit's
(same logits), HF-layout input directories, and clear errors for bad input. Each task family runs on a BERT and on a
ModernBERT alike (the task's BERT head swapped for ModernBERT's, ``models.for_directory``: a transformers
ModernBERT of that head with the same logits); a fine-tuned ModernBERT in ``load_pipeline``."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from tinymodels import FINETUNE_VOCAB, cli_process, finetune_metrics, last_json, read_vocab, run_cli

from bertkit.cli import main

ARCHS = pytest.mark.parametrize("arch", ["bert", "modernbert"])


def _compare_with_transformers(out, arch, head, inputs):
    """The output directory is transformers' ``{Bert|ModernBert}For{head}`` (its config says so) and gives bertkit's
    logits on ``inputs`` (ModernBERT: without token_type_ids)."""
    transformers = pytest.importorskip("transformers")
    if arch == "bert":
        import bertkit.modeling as bm

        name, extra = f"BertFor{head}", {}
    else:
        import bertkit.modeling_modernbert as bm

        name, extra = f"ModernBertFor{head}", {"attn_implementation": "eager"}
        inputs = {k: v for k, v in inputs.items() if k != "token_type_ids"}
    assert json.loads((out / "config.json").read_text())["architectures"] == [name]
    hf = getattr(transformers, name).from_pretrained(out, **extra).eval()
    ours = getattr(bm, name).from_pretrained(out).eval()
    with torch.no_grad():
        a, b = hf(**inputs), ours(**inputs)
    for name in ("logits", "start_logits", "end_logits"):
        if hasattr(b, name) and getattr(b, name) is not None:
            torch.testing.assert_close(getattr(a, name), getattr(b, name), atol=1e-5, rtol=1e-4)
    return ours


@ARCHS
def test_glue_classification_end_to_end(arch, finetune_base_of, ft, tmp_path, capsys):
    out = tmp_path / "sst2"
    metrics = finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", finetune_base_of(arch), out)
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["step"] == 2
    lines = (out / "predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 25
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    for name in ("config.json", "model.safetensors", "vocab.txt", "finetune_config.json"):
        assert (out / name).is_file()
    inputs = {"input_ids": torch.tensor([[5, 20, 30, 6, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 0]])}
    _compare_with_transformers(out, arch, "SequenceClassification", inputs)
    # evaluate reproduces the dev metrics of the saved (best) checkpoint
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--precision",
                "fp32",
                "--output",
                str(tmp_path / "ev"),
            ]
        )
        == 0
    )
    again = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert again["accuracy"] == pytest.approx(metrics["accuracy"])


def test_regression_and_generic_csv(tiny_dir, ft, tmp_path):
    out = tmp_path / "stsb"
    m = finetune_metrics("stsb", ft / "stsb_train.tsv", ft / "stsb_dev.tsv", tiny_dir, out)
    assert {"pearson", "spearman"} <= set(m) and -1 <= m["pearson"] <= 1
    assert len(json.loads((out / "config.json").read_text())["id2label"]) == 1  # one output: regression
    pred = (out / "predictions.tsv").read_text().splitlines()[1]
    assert len(pred.split("\t")[1].split(".")[1]) == 3  # GLUE's STS-B format: 3 decimals
    out2 = tmp_path / "generic"
    m2 = finetune_metrics(
        "classification",
        ft / "generic_train.csv",
        ft / "generic_dev.csv",
        tiny_dir,
        out2,
        "--text-column",
        "review",
        "--label-column",
        "sentiment",
    )
    assert "accuracy" in m2 and "f1" in m2
    cfg = json.loads((out2 / "config.json").read_text())
    assert cfg["id2label"] == {"0": "neg", "1": "pos"}
    assert (
        main(
            [
                "predict",
                "--model",
                str(out2),
                "--data",
                str(ft / "generic_dev.jsonl"),
                "--quiet",
                "--output",
                str(tmp_path / "p"),
            ]
        )
        == 0
    )
    rows = (tmp_path / "p" / "predictions.tsv").read_text().splitlines()
    assert rows[1].split("\t")[0] == "r0" and rows[1].split("\t")[1] in ("neg", "pos")


@ARCHS
def test_squad_v1_and_v2_end_to_end(arch, finetune_base_of, ft, tmp_path):
    tiny_dir = finetune_base_of(arch)
    extra = ["--max-seq-length", "64", "--doc-stride", "24", "--max-query-length", "16"]
    out = tmp_path / "squad"
    m = finetune_metrics("squad", ft / "squad_train.json", ft / "squad_dev.json", tiny_dir, out, *extra)
    assert 0 <= m["exact_match"] <= 100 and 0 <= m["f1"] <= 100
    preds = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    dev = json.loads((ft / "squad_dev.json").read_text())
    ids = [q["id"] for a in dev["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert sorted(preds) == sorted(ids) == sorted(nbest)
    assert all(isinstance(v, str) for v in preds.values())
    assert all(nbest[q][0]["text"] == preds[q] for q in ids)
    inputs = {
        "input_ids": torch.tensor([[5, 20, 30, 6, 40, 41, 6]]),
        "token_type_ids": torch.tensor([[0] * 4 + [1] * 3]),
    }
    _compare_with_transformers(out, arch, "QuestionAnswering", inputs)
    out2 = tmp_path / "squad2"
    m2 = finetune_metrics("squad_v2", ft / "squad_v2_train.json", ft / "squad_v2_dev.json", tiny_dir, out2, *extra)
    assert {"HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"} <= set(m2)
    assert m2["best_f1"] >= m2["f1"] - 1e-9 and m2["best_exact"] >= m2["exact_match"] - 1e-9  # 0.0 is a candidate
    assert (out2 / "null_odds.json").is_file()
    # an impossible threshold makes every answer null: NoAns all right, HasAns all wrong
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out2),
                "--data",
                str(ft / "squad_v2_dev.json"),
                "--quiet",
                "--null-score-diff-threshold=-1e9",
                "--output",
                str(tmp_path / "ev2"),
            ]
        )
        == 0
    )
    ev = json.loads((tmp_path / "ev2" / "metrics.json").read_text())
    assert ev["NoAns_exact"] == 100.0 and ev["HasAns_exact"] == 0.0


@ARCHS
def test_conll_fine_tuned(arch, finetune_base_of, ft, tmp_path):
    out = tmp_path / "ner"
    m = finetune_metrics("conll2003", ft / "conll_train.txt", ft / "conll_dev.txt", finetune_base_of(arch), out)
    assert {"precision", "recall", "f1"} <= set(m)
    blocks = (out / "predictions.txt").read_text().strip().split("\n\n")
    assert len(blocks) == 8 and all(len(line.split()) == 3 for b in blocks for line in b.splitlines())
    inputs = {"input_ids": torch.tensor([[5, 20, 30, 6]])}
    _compare_with_transformers(out, arch, "TokenClassification", inputs)


@ARCHS
def test_conll_feature_based(arch, finetune_base_of, ft, tmp_path):
    """The encoder frozen, a tagger trained on its layers: the saved encoder is the base model's, unchanged, and
    transformers loads it; ``evaluate`` and ``load_pipeline`` run the tagger (its tags and scores are the tagger's
    own softmax), and the pipeline's encoder routes run the frozen encoder."""
    from bertkit.pipelines import load_pipeline
    from bertkit.tasks.tagging import FeatureTagger

    base = finetune_base_of(arch)
    fb = tmp_path / "ner_fb"
    m2 = finetune_metrics(
        "conll2003",
        ft / "conll_train.txt",
        ft / "conll_dev.txt",
        base,
        fb,
        "--feature-based",
        "--feature-layers=-1,-2",
        "--tagger-hidden",
        "16",
    )
    assert "f1" in m2 and (fb / "tagger.safetensors").is_file() and (fb / "tagger_config.json").is_file()
    encoder_cls = type(FeatureTagger.from_pretrained(fb).bert)
    assert encoder_cls.__name__ == {"bert": "BertModel", "modernbert": "ModernBertModel"}[arch]
    frozen, before = encoder_cls.from_pretrained(fb).state_dict(), encoder_cls.from_pretrained(base).state_dict()
    assert frozen.keys() == before.keys() and all(torch.equal(frozen[k], before[k]) for k in frozen)  # untouched
    tagger = FeatureTagger.from_pretrained(fb)
    assert tagger.layers == [-1, -2] and tagger.classifier.in_features == 32
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModel.from_pretrained(fb)  # the frozen encoder is a plain transformers encoder directory
    assert type(hf).__name__ == encoder_cls.__name__
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(fb),
                "--data",
                str(ft / "conll_dev.txt"),
                "--quiet",
                "--output",
                str(tmp_path / "fbev"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "fbev" / "metrics.json").read_text())["f1"] == pytest.approx(m2["f1"])

    pipe = load_pipeline(fb, precision="fp32")
    assert pipe.kind == "ner"
    texts = ["alice works for acme in berlin", "the film is very good"]
    got = pipe.ner(texts, aggregation_strategy="none", ignore_labels=[])
    for text, row in zip(texts, got):
        ids = pipe.tokenizer.encode(text).ids
        with torch.no_grad():
            logits = tagger(torch.tensor([ids])).logits[0, 1:-1]  # [CLS] and [SEP] are not tagged
        assert [o["entity"] for o in row] == [tagger.labels[i] for i in logits.argmax(-1).tolist()]
        torch.testing.assert_close(
            torch.tensor([o["score"] for o in row]), logits.softmax(-1).max(-1).values, atol=1e-5, rtol=0
        )
    enc = pipe.encoder()  # the server's encoder routes: the frozen encoder
    layers = json.loads((base / "config.json").read_text())["num_hidden_layers"]
    assert enc.num_layers == layers and enc.encode(texts, layers=-1).shape == (2, 32)


@ARCHS
def test_swag_end_to_end(arch, finetune_base_of, ft, tmp_path):
    out = tmp_path / "swag"
    m = finetune_metrics("swag", ft / "swag_train.csv", ft / "swag_dev.csv", finetune_base_of(arch), out)
    assert 0 <= m["accuracy"] <= 1
    inputs = {"input_ids": torch.tensor([[[5, 20, 6, 30, 6], [5, 20, 6, 31, 6]]])}
    _compare_with_transformers(out, arch, "MultipleChoice", inputs)


def test_hf_model_directory_as_input(ft, tmp_path):
    transformers = pytest.importorskip("transformers")
    d = tmp_path / "hf"
    config = transformers.BertConfig(
        vocab_size=len(read_vocab(FINETUNE_VOCAB)),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=128,
    )
    transformers.BertForPreTraining(config).save_pretrained(d)
    shutil.copy(ft / "vocab.txt", d / "vocab.txt")
    (d / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    m = finetune_metrics("cola", ft / "cola_train.tsv", ft / "cola_dev.tsv", d, tmp_path / "cola")
    assert -1 <= m["mcc"] <= 1


def test_bad_input_exits_2_naming_file_and_line(tiny_dir, ft, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nfine\t1\nbroken row\n")
    argv = [
        "finetune",
        "--task",
        "sst2",
        "--train",
        str(bad),
        "--model",
        str(tiny_dir),
        "--output",
        str(tmp_path / "o"),
        "--quiet",
    ]
    assert main(argv) == 2
    assert "bad.tsv:3: expected 2 tab-separated columns, got 1" in capsys.readouterr().err
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(empty),
                "--model",
                str(tiny_dir),
                "--output",
                str(tmp_path / "o"),
                "--quiet",
            ]
        )
        == 2
    )
    assert "empty" in capsys.readouterr().err
    # with --skip-bad-rows the bad row is counted and training goes on
    bad.write_text("sentence\tlabel\n" + "the film is good .\t1\nthe film is bad .\t0\n" * 4 + "broken row\n")
    assert main(argv + ["--skip-bad-rows", "--epochs", "1", "--precision", "fp32"]) == 0
    assert "skipped 1 bad rows" in capsys.readouterr().err
    assert (tmp_path / "o" / "model.safetensors").is_file()


def test_dropout_flag_is_applied_and_saved(tiny_dir, ft, tmp_path):
    out = tmp_path / "sst2-dropout"
    finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", tiny_dir, out, "--dropout", "0.25")
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_dropout_prob"] == config["attention_probs_dropout_prob"] == 0.25
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(ft / "sst2_train.tsv"),
                "--model",
                str(tiny_dir),
                "--output",
                str(tmp_path / "bad"),
                "--dropout",
                "1.5",
                "--quiet",
            ]
        )
        == 2
    )


def test_gradient_accumulation_equals_the_large_batch(tiny_dir, ft, tmp_path, monkeypatch):
    """Two accumulated micro-batches of 4 make the same gradient and optimizer step as one batch of 8
    (same-length sentences, no dropout, fp32)."""
    from bertkit.recipes.finetune import FinetuneArgs, finetune
    from bertkit.tasks import get_task
    from bertkit.tokenization import BertTokenizer

    norms = []  # Adam's step hardly depends on the gradient's scale: compare the gradient norm itself
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: norms.append(n := clip(*a, **k)) or n)
    weights = []
    for batch_size, accum in ((8, 1), (4, 2)):
        task = get_task("sst2", max_seq_length=32)
        train = task.read(ft / "sst2_train.tsv")[:8]  # every fixture sentence has 6 words
        torch.manual_seed(0)
        model = task.load_model(tiny_dir, finetuned=False)
        model.set_dropout(0.0)
        args = FinetuneArgs(
            epochs=1,
            batch_size=batch_size,
            grad_accum=accum,
            lr=1e-2,
            warmup_fraction=0.0,
            precision="fp32",
            quiet=True,
            device="cpu",
        )
        tokenizer = BertTokenizer.from_pretrained(tiny_dir)
        summary = finetune(task, model, tokenizer, train, None, tmp_path / f"b{batch_size}", args)
        assert summary["step"] == 1
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.manual_seed(0)
    initial = torch.cat([p.detach().flatten() for p in get_task("sst2").load_model(tiny_dir, False).parameters()])
    assert (weights[0] - initial).abs().max() > 1e-4  # the step moved the weights
    torch.testing.assert_close(weights[1], weights[0], atol=2e-6, rtol=1e-5)
    assert len(norms) == 2 and float(norms[1]) == pytest.approx(float(norms[0]), rel=1e-5)


def test_the_log_window_gets_each_steps_own_loss(tiny_dir, ft, tmp_path, monkeypatch):
    """Fine-tuning passes ``Run.stepped`` the step's own loss (the mean of its micro-batches'), as pre-training
    does, not the run's running average: over 4 steps of 2 micro-batches each, the loss a step reports equals the
    mean of the micro-batch losses counted during that step; and each micro-batch's rows are counted (the log's
    rows per second)."""
    from bertkit.recipes.finetune import FinetuneArgs, finetune
    from bertkit.tasks import get_task
    from bertkit.tokenization import BertTokenizer
    from bertkit.training.run import Run

    seen = []  # (loss passed, the run's loss sum, count and rows after the step)
    stepped = Run.stepped
    monkeypatch.setattr(
        Run,
        "stepped",
        lambda run, loss, t0: seen.append((loss, run.loss_sum, run.loss_n, run.seen)) or stepped(run, loss, t0),
    )
    task = get_task("sst2", max_seq_length=16)
    args = FinetuneArgs(epochs=1, batch_size=2, grad_accum=2, max_steps=4, lr=1e-3, precision="fp32", quiet=True)
    model = task.load_model(tiny_dir, finetuned=False)
    finetune(
        task,
        model,
        BertTokenizer.from_pretrained(tiny_dir),
        task.read(ft / "sst2_train.tsv"),
        None,
        tmp_path / "o",
        args,
    )
    assert len(seen) == 4
    before = (0.0, 0)
    for step, (loss, total, n, rows) in enumerate(seen, 1):
        assert n - before[1] == 2 and loss == pytest.approx((total - before[0]) / 2, rel=1e-5)
        assert rows == 4 * step  # 2 micro-batches of 2 rows a step
        before = (total, n)
    assert seen[-1][0] != pytest.approx(seen[-1][1] / seen[-1][2], rel=1e-5)  # not the running average


def test_grad_accum_must_be_positive(tiny_dir, ft, tmp_path, capsys):
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(ft / "sst2_train.tsv"),
                "--model",
                str(tiny_dir),
                "--output",
                str(tmp_path / "o"),
                "--grad-accum",
                "0",
                "--quiet",
            ]
        )
        == 2
    )
    assert "--grad-accum" in capsys.readouterr().err


@pytest.mark.timeout(150)
def test_torchrun_two_processes_equal_one_large_batch(tiny_dir, ft, tmp_path):
    """DDP fine-tuning: 2 processes x batches of 4 make the optimizer step one process makes with a batch of 8
    (same 8 same-length sentences, no dropout, fp32); rank 0 alone writes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    train = tmp_path / "train8.tsv"
    train.write_text(
        "".join((ft / "sst2_train.tsv").read_text(encoding="utf-8").splitlines(True)[:9]), encoding="utf-8"
    )
    common = [
        "finetune",
        "--task",
        "sst2",
        "--train",
        str(train),
        "--model",
        str(tiny_dir),
        "--epochs",
        "1",
        "--lr",
        "1e-2",
        "--warmup-fraction",
        "0",
        "--precision",
        "fp32",
        "--dropout",
        "0",
        "--quiet",
        "--device",
        "cpu",
    ]  # gloo on the CPU, also on a machine with one GPU
    assert main([*common, "--output", str(tmp_path / "one"), "--batch-size", "8"]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    torchrun = Path(sys.executable).parent / "torchrun"
    r = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "bertkit.cli",
            *common,
            "--output",
            str(tmp_path / "two"),
            "--batch-size",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=140,
        cwd=tmp_path,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert len([line for line in r.stdout.splitlines() if line.startswith("{")]) == 1  # rank 0 reports
    assert json.loads(r.stdout.strip().splitlines()[-1])["step"] == 1
    one = load_file(str(tmp_path / "one" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=2e-6, rtol=1e-5, msg=key)
    assert not list((tmp_path / "two").rglob("*.tmp*"))


def _parser(command):
    import argparse
    import importlib

    from bertkit.cli import COMMANDS

    parser = argparse.ArgumentParser(prog=f"bertkit {command}")
    importlib.import_module(COMMANDS[command][0]).configure(parser)
    return parser


def test_flags_come_from_one_definition_each():
    """Every flag of finetune / evaluate / predict has help; --task's choices are the one task registry (GLUE's
    names from data/tasks/glue.py), and for evaluate the tasks it hands to its variants (cli.VARIANTS: named in an
    "invalid choice", issue 60); finetune's defaults are FinetuneArgs'; evaluate and predict take the same flags."""
    from bertkit.data.tasks.glue import GLUE_TASKS
    from bertkit.embeddings import EVALUATION_TASKS
    from bertkit.errors import InputError
    from bertkit.options import from_args
    from bertkit.recipes.finetune import FinetuneArgs
    from bertkit.tasks import TASK_NAMES, get_task

    flags = {}
    for command in ("finetune", "evaluate", "predict"):
        parser = _parser(command)
        for action in parser._actions:
            assert action.dest == "help" or action.help, (command, action.option_strings)
        (task,) = [a for a in parser._actions if a.dest == "task"]
        routed = (*EVALUATION_TASKS, "blimp") if command == "evaluate" else ()
        assert tuple(task.choices) == (*TASK_NAMES, *routed)
        flags[command] = {s for a in parser._actions for s in a.option_strings}
    assert flags["evaluate"] == flags["predict"]
    inference_only = {"--model", "--data", "--output", "--batch-size", "--quantize", "--backend"}
    assert flags["evaluate"] - inference_only < flags["finetune"]
    assert {name for name, spec in GLUE_TASKS.items() if spec.name == name} < set(TASK_NAMES)
    args = _parser("finetune").parse_args(["--task", "sst2", "--train", "t", "--model", "m", "--output", "o"])
    assert from_args(FinetuneArgs, args) == FinetuneArgs()
    with pytest.raises(InputError, match="--task: unknown task 'nope'"):
        get_task("nope")


def test_fp16_scales_the_loss_so_small_gradients_survive(tiny_dir, ft, tmp_path, monkeypatch):
    """fp16 autocast (on CPU here; the same path as on a V100 / T4) with a loss so small that its gradients underflow
    fp16: the GradScaler keeps them, so the clipped (unscaled) gradient norm equals fp32's; its state is saved in
    the resumable checkpoint."""
    import dataclasses

    import bertkit.recipes.finetune as recipe
    from bertkit.tasks import get_task
    from bertkit.tokenization import BertTokenizer

    class TinyLoss(torch.nn.Module):
        """The model with its loss times 1e-6: gradients of ~1e-9, below fp16's smallest subnormal (6e-8)."""

        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, **batch):
            out = self.inner(**batch)
            return dataclasses.replace(out, loss=out.loss * 1e-6)

        def save_pretrained(self, directory):
            self.inner.save_pretrained(directory)

    norms, saved = [], []
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: norms.append(n := clip(*a, **k)) or n)
    import bertkit.training.state as train_state

    save = train_state.save_checkpoint
    monkeypatch.setattr(
        train_state,
        "save_checkpoint",
        lambda d, step, state, keep: saved.append(state) or save(d, step, state, keep=keep),
    )
    for precision in ("fp32", "fp16"):
        task = get_task("sst2", max_seq_length=32)
        train = task.read(ft / "sst2_train.tsv")[:8]
        torch.manual_seed(0)
        model = task.load_model(tiny_dir, finetuned=False)
        model.set_dropout(0.0)
        args = recipe.FinetuneArgs(
            epochs=1, batch_size=8, lr=1e-3, precision=precision, quiet=True, max_steps=2, save_every=1
        )
        summary = recipe.finetune(
            task, TinyLoss(model), BertTokenizer.from_pretrained(tiny_dir), train * 2, None, tmp_path / precision, args
        )
        assert summary["compute_precision"] == precision
    norms = [float(n) for n in norms]
    assert len(norms) == 4 and norms[0] > 0
    assert norms[2] == pytest.approx(norms[0], rel=2e-2)  # the first step: same gradient, fp16 or not
    assert saved[0]["scaler"] == {} and saved[1]["scaler"]["scale"] == 65536.0  # disabled in fp32; fp16's state


def _finetune_argv(tiny_dir, ft, output, *extra) -> list[str]:
    """The signal test's run: 12 epochs x 8 steps of SST-2, long enough to be stopped mid-run."""
    return [
        "finetune",
        "--task",
        "sst2",
        "--train",
        str(ft / "sst2_train.tsv"),
        "--dev",
        str(ft / "sst2_dev.tsv"),
        "--model",
        str(tiny_dir),
        "--epochs",
        "12",
        "--batch-size",
        "4",
        "--grad-accum",
        "2",
        "--lr",
        "1e-3",
        "--precision",
        "fp32",
        "--eval-every",
        "25",
        "--quiet",
        "--max-seq-length",
        "16",
        "--output",
        str(output),
        *extra,
    ]


def _finetune_process(tiny_dir, ft, output, *extra):
    """The run as a real ``bertkit finetune`` process (one thread, as tinymodels.run_cli runs it in-process)."""
    return cli_process(_finetune_argv(tiny_dir, ft, output, *extra))


@pytest.fixture(scope="module")
def uninterrupted(tiny_dir, ft, tmp_path_factory):
    """The reference: the same run uninterrupted, in-process (only the stopped run needs a process of its own)."""
    whole = tmp_path_factory.mktemp("whole")
    return whole, last_json(run_cli(_finetune_argv(tiny_dir, ft, whole)))


@pytest.mark.timeout(180)
def test_signal_saves_a_checkpoint_and_resume_equals_an_uninterrupted_run(tiny_dir, ft, tmp_path, uninterrupted):
    """A real `bertkit finetune` process gets SIGTERM mid-run: it finishes the step, writes a checkpoint, exits
    128 + signal saying how to resume; --resume then ends with the uninterrupted run's weights and dev history, bit
    for bit; a finished run leaves no checkpoint or temp file behind. (SIGINT: tests/unit/test_interrupt.py.)"""
    import signal
    import time

    from safetensors.torch import load_file

    whole, total = uninterrupted
    cut = tmp_path / "cut"
    proc = _finetune_process(tiny_dir, ft, cut, "--save-every", "10")
    latest = cut / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while not latest.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "--resume" in err and "checkpoint" in err
    (ckpt,) = (cut / "checkpoints").glob("step-*.pt")
    assert 10 <= int(ckpt.stem.split("-")[1]) < 96  # 12 epochs x 8 steps: stopped mid-run
    resumed = last_json(
        run_cli(_finetune_argv(tiny_dir, ft, cut, "--resume"))
    )  # in-process: the stopped process is gone
    same = ("train_seconds", "output")
    assert {k: v for k, v in resumed.items() if k not in same} == {k: v for k, v in total.items() if k not in same}
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(cut / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history = [json.loads((d / "train_log.json").read_text())["history"] for d in (whole, cut)]
    assert history[0] == history[1] and [h["step"] for h in history[0]] == [25, 50, 75, 96]
    assert not (cut / "checkpoints").exists() and not list(cut.rglob(".*tmp*"))


def test_resume_refusals(tiny_dir, ft, tmp_path, capsys):
    """An interrupted run's checkpoint is not silently overwritten; --resume with other settings is refused."""
    from bertkit.training.checkpointing import checkpoint_dir, save_checkpoint

    out = tmp_path / "o"
    argv = [
        "finetune",
        "--task",
        "sst2",
        "--train",
        str(ft / "sst2_train.tsv"),
        "--model",
        str(tiny_dir),
        "--output",
        str(out),
        "--quiet",
        "--precision",
        "fp32",
        "--epochs",
        "1",
    ]
    settings = {"model": "/elsewhere", "max_seq_length": 64}  # the model and task settings it started with
    run = {"task": "sst2", "args": {"lr": 1e-4}, "settings": settings}
    save_checkpoint(checkpoint_dir(out), 3, {"model": {}, "run": run})
    assert main(argv) == 2
    assert "pass --resume to continue it" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--lr 5e-05 (the run used 0.0001)" in err
    assert f"--model {tiny_dir.resolve()} (the run used /elsewhere)" in err  # was resumed silently
    assert "--max-seq-length 128 (the run used 64)" in err
    shutil.rmtree(checkpoint_dir(out))
    (out / "train_log.json").write_text("{}")
    assert main([*argv, "--resume"]) == 2
    assert "holds a finished run" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate", "predict"])
@pytest.mark.parametrize(
    "task,data,missing",
    [("sst2", "sst2_dev.tsv", "classifier.weight"), ("squad", "squad_dev.json", "qa_outputs.weight")],
)
def test_evaluate_and_predict_refuse_a_model_without_the_trained_head(
    tiny_dir, ft, tmp_path, capsys, command, task, data, missing
):
    """A pre-trained directory has no task head: evaluate / predict refuse it, naming the missing weights, instead
    of scoring with a freshly initialised head; nothing is written."""
    out = tmp_path / "o"
    assert (
        main(
            [
                command,
                "--task",
                task,
                "--model",
                str(tiny_dir),
                "--data",
                str(ft / data),
                "--quiet",
                "--output",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"no trained {task} head" in err and missing in err and "bertkit finetune" in err
    assert not out.exists()


def test_evaluate_quantize_int8_runs_the_int8_model(tiny_dir, ft, tmp_path, monkeypatch):
    """``evaluate --quantize int8`` evaluates the int8 model (int8 numerics are tested in test_quantize.py)."""
    import bertkit.quantize as quantize

    seen = []
    real = quantize.quantize_model

    def spy(model, method, device="cpu"):
        out = real(model, method, device)
        seen.append((method, quantize.is_quantized(out)))
        return out

    monkeypatch.setattr(quantize, "quantize_model", spy)
    out = tmp_path / "sst2"
    finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", tiny_dir, out)
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--output",
                str(tmp_path / "int8"),
                "--quantize",
                "int8",
            ]
        )
        == 0
    )
    assert seen == [("int8", True)]
    assert 0.0 <= json.loads((tmp_path / "int8" / "metrics.json").read_text())["accuracy"] <= 1.0
    # where a GPU is present, --quantize without --device still runs on the CPU (int8 kernels are CPU-only): it
    # used to pick cuda and refuse ("int8 runs on the CPU only"), as it did on the H100
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--output",
                str(tmp_path / "int8-gpu-box"),
                "--quantize",
                "int8",
            ]
        )
        == 0
    )
    assert seen == [("int8", True)] * 2


def test_finetune_tensorboard_writes_dev_metrics(tiny_dir, ft, tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "tb"
    metrics = finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", tiny_dir, out, "--tensorboard")
    acc = ea.EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    points = acc.Scalars("dev/accuracy")
    assert [p.step for p in points] == [metrics["step"]]
    assert points[0].value == pytest.approx(metrics["accuracy"])


def test_a_fine_tuned_reranker_without_its_head_is_refused(tiny_dir):
    """The rerank task loads a fine-tuned directory through the same head check as the other tasks."""
    from bertkit.errors import InputError
    from bertkit.tasks import get_task

    with pytest.raises(InputError, match="no trained rerank head: the weights lack .*classifier.weight"):
        get_task("rerank").load_model(tiny_dir, finetuned=True)


def test_a_finished_output_is_refused_without_overwrite_and_an_unwritable_one_up_front(tiny_dir, ft, tmp_path, capsys):
    """finetune into a finished run's directory needs --overwrite (as pretrain); an output that cannot be written
    fails before any training with a one-line error naming --output. Both metrics.json and the summary record how
    the figures were computed: precision, backend and device."""
    out = tmp_path / "o"
    argv = [
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
        str(out),
        "--quiet",
        "--precision",
        "fp32",
        "--epochs",
        "1",
        "--max-train-examples",
        "8",
        "--max-seq-length",
        "16",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    metrics = json.loads((out / "metrics.json").read_text())
    for record in (summary, metrics):
        assert (record["precision"], record["backend"], record["device"]) == ("fp32", "pytorch", "cpu")
    before = (out / "model.safetensors").read_bytes()
    assert main(argv) == 2
    assert "already holds a finished run" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == before
    assert main([*argv, "--overwrite"]) == 0
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    bad = [*argv[: argv.index("--output") + 1], str(blocker / "out"), *argv[argv.index("--output") + 2 :]]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert f"--output {blocker / 'out'}: cannot write there" in err and "Traceback" not in err


def test_pipeline_and_predict_on_a_finetuned_modernbert(finetune_base_of, ft, tmp_path):
    modern_dir = finetune_base_of("modernbert")
    """``load_pipeline`` (what ``bertkit predict`` and the server's task routes run) on the fine-tuned ModernBERT
    classifier: its probabilities are the model's softmax; a transformers-written ModernBERT classifier (no
    finetune_config.json) loads too, with its label names; int8 loads too."""
    from bertkit.modeling_modernbert import ModernBertForSequenceClassification
    from bertkit.pipelines import load_pipeline

    out = tmp_path / "sst2"
    finetune_metrics("sst2", ft / "sst2_train.tsv", ft / "sst2_dev.tsv", modern_dir, out)
    pipe = load_pipeline(out, precision="fp32")
    texts = ["a fine film", "dull and slow"]
    logits = pipe.logits(texts)
    model = ModernBertForSequenceClassification.from_pretrained(out)
    enc = pipe.tokenizer.encode_batch(texts)
    for row, e in zip(logits, enc):
        with torch.no_grad():
            want = model(torch.tensor([e.ids])).logits[0]
        torch.testing.assert_close(torch.as_tensor(row, dtype=torch.float32), want, atol=1e-5, rtol=1e-4)
    assert (
        main(
            [
                "predict",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--precision",
                "fp32",
                "--output",
                str(tmp_path / "pred"),
            ]
        )
        == 0
    )
    assert any((tmp_path / "pred").iterdir())
    int8 = load_pipeline(out, quantize="int8")  # int8 as BERT's (tests/unit/test_quantize.py)
    assert int8.quantize == "int8" and int8.logits(texts).shape == logits.shape

    transformers = pytest.importorskip("transformers")
    hf_dir = tmp_path / "hf"
    config = transformers.ModernBertConfig.from_pretrained(
        modern_dir, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    transformers.ModernBertForSequenceClassification(config).save_pretrained(hf_dir)
    shutil.copy(ft / "vocab.txt", hf_dir / "vocab.txt")
    hf_pipe = load_pipeline(hf_dir, precision="fp32")
    assert hf_pipe.kind == "classification" and hf_pipe.task.labels == ["neg", "pos"]
    assert len(hf_pipe.logits(texts)) == 2


@pytest.mark.parametrize("recipe", ["finetune", "embeddings", "distill"])
def test_max_time_ends_an_epoch_recipe_early_with_a_finished_model(
    recipe, tiny_dir, sst2_tuned_of, ft, fixtures_dir, tmp_path
):
    """--max-time on fine-tuning, the embedding tasks and distillation (``Run``'s budget, as pre-training's): a
    budget of 1 ms, spent by the first step, ends a run of hundreds of steps after that step, evaluated on dev and
    saved as at a last step: a loadable model whose dev metrics are step 1's, and run.json records the steps and
    why the run stopped."""
    from bertkit import Encoder

    out = tmp_path / recipe
    if recipe == "embeddings":
        emb = fixtures_dir / "embeddings"
        argv = ["finetune", "--task", "simcse", "--train", str(emb / "texts.txt"), "--dev", str(emb / "sts_dev.tsv")]
        argv += ["--model", str(tiny_dir)]
    else:
        argv = ["finetune", "--task", "sst2", "--model", str(tiny_dir)]
        if recipe == "distill":
            argv = ["distill", "--teacher", str(sst2_tuned_of("bert")), "--student", "layers:2"]
        argv += ["--train", str(ft / "sst2_train.tsv"), "--dev", str(ft / "sst2_dev.tsv")]
    common = ["--epochs", "50", "--batch-size", "4", "--quiet", "--precision", "fp32", "--max-time", "0.001s"]
    assert main([*argv, *common, "--output", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["finished"] and run["stopped"] == "max_time" and run["steps"] == 1 < run["total_steps"]
    best = json.loads((out / ("embedding_config.json" if recipe == "embeddings" else "metrics.json")).read_text())
    assert (best["best"] if recipe == "embeddings" else best)["step"] == 1
    assert Encoder.from_pretrained(out).encode(["a short text"]).shape[0] == 1
