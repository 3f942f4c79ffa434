"""BertTokenizer: parity with Google's reference on a shipped vocabulary, API, loading/saving, bad input."""

from __future__ import annotations

import json
import time

import pytest
import torch
from google_reference import google_pair

from bertkit.tokenization import BertTokenizer, Encoding, load_vocab, truncate_pair_lengths

TRICKY = [
    "Hello, World! How are you?",
    "The quick brown fox jumped over the lazy dog.",
    "héllo wörld, café naïve école straße",
    "e\u0301cole cafe\u0301 n\u0303",  # decomposed accents (NFC composes them)
    "ΣΑΣ Σίσυφος οδός ΟΔΟΣ",  # final sigma
    "İstanbul ǅ ﬁne ﬂy Å Ω",  # special lowercasing, compatibility characters
    "日本語のテキスト、東京。中文字符",
    "한국어 텍스트입니다 한",  # precomposed and conjoining jamo
    "emoji 😀🥰 👩\u200d👩\u200d👧 flags 🇰🇷",
    "zero\u200bwidth\u200cnon\u200djoiner soft\u00adhyphen",
    "ctrl\x00nul\x01\x07\x1b[0m\x7f\x85end \ufffd\ufeffbom",
    "tab\tnew\nline\rcr\x0bvt\x0cff\u2028ls\u2029ps\u00a0nbsp\u3000ideo",
    "punct: ¡¿«»—–…‘’“” $^`~ ¥£€ §¶ ©®",
    "a" * 150 + " " + "b" * 250 + " " + "ab" * 101,
    "\ud800lone\udfffsurrogates\ud83d",
    "mixed العربية עברית русский ไทย हिन्दी",
    "\U0002b820\U0002b91f\U0002ceaf \uf900\ufa6e\U0002f800 \u4e00\u9fff",
    "",
    "   \t\n ",
    "[CLS] [SEP] [MASK] not special",
    "can't won't U.S.A. 3.14 $5,000 e-mail",
]


@pytest.fixture(scope="module")
def tok(vocab_file) -> BertTokenizer:
    return BertTokenizer.from_pretrained(vocab_file, lowercase=True)


def reference(vocab_file, lowercase: bool = True, strip_accents=None, chinese: bool = True, max_chars: int = 200):
    """Google's BasicTokenizer + WordpieceTokenizer (kept in transformers as the legacy tokenizer)."""
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer
    from transformers.models.bert.tokenization_bert_legacy import load_vocab as ref_load_vocab

    vocab = ref_load_vocab(str(vocab_file))
    basic = BasicTokenizer(do_lower_case=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=chinese)
    wordpiece = WordpieceTokenizer(vocab, "[UNK]", max_input_chars_per_word=max_chars)

    def ids(text: str) -> list[int]:
        return [vocab[p] for w in basic.tokenize(text) for p in wordpiece.tokenize(w)]

    return ids


@pytest.mark.parametrize(
    "lowercase,strip_accents,chinese",
    [(True, None, True), (False, None, True), (True, False, True), (False, True, True), (True, None, False)],
)
def test_parity_with_reference_on_tricky_strings(vocab_file, lowercase, strip_accents, chinese):
    tok = BertTokenizer.from_pretrained(
        vocab_file, lowercase=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=chinese
    )
    ref = reference(vocab_file, lowercase, strip_accents, chinese)
    for text in TRICKY:
        assert tok.encode(text, add_special_tokens=False, truncation=False).ids == ref(text), repr(text)
    # batch path, and pairs with truncation
    got = tok.encode_batch(TRICKY, TRICKY[::-1], max_length=40)
    for enc, a, b in zip(got, TRICKY, TRICKY[::-1]):
        assert enc.ids == google_pair(ref(a), ref(b), 40, tok.cls_token_id, tok.sep_token_id), (a, b)


def test_max_input_chars_per_word_defaults_to_google_200_and_can_be_set(vocab_file):
    word = "ab" * 75  # 150 characters, coverable piece by piece
    assert BertTokenizer.from_pretrained(vocab_file).tokenize(word) != ["[UNK]"]
    assert BertTokenizer.from_pretrained(vocab_file, max_input_chars_per_word=100).tokenize(word) == ["[UNK]"]
    assert BertTokenizer.from_pretrained(vocab_file).tokenize("a" * 201) == ["[UNK]"]
    ids = reference(vocab_file, max_chars=100)(word)
    assert (
        BertTokenizer.from_pretrained(vocab_file, max_input_chars_per_word=100)
        .encode(word, add_special_tokens=False)
        .ids
        == ids
    )


