"""A ModernBERT directory through the BERT commands: Encoder (poolings, layers), ``bertkit embed``,
``bertkit fill-mask``, each checked against the model computed directly; BERT's classes refuse it in one line
(int8 and ONNX: tests/integration/test_modernbert_onnx.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import Encoder
from bertkit.cli import main
from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
LINES = ["the cat sat on the mat", "hello world", "we went to the river bank . the dog ran to the big red mat"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("mb-model")
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=4,
        max_position_embeddings=64,
        pad_token_id=0,
        cls_token_id=2,
        sep_token_id=3,
        bos_token_id=2,
        eos_token_id=3,
    )
    model = ModernBertForMaskedLM(config)
    with torch.no_grad():  # a peaked decoder bias, so fill-mask's ranking is not a tie
        model.decoder.bias.copy_(torch.randn(len(VOCAB)))
    model.save_pretrained(d)
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def reference(model_dir):
    return ModernBertForMaskedLM.from_pretrained(model_dir).eval()


def direct(reference, encoder, texts):
    """(input_ids, attention_mask, hidden states) from the model itself, on the encoder's tokenization."""
    ids, _, mask = encoder.collate(encoder.tokenize(texts))
    with torch.no_grad():
        states = reference.model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    return ids, mask, states


def test_encoder_poolings_and_layers_equal_the_model(model_dir, reference):
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    assert enc.num_layers == 3 and not enc.has_pooler and enc.mlm_head is not None
    _, mask, states = direct(reference, enc, LINES)
    m = mask[..., None].float()
    mean_last = (states[-1] * m).sum(1) / m.sum(1)
    np.testing.assert_allclose(enc.encode(LINES, layers=[-1], pooling="mean"), mean_last.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        enc.encode(LINES, layers=[1], pooling="cls"), states[1][:, 0].numpy(), rtol=1e-5, atol=1e-5
    )
    both = enc.encode(LINES, layers=["embeddings", -1], pooling="cls")
    np.testing.assert_allclose(both, torch.cat([states[0][:, 0], states[-1][:, 0]], -1).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="pooler"):
        enc.encode(LINES, pooling="cls_pooled")


def test_embed_command(model_dir, reference, tmp_path):
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
                "-1",
                "--pooling",
                "max",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    _, mask, states = direct(reference, enc, LINES)
    want = states[-1].masked_fill(~mask.bool()[..., None], float("-inf")).amax(1)
    np.testing.assert_allclose(np.load(out), want.numpy(), rtol=1e-5, atol=1e-5)


def test_fill_mask_equals_the_models_top_predictions(model_dir, reference, capsys):
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    text = "the cat [MASK] on the mat"
    got = enc.fill_mask([text], top_k=3)[0][0]
    ids = torch.tensor(
        [[2, VOCAB.index("the"), VOCAB.index("cat"), 4, VOCAB.index("on"), VOCAB.index("the"), VOCAB.index("mat"), 3]]
    )
    with torch.no_grad():
        probs = reference(ids).logits[0, 3].softmax(-1)
    top = probs.topk(3)
    assert [g["token_id"] for g in got] == top.indices.tolist()
    np.testing.assert_allclose([g["score"] for g in got], top.values.numpy(), rtol=1e-5)
    assert main(["fill-mask", "--model", str(model_dir), "--precision", "fp32", "--json", text]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.dumps(printed).count(VOCAB[top.indices[0]]) >= 1


def test_bert_only_paths_refuse_in_one_line(model_dir):
    from bertkit import BertForSequenceClassification
    from bertkit.errors import BertkitError

    with pytest.raises(BertkitError, match="ModernBERT.*BERT models only"):
        BertForSequenceClassification.from_pretrained(model_dir)


def test_served_embeddings_equal_the_encoder(model_dir):
    """``bertkit serve`` loads a ModernBERT directory as an embedding model (no task head) and /embed and OpenAI's
    /v1/embeddings answer what ``Encoder.encode`` computes."""
    from tinymodels import http_json

    from bertkit.commands.serve import load_model
    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    enc = load_model(str(model_dir), "cpu", "fp32")
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
