"""Model directories whose tokenizer is a ``tokenizer.json`` of another type than WordPiece (here a byte-level BPE,
the kind ModernBERT ships, trained in the test with the ``tokenizers`` library's own trainer): the tokenizer agrees
with ``transformers``' on the same directory, and ``Encoder``, fill-mask, ``bertkit finetune``, the task pipeline and
``bertkit serve``'s /embed work on it, for a tiny ModernBERT and a tiny BERT. WordPiece directories keep
``BertTokenizer``; a directory with no tokenizer is refused naming it."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from tinymodels import http_json, make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer, FastTokenizer, VocabNotFoundError, load_tokenizer

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ModernBERT's names, ids in its order of appearance
CORPUS = [
    "the cat sat on the mat",
    "a dog ran to the river bank",
    "we went to the bank to get money",
    "hello world, hello again!",
    "it's a fine film",
    "dull and slow, and far too long",
    "Café naïve résumé — 東京 and emoji 🙂 too",
    "the big red dog runs; the small blue cat ran.",
] * 3
TEXTS = [
    "The cat sat on the mat.",
    "  leading and trailing spaces  ",
    "Café 🙂 東京 naïve",
    "it's   a dog's   life",
    "",
    "x",
]
PAIRS = ["a dog ran", "the river bank is far, far away from here and there", "?", "hello", "world", "y z"]


def _train_bpe(path):
    """A GPT-NeoX / ModernBERT-style byte-level BPE ``tokenizer.json``: NFC, byte-level pre-tokenizer and decoder,
    ``[CLS] A [SEP] (B [SEP])`` template, [MASK] an added token that swallows the space before it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.save(str(path))
    return tok


def _tokenizer_files(d):
    rust = _train_bpe(d / "tokenizer.json")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "mask_token": "[MASK]",
        "unk_token": "[UNK]",
        "model_max_length": 64,
        "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return rust


@pytest.fixture(scope="module")
def modern_dir(tmp_path_factory):
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

    d = tmp_path_factory.mktemp("mb-bpe")
    rust = _tokenizer_files(d)
    ids = {t: rust.token_to_id(t) for t in SPECIALS}
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=rust.get_vocab_size(),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=8,
        max_position_embeddings=64,
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
    )
    model = ModernBertForMaskedLM(config)
    with torch.no_grad():  # a peaked decoder bias, so fill-mask's ranking is not a tie
        model.decoder.bias.copy_(torch.randn(config.vocab_size))
    model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert-bpe")
    rust = _tokenizer_files(d)
    make_model_dir(d, [f"t{i}" for i in range(rust.get_vocab_size())])
    (d / "vocab.txt").unlink()  # make_model_dir writes one; this directory's tokenizer is tokenizer.json alone
    return d


def _hf(d):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(d))


# ------------------------------------------------------------------------------------------------ the tokenizer


def test_same_tokens_offsets_and_words_as_transformers(modern_dir):
    transformers = pytest.importorskip("transformers")
    tok = load_tokenizer(modern_dir)
    assert isinstance(tok, FastTokenizer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(modern_dir / "tokenizer.json"))
    for hf in (_hf(modern_dir), fast):
        for text in TEXTS:
            want = hf(text, return_offsets_mapping=True)
            got = tok.encode(text, truncation=False)
            assert got.ids == want["input_ids"], text
            assert got.offsets == [tuple(o) for o in want["offset_mapping"]], text
            assert got.word_ids == want.word_ids(), text
            assert got.tokens == hf.convert_ids_to_tokens(want["input_ids"])
    hf = _hf(modern_dir)
    for name in ("cls", "sep", "pad", "mask", "unk"):
        assert getattr(tok, f"{name}_token_id") == getattr(hf, f"{name}_token_id"), name
    assert len(tok) == len(hf) and tok.model_max_length == hf.model_max_length == 64


