"""The sentence-transformers round trip, both ways (sentence-transformers and transformers are dev extras)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tinymodels
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import BertModel, Encoder
from bertkit.errors import InputError
from bertkit.st_format import read_sentence_transformers, write_sentence_transformers
from bertkit.tokenization import BertTokenizer


@pytest.fixture(scope="module")
def st():
    """sentence-transformers, imported by the tests that use it: at module level, every xdist worker paid its
    seconds of imports while collecting, whichever worker ran this file."""
    return pytest.importorskip("sentence_transformers")


WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
TEXTS = [
    "the cat sat on the mat",
    "hello",
    "we went to the river bank . the dog ran to the big red mat",
    "a dog",
    "Big Blue Runs",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def _bertkit_dir(path, pooling, normalize, max_seq_length=32):
    tinymodels.make_model_dir(path, VOCAB, cls=BertModel, layers=2)
    BertTokenizer.from_pretrained(path).save_pretrained(path)
    write_sentence_transformers(path, pooling=pooling, normalize=normalize, dim=32, max_seq_length=max_seq_length)
    return path


@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("cls", False), ("max", True), ("sep", False)])
def test_bertkit_directory_loads_in_sentence_transformers(st, tmp_path, pooling, normalize):
    path = _bertkit_dir(tmp_path / "m", pooling, normalize)
    ours = Encoder.from_pretrained(path, precision="fp32")
    assert (ours.defaults.pooling, ours.defaults.normalize, ours.defaults.layers) == (pooling, normalize, (-1,))
    mine = ours.encode(TEXTS)
    model = st.SentenceTransformer(str(path), device="cpu")
    theirs = model.encode(TEXTS, convert_to_numpy=True)
    assert theirs.shape == mine.shape == (len(TEXTS), 32)
    assert _cosines(mine, theirs).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), np.linalg.norm(theirs, axis=1), rtol=1e-4)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, rtol=1e-5)
    # the defaults came from the files: the same weights without them encode with bert-as-service's defaults
    (path / "modules.json").unlink()
    assert Encoder.from_pretrained(path).defaults.layers == (-2,)


def test_max_seq_length_is_honoured(st, tmp_path):
    path = _bertkit_dir(tmp_path / "m", "mean", True, max_seq_length=5)
    ours = Encoder.from_pretrained(path, precision="fp32")
    long = ["we went to the river bank . the dog ran to the big red mat"]
    theirs = st.SentenceTransformer(str(path), device="cpu").encode(long)
    assert _cosines(ours.encode(long), theirs).min() >= 0.9999
    assert _cosines(ours.encode(long, max_length=64), theirs).min() < 0.9999


def test_bertkit_directory_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = _bertkit_dir(tmp_path / "m", "mean", True)
    hf = transformers.AutoModel.from_pretrained(str(path)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    batch = tok(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = hf(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    ours = Encoder.from_pretrained(path, precision="fp32").encode(TEXTS[:2], normalize=False)
    np.testing.assert_allclose(ours, mean.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,ours", [("mean", "mean"), ("cls", "cls"), ("max", "max"), ("lasttoken", "sep")])
@pytest.mark.parametrize("normalize", [False, True])
def test_sentence_transformers_directory_loads_in_encoder(st, tmp_path, mode, ours, normalize):
    transformers = pytest.importorskip("transformers")
    from sentence_transformers import models

    hf_dir = tmp_path / "hf"
    torch.manual_seed(1)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(str(hf_dir))
    (hf_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    modules = [models.Transformer(str(hf_dir)), models.Pooling(32, mode)]
    if normalize:
        modules.append(models.Normalize())
    model = st.SentenceTransformer(modules=modules, device="cpu")
    out = tmp_path / "st"
    model.save(str(out))
    settings = read_sentence_transformers(out)
    assert (settings.pooling, settings.normalize) == (ours, normalize)
    encoder = Encoder.from_pretrained(out, precision="fp32")
    mine = encoder.encode(TEXTS)
    theirs = model.encode(TEXTS)
    assert _cosines(mine, theirs).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), np.linalg.norm(theirs, axis=1), rtol=1e-4)


def test_unsupported_pipelines_are_named(tmp_path):
    path = _bertkit_dir(tmp_path / "m", "mean", False)
    pool = json.loads((path / "1_Pooling" / "config.json").read_text())
    pool["pooling_mode_max_tokens"] = True  # mean + max concatenated in sentence-transformers' order
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    with pytest.raises(InputError, match="1_Pooling/config.json: pooling max\\+mean"):
        Encoder.from_pretrained(path)
    pool["pooling_mode_max_tokens"] = False
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    assert read_sentence_transformers(path).pooling == "mean"
    modules = json.loads((path / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(InputError, match="Dense"):
        read_sentence_transformers(path)
    with pytest.raises(InputError, match="no sentence-transformers equivalent"):
        write_sentence_transformers(tmp_path / "x", pooling="mean_max", normalize=False, dim=32, max_seq_length=8)


def test_encode_takes_mteb_protocol_calls(tmp_path):
    """MTEB 1.x: encode(sentences, task_name=..., prompt_type=..., batch_size=...); MTEB 2: a DataLoader of
    {"text": [...]} batches plus task_metadata / hf_split / hf_subset. Other keywords stay errors."""
    from torch.utils.data import DataLoader

    encoder = Encoder.from_pretrained(_bertkit_dir(tmp_path / "m", "mean", True), precision="fp32")
    want = encoder.encode(TEXTS)
    v1 = encoder.encode(TEXTS, task_name="STSBenchmark", prompt_type=None, batch_size=2)
    np.testing.assert_allclose(v1, want, rtol=1e-5, atol=1e-6)
    loader = DataLoader([{"text": t} for t in TEXTS], batch_size=2)
    v2 = encoder.encode(loader, task_metadata=object(), hf_split="test", hf_subset="default", prompt_type=None)
    np.testing.assert_allclose(v2, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="unexpected keyword argument.*poolin"):
        encoder.encode(TEXTS, poolin="cls")
