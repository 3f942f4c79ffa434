"""Each dialect with its own client, offline against a live local server: OpenAI's `openai` package,
huggingface_hub's `InferenceClient` (TEI), and bert-as-service's raw HTTP JSON; plus TEI's other routes raw."""

from __future__ import annotations

import numpy as np
import pytest
from tinymodels import http_json, make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.serve.app import ServerThread, ServeSettings, create_app

openai = pytest.importorskip("openai")
huggingface_hub = pytest.importorskip("huggingface_hub")

WORDS = "the a cat dog sat on mat bank river money went to i we , . big small red blue hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing"]
FP32 = dict(rtol=1e-4, atol=1e-5)  # an fp32 server: batching changes nothing beyond float noise
TIMEOUT = 60


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return Encoder.from_pretrained(make_model_dir(tmp_path_factory.mktemp("clients"), VOCAB), precision="fp32")


@pytest.fixture(scope="module")
def server(encoder):
    with ServerThread(create_app(encoder, ServeSettings(model_id="tiny-bert", max_input_chars=2000))) as srv:
        yield srv


def raw(url: str, path: str, body=None, method=None):
    return http_json(url, path, body, method, timeout=TIMEOUT)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


TEXTS = ["the cat sat on the mat", "a dog went to the bank", "hello world", "big red river"]


# ------------------------------------------------------------------ OpenAI


def test_openai_client_embeddings(server, encoder):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=TIMEOUT)
    want = encoder.encode(TEXTS, normalize=True)  # the server's defaults: layer -2, mean, unit length
    out = client.embeddings.create(model="tiny-bert", input=TEXTS)  # the client's defaults (base64 on the wire)
    np.testing.assert_allclose([d.embedding for d in out.data], want, **FP32)
    assert [d.index for d in out.data] == [0, 1, 2, 3] and out.model == "tiny-bert"
    n_tokens = sum(len(e.ids) for e in encoder.tokenize(TEXTS))
    assert out.usage.prompt_tokens == n_tokens == out.usage.total_tokens
    floats = client.embeddings.create(model="tiny-bert", input=TEXTS[0], encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, want[0], **FP32)

    ids = [e.ids for e in encoder.tokenize(TEXTS[:2])]  # token arrays: the model's own ids, used as given
    out = client.embeddings.create(model="tiny-bert", input=ids)
    np.testing.assert_allclose([d.embedding for d in out.data], want[:2], **FP32)
    out = client.embeddings.create(model="tiny-bert", input=ids[0])  # one list of ints is one input
    assert len(out.data) == 1
    np.testing.assert_allclose(out.data[0].embedding, want[0], **FP32)

    many = [f"{WORDS[i % 20]} {WORDS[(i * 7) % 20]} {i % 13}" for i in range(1000)]
    out = client.embeddings.create(model="tiny-bert", input=many)
    assert len(out.data) == 1000 and [d.index for d in out.data] == list(range(1000))
    np.testing.assert_allclose(
        [out.data[k].embedding for k in (0, 999)], encoder.encode([many[0], many[999]], normalize=True), **FP32
    )

    out = client.embeddings.create(model="tiny-bert", input=TEXTS, dimensions=16)
    got = np.asarray([d.embedding for d in out.data])
    assert got.shape == (4, 16)
    np.testing.assert_allclose(got, unit(encoder.encode(TEXTS)[:, :16]), **FP32)  # truncate, then re-normalise


def test_openai_client_models_and_errors(server, encoder):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=TIMEOUT, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny-bert"]
    assert client.models.retrieve("tiny-bert").owned_by == "bertkit"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    long = "the cat " * 100  # 202 tokens; the model takes 64
    with pytest.raises(openai.UnprocessableEntityError, match='set \\\\?"truncate\\\\?": true'):
        client.embeddings.create(model="tiny-bert", input=[long])
    out = client.embeddings.create(model="tiny-bert", input=[long], extra_body={"truncate": True})  # as hinted
    np.testing.assert_allclose(out.data[0].embedding, encoder.encode([long], normalize=True, max_length=64)[0], **FP32)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny-bert", input=[])
    with pytest.raises(openai.UnprocessableEntityError, match="dimensions"):
        client.embeddings.create(model="tiny-bert", input="x", dimensions=33)