def test_pairs_truncation_and_decoding_as_transformers(modern_dir):
    tok, hf = load_tokenizer(modern_dir), _hf(modern_dir)
    for max_length in (5, 8, 12, 64):
        want = hf(TEXTS, PAIRS, truncation=True, max_length=max_length, return_token_type_ids=True)
        got = tok.encode_batch(TEXTS, PAIRS, max_length=max_length)
        assert [e.ids for e in got] == want["input_ids"], max_length
        assert [e.type_ids for e in got] == want["token_type_ids"], max_length
        assert all(len(e.ids) <= max_length for e in got)
    want = hf(TEXTS, truncation=True, max_length=6)["input_ids"]
    assert [e.ids for e in tok.encode_batch(TEXTS, max_length=6)] == want
    assert [e.ids for e in tok.encode_batch(TEXTS, add_special_tokens=False, truncation=False)] == hf(
        TEXTS, add_special_tokens=False
    )["input_ids"]
    ids = hf("hello world , it's a fine [MASK] film .")["input_ids"]
    assert tok.encode_with_masks("hello world , it's a fine [MASK] film .", "[MASK]") == ids
    for skip in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
    assert tok.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(ids)) == ids
    with pytest.raises(IndexError):
        tok.convert_ids_to_tokens([len(tok)])
    again = pickle.loads(pickle.dumps(tok))  # e.g. into DataLoader workers
    assert [e.ids for e in again.encode_batch(TEXTS, PAIRS, max_length=8)] == hf(
        TEXTS, PAIRS, truncation=True, max_length=8
    )["input_ids"]


