"""langchain-community's HuggingFaceInferenceAPIEmbeddings against `bertkit serve` (POST / with the inference API's
{"inputs", "options"}). In this tier because the package is heavy (SQLAlchemy, aiohttp, langchain-core)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.serve.app import ServerThread, ServeSettings, create_app

WORDS = "the a cat dog sat on mat bank river money went to i we big small red blue hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
TEXTS = ["the cat sat on the mat", "a dog went to the bank", "hello world"]


def test_langchain_inference_api_embeddings(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community announces its sunset
        embeddings = pytest.importorskip("langchain_community.embeddings")
    encoder = Encoder.from_pretrained(make_model_dir(tmp_path / "m", VOCAB), precision="fp32")
    with ServerThread(create_app(encoder, ServeSettings(model_id="tiny"))) as srv:
        client = embeddings.HuggingFaceInferenceAPIEmbeddings(api_key="unused", api_url=srv.url)
        got = client.embed_documents(TEXTS)
        np.testing.assert_allclose(got, encoder.encode(TEXTS, normalize=True), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(
            client.embed_query(TEXTS[0]), encoder.encode(TEXTS[:1], normalize=True)[0], rtol=1e-4, atol=1e-5
        )
