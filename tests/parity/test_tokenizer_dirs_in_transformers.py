"""Issue 31: a model directory bertkit writes, BERT or ModernBERT, opens whole in transformers: ``AutoTokenizer``
gives bertkit's ids, and ``pipeline("fill-mask")`` bertkit's top 5. A ModernBERT directory used to fail in
``AutoTokenizer`` ("Couldn't instantiate the backend tokenizer"): transformers opens that model type only through a
``tokenizer.json``, which bertkit did not write."""

from __future__ import annotations

import pytest
import torch
from tinymodernbert import fixture_vocab, make_modernbert_dir

transformers = pytest.importorskip("transformers")

from bertkit.features import Encoder  # noqa: E402
from bertkit.tokenization import BertTokenizer  # noqa: E402

TEXTS = [
    "the film was good , the cast was great .",
    "Héllo wörld ! naïve café , ÉTÉ",  # accents stripped when uncased
    "中文 字符 and 日本語",  # CJK ideographs one word each
    "a " + "x" * 250 + " word",  # longer than max_input_chars_per_word: [UNK]
    "tab\there  and\u00a0spaces\u200b",  # whitespace and a zero-width character
]
MASKED = ["the film was [MASK] , the cast was great .", "a [MASK] plot and a [MASK] ending"]


def _bert_dir(path, vocab: list[str]):
    from bertkit import BertConfig
    from bertkit.modeling import BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
    )
    BertForMaskedLM(config).save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=["bert", "modernbert"])
def model_dir(request, tmp_path_factory, fixtures_dir):
    vocab = fixture_vocab(fixtures_dir)
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "modernbert":
        make_modernbert_dir(path, vocab)
    else:
        _bert_dir(path, vocab)
    BertTokenizer.from_pretrained(path).save_pretrained(path)  # as bertkit's recipes write their outputs
    return path


def test_auto_tokenizer_gives_bertkits_ids(model_dir):
    theirs = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    ours = BertTokenizer.from_pretrained(model_dir)
    for text in TEXTS:
        assert theirs(text)["input_ids"] == ours.encode(text).ids, text
    pair = theirs(TEXTS[0], TEXTS[1])["input_ids"]
    assert pair == ours.encode(TEXTS[0], TEXTS[1]).ids
    assert theirs.mask_token == "[MASK]" and theirs.mask_token_id == ours.mask_token_id


def test_fill_mask_pipeline_gives_bertkits_top_5(model_dir):
    pipe = transformers.pipeline("fill-mask", model=str(model_dir), device="cpu")
    ours = Encoder.from_pretrained(model_dir, device="cpu", precision="fp32").fill_mask(MASKED, top_k=5)
    for text, per_mask in zip(MASKED, ours):
        theirs = pipe(text, top_k=5)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs  # one [MASK]: a flat list
        assert len(theirs) == len(per_mask)
        for t, o in zip(theirs, per_mask):
            assert [p["token"] for p in t] == [p["token_id"] for p in o], text
            assert [p["score"] for p in t] == pytest.approx([p["score"] for p in o], abs=1e-5)


def test_bertkit_reads_its_tokenizer_json_back_as_the_same_wordpiece(model_dir, tmp_path):
    from bertkit.tokenization.fast import is_bert_wordpiece, load_tokenizer

    assert is_bert_wordpiece(model_dir / "tokenizer.json")
    (tmp_path / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())  # no vocab.txt
    alone = load_tokenizer(tmp_path)
    ours = BertTokenizer.from_pretrained(model_dir)
    assert isinstance(alone, BertTokenizer) and all(alone.encode(t).ids == ours.encode(t).ids for t in TEXTS)


def test_sentence_transformers_opens_it_and_embeds_as_bertkit(model_dir):
    st = pytest.importorskip("sentence_transformers")
    import numpy as np

    theirs = st.SentenceTransformer(str(model_dir), device="cpu").encode(TEXTS[:3])
    ours = Encoder.from_pretrained(model_dir, device="cpu", precision="fp32").encode(
        TEXTS[:3], pooling="mean", layers=-1
    )
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
