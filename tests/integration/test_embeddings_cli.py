"""`bertkit finetune --task simcse|pairs|sts` and `bertkit evaluate --task sts|retrieval` end to end on the synthetic
embedding fixtures (tests/fixtures/embeddings, see make_fixtures.py) with a tiny random BERT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tinymodels
from tinymodels import cli_process, one_thread  # noqa: F401  (one_thread: an autouse fixture)

from bertkit import BertForPreTraining, Encoder
from bertkit.cli import main


@pytest.fixture(scope="module")
def fx(fixtures_dir) -> Path:
    return fixtures_dir / "embeddings"


@pytest.fixture(scope="module")
def base(tmp_path_factory, fx) -> Path:
    vocab = (fx / "vocab.txt").read_text(encoding="utf-8").split()
    return tinymodels.make_model_dir(tmp_path_factory.mktemp("base"), vocab, cls=BertForPreTraining, layers=2)


def _json_out(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _retrieval(capsys, model, fx, out, *extra) -> dict:
    assert (
        main(
            [
                "evaluate",
                "--task",
                "retrieval",
                "--model",
                str(model),
                "--data",
                str(fx / "beir"),
                "--output",
                str(out),
                "--precision",
                "fp32",
                *extra,
            ]
        )
        == 0
    )
    result = _json_out(capsys)
    assert json.loads((out / "metrics.json").read_text())["ndcg@10"] == result["ndcg@10"]
    return result


@pytest.fixture(scope="module")
def trained(tmp_path_factory, base, fx) -> Path:
    out = tmp_path_factory.mktemp("pairs") / "model"
    assert (
        main(
            [
                "finetune",
                "--task",
                "pairs",
                "--train",
                str(fx / "train_pairs.tsv"),
                "--model",
                str(base),
                "--output",
                str(out),
                "--batch-size",
                "32",
                "--epochs",
                "3",
                "--lr",
                "1e-3",
                "--precision",
                "fp32",
                "--dev",
                str(fx / "sts_dev.tsv"),
                "--quiet",
            ]
        )
        == 0
    )
    return out


def test_pairs_training_raises_retrieval(capsys, tmp_path, base, trained, fx):
    before = _retrieval(capsys, base, fx, tmp_path / "before", "--pooling", "mean", "--layers", "-1")
    after = _retrieval(capsys, trained, fx, tmp_path / "after")
    assert after["encoding"] == {"layers": [2], "pooling": "mean", "normalize": True}  # the saved defaults
    assert after["ndcg@10"] > before["ndcg@10"] + 20, (before, after)
    assert after["recall@10"] > before["recall@10"] + 20
    log = json.loads((trained / "train_log.json").read_text())
    assert log["summary"]["best_step"] in [h["step"] for h in log["history"]]
    best = max(h["dev_spearman"] for h in log["history"])
    assert log["summary"]["dev_spearman"] == best  # the best dev checkpoint is the one kept
    assert (
        main(
            [
                "evaluate",
                "--task",
                "sts",
                "--model",
                str(trained),
                "--data",
                str(fx / "sts_dev.tsv"),
                "--output",
                str(tmp_path / "sts"),
            ]
        )
        == 0
    )
    assert _json_out(capsys)["spearman"] == pytest.approx(best, abs=0.5)


def test_trained_directory_loads_in_sentence_transformers(trained, fx):
    st = pytest.importorskip("sentence_transformers")
    texts = [line.split("\t")[0] for line in (fx / "sts_dev.tsv").read_text().splitlines()[1:9]]
    ours = Encoder.from_pretrained(trained, precision="fp32").encode(texts)
    theirs = st.SentenceTransformer(str(trained), device="cpu").encode(texts)
    assert (ours * theirs).sum(1).min() >= 0.9999  # both unit length (Normalize)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    "argv",
    [
        ["--task", "simcse", "--train", "texts.txt", "--max-steps", "3", "--mini-batch-size", "5"],
        [
            "--task",
            "pairs",
            "--train",
            "train_triplets.jsonl",
            "--max-steps",
            "2",
            "--symmetric",
            "--matryoshka-dims",
            "32,16",
        ],
        ["--task", "sts", "--train", "sts_dev.tsv", "--max-steps", "2", "--pooling", "cls", "--no-normalize"],
    ],
)
def test_other_tasks_run_and_save(tmp_path, base, fx, argv, capsys):
    argv = [a if not a.endswith((".txt", ".jsonl", ".tsv")) else str(fx / a) for a in argv]
    out = tmp_path / "out"
    assert (
        main(
            [
                "finetune",
                *argv,
                "--model",
                str(base),
                "--output",
                str(out),
                "--batch-size",
                "16",
                "--quiet",
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    summary = _json_out(capsys)
    assert summary["steps"] == int(argv[argv.index("--max-steps") + 1]) and np.isfinite(summary["train_loss"])
    encoder = Encoder.from_pretrained(out)
    pooling = argv[argv.index("--pooling") + 1] if "--pooling" in argv else "mean"
    assert encoder.defaults.pooling == pooling and encoder.defaults.normalize == ("--no-normalize" not in argv)


def test_a_modernbert_directory_trains_as_an_embedding_model(tmp_path, fx, capsys):
    """The recipe takes the bare encoder of the directory's architecture (bertkit.models), not BERT's only."""
    from tinymodernbert import make_modernbert_dir

    vocab = (fx / "vocab.txt").read_text(encoding="utf-8").split()
    base = make_modernbert_dir(tmp_path / "modern", vocab)
    out = tmp_path / "out"
    argv = ["finetune", "--task", "simcse", "--train", str(fx / "texts.txt"), "--max-steps", "2", "--lr", "1e-3"]
    argv += ["--model", str(base), "--output", str(out), "--batch-size", "16", "--quiet", "--precision", "fp32"]
    assert main(argv) == 0
    assert _json_out(capsys)["steps"] == 2
    assert json.loads((out / "config.json").read_text())["model_type"] == "modernbert"
    texts = ["q1 q2 the", "d3 of d4"]
    before = Encoder.from_pretrained(base, precision="fp32").encode(texts, layers=-1, pooling="mean")
    after = Encoder.from_pretrained(out, precision="fp32").encode(texts, layers=-1, pooling="mean")
    assert np.isfinite(after).all() and not np.allclose(before, after)  # trained: the weights moved


def test_bad_input_errors(tmp_path, base, fx, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("anchor\tpositive\nq1\td1\nq2\t\n", encoding="utf-8")
    common = ["--model", str(base), "--output", str(tmp_path / "o"), "--quiet"]
    assert main(["finetune", "--task", "pairs", "--train", str(bad), *common]) == 2
    assert f"{bad}:3: missing or empty text in column 'positive'" in capsys.readouterr().err
    assert main(["finetune", "--task", "pairs", "--train", str(fx / "texts.txt"), *common]) == 2
    assert "--task simcse" in capsys.readouterr().err
    assert (
        main(["finetune", "--task", "simcse", "--train", str(fx / "texts.txt"), "--batch-size", "1000", *common]) == 2
    )
    assert "no full batch" in capsys.readouterr().err


def test_embed_command_uses_the_saved_pooling(tmp_path, trained, fx, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("q1 q2 the\nd3 of d4\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    assert (
        main(
            [
                "embed",
                "--model",
                str(trained),
                "--input",
                str(texts),
                "--output",
                str(out),
                "--quiet",
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    got = np.load(out)
    want = Encoder.from_pretrained(trained, precision="fp32").encode(
        ["q1 q2 the", "d3 of d4"], layers=-1, pooling="mean", normalize=True
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # layer -1, mean, unit length: the saved settings


def test_embedding_tasks_route_to_their_own_flags(capsys):
    from bertkit.cli import route

    assert route("finetune", ["--model", "m", "--task", "pairs"]) == "bertkit.commands.finetune_embeddings"
    assert route("finetune", ["--task=simcse"]) == "bertkit.commands.finetune_embeddings"
    assert route("finetune", ["--task", "stsb"]) is None  # GLUE's STS-B regression stays with finetune
    assert route("evaluate", ["--task", "retrieval"]) == "bertkit.commands.evaluate_embeddings"
    assert route("predict", ["--task", "sts"]) is None
    with pytest.raises(SystemExit):
        main(["finetune", "--task", "pairs", "-h"])
    assert "--mini-batch-size" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "--task", "retrieval", "-h"])
    assert "--split" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["finetune", "-h"])
    assert "--task simcse | pairs | sts" in capsys.readouterr().out


def test_server_uses_the_saved_pooling(trained):
    import urllib.request

    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    encoder = Encoder.from_pretrained(trained, precision="fp32")
    with ServerThread(create_app(encoder, ServeSettings())) as srv:
        with urllib.request.urlopen(srv.url + "/info", timeout=30) as r:
            info = json.loads(r.read())
        body = json.dumps({"texts": ["q1 q2 the", "d3 of d4"]}).encode()
        req = urllib.request.Request(srv.url + "/encode", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
    assert info["default_pooling_layer"] == [-1] and info["default_pooling_strategy"] == "mean"
    saved = json.loads((trained / "sentence_bert_config.json").read_text())["max_seq_length"]
    assert info["max_input_length"] == saved == 64  # --max-seq-length 128, capped by the tiny model's 64 positions
    want = encoder.encode(["q1 q2 the", "d3 of d4"], normalize=False)  # /encode normalises only when asked
    np.testing.assert_allclose(np.array(out["embeddings"]), want, rtol=1e-4, atol=1e-5)


def test_fp16_scales_the_loss_so_small_gradients_survive(tmp_path, base, fx, monkeypatch):
    """fp16 autocast (on CPU here; what --precision auto picks on a GPU without bf16) with a loss so small that its
    gradients underflow fp16: the loss scaler keeps them, so the (unscaled) gradient norm of the first step equals
    fp32's. Without loss scaling the fp16 gradients flush to zero."""
    import torch

    import bertkit.embeddings.recipe as recipe
    from bertkit.embeddings.data import read_training_rows
    from bertkit.training.distributed import DistContext

    build = recipe.build_loss

    def tiny_loss(*a, **k):
        inner = build(*a, **k)
        return lambda reps, labels: inner(reps, labels) * 1e-6  # Linear gradients below fp16's smallest, 6e-8

    monkeypatch.setattr(recipe, "build_loss", tiny_loss)
    grads = []  # the unscaled gradient of each parameter, as clipping sees it

    def record(params, *a, **k):
        params = list(params)
        grads.append([p.grad.norm().item() for p in params if p.grad is not None])  # the pooler has none
        return clip(params, *a, **k)

    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", record)
    for precision in ("fp32", "fp16"):
        args = recipe.EmbeddingTrainArgs(
            task="pairs",
            train=str(fx / "train_pairs.tsv"),
            model=str(base),
            output=str(tmp_path / precision),
            batch_size=16,
            max_steps=1,
            lr=1e-3,
            precision=precision,
            device="cpu",
            quiet=True,
        )
        torch.manual_seed(0)
        summary = recipe.train_embeddings(args, read_training_rows(args), None, DistContext())
        assert summary["compute_precision"] == precision == summary["precision"]
    fp32, fp16 = grads
    # the attention key biases get no gradient in exact arithmetic (softmax ignores a constant): only rounding noise
    real = [(a, b) for a, b in zip(fp32, fp16) if a > 1e-4 * max(fp32)]
    assert len(fp32) == len(fp16) and len(real) >= 20  # of 37: the layers' weights among them
    # every weight's gradient survives, the fp16 Linear layers' included (they flush to zero without the scaler)
    assert all(b == pytest.approx(a, rel=5e-2) for a, b in real)