def test_special_tokens_and_vocab_api(tok, vocab_file):
    lines = vocab_file.read_text(encoding="utf-8").split("\n")
    assert tok.pad_token_id == lines.index("[PAD]") == 0
    assert tok.unk_token_id == lines.index("[UNK]")
    assert tok.cls_token_id == lines.index("[CLS]")
    assert tok.sep_token_id == lines.index("[SEP]")
    assert tok.mask_token_id == lines.index("[MASK]")
    assert len(tok) == tok.vocab_size == len(lines) - 1
    assert tok.vocab["the"] == lines.index("the")
    assert tok.convert_tokens_to_ids(["the", "no-such-token"]) == [lines.index("the"), tok.unk_token_id]
    assert tok.convert_tokens_to_ids("[MASK]") == tok.mask_token_id
    assert tok.convert_ids_to_tokens([0, tok.mask_token_id]) == ["[PAD]", "[MASK]"]
    assert tok.convert_ids_to_tokens(tok.cls_token_id) == "[CLS]"
    with pytest.raises(IndexError):
        tok.convert_ids_to_tokens(len(tok))
    assert tok.tokenize("Hello, world!") == ["hello", ",", "world", "!"]


def test_encode_layout_and_offsets(tok):
    a, b = "Hello, world!", "The cat sat."
    enc = tok.encode(a, b)
    assert isinstance(enc, Encoding)
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    sep1 = enc.tokens.index("[SEP]")
    assert enc.type_ids == [0] * (sep1 + 1) + [1] * (len(enc) - sep1 - 1)
    assert enc.attention_mask == [1] * len(enc)
    assert enc.special_tokens_mask == [1 if t in ("[CLS]", "[SEP]") else 0 for t in enc.tokens]
    assert enc.offsets[0] == enc.offsets[sep1] == enc.offsets[-1] == (0, 0)
    assert enc.word_ids[0] is None and enc.word_ids[1:4] == [0, 1, 2]
    assert enc.word_ids[sep1 + 1] == 0  # B's words count from 0
    for k in range(1, sep1):
        s, e = enc.offsets[k]
        assert a[s:e].lower() == enc.tokens[k].removeprefix("##")
    for k in range(sep1 + 1, len(enc) - 1):
        s, e = enc.offsets[k]
        assert b[s:e].lower() == enc.tokens[k].removeprefix("##")


def test_offsets_in_original_text_around_removed_and_unsafe_chars(tok):
    text = "\ud800x\x00 Cafe\u0301!\u200d wörld 中文"
    enc = tok.encode(text, add_special_tokens=False)
    assert enc.tokens == ["x", "cafe", "!", "world", "中", "文"]
    spans = [text[s:e] for s, e in enc.offsets]
    assert spans == ["x", "Cafe\u0301", "!", "wörld", "中", "文"]
    assert enc.word_ids == [0, 1, 2, 3, 4, 5]


def test_truncation_single_and_pair(tok):
    long = "the " * 50
    assert len(tok.encode(long, max_length=10).ids) == 10
    assert tok.encode(long, max_length=10).tokens[-1] == "[SEP]"
    assert len(tok.encode(long, truncation=False).ids) == 52
    assert len(tok.encode(long * 20).ids) == 512  # model_max_length
    enc = tok.encode("the " * 30, "of " * 5, max_length=20)  # A loses tokens until it matches B, then alternate
    assert enc.type_ids.count(1) == 6 and enc.type_ids.count(0) == 14
    assert tok.encode("x", "y", max_length=2).ids == [tok.cls_token_id, tok.sep_token_id, tok.sep_token_id]


def test_truncate_pair_lengths_matches_google_loop():
    for la in range(12):
        for lb in range(12):
            for budget in range(-1, 26):
                a, b = la, lb
                while a + b > max(budget, 0):
                    if a > b:
                        a -= 1
                    else:
                        b -= 1
                assert truncate_pair_lengths(la, lb, budget) == (a, b), (la, lb, budget)


