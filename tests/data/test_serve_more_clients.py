"""LangChain's OpenAIEmbeddings (langchain-openai) and LlamaIndex's TextEmbeddingsInference against `bertkit serve`,
each the party's own client package. In this tier because the packages are heavy (langchain-core, llama-index-core).
"""

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


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    encoder = Encoder.from_pretrained(make_model_dir(tmp_path_factory.mktemp("m"), VOCAB), precision="fp32")
    with ServerThread(create_app(encoder, ServeSettings(model_id="tiny"))) as srv:
        yield encoder, srv.url


def test_langchain_openai_embeddings(served):
    encoder, url = served
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        lc = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: LangChain would otherwise tokenize with tiktoken (a download) and send ids
    client = lc.OpenAIEmbeddings(model="tiny", base_url=url + "/v1", api_key="unused", check_embedding_ctx_length=False)
    want = encoder.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(client.embed_documents(TEXTS), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(client.embed_query(TEXTS[1]), want[1], rtol=1e-4, atol=1e-5)


def test_llama_index_text_embeddings_inference(served):
    encoder, url = served
    tei = pytest.importorskip("llama_index.embeddings.text_embeddings_inference")
    client = tei.TextEmbeddingsInference(model_name="tiny", base_url=url, embed_batch_size=2)
    want = encoder.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(client.get_text_embedding_batch(TEXTS), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(client.get_query_embedding(TEXTS[2]), want[2], rtol=1e-4, atol=1e-5)