def _embeddings_argv(base, fx, output, *extra) -> list[str]:
    """The signal test's run: 2 epochs x 50 steps of pairs, long enough to be stopped mid-run."""
    return [
        "finetune",
        "--task",
        "pairs",
        "--train",
        str(fx / "train_pairs.tsv"),
        "--dev",
        str(fx / "sts_dev.tsv"),
        "--model",
        str(base),
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--precision",
        "fp32",
        "--eval-every",
        "40",
        "--quiet",
        "--output",
        str(output),
        *extra,
    ]


def _embeddings_process(base, fx, output, *extra):
    """The run as a real ``bertkit finetune`` process (one thread, as tinymodels.run_cli runs it in-process)."""
    return cli_process(_embeddings_argv(base, fx, output, *extra))


@pytest.mark.timeout(300)
def test_signal_saves_a_checkpoint_and_resume_equals_an_uninterrupted_run(tmp_path, base, fx):
    """A real `bertkit finetune --task pairs` process gets SIGTERM mid-run: it finishes the step, writes a
    checkpoint, exits 143 saying how to resume; --resume then ends with the uninterrupted run's weights and dev
    history, bit for bit, and leaves no checkpoint behind. (The refusals of an interrupted run without --resume and of
    a finished one without --overwrite are the finetune command's, tested in test_finetune_cli.py.)"""
    import time

    from safetensors.torch import load_file

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    total = tinymodels.last_json(tinymodels.run_cli(_embeddings_argv(base, fx, whole)))  # the reference, in-process
    proc = _embeddings_process(base, fx, cut, "--save-every", "10")
    latest = cut / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while not latest.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(15)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "--resume" in err and "checkpoint" in err
    (ckpt,) = (cut / "checkpoints").glob("step-*.pt")
    assert 10 <= int(ckpt.stem.split("-")[1]) < 100  # 2 epochs x 50 steps: stopped mid-run
    resumed = tinymodels.last_json(
        tinymodels.run_cli(_embeddings_argv(base, fx, cut, "--resume"))
    )  # in-process: the stopped one is gone
    same = ("train_seconds", "rows_per_second", "output")
    assert {k: v for k, v in resumed.items() if k not in same} == {k: v for k, v in total.items() if k not in same}
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(cut / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch_equal(a[k], b[k]) for k in a)
    history = [json.loads((d / "train_log.json").read_text())["history"] for d in (whole, cut)]
    assert history[0] == history[1] and [h["step"] for h in history[0]] == [40, 80, 100]
    assert not (cut / "checkpoints").exists()


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_unwritable_outputs_fail_before_the_work(tmp_path, base, fx, capsys):
    """embed --output, and the embedding-task training's --output, in a place that cannot be written: a one-line
    error naming the flag, before anything is computed."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    texts = tmp_path / "texts.txt"
    texts.write_text("q1 q2 the\n", encoding="utf-8")
    assert (
        main(["embed", "--model", str(base), "--input", str(texts), "--output", str(blocker / "v.npy"), "--quiet"]) == 2
    )
    assert f"--output {blocker}: cannot write there" in capsys.readouterr().err
    assert (
        main(
            [
                "finetune",
                "--task",
                "pairs",
                "--train",
                str(fx / "train_pairs.tsv"),
                "--model",
                str(base),
                "--output",
                str(blocker / "o"),
                "--quiet",
                "--max-steps",
                "1",
            ]
        )
        == 2
    )
    assert f"--output {blocker / 'o'}: cannot write there" in capsys.readouterr().err


def test_evaluation_metrics_record_precision_backend_and_device(capsys, tmp_path, base, fx):
    _retrieval(capsys, base, fx, tmp_path / "r", "--device", "cpu")
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert (metrics["precision"], metrics["backend"], metrics["device"]) == ("fp32", "pytorch", "cpu")