def test_call_returns_padded_tensors(tok):
    texts = ["Hello world", "The cat sat on the mat and then it slept."]
    out = tok(texts)
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask"}
    assert all(v.dtype == torch.long for v in out.values())
    encs = tok.encode_batch(texts)
    assert out["input_ids"].shape == (2, max(len(e) for e in encs))
    for row, enc in enumerate(encs):
        n = len(enc)
        assert out["input_ids"][row, :n].tolist() == enc.ids
        assert out["input_ids"][row, n:].eq(tok.pad_token_id).all()
        assert out["attention_mask"][row].tolist() == [1] * n + [0] * (out["input_ids"].shape[1] - n)
    assert tok(texts, padding="max_length", max_length=16)["input_ids"].shape == (2, 16)
    assert tok(texts, pad_to_multiple_of=8)["input_ids"].shape[1] % 8 == 0
    single = tok("Hello world")
    assert single["input_ids"].tolist() == [encs[0].ids]
    pairs = tok(texts, ["a b", "c"], max_length=8)
    for row, (a, b) in enumerate(zip(texts, ["a b", "c"])):
        enc = tok.encode(a, b, max_length=8)
        assert pairs["input_ids"][row, : len(enc)].tolist() == enc.ids
        assert pairs["token_type_ids"][row, : len(enc)].tolist() == enc.type_ids
    assert tok(texts, return_tensors=None, padding=False)["input_ids"] == [e.ids for e in encs]
    assert tok(texts, return_tensors="np")["input_ids"].dtype.name == "int64"
    with pytest.raises(ValueError, match="pairs"):
        tok(texts, ["only one"])


def test_decode_joins_wordpieces(tok):
    enc = tok.encode("Unaffable playing, the cats!")
    assert any(t.startswith("##") for t in enc.tokens)
    assert tok.decode(enc.ids) == "unaffable playing , the cats !"
    assert tok.decode(enc.ids, skip_special_tokens=False).startswith("[CLS] unaffable")
    assert tok.decode(torch.tensor(enc.ids)) == "unaffable playing , the cats !"


def test_from_pretrained_directory_config_and_guess(tmp_path, vocab_file):
    (tmp_path / "vocab.txt").write_bytes(vocab_file.read_bytes())
    assert BertTokenizer.from_pretrained(tmp_path).lowercase is True  # guessed: the fixture is (almost) uncased
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": False, "tokenize_chinese_chars": False, "model_max_length": 128})
    )
    tok = BertTokenizer.from_pretrained(tmp_path)
    assert (tok.lowercase, tok.tokenize_chinese_chars, tok.model_max_length) == (False, False, 128)
    assert BertTokenizer.from_pretrained(tmp_path, lowercase=True).lowercase is True
    cased = tmp_path / "cased"
    cased.mkdir()
    (cased / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("ABCDEFabc")))
    assert BertTokenizer.from_pretrained(cased / "vocab.txt").lowercase is False
    with pytest.raises(FileNotFoundError):
        BertTokenizer.from_pretrained(tmp_path / "nope")


@pytest.mark.parametrize("lowercase", [True, False])
def test_save_pretrained_is_read_identically_by_transformers(tmp_path, vocab_file, lowercase):
    from transformers import BertTokenizerFast

    tok = BertTokenizer.from_pretrained(vocab_file, lowercase=lowercase)
    tok.save_pretrained(tmp_path)
    again = BertTokenizer.from_pretrained(tmp_path)
    assert again.vocab == tok.vocab and again.lowercase == lowercase
    fast = BertTokenizerFast.from_pretrained(str(tmp_path))
    texts = ["Hello World, café!", "The Paris école: naïve 東京 straße", "can't stop"]
    for text in texts:
        assert fast(text)["input_ids"] == tok.encode(text).ids, text
    assert (
        fast("Hello")["input_ids"]
        != BertTokenizer.from_pretrained(vocab_file, lowercase=not lowercase).encode("Hello").ids
    )