def _train_unigram(path):
    """A SentencePiece-style Unigram ``tokenizer.json`` with RoBERTa's special tokens and pair template
    (``<s> A </s></s> B </s>``), and no tokenizer_config.json: the special tokens are found in the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=150,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    tok.save(str(path))


def test_a_unigram_tokenizer_with_roberta_tokens_as_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    _train_unigram(tmp_path / "tokenizer.json")
    tok = load_tokenizer(tmp_path)
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json"),
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        mask_token="<mask>",
        unk_token="<unk>",
    )
    assert (tok.cls_token, tok.sep_token, tok.pad_token, tok.mask_token, tok.unk_token) == (
        "<s>",
        "</s>",
        "<pad>",
        "<mask>",
        "<unk>",
    )
    for name in ("cls", "sep", "pad", "mask", "unk"):
        assert getattr(tok, f"{name}_token_id") == getattr(hf, f"{name}_token_id"), name
    for text in TEXTS:
        want = hf(text, return_offsets_mapping=True)
        got = tok.encode(text, truncation=False)
        assert (got.ids, got.offsets, got.word_ids) == (
            want["input_ids"],
            [tuple(o) for o in want["offset_mapping"]],
            want.word_ids(),
        ), text
    for max_length in (6, 10, 64):
        assert [e.ids for e in tok.encode_batch(TEXTS, PAIRS, max_length=max_length)] == hf(
            TEXTS, PAIRS, truncation=True, max_length=max_length
        )["input_ids"], max_length
    ids = hf(TEXTS[0])["input_ids"]
    assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)


def test_save_pretrained_round_trips_through_transformers(modern_dir, tmp_path):
    tok = load_tokenizer(modern_dir)
    tok.save_pretrained(tmp_path)
    assert not (tmp_path / "vocab.txt").exists()
    shutil.copy(modern_dir / "config.json", tmp_path / "config.json")
    hf = _hf(tmp_path)
    assert hf(TEXTS, PAIRS)["input_ids"] == [e.ids for e in load_tokenizer(tmp_path).encode_batch(TEXTS, PAIRS)]
    assert hf.mask_token == "[MASK]" and hf.model_max_length == 64


def test_special_tokens_from_special_tokens_map_or_the_vocabulary(modern_dir, tmp_path):
    shutil.copy(modern_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    guessed = load_tokenizer(tmp_path)  # no config: BERT's names, found in the vocabulary
    assert guessed.cls_token == "[CLS]" and guessed.mask_token_id == load_tokenizer(modern_dir).mask_token_id
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"cls_token": {"content": "[SEP]"}}))
    assert load_tokenizer(tmp_path).cls_token_id == guessed.sep_token_id
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<nope>"}))
    with pytest.raises(BertkitError, match=r"tokenizer\.json.*pad_token '<nope>' is not in its vocabulary"):
        load_tokenizer(tmp_path)
    with pytest.raises(BertkitError, match="casing"):
        load_tokenizer(modern_dir, lowercase=True)


def test_wordpiece_directories_keep_bert_tokenizer(tmp_path, fixtures_dir):
    shutil.copy(fixtures_dir / "finetune" / "vocab.txt", tmp_path / "vocab.txt")
    tok = load_tokenizer(tmp_path)
    assert type(tok) is BertTokenizer
    same = BertTokenizer.from_pretrained(tmp_path)
    assert [e.ids for e in tok.encode_batch(TEXTS, PAIRS, max_length=9)] == [
        e.ids for e in same.encode_batch(TEXTS, PAIRS, max_length=9)
    ]


def test_a_directory_without_a_tokenizer_is_refused_naming_it(modern_dir, tmp_path, capsys):
    with pytest.raises(VocabNotFoundError, match=str(tmp_path)):
        load_tokenizer(tmp_path)
    bare = tmp_path / "bare"
    shutil.copytree(modern_dir, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    out = tmp_path / "out.npy"
    assert (
        main(
            ["embed", "--model", str(bare), "--input", str(modern_dir / "config.json"), "--output", str(out), "--quiet"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(bare) in err and "tokenizer.json" in err and "Traceback" not in err


def test_pretraining_refuses_a_bpe_directory_in_one_line(modern_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "pretrain",
                "--corpus",
                str(corpus),
                "--output",
                str(tmp_path / "run"),
                "--init-from",
                str(modern_dir),
                "--quiet",
                "--max-steps",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(modern_dir) in err and "WordPiece" in err and "Traceback" not in err
    assert (
        main(
            [
                "pretrain",
                "--corpus",
                str(corpus),
                "--output",
                str(tmp_path / "run2"),
                "--vocab",
                str(modern_dir),
                "--quiet",
                "--max-steps",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "tokenizer.json" in err and "WordPiece" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ the pipeline


def _padded(hf, texts):
    return hf(texts, padding=True, return_tensors="pt", return_token_type_ids=True)


@pytest.mark.parametrize("which", ["modern", "bert"])
def test_encoder_embeddings_equal_the_model_on_transformers_tokens(which, modern_dir, bert_dir):
    d = modern_dir if which == "modern" else bert_dir
    enc = Encoder.from_pretrained(d, precision="fp32")
    assert isinstance(enc.tokenizer, FastTokenizer)
    batch = _padded(_hf(d), TEXTS[:4])
    with torch.no_grad():
        if which == "modern":
            from bertkit.modeling_modernbert import ModernBertModel

            states = (
                ModernBertModel.from_pretrained(d)
                .eval()(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
                .hidden_states
            )
        else:
            from bertkit import BertModel

            states = (
                BertModel.from_pretrained(d)
                .eval()(
                    batch["input_ids"],
                    token_type_ids=batch["token_type_ids"],
                    attention_mask=batch["attention_mask"],
                    output_hidden_states=True,
                )
                .hidden_states
            )
    m = batch["attention_mask"][..., None].float()
    want = ((states[-1] * m).sum(1) / m.sum(1)).numpy()
    np.testing.assert_allclose(enc.encode(TEXTS[:4], layers=[-1], pooling="mean"), want, rtol=1e-5, atol=1e-5)


def test_fill_mask_on_a_bpe_modernbert(modern_dir):
    from bertkit.modeling_modernbert import ModernBertForMaskedLM

    enc = Encoder.from_pretrained(modern_dir, precision="fp32")
    text = "the cat [MASK] on the mat"
    got = enc.fill_mask([text], top_k=3)[0][0]
    ids = _hf(modern_dir)(text, return_tensors="pt")["input_ids"]
    where = ids[0].tolist().index(enc.tokenizer.mask_token_id)
    with torch.no_grad():
        top = ModernBertForMaskedLM.from_pretrained(modern_dir).eval()(ids).logits[0, where].softmax(-1).topk(3)
    assert [g["token_id"] for g in got] == top.indices.tolist()
    np.testing.assert_allclose([g["score"] for g in got], top.values.numpy(), rtol=1e-5)


@pytest.mark.parametrize("which", ["modern", "bert"])
def test_finetune_then_pipeline_on_a_bpe_directory(which, modern_dir, bert_dir, fixtures_dir, tmp_path):
    from bertkit.pipelines import load_pipeline

    d = modern_dir if which == "modern" else bert_dir
    ft = fixtures_dir / "finetune"
    out = tmp_path / "sst2"
    assert (
        main(
            [
                "finetune",
                "--task",
                "sst2",
                "--train",
                str(ft / "sst2_train.tsv"),
                "--dev",
                str(ft / "sst2_dev.tsv"),
                "--model",
                str(d),
                "--output",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--lr",
                "1e-3",
                "--quiet",
                "--precision",
                "fp32",
                "--max-train-examples",
                "16",
                "--max-seq-length",
                "32",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 2 and 0.0 <= metrics["accuracy"] <= 1.0
    assert (out / "tokenizer.json").read_bytes() == (d / "tokenizer.json").read_bytes()
    assert not (out / "vocab.txt").exists()
    pipe = load_pipeline(out, precision="fp32")
    texts = ["a fine film", "dull and slow, and far too long"]
    batch = _padded(_hf(out), texts)
    if which == "modern":
        from bertkit.modeling_modernbert import ModernBertForSequenceClassification as Head

        model_inputs = {"attention_mask": batch["attention_mask"]}
    else:
        from bertkit import BertForSequenceClassification as Head

        model_inputs = {"attention_mask": batch["attention_mask"], "token_type_ids": batch["token_type_ids"]}
    with torch.no_grad():
        want = Head.from_pretrained(out).eval()(batch["input_ids"], **model_inputs).logits
    torch.testing.assert_close(
        torch.as_tensor(np.asarray(pipe.logits(texts)), dtype=torch.float32), want, atol=1e-5, rtol=1e-4
    )
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(out),
                "--data",
                str(ft / "sst2_dev.tsv"),
                "--quiet",
                "--precision",
                "fp32",
                "--output",
                str(tmp_path / "ev"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["accuracy"] == pytest.approx(metrics["accuracy"])


def test_served_embed_and_tokenize_on_a_bpe_modernbert(modern_dir):
    from bertkit.commands.serve import load_model
    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    enc = load_model(str(modern_dir), "cpu", "fp32")
    texts = ["the cat sat", "Café 🙂 東京, a big red dog ran to the river bank"]
    want = enc.encode(texts, normalize=True)
    hf = _hf(modern_dir)
    with ServerThread(create_app(enc, ServeSettings(model_id="mb"))) as srv:
        status, out = http_json(srv.url, "/embed", {"inputs": texts}, timeout=60)
        assert status == 200, out
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        status, out = http_json(srv.url, "/tokenize", {"inputs": texts[1]}, timeout=60)
        assert status == 200, out
        assert [row["id"] for row in out[0]] == hf(texts[1])["input_ids"]


def _finetune(task, train, dev, model, out, *extra):
    assert (
        main(
            [
                "finetune",
                "--task",
                task,
                "--train",
                str(train),
                "--dev",
                str(dev),
                "--model",
                str(model),
                "--output",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--lr",
                "1e-3",
                "--quiet",
                "--precision",
                "fp32",
                "--max-train-examples",
                "16",
                *extra,
            ]
        )
        == 0
    )
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.filterwarnings("ignore:Tokenizer does not support real words")  # transformers says so for BPE
def test_token_tagging_and_ner_pipeline_equal_transformers(modern_dir, fixtures_dir, tmp_path):
    """CoNLL tagging fine-tunes on the BPE directory (words tokenized one by one, as transformers'
    ``is_split_into_words``), and the NER pipeline's entities equal transformers' token-classification pipeline's on
    the output directory, for every aggregation (byte-level BPE has no sub-word mark: words are told by spaces)."""
    transformers = pytest.importorskip("transformers")
    from bertkit.pipelines import load_pipeline

    ft = fixtures_dir / "finetune"
    out = tmp_path / "conll"
    assert _finetune("conll2003", ft / "conll_train.txt", ft / "conll_dev.txt", modern_dir, out)["step"] >= 1
    ours = load_pipeline(out, precision="fp32")
    texts = ["Carol lives in Berlin, near the Rhine.", "EU rejects German call to boycott British lamb ."]
    for strategy in ("none", "simple", "first", "average", "max"):
        theirs = transformers.pipeline(
            "token-classification", model=str(out), aggregation_strategy=strategy, device="cpu", ignore_labels=[]
        )
        for text in texts:  # no label ignored: every token (word, group) is compared
            got, want = ours.ner(text, aggregation_strategy=strategy, ignore_labels=[]), theirs(text)
            assert len(want) >= (12 if strategy == "none" else 1)
            key = "entity" if strategy == "none" else "entity_group"
            assert [(g[key], g["word"], g["start"], g["end"]) for g in got] == [
                (w[key], w["word"], w["start"], w["end"]) for w in want
            ], (strategy, text)
            np.testing.assert_allclose(
                [g["score"] for g in got], [float(w["score"]) for w in want], rtol=1e-4, atol=1e-5
            )


def test_span_qa_on_a_bpe_modernbert(modern_dir, fixtures_dir, tmp_path):
    """SQuAD fine-tunes on the BPE directory (offsets place the answers), and the QA pipeline answers with a span of
    the context in both conventions."""
    from bertkit.pipelines import load_pipeline

    ft = fixtures_dir / "finetune"
    out = tmp_path / "squad"
    metrics = _finetune(
        "squad",
        ft / "squad_train.json",
        ft / "squad_dev.json",
        modern_dir,
        out,
        "--max-seq-length",
        "64",
        "--doc-stride",
        "24",
        "--max-query-length",
        "16",
    )
    assert metrics["step"] >= 1 and 0.0 <= metrics["f1"] <= 100.0
    pipe = load_pipeline(out, precision="fp32")
    context = "The cat sat on the mat in Berlin, near the river bank."
    for convention in ("hf", "google"):
        pipe.convention = convention
        answer = pipe.answer(question="Where did the cat sit?", context=context)
        assert context[answer["start"] : answer["end"]] == answer["answer"] and answer["answer"] in context


def test_sentence_embedding_training_on_a_bpe_bert(bert_dir, fixtures_dir, tmp_path):
    """``bertkit finetune --task pairs`` trains a BERT whose tokenizer is a BPE tokenizer.json; sentence-transformers
    loads the output (with its tokenizer) and embeds as bertkit's Encoder does."""
    st = pytest.importorskip("sentence_transformers")
    fx = fixtures_dir / "embeddings"
    out = tmp_path / "st"
    assert (
        main(
            [
                "finetune",
                "--task",
                "pairs",
                "--train",
                str(fx / "train_pairs.tsv"),
                "--model",
                str(bert_dir),
                "--output",
                str(out),
                "--batch-size",
                "32",
                "--epochs",
                "1",
                "--lr",
                "1e-3",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    assert (out / "tokenizer.json").read_bytes() == (bert_dir / "tokenizer.json").read_bytes()
    texts = ["the cat sat on the mat", "Café 🙂 東京, a big red dog ran to the river bank"]
    want = st.SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(Encoder.from_pretrained(out, precision="fp32").encode(texts), want, rtol=1e-4, atol=1e-5)


def test_served_fill_mask_equals_transformers_pipeline_on_a_bpe_modernbert(modern_dir):
    """/fill-mask in the inference API's shape against transformers' fill-mask pipeline on the BPE ModernBERT: ids,
    token_str and sequence decoded by the byte-level decoder, and scores."""
    transformers = pytest.importorskip("transformers")
    from bertkit.serve.app import ServerThread, ServeSettings, create_app

    reference = transformers.pipeline("fill-mask", model=str(modern_dir), device="cpu")
    texts = ["the cat [MASK] on the mat", "Café 🙂, a dog went to the [MASK].", "the [MASK] sat on the [MASK]"]
    with ServerThread(create_app(Encoder.from_pretrained(modern_dir, precision="fp32"), ServeSettings())) as srv:
        for text in texts:
            status, got = http_json(srv.url, "/fill-mask", {"inputs": text, "parameters": {"top_k": 4}})
            assert status == 200, got
            want = reference(text, top_k=4)
            got, want = (got, want) if text.count("[MASK]") > 1 else ([got], [want])
            for g_mask, w_mask in zip(got, want, strict=True):
                assert [(p["token"], p["token_str"], p["sequence"]) for p in g_mask] == [
                    (p["token"], p["token_str"], p["sequence"]) for p in w_mask
                ]
                np.testing.assert_allclose(
                    [p["score"] for p in g_mask], [p["score"] for p in w_mask], rtol=1e-4, atol=1e-6
                )


def test_a_tokenizer_json_without_a_template_gets_berts(modern_dir, tmp_path, caplog):
    """A file with no post-processor: every input gets [CLS] A [SEP] (B [SEP]), the shape bertkit's own builders
    (SQuAD windows, tagging) use, and a warning says so; ids between the specials stay the library's."""
    spec = json.loads((modern_dir / "tokenizer.json").read_text(encoding="utf-8"))
    spec["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    shutil.copy(modern_dir / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    with caplog.at_level("WARNING", logger="bertkit"):
        tok = load_tokenizer(tmp_path)
    assert "no post-processor" in caplog.text and str(tmp_path) in caplog.text
    with_template = load_tokenizer(modern_dir)
    for a, b in zip(TEXTS, PAIRS):
        assert tok.encode(a, b, truncation=False).ids == with_template.encode(a, b, truncation=False).ids
        assert tok.encode(a, b, truncation=False).type_ids == with_template.encode(a, b, truncation=False).type_ids
    assert pickle.loads(pickle.dumps(tok)).encode(TEXTS[0]).ids == with_template.encode(TEXTS[0]).ids


def test_onnx_export_of_a_bpe_bert_keeps_its_tokenizer(bert_dir, tmp_path):
    """``bertkit export --onnx`` copies tokenizer.json and its config; the exported directory (no PyTorch weights)
    embeds through ONNX Runtime with the same tokenizer and numbers as the PyTorch directory."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "onnx"
    assert main(["export", "--onnx", str(bert_dir), str(out), "--all-layers"]) == 0
    assert (out / "tokenizer.json").read_bytes() == (bert_dir / "tokenizer.json").read_bytes()
    assert (out / "encoder.onnx").is_file() and not (out / "model.safetensors").exists()
    enc = Encoder.from_pretrained(out, backend="onnx")
    assert isinstance(enc.tokenizer, FastTokenizer)
    np.testing.assert_allclose(
        enc.encode(TEXTS[:4]),
        Encoder.from_pretrained(bert_dir, precision="fp32").encode(TEXTS[:4]),
        rtol=1e-4,
        atol=1e-5,
    )