# ------------------------------------------------------------------ huggingface_hub (TEI)


def test_inference_client(server, encoder):
    client = huggingface_hub.InferenceClient(base_url=server.url, timeout=TIMEOUT)
    got = client.feature_extraction("the cat sat on the mat")  # POST / with {"inputs": ...}
    assert got.shape == (1, 32)
    np.testing.assert_allclose(got[0], encoder.encode([TEXTS[0]], normalize=True)[0], **FP32)
    got = client.feature_extraction(TEXTS, normalize=False)
    np.testing.assert_allclose(got, encoder.encode(TEXTS), **FP32)
    got = client.feature_extraction(TEXTS, dimensions=8)
    np.testing.assert_allclose(got, unit(encoder.encode(TEXTS)[:, :8]), **FP32)
    long = "hello world " * 31 + "the cat sat"  # 67 tokens: over the limit of 64
    got = client.feature_extraction(long, truncate=True, truncation_direction="left")
    ids = encoder.tokenizer.encode(long, truncation=False).ids
    kept = [ids[0], *ids[-63:]]  # [CLS] + the end ([SEP] included)
    assert len(kept) == 64
    np.testing.assert_allclose(got[0], unit(_embed_ids(server, kept)), **FP32)
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as err:
        client.feature_extraction(long)  # no truncate: 422 Validation
    assert err.value.response.status_code == 422

    sims = client.sentence_similarity("the cat sat on the mat", ["the cat sat on the mat", "big red river"])
    vecs = encoder.encode([TEXTS[0], TEXTS[3]], normalize=True)
    np.testing.assert_allclose(sims, [1.0, float(vecs[0] @ vecs[1])], rtol=1e-4, atol=1e-5)


def test_inference_client_fill_mask(server, encoder):
    """huggingface_hub's fill_mask sends {"inputs", "parameters": {...}} and reads transformers' answer: token ids,
    token_str, the filled sequence; one [MASK] gives a flat list."""
    client = huggingface_hub.InferenceClient(base_url=server.url + "/fill-mask", timeout=TIMEOUT)
    text = "the cat [MASK] on the mat"
    want = encoder.fill_mask([text], top_k=5)[0][0]
    got = client.fill_mask(text)
    assert [x.token for x in got] == [w["token_id"] for w in want]
    np.testing.assert_allclose([x.score for x in got], [w["score"] for w in want], **FP32)
    assert [x.token_str for x in got] == [w["token"] for w in want]
    assert got[0].sequence == text.replace("[MASK]", want[0]["token"])
    got = client.fill_mask(text, top_k=2)
    assert [x.token for x in got] == [w["token_id"] for w in want[:2]]
    status, out = raw(server.url, "/fill-mask", {"inputs": "the [MASK] sat on the [MASK]", "parameters": {}})
    assert status == 200 and len(out) == 2 and len(out[0]) == 5  # several [MASK]s: a list per [MASK]
    assert "[CLS]" in out[0][0]["sequence"] and "[MASK]" in out[0][0]["sequence"]  # as transformers decodes them
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError, match="targets"):
        client.fill_mask(text, targets=["cat"])  # not implemented: refused, never ignored


def test_inference_api_options_and_info(server, encoder):
    """The inference API's "options" (langchain-community's HuggingFaceInferenceAPIEmbeddings sends them) are
    accepted on POST / and /embed; unknown ones are refused naming them. /info records precision, backend, device."""
    body = {"inputs": TEXTS, "options": {"wait_for_model": True, "use_cache": True}}
    status, out = raw(server.url, "/", body)
    assert status == 200
    np.testing.assert_allclose(out, encoder.encode(TEXTS, normalize=True), **FP32)
    status, out = raw(server.url, "/embed", {"inputs": TEXTS[0], "options": {"use_cache": False}})
    assert status == 200
    status, out = raw(server.url, "/", {"inputs": TEXTS[0], "options": {"wait": True}})
    assert status == 422 and "options.wait" in out["error"]
    status, info = raw(server.url, "/info")
    assert (info["precision"], info["backend"], info["device"]) == ("fp32", "torch", "cpu")
    assert info["model_dtype"] == "float32"
    status, _ = raw(server.url, "/health", method="HEAD")
    assert status == 200


