"""Property tests on arbitrary Unicode (lone surrogates included): BertTokenizer never fails, equals the reference."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bertkit.tokenization import BertTokenizer

# Any code point (surrogates and unassigned ones too), mixed with characters that exercise the tricky rules.
TRICKY = list(
    "aeiouAEIOU thequickbrown,.!?'-#[]ΣσςΑάéÉ\u0301\u0308ßİı한국ᄒ\u1161中文日本"
    "\u200d\u200b\u00ad😀🥰\x00\t\n\u2028\u3000ﬁ"
)
CHAR = st.one_of(st.characters(exclude_categories=()), st.sampled_from(TRICKY), st.sampled_from(TRICKY))
TEXT = st.text(alphabet=CHAR, max_size=40)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def pair(request, vocab_file):
    """(bertkit tokenizer, reference ids function, reference basic tokenizer) for one casing."""
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer, load_vocab

    lowercase = request.param
    vocab = load_vocab(str(vocab_file))
    basic = BasicTokenizer(do_lower_case=lowercase)
    wordpiece = WordpieceTokenizer(vocab, "[UNK]", max_input_chars_per_word=200)

    def ref_ids(text: str) -> list[int]:
        return [vocab[p] for w in basic.tokenize(text) for p in wordpiece.tokenize(w)]

    return BertTokenizer.from_pretrained(vocab_file, lowercase=lowercase), ref_ids, basic


@SETTINGS
@given(text=TEXT, other=TEXT)
def test_never_fails_ids_and_offsets_in_bounds(pair, text, other):
    tok, _, _ = pair
    enc = tok.encode(text, other, max_length=64)
    assert len(enc) <= 64
    assert all(0 <= i < tok.vocab_size for i in enc.ids)
    for (s, e), seq in zip(enc.offsets, enc.sequence_ids):
        n = len(text) if seq == 0 else len(other) if seq == 1 else 0
        assert 0 <= s <= e <= n
    assert len(enc.ids) == len(enc.tokens) == len(enc.type_ids) == len(enc.offsets) == len(enc.word_ids)
    batch = tok([text, other], padding="longest", max_length=64)
    assert batch["input_ids"].shape[1] <= 64


@SETTINGS
@given(text=TEXT)
def test_ids_equal_reference(pair, text):
    tok, ref_ids, basic = pair
    assert tok.encode(text, add_special_tokens=False).ids == ref_ids(text)
    assert tok.basic_tokenize(text) == basic.tokenize(text)


@SETTINGS
@given(a=TEXT, b=TEXT)
@example(a="", b="0\ufada0")  # an unassigned code point in a CJK block: cleaned away first, so "00" is one word
def test_pair_ids_equal_reference_with_google_truncation(pair, a, b):
    tok, ref_ids, _ = pair
    ra, rb = ref_ids(a), ref_ids(b)
    while len(ra) + len(rb) > 16 - 3:
        (ra if len(ra) > len(rb) else rb).pop()
    assert tok.encode(a, b, max_length=16).ids == [tok.cls_token_id, *ra, tok.sep_token_id, *rb, tok.sep_token_id]


@SETTINGS
@given(text=TEXT)
def test_uncased_tokens_are_lowercase(vocab_file, text):
    tok = BertTokenizer.from_pretrained(vocab_file, lowercase=True)
    assert any(t != t.lower() for t in tok.vocab if not t.startswith("["))  # the fixture does hold cased tokens
    for token in tok.tokenize(text):
        assert token == "[UNK]" or token == token.lower()


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(TRICKY + list("abcdefghij 。，")), max_size=40))
def test_decode_of_encode_is_normalized_text_when_covered(pair, text):
    tok, _, _ = pair
    enc = tok.encode(text, truncation=False)
    if tok.unk_token_id in enc.ids:
        return
    assert tok.decode(enc.ids) == " ".join(tok.basic_tokenize(text))
