"""Helpers shared by the tests: tiny model directories (random, or fine-tuned for a few steps on the fixture data),
one torch thread per module, and a JSON-over-HTTP call to a live server.

One builder for every tiny BERT: :func:`make_model_dir` (any vocabulary, any head), :func:`finetune_base` (the
fine-tuning tests' model on tests/fixtures/finetune's vocabulary) and :func:`finetune_quickly` (one short
``bertkit finetune`` run on the fixture files)."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertForPreTraining

FINETUNE_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "finetune"
FINETUNE_VOCAB = FINETUNE_FIXTURES / "vocab.txt"
# one epoch of 16 examples at a high learning rate, exact arithmetic: seconds, and a head that has moved
QUICK_FINETUNE = [
    "--epochs",
    "1",
    "--batch-size",
    "8",
    "--lr",
    "1e-3",
    "--quiet",
    "--precision",
    "fp32",
    "--max-train-examples",
    "16",
]
WIDE = dict(hidden_size=64, intermediate_size=128)  # the int8 and ONNX export tests' width
# the pre-training tests' tiny BERT: bert-tiny's 2 layers, narrower (config_overrides, or --config-override)
TINY_OVERRIDES = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
TINY_BERT_FLAGS = ["--model-size", "bert-tiny"] + [
    flag for key, value in TINY_OVERRIDES.items() for flag in ("--config-override", f"{key}={value}")
]
# one bertkit pretrain run's flags at that size: short sequences, exact arithmetic, one tokenizing worker
TINY_PRETRAIN = [*TINY_BERT_FLAGS, "--seq-len", "32", "--batch-size", "4", "--precision", "fp32", "--workers", "1"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]
NER_TEXTS = [
    "Carol lives in Berlin and works for Acme Corp.",
    "Dave works for Globex  in London!",
    "the ending was boring , the cast was great .",
    "Zürich's qwertyuiop is unknown",
]


def read_vocab(path: Path) -> list[str]:
    """The tokens of a vocab.txt (blank lines skipped)."""
    return [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def tiny_config(vocab_size: int, layers: int = 3, max_position_embeddings: int = 64, **overrides) -> BertConfig:
    """Hidden 32, 4 heads, intermediate 37 unless ``overrides`` say otherwise (any BertConfig field, e.g.
    ``hidden_size``, ``id2label``)."""
    fields = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37)
    fields.update(overrides)
    return BertConfig(
        vocab_size=vocab_size, num_hidden_layers=layers, max_position_embeddings=max_position_embeddings, **fields
    )


def make_model_dir(
    path: Path,
    vocab: list[str] | Path,
    cls=BertForPreTraining,
    layers: int = 3,
    seed: int = 0,
    max_position_embeddings: int = 64,
    **overrides,
) -> Path:
    """A random tiny BERT (``tiny_config``; ``cls`` any head) saved with ``save_pretrained`` plus its ``vocab.txt``:
    ``vocab`` is the token list, or a vocab.txt to copy. The weights follow ``seed``."""
    tokens = read_vocab(vocab) if isinstance(vocab, Path) else vocab
    torch.manual_seed(seed)
    cls(tiny_config(len(tokens), layers, max_position_embeddings, **overrides)).save_pretrained(path)
    if isinstance(vocab, Path):
        shutil.copy(vocab, Path(path) / "vocab.txt")
    else:
        (Path(path) / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return Path(path)


def finetune_config(**overrides) -> BertConfig:
    """The config of :func:`finetune_base`'s model."""
    return tiny_config(len(read_vocab(FINETUNE_VOCAB)), layers=2, max_position_embeddings=128, **overrides)


def finetune_base(path: Path, cls=BertForPreTraining, seed: int = 0, **overrides) -> Path:
    """The fine-tuning tests' tiny BERT: 2 layers, 128 positions, tests/fixtures/finetune's vocabulary (``WIDE``:
    hidden 64, as the int8 and ONNX export tests use it)."""
    return make_model_dir(path, FINETUNE_VOCAB, cls, layers=2, seed=seed, max_position_embeddings=128, **overrides)


def random_ner_head(path: Path) -> Path:
    """A random token-classification head over IOB labels (``NER_LABELS``): its guesses make groups of every
    shape."""
    from bertkit.modeling import BertForTokenClassification

    return finetune_base(path, BertForTokenClassification, seed=3, id2label=dict(enumerate(NER_LABELS)))


def finetune_quickly(task: str, train: Path, dev: Path | None, model: Path, out: Path, *extra: str) -> Path:
    """``bertkit finetune`` for a few steps (``QUICK_FINETUNE``, then ``extra``); asserts it succeeded; ``out``."""
    from bertkit.cli import main

    argv = [
        "finetune",
        "--task",
        task,
        "--train",
        str(train),
        *(["--dev", str(dev)] if dev is not None else []),
        "--model",
        str(model),
        "--output",
        str(out),
        *QUICK_FINETUNE,
        *extra,
    ]
    assert main(argv) == 0
    return Path(out)


def finetune_metrics(task: str, train: Path, dev: Path | None, model: Path, out: Path, *extra: str) -> dict:
    """:func:`finetune_quickly`, then the run's ``metrics.json``."""
    out = finetune_quickly(task, train, dev, model, out, *extra)
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def one_by_one_logits(
    model_dir: Path,
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    max_length: int = 128,
    num_labels: int | None = None,
):
    """A sequence-classification head's logits [len(texts), num_labels], one unpadded text at a time: the
    reference a batched pipeline must equal."""
    from bertkit.modeling import BertForSequenceClassification

    extra = {"num_labels": num_labels} if num_labels else {}
    model = BertForSequenceClassification.from_pretrained(model_dir, **extra).eval()
    rows = []
    with torch.no_grad():
        for i, t in enumerate(texts):
            enc = tokenizer.encode(t, pairs[i] if pairs else None, max_length=max_length)
            rows.append(model(torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits[0])
    return torch.stack(rows).numpy()


def run_cli(argv: Sequence[str]) -> str:
    """``bertkit ARGV`` in this process (``bertkit.cli.main``, what the ``bertkit`` script calls) on one torch
    thread, as a child process with OMP_NUM_THREADS=1 runs it, so that their sums agree bit for bit: a reference
    run or a resume without a child's seconds of imports. Asserts exit 0; returns what it printed."""
    import contextlib
    import io

    from bertkit.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = main([str(a) for a in argv])
    finally:
        torch.set_num_threads(threads)
    assert code == 0, printed.getvalue()[-2000:]
    return printed.getvalue()


def cli_process(argv: Sequence[str]):
    """``bertkit ARGV`` as a real process (``python -m bertkit.cli``) on one thread, as :func:`run_cli` runs it
    in-process, for a test that signals or kills it: a ``subprocess.Popen`` with text pipes."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    cmd = [sys.executable, "-m", "bertkit.cli", *[str(a) for a in argv]]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def last_json(printed: str) -> dict:
    """The JSON summary a command printed last (``bertkit finetune``'s metrics)."""
    return json.loads(printed.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids ~10 ms of thread wake-up per op."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def http_json(url: str, path: str, body=None, method: str | None = None, timeout: float = 120):
    """``(status, parsed JSON answer or None)`` for ``body`` sent as JSON (GET without a body), errors included."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path,
        data=data,
        method=method or ("GET" if data is None else "POST"),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
