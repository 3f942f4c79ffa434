"""/fill-mask in the inference API's shape (what huggingface_hub's fill_mask reads) against transformers' own
fill-mask pipeline on the same model directory: token ids, token_str, sequence and scores (fp32)."""

from __future__ import annotations

import numpy as np
import pytest
from asgi import asgi_json
from starlette.testclient import TestClient
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.serve.app import ServeSettings, create_app

transformers = pytest.importorskip("transformers")

WORDS = "the a cat dog sat on mat bank river money went to i we big small red blue hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing"]


def test_fill_mask_equals_transformers_pipeline(tmp_path):
    directory = make_model_dir(tmp_path / "m", VOCAB)
    model = transformers.BertForMaskedLM.from_pretrained(directory).eval()
    tokenizer = transformers.BertTokenizer(str(directory / "vocab.txt"))
    reference = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    texts = ["the cat [MASK] on the mat", "a dog went to the [MASK] .", "the [MASK] sat on the [MASK]"]
    with TestClient(create_app(Encoder.from_pretrained(directory, precision="fp32"), ServeSettings())) as srv:
        for text in texts:
            status, got = asgi_json(srv, "/fill-mask", {"inputs": text, "parameters": {"top_k": 4}})
            want = reference(text, top_k=4)
            assert status == 200
            got, want = (got, want) if text.count("[MASK]") > 1 else ([got], [want])
            for g_mask, w_mask in zip(got, want, strict=True):
                assert [(p["token"], p["token_str"], p["sequence"]) for p in g_mask] == [
                    (p["token"], p["token_str"], p["sequence"]) for p in w_mask
                ]
                np.testing.assert_allclose(
                    [p["score"] for p in g_mask], [p["score"] for p in w_mask], rtol=1e-4, atol=1e-6
                )
