"""Extended model directories (``bertkit vocab extend``) in transformers: a tiny BERT and a tiny ModernBERT with a
WordPiece vocab.txt, and a tiny ModernBERT with a byte-level BPE tokenizer.json, each extended on the fixture text,
load in transformers with the same outputs as in bertkit (padded batches holding the new tokens), and transformers'
AutoTokenizer on the written directory tokenizes as bertkit does."""

from __future__ import annotations

import json

import pytest
import torch
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)
from tinymodernbert import make_modernbert_dir

from bertkit import BertForPreTraining
from bertkit.commands.vocab_extend import extend_vocabulary
from bertkit.modeling_modernbert import ModernBertForMaskedLM
from bertkit.tokenization import FastTokenizer, load_tokenizer

transformers = pytest.importorskip("transformers")


def _outputs_agree(directory, tokenizer, texts, ours, theirs, new_ids):
    batch = tokenizer(texts, return_tensors="pt", max_length=48)
    assert any(int(i) in new_ids for i in batch["input_ids"].flatten())  # the new rows are read
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        mine = ours.from_pretrained(directory).eval()(**inputs)
        ref = theirs.from_pretrained(str(directory)).eval()(**inputs)
    mine_logits = mine.prediction_logits if hasattr(mine, "prediction_logits") else mine.logits
    ref_logits = ref.prediction_logits if hasattr(ref, "prediction_logits") else ref.logits
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(mine_logits[mask], ref_logits[mask], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_an_extended_wordpiece_directory_loads_in_transformers_alike(arch, fixtures_dir, tmp_path):
    base = tmp_path / "base"
    vocab = fixtures_dir / "tokenizer" / "vocab.txt"
    if arch == "bert":
        make_model_dir(base, vocab, cls=BertForPreTraining)
        ours, theirs = BertForPreTraining, transformers.BertForPreTraining
    else:
        make_modernbert_dir(base, [t for t in vocab.read_text(encoding="utf-8").splitlines() if t])
        ours, theirs = ModernBertForMaskedLM, transformers.ModernBertForMaskedLM
    corpus = fixtures_dir / "tokenizer" / "korean.txt"
    report = extend_vocabulary(base, [corpus], 10, tmp_path / "ext")
    texts = corpus.read_text(encoding="utf-8").splitlines()[:6]
    tok = load_tokenizer(tmp_path / "ext")
    hf_tok = transformers.BertTokenizer.from_pretrained(str(tmp_path / "ext"))
    for text in texts:
        assert tok.encode(text).ids == hf_tok(text)["input_ids"]
    _outputs_agree(tmp_path / "ext", tok, texts, ours, theirs, {c.id for c in report["chosen"]})


SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def _bpe_directory(path, corpus_lines):
    """A tiny ModernBERT with a ModernBERT-style byte-level BPE tokenizer.json (the tokenizers library's trainer),
    whose model has 8 embedding rows more than the tokenizer has tokens (as ModernBERT pads its vocabulary)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_lines, trainer)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 64}
    config.update({n: t for n, t in zip(("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"), SPECIALS)})
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    vocab = [f"t{i}" for i in range(tok.get_vocab_size() + 8)]
    for token in SPECIALS:
        vocab[tok.token_to_id(token)] = token
    make_modernbert_dir(path, vocab, max_position_embeddings=64)
    (path / "vocab.txt").unlink()  # this directory's tokenizer is its tokenizer.json
    with torch.no_grad():
        model = ModernBertForMaskedLM.from_pretrained(path)
        model.decoder.bias.copy_(torch.randn(model.config.vocab_size))
        model.save_pretrained(path)
    return tok


def test_an_extended_bpe_tokenizer_json_tokenizes_and_loads_as_in_transformers(fixtures_dir, tmp_path):
    english = (fixtures_dir / "tokenizer" / "english.txt").read_text(encoding="utf-8").splitlines()
    korean = fixtures_dir / "tokenizer" / "korean.txt"
    old_rust = _bpe_directory(tmp_path / "base", english)
    report = extend_vocabulary(tmp_path / "base", [korean], 20, tmp_path / "ext")
    chosen = report["chosen"]
    assert len(chosen) == 20
    first = old_rust.get_vocab_size()
    assert [c.id for c in chosen] == list(range(first, first + 20))  # the 8 padding rows first, then 12 new ones
    assert report["vocab_size"] == (first + 8, first + 20)
    before, after = report["before"][1], report["after"][1]
    assert before - after == sum(c.saving for c in chosen)  # a merge saves exactly its pair's count

    tok = load_tokenizer(tmp_path / "ext")
    assert isinstance(tok, FastTokenizer)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "ext"))
    lines = korean.read_text(encoding="utf-8").splitlines() + english[:20]
    for line in lines:
        assert tok.encode(line, truncation=False).ids == hf_tok(line)["input_ids"], line
    # a new row is the mean of the rows (and biases) of the old tokens it is merged from
    old = ModernBertForMaskedLM.from_pretrained(tmp_path / "base")
    new = ModernBertForMaskedLM.from_pretrained(tmp_path / "ext")
    old_emb, new_emb = old.model.embeddings.tok_embeddings.weight, new.model.embeddings.tok_embeddings.weight
    for c in chosen:
        torch.testing.assert_close(new_emb[c.id], old_emb[c.pieces].mean(0))
        torch.testing.assert_close(new.decoder.bias[c.id], old.decoder.bias[c.pieces].mean())
    _outputs_agree(
        tmp_path / "ext",
        tok,
        lines[:5],
        ModernBertForMaskedLM,
        transformers.ModernBertForMaskedLM,
        {c.id for c in chosen},
    )


def test_pretraining_continues_from_an_extended_directory(fixtures_dir, tmp_path):
    """``bertkit pretrain --init-from`` reads the extended directory: its vocabulary and its weights, new rows included
    (a learning rate too small to move them)."""
    from safetensors.torch import load_file

    from bertkit.recipes.pretrain import PretrainConfig, pretrain

    base = tmp_path / "base"
    make_model_dir(base, fixtures_dir / "tokenizer" / "vocab.txt", cls=BertForPreTraining, max_position_embeddings=64)
    corpus = fixtures_dir / "tokenizer" / "korean.txt"
    extend_vocabulary(base, [corpus], 10, tmp_path / "ext")
    out = tmp_path / "continued"
    settings = dict(seq_len=32, batch_size=4, max_steps=1, quiet=True, workers=1, precision="fp32", lr=1e-12)
    pretrain(PretrainConfig(corpus=[str(corpus)], output=str(out), init_from=str(tmp_path / "ext"), **settings))
    assert (out / "vocab.txt").read_text(encoding="utf-8") == (tmp_path / "ext" / "vocab.txt").read_text(
        encoding="utf-8"
    )
    a, b = load_file(str(tmp_path / "ext" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    key = "bert.embeddings.word_embeddings.weight"
    torch.testing.assert_close(b[key], a[key], atol=1e-8, rtol=0)
