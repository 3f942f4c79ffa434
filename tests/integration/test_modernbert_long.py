"""Long context on a tiny ModernBERT with ModernBERT's 8192 positions (128-token sliding windows in two of its three
layers): an 8000-token document embeds whole (no 512-token cut: the default limit is the model's
max_position_embeddings), the server's limits follow the model (/info says 8192, an 8000-token input is served, a
longer one gets a 422 naming 8192), and ``bertkit finetune --max-seq-length 8192`` trains on 8000-token documents whose
pipeline then predicts what the model computes."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from tinymodels import http_json, one_thread  # noqa: F401  (autouse fixture: one torch thread)
from tinymodernbert import fixture_vocab, make_modernbert_dir

from bertkit.cli import main
from bertkit.features import Encoder

WORDS = "the film is very good . the plot was boring , the cast was great and grim .".split()  # one piece each
POSITIONS = 8192


def document(n_tokens: int, seed: int = 0) -> str:
    """A text of ``n_tokens`` tokens with [CLS] and [SEP] (every word is one wordpiece)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_tokens - 2))


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory, fixtures_dir):
    return make_modernbert_dir(
        tmp_path_factory.mktemp("mb-long"),
        fixture_vocab(fixtures_dir),
        local_attention=128,
        max_position_embeddings=POSITIONS,
    )


def test_an_8000_token_document_embeds_whole(long_dir):
    enc = Encoder.from_pretrained(long_dir, precision="fp32")
    assert enc.max_tokens(None) == POSITIONS
    text = document(8000)
    vectors, tokens = enc.encode([text], layers=-1, pooling="mean", show_tokens=True)
    assert len(tokens[0]) == 8000  # whole: not cut at 512
    ids = torch.tensor([enc.tokenizer.encode(text, max_length=POSITIONS).ids])
    assert ids.shape == (1, 8000)
    with torch.no_grad():
        states = enc.bert(ids).last_hidden_state[0]  # [T, H]
    np.testing.assert_allclose(vectors[0], states.mean(0).numpy(), rtol=1e-4, atol=1e-5)
    # the global layer spans the whole document: its last word reaches the first token's state, 8000 tokens away
    other = text.rsplit(" ", 1)[0] + (" film" if not text.endswith("film") else " plot")
    first = [enc.encode([t], layers=-1, pooling="cls")[0] for t in (text, other)]
    assert not np.allclose(first[0], first[1], rtol=0, atol=1e-7)
    _, cut = enc.encode([document(9000)], layers=-1, show_tokens=True)
    assert len(cut[0]) == POSITIONS  # past the model's positions: truncated to them


def test_server_limits_follow_the_model(long_dir):
    from bertkit.commands.serve import load_model
    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    enc = load_model(str(long_dir), "cpu", "fp32")
    text = document(8000, seed=1)
    want = enc.encode([text], normalize=True)
    with ServerThread(create_app(enc, ServeSettings(model_id="mb-long"))) as srv:
        status, info = http_json(srv.url, "/info")
        assert status == 200 and info["max_input_length"] == POSITIONS, info
        status, out = http_json(srv.url, "/embed", {"inputs": [text]})
        assert status == 200, out
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        status, out = http_json(srv.url, "/v1/embeddings", {"input": [text], "model": "mb-long"})
        assert status == 200, out
        np.testing.assert_allclose([d["embedding"] for d in out["data"]], want, rtol=1e-4, atol=1e-5)
        status, out = http_json(srv.url, "/embed", {"inputs": [document(8300)]})
        assert status == 422 and "8192" in json.dumps(out), out
    # a lower --max-length: the per-batch token budget need only hold that many (the model's 8192 need not fit)
    settings = ServeSettings(max_length=4096, max_batch_tokens=4096)
    with ServerThread(create_app(enc, settings)) as srv:
        status, info = http_json(srv.url, "/info")
        assert status == 200 and info["max_input_length"] == 4096, info
        status, out = http_json(srv.url, "/embed", {"inputs": [text]})
        assert status == 422 and "4096" in json.dumps(out), out


def test_finetune_and_predict_at_8000_tokens(long_dir, tmp_path):
    from bertkit.modeling_modernbert import ModernBertForSequenceClassification
    from bertkit.pipelines import load_pipeline

    data = tmp_path / "long.tsv"
    rows = [(document(8000, seed=10 + i), i % 2) for i in range(2)]
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    out = tmp_path / "clf"
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(data),
                "--dev",
                str(data),
                "--model",
                str(long_dir),
                "--output",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "1",
                "--lr",
                "1e-3",
                "--quiet",
                "--precision",
                "fp32",
                "--max-seq-length",
                str(POSITIONS),
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 2 and 0.0 <= metrics["accuracy"] <= 1.0
    pipe = load_pipeline(out, precision="fp32")
    assert pipe.max_length == POSITIONS
    text = rows[0][0]
    logits = pipe.logits([text])[0]
    model = ModernBertForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        want = model(torch.tensor([pipe.tokenizer.encode(text, max_length=POSITIONS).ids])).logits[0]
    np.testing.assert_allclose(logits, want.numpy(), rtol=1e-4, atol=1e-5)