def test_vocab_without_unk_or_with_duplicates_is_rejected(tmp_path):
    no_unk = tmp_path / "no_unk.txt"
    no_unk.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    with pytest.raises(ValueError, match=r"no_unk\.txt.*\[UNK\]"):
        BertTokenizer.from_pretrained(no_unk)
    with pytest.raises(ValueError, match=r"\[UNK\]"):
        load_vocab(no_unk)
    dup = tmp_path / "dup.txt"
    dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello\n")
    with pytest.raises(ValueError, match=r"dup\.txt:8: duplicate token 'hello' \(first seen on line 6\)"):
        BertTokenizer.from_pretrained(dup)
    with pytest.raises(ValueError, match="lacks the special token"):
        BertTokenizer({"[UNK]": 0, "a": 1})


@pytest.mark.parametrize(
    "text",
    ["", " ", "\t\n\r ", "\x00", "\ud800", "\udfff\ud800", "\u200d", "\u0301\u0301", "😀" * 50, "a\ufffdb", "\x1f\x85"],
)
def test_bad_input_never_crashes(tok, text):
    enc = tok.encode(text, text)
    assert enc.tokens[0] == "[CLS]"
    assert all(0 <= s <= e <= len(text) for s, e in enc.offsets)
    out = tok([text, text + "x"])
    assert out["input_ids"].shape[0] == 2


