"""bertkit embed / similarity / fill-mask / serve -h, run in-process through bertkit.cli.main; ``embed`` and
``fill-mask`` on a BERT and on a ModernBERT directory alike. ModernBERT's own: the Encoder (poolings, layers) and
fill-mask checked against the model computed directly, BERT's classes refusing it in one line, and its embeddings
served (int8 and ONNX: tests/integration/test_modernbert_onnx.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)
from tinymodernbert import make_modernbert_dir

from bertkit import Encoder
from bertkit.cli import main

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
# the third line is past ModernBERT's 4-token windows: its sliding-window layers attend within them
LINES = ["the cat sat on the mat", "hello world", "we went to the river bank . the dog ran to the big red mat"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("cli-model"), VOCAB, layers=4)


@pytest.fixture(scope="module")
def encoder(model_dir):
    return Encoder.from_pretrained(model_dir, precision="fp32")


@pytest.fixture(scope="module")
def mb_dir(tmp_path_factory):
    """A tiny random ModernBertForMaskedLM (3 layers, 4-token windows) with a peaked decoder bias, so that
    fill-mask's ranking is not a tie."""
    from bertkit.modeling_modernbert import ModernBertForMaskedLM

    d = tmp_path_factory.mktemp("mb-model")
    make_modernbert_dir(d, VOCAB, max_position_embeddings=64)
    model = ModernBertForMaskedLM.from_pretrained(d)
    with torch.no_grad():
        model.decoder.bias.copy_(torch.randn(len(VOCAB), generator=torch.Generator().manual_seed(0)))
    model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def reference(mb_dir):
    from bertkit.modeling_modernbert import ModernBertForMaskedLM

    return ModernBertForMaskedLM.from_pretrained(mb_dir).eval()


@pytest.fixture(params=["bert", "modernbert"])
def arch_dir(request):
    """(model directory, its fp32 Encoder) of each architecture."""
    if request.param == "bert":
        return request.getfixturevalue("model_dir"), request.getfixturevalue("encoder")
    d = request.getfixturevalue("mb_dir")
    return d, Encoder.from_pretrained(d, precision="fp32")


def test_embed_npy_with_concatenated_layers(tmp_path, arch_dir):
    model_dir, encoder = arch_dir
    layers = [-i for i in range(1, encoder.num_layers + 1)]  # every layer: 4 of BERT's, 3 of ModernBERT's
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(out),
                "--layers",
                ",".join(map(str, layers)),
                "--pooling",
                "mean_max",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    got = np.load(out)
    assert got.shape == (3, len(layers) * 32 * 2)
    np.testing.assert_allclose(got, encoder.encode(LINES, layers=layers, pooling="mean_max"), rtol=1e-5, atol=1e-6)
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []  # atomic write left no temp file


def test_embed_jsonl_pairs_and_per_token(tmp_path, model_dir, encoder):
    src = tmp_path / "in.tsv"
    src.write_text("the cat\tsat on the mat\na dog\tran\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(out),
                "--pooling",
                "none",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["pair"] for r in rows] == ["sat on the mat", "ran"]
    assert rows[0]["tokens"] == ["[CLS]", "the", "cat", "[SEP]", "sat", "on", "the", "mat", "[SEP]"]
    want = encoder.encode(["the cat", "a dog"], pairs=["sat on the mat", "ran"], pooling="none")
    for r, w in zip(rows, want):
        np.testing.assert_allclose(np.asarray(r["embedding"]), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "content,suffix,message",
    [
        ("a\n\nb\n", ".txt", "line 2: empty text"),
        ('{"text": "a"}\n{"text": 3}\n', ".jsonl", "line 2: expected an object"),
        ('{"text": "a"}\n{oops\n', ".jsonl", "line 2: not valid JSON"),
        ('{"text": "a"}\n[1, 2]\n', ".jsonl", "line 2: expected a JSON object, got list"),
        ("a\tb\nc\n", ".tsv", "line 2: some lines have a pair"),
    ],
)
def test_embed_bad_input_names_the_line(tmp_path, model_dir, capsys, content, suffix, message):
    src = tmp_path / f"in{suffix}"
    src.write_text(content, encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["embed", "--model", str(model_dir), "--input", str(src), "--output", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and message in err
    assert not out.exists()


def test_embed_refuses_per_token_npy_and_bad_layers(tmp_path, model_dir, capsys):
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(tmp_path / "o.npy"),
                "--pooling",
                "none",
            ]
        )
        == 2
    )
    assert ".jsonl" in capsys.readouterr().err
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(tmp_path / "o.npy"),
                "--layers",
                "-9",
            ]
        )
        == 2
    )
    assert "out of range" in capsys.readouterr().err