def _embed_ids(server, ids: list[int]) -> np.ndarray:
    status, out = raw(server.url, "/embed", {"inputs": [ids], "normalize": False})
    assert status == 200, out
    return np.asarray(out[0])


# ------------------------------------------------------------------ TEI's other routes, raw


def test_tei_routes(server, encoder):
    assert raw(server.url, "/")[0] == 200 and raw(server.url, "/ping")[0] == 200
    status, info = raw(server.url, "/info")
    assert status == 200 and info["model_id"] == "tiny-bert"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_client_batch_size"] == 2048 and info["max_input_length"] == 64 and info["auto_truncate"] is False
    for key in ("model_dtype", "max_concurrent_requests", "max_batch_tokens", "version", "max_batch_requests"):
        assert key in info
    status, out = raw(server.url, "/", {"inputs": TEXTS, "normalize": False})
    np.testing.assert_allclose(out, encoder.encode(TEXTS), **FP32)

    status, out = raw(server.url, "/embed_all", {"inputs": TEXTS[:2]})
    want = encoder.encode(TEXTS[:2], pooling="none")
    assert status == 200 and [np.asarray(o).shape for o in out] == [w.shape for w in want]
    for o, w in zip(out, want):
        np.testing.assert_allclose(o, w, **FP32)

    ids = encoder.tokenizer.encode("the cat sat").ids
    assert raw(server.url, "/decode", {"ids": ids}) == (200, ["the cat sat"])
    assert raw(server.url, "/decode", {"ids": [ids, ids[1:2]], "skip_special_tokens": False}) == (
        200,
        ["[CLS] the cat sat [SEP]", "the"],
    )
    status, toks = raw(server.url, "/tokenize", {"inputs": ["the cat", "a dog"], "add_special_tokens": False})
    assert status == 200 and [[t["text"] for t in row] for row in toks] == [["the", "cat"], ["a", "dog"]]
    assert set(toks[0][0]) == {"id", "text", "special", "start", "stop"}  # TEI's SimpleToken

    status, out = raw(server.url, "/similarity", {"inputs": {"source_sentence": "hello world", "sentences": []}})
    assert status == 400 and out["error_type"] == "Empty"
    for body, code, kind in [
        ({"inputs": []}, 400, "Empty"),
        ({"inputs": ["the cat " * 40]}, 422, "Validation"),
        ({"inputs": "x", "truncation_direction": "Up"}, 422, "Validation"),
    ]:
        status, out = raw(server.url, "/embed", body)
        assert (status, out["error_type"]) == (code, kind), out


# ------------------------------------------------------------------ bert-as-service


def test_bert_as_service_http(server, encoder):
    status, out = raw(server.url, "/encode", {"id": 123, "texts": TEXTS[:2], "is_tokenized": False})
    assert status == 200 and set(out) == {"id", "result"} and out["id"] == 123
    np.testing.assert_allclose(out["result"], encoder.encode(TEXTS[:2]), **FP32)
    status, out = raw(
        server.url,
        "/encode",
        {"id": "a", "texts": [["the", "cat", "sat", "on", "the", "mat"], ["hello", "world"]], "is_tokenized": True},
    )
    assert status == 200 and out["id"] == "a"
    np.testing.assert_allclose(out["result"], encoder.encode([TEXTS[0], "hello world"]), **FP32)
    status, out = raw(server.url, "/encode", {"texts": TEXTS[:1]})  # bertkit's own answer stays
    assert status == 200 and out["shape"] == [1, 32] and "embeddings" in out
    status, out = raw(server.url, "/encode", {"id": 1, "texts": [["the", "cat"]]})
    assert status == 422 and "is_tokenized" in out["error"]
    status, out = raw(server.url, "/status/server")
    assert status == 200 and out["ckpt_name"] == "tiny-bert" and out["max_seq_len"] == 64
    assert out["pooling_strategy"] == "REDUCE_MEAN" and out["pooling_layer"] == [-2] and out["num_request"] > 0