def _seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def test_long_line_scales_linearly(tok):
    """A 300 KB line (mixed scripts, emoji, and chunks that need the exact Python path) against a 30 KB one.

    The 10 MB line is checked in the shared-data tier (tests/data/test_tokenizer_parity.py), where time is budgeted.
    """
    unit = "The quick brown fox, naïve café 中文 😀! e\u0301cole Σ\ud800 \x00 "
    small = unit * (30_000 // len(unit))
    big = unit * (300_000 // len(unit))
    enc = tok.encode(big, truncation=False, add_special_tokens=False)
    assert len(enc.ids) == 10 * len(tok.encode(small, truncation=False, add_special_tokens=False).ids)
    assert all(0 <= s <= e <= len(big) for s, e in enc.offsets[-50:])
    t_small = min(_seconds(tok.tokenize, small) for _ in range(2))
    t_big = _seconds(tok.tokenize, big)
    assert t_big < 30 * t_small + 1.0, (t_small, t_big)  # linear: ~10x; quadratic would be ~100x
    assert tok.tokenize("a" * 1_000_000) == ["[UNK]"]


@pytest.mark.parametrize("lowercase", [True, False])
def test_separators_are_exactly_googles_word_boundaries_and_rust_agrees(lowercase):
    """Chunks are cut at SEPARATORS; that is only sound if they are exactly the characters that split words."""
    import unicodedata

    from bertkit.tokenization.normalizer import SEPARATORS, ExactNormalizer

    space_like = {chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in ("Zs", "Zl", "Zp")}
    assert set(SEPARATORS) == space_like | set("\t\n\r")
    normalizer = ExactNormalizer(lowercase)
    assert not normalizer.unsafe_chars(SEPARATORS)
    for ch in SEPARATORS:
        assert normalizer.basic_tokenize(f"a{ch}b") == ["a", "b"]


def test_long_texts_are_cut_at_separators_without_changing_the_result(tok, monkeypatch):
    import bertkit.tokenization.wordpiece as wp

    text = "Hello, wörld! e\u0301cole 中文 \x00 ΣΑΣ " * 40
    whole = tok.encode(text, "the cat " * 30, truncation=False)
    monkeypatch.setattr(wp, "LONG_TEXT", 25)  # cut into many pieces, run in groups
    cut = tok.encode(text, "the cat " * 30, truncation=False)
    assert (cut.ids, cut.offsets, cut.word_ids) == (whole.ids, whole.offsets, whole.word_ids)
    for max_len in (7, 50, 300):  # long segments are only tokenized as far as truncation needs
        ref = tok._build(tok._segments([text])[0], tok._segments(["the cat " * 30])[0], max_len, True)
        assert tok.encode(text, "the cat " * 30, max_length=max_len).ids == ref.ids
        assert tok([text], ["the cat " * 30], max_length=max_len)["input_ids"][0].tolist() == ref.ids


def test_pickles(tok):
    import pickle

    text = "Héllo e\u0301cole ΣΑΣ 中文 \ud800!"
    again = pickle.loads(pickle.dumps(tok))
    assert again.encode(text) == tok.encode(text)
    assert (again.lowercase, again.max_input_chars_per_word, len(again)) == (tok.lowercase, 200, len(tok))


PLAIN = [
    "Hello, World! How are you?",
    "héllo wörld, café naïve École STRASSE",
    "日本語のテキスト、東京。中文字符 한국어",
    "can't won't U.S.A. 3.14 $5,000 e-mail",
    "a" * 150 + " " + "x" * 90,  # HF's tokenizer.json states a 100-character word limit, not Google's 200
]


@pytest.mark.parametrize(
    "lowercase,strip_accents,chinese",
    [(True, None, True), (False, None, True), (False, True, False), (True, False, True)],
)
def test_directory_written_by_transformers_5_loads_from_tokenizer_json(
    tmp_path, vocab_file, lowercase, strip_accents, chinese
):
    from transformers import BertTokenizerFast

    fast = BertTokenizerFast(
        str(vocab_file), do_lower_case=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=chinese
    )
    fast.save_pretrained(str(tmp_path))
    assert not (tmp_path / "vocab.txt").exists() and (tmp_path / "tokenizer.json").is_file()
    (tmp_path / "tokenizer_config.json").unlink()  # the settings must come from tokenizer.json itself
    mine = BertTokenizer.from_pretrained(tmp_path)
    assert (mine.lowercase, mine.strip_accents, mine.tokenize_chinese_chars) == (lowercase, strip_accents, chinese)
    assert mine.max_input_chars_per_word == 100
    assert mine.vocab == load_vocab(vocab_file)
    for text in PLAIN:
        assert mine.encode(text, "the pair").ids == fast(text, "the pair")["input_ids"], text
    # and exactly what the same settings give from a vocab.txt, on the tricky strings too
    same = BertTokenizer.from_pretrained(
        vocab_file,
        lowercase=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=chinese,
        max_input_chars_per_word=100,
    )
    for text in TRICKY:
        assert mine.encode(text) == same.encode(text)
    # also read by the file's name, and with the config transformers writes next to it
    assert BertTokenizer.from_pretrained(tmp_path / "tokenizer.json").vocab == mine.vocab
    fast.save_pretrained(str(tmp_path))
    assert BertTokenizer.from_pretrained(tmp_path).lowercase is lowercase
    again = BertTokenizerFast.from_pretrained(str(tmp_path))
    for text in PLAIN:
        assert mine.encode(text).ids == again(text)["input_ids"], text


def _tokenizer_json(tmp_path, vocab_file, edit) -> object:
    from transformers import BertTokenizerFast

    BertTokenizerFast(str(vocab_file)).save_pretrained(str(tmp_path))
    spec = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    edit(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda s: s["model"].update(type="BPE"), "model.type"),
        (lambda s: s["model"].update(continuing_subword_prefix="@@"), "model.continuing_subword_prefix"),
        (lambda s: s.update(normalizer={"type": "NFKC"}), "normalizer.type"),
        (lambda s: s.update(normalizer=None), "normalizer.type"),
        (lambda s: s.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer.type"),
        (lambda s: s["model"]["vocab"].pop("[CLS]"), r"\[CLS\]"),
        (lambda s: s["added_tokens"].append({"id": 99999, "content": "<new>", "special": True}), "added token"),
    ],
)
def test_tokenizer_json_that_is_not_bert_wordpiece_is_refused(tmp_path, vocab_file, edit, field):
    from bertkit.errors import InputError

    directory = _tokenizer_json(tmp_path, vocab_file, edit)
    with pytest.raises(InputError, match=rf"tokenizer\.json: .*{field}"):
        BertTokenizer.from_pretrained(directory)


def test_tokenizer_json_from_a_non_bert_tokenizer_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    from bertkit.errors import InputError

    Tokenizer(models.BPE()).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(InputError, match=r"not a BERT WordPiece tokenizer: model.type is \"BPE\""):
        BertTokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"tokenizer\.json: not valid JSON"):
        BertTokenizer.from_pretrained(tmp_path)


def test_directory_without_any_vocabulary_names_both_files(tmp_path):
    from bertkit.tokenization import find_vocab

    assert find_vocab(tmp_path) is None
    with pytest.raises(FileNotFoundError, match=r"no vocab\.txt or tokenizer\.json"):
        BertTokenizer.from_pretrained(tmp_path)