def test_similarity_texts_and_word(model_dir, encoder, capsys):
    assert main(["similarity", "--model", str(model_dir), "--layers", "-1", *LINES[:2]]) == 0
    out = capsys.readouterr().out
    v = encoder.encode(LINES[:2], layers=-1)
    d = 1 - float(v[0] @ v[1] / np.linalg.norm(v[0]) / np.linalg.norm(v[1]))
    assert f"{d:9.4f}" in out
    sentences = ["we went to the river bank", "the bank of money", "i ran to the bank ."]
    assert main(["similarity", "--model", str(model_dir), "--word", "bank", *sentences]) == 0
    out = capsys.readouterr().out
    vecs, tokens = encoder.encode(sentences, pooling="none", show_tokens=True)
    bank = [v[t.index("bank")] for v, t in zip(vecs, tokens)]
    d01 = 1 - float(bank[0] @ bank[1] / np.linalg.norm(bank[0]) / np.linalg.norm(bank[1]))
    assert d01 > 1e-3 and f"{d01:9.4f}" in out  # the same word, different contexts, different vectors
    assert main(["similarity", "--model", str(model_dir), "--word", "bank", "a cat", "the bank"]) == 2
    assert "text 1" in capsys.readouterr().err


def test_fill_mask_command_prints_the_encoders_predictions(arch_dir, capsys):
    model_dir, encoder = arch_dir
    texts = ["the [MASK] sat on the [MASK]", "a [MASK] dog"]
    assert main(["fill-mask", "--model", str(model_dir), "--top-k", "3", "--json", *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = encoder.fill_mask(texts, top_k=3)
    assert [r["text"] for r in rows] == texts
    for row, per_text in zip(rows, want):
        assert [[p["token"] for p in m] for m in row["predictions"]] == [[p["token"] for p in m] for m in per_text]
        assert [[p["probability"] for p in m] for m in row["predictions"]] == [
            [round(p["score"], 5) for p in m] for m in per_text
        ]
    assert main(["fill-mask", "--model", str(model_dir), "no mask here"]) == 2
    assert "error: no [MASK] in 'no mask here'" in capsys.readouterr().err
    assert main(["fill-mask", "--model", str(model_dir), "--top-k", "0", "the [MASK]"]) == 2
    assert "--top-k" in capsys.readouterr().err


def test_embed_and_similarity_do_not_import_fastapi(tmp_path, model_dir):
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    code = (
        "import sys\nfrom bertkit.cli import main\n"
        f"assert main(['embed', '--model', {str(model_dir)!r}, '--input', {str(src)!r}, '--output', "
        f"{str(tmp_path / 'o.npy')!r}, '--quiet']) == 0\n"
        f"assert main(['similarity', '--model', {str(model_dir)!r}, 'the cat', 'a dog']) == 0\n"
        "print('fastapi' in sys.modules, 'bertkit.serve.app' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "False False"


@pytest.mark.parametrize("command", ["embed", "similarity", "fill-mask", "serve"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "-h"])
    assert exit_.value.code == 0 and "--model" in capsys.readouterr().out


def test_embed_quantize_int8_is_close_to_fp32(tmp_path, model_dir):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    for mode in ("fp32", "int8"):
        extra = ["--quantize", "int8"] if mode == "int8" else []
        assert (
            main(
                [
                    "embed",
                    "--model",
                    str(model_dir),
                    "--input",
                    str(src),
                    "--output",
                    str(tmp_path / f"{mode}.npy"),
                    "--precision",
                    "fp32",
                    "--quiet",
                    *extra,
                ]
            )
            == 0
        )
    a, b = np.load(tmp_path / "fp32.npy"), np.load(tmp_path / "int8.npy")
    assert not np.array_equal(a, b)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99


# ------------------------------------------------------------------------------------------- ModernBERT's own


def direct(reference, encoder, texts):
    """(input_ids, attention_mask, hidden states) from the model itself, on the encoder's tokenization."""
    ids, _, mask = encoder.collate(encoder.tokenize(texts))
    with torch.no_grad():
        states = reference.model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    return ids, mask, states


def test_modernbert_encoder_poolings_and_layers_equal_the_model(mb_dir, reference):
    enc = Encoder.from_pretrained(mb_dir, precision="fp32")
    assert enc.num_layers == 3 and not enc.has_pooler and enc.mlm_head is not None
    _, mask, states = direct(reference, enc, LINES)
    m = mask[..., None].float()
    mean_last = (states[-1] * m).sum(1) / m.sum(1)
    np.testing.assert_allclose(enc.encode(LINES, layers=[-1], pooling="mean"), mean_last.numpy(), rtol=1e-5, atol=1e-5)
    max_last = states[-1].masked_fill(~mask.bool()[..., None], float("-inf")).amax(1)
    np.testing.assert_allclose(enc.encode(LINES, layers=[-1], pooling="max"), max_last.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        enc.encode(LINES, layers=[1], pooling="cls"), states[1][:, 0].numpy(), rtol=1e-5, atol=1e-5
    )
    both = enc.encode(LINES, layers=["embeddings", -1], pooling="cls")
    np.testing.assert_allclose(both, torch.cat([states[0][:, 0], states[-1][:, 0]], -1).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="pooler"):
        enc.encode(LINES, pooling="cls_pooled")


def test_modernbert_fill_mask_equals_the_models_top_predictions(mb_dir, reference):
    """The Encoder's fill-mask is the model's own top 3 (what the command prints of it: above)."""
    enc = Encoder.from_pretrained(mb_dir, precision="fp32")
    got = enc.fill_mask(["the cat [MASK] on the mat"], top_k=3)[0][0]
    ids = torch.tensor(
        [[2, VOCAB.index("the"), VOCAB.index("cat"), 4, VOCAB.index("on"), VOCAB.index("the"), VOCAB.index("mat"), 3]]
    )
    with torch.no_grad():
        probs = reference(ids).logits[0, 3].softmax(-1)
    top = probs.topk(3)
    assert [g["token_id"] for g in got] == top.indices.tolist()
    np.testing.assert_allclose([g["score"] for g in got], top.values.numpy(), rtol=1e-5)


def test_modernbert_refused_by_bert_classes_in_one_line(mb_dir):
    from bertkit import BertForSequenceClassification
    from bertkit.errors import BertkitError

    with pytest.raises(BertkitError, match="ModernBERT.*BERT models only"):
        BertForSequenceClassification.from_pretrained(mb_dir)


def test_modernbert_served_embeddings_equal_the_encoder(mb_dir):
    """``bertkit serve`` loads a ModernBERT directory as an embedding model (no task head) and /embed and OpenAI's
    /v1/embeddings answer what ``Encoder.encode`` computes."""
    from tinymodels import http_json

    from bertkit.commands.serve import load_model
    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    enc = load_model(str(mb_dir), "cpu", "fp32")
    assert isinstance(enc, Encoder)
    texts = ["the cat sat", "a big red dog ran to the river bank"]
    want = enc.encode(texts, normalize=True)
    with ServerThread(create_app(enc, ServeSettings(model_id="mb"))) as srv:
        status, out = http_json(srv.url, "/embed", {"inputs": texts}, timeout=60)
        assert status == 200, out
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        status, out = http_json(srv.url, "/v1/embeddings", {"input": texts, "model": "mb"}, timeout=60)
        np.testing.assert_allclose([d["embedding"] for d in out["data"]], want, rtol=1e-4, atol=1e-5)
        status, out = http_json(srv.url, "/predict", {"inputs": "the cat"}, timeout=60)
        assert status >= 400  # no task head: refused, not a traceback
