"""Masked next-token prediction (``--objective mntp``, GPT-BERT; recipes/pretrain/objectives/mntp.py) and its readers:
the shift of labels and reads, the causal attention option of both architectures (alone and with ModernBERT's sliding
windows), the objective's model (what it reads, what the meter may count), and a saved model whose config.json says
``bertkit_objective: mntp`` read shifted by fill-mask and by BLiMP's scorer, each against a naive recomputation."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tinymodels import FINETUNE_VOCAB, read_vocab, tiny_config
from tinymodernbert import modernbert_config

from bertkit import models
from bertkit.config import OBJECTIVE_KEY, ConfigError
from bertkit.features import Encoder, encode_with_masks
from bertkit.modeling import BertForPreTraining, BertModel, shift_left
from bertkit.modeling_modernbert import ModernBertForMaskedLM, ModernBertModel
from bertkit.recipes.pretrain.objectives.mntp import MntpPretraining, next_token_labels
from bertkit.tasks.blimp import PllScorer
from bertkit.tokenization import load_tokenizer

VOCAB = read_vocab(FINETUNE_VOCAB)
ARCHS = ("bert", "modernbert")


def _masked_lm(arch: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    if arch == "bert":
        return BertForPreTraining(tiny_config(len(VOCAB), layers=2, max_position_embeddings=64, **overrides)).eval()
    return ModernBertForMaskedLM(modernbert_config(VOCAB, **overrides)).eval()  # local_attention 4: windows at work


def _saved(tmp_path, arch: str, mntp: bool = True):
    model = _masked_lm(arch)
    if mntp:
        model.config.extra[OBJECTIVE_KEY] = "mntp"
    model.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return tmp_path


def test_the_shift_and_the_causal_labels():
    labels = torch.tensor([[-100, 7, -100, 9, -100], [-100, -100, 5, -100, -100]])
    assert shift_left(labels, -100).tolist() == [[7, -100, 9, -100, -100], [-100, 5, -100, -100, -100]]
    ids = torch.tensor([[2, 10, 11, 3, 0], [2, 12, 13, 14, 3]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert next_token_labels(ids, mask).tolist() == [[10, 11, 3, -100, -100], [12, 13, 14, 3, -100]]


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_attention_hides_the_later_tokens_and_only_when_asked(arch):
    encoder = models.encoder_of(_masked_lm(arch))
    torch.manual_seed(1)
    a = torch.randint(5, len(VOCAB), (2, 12))
    b = a.clone()
    b[:, 7:] = torch.randint(5, len(VOCAB), (2, 5))  # the tokens after position 6 changed
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 10:] = 0  # a padded row too

    def run(ids, causal):
        return encoder(ids, mask, causal=causal).last_hidden_state

    with torch.no_grad():
        assert torch.allclose(run(a, True)[:, :7], run(b, True)[:, :7], atol=1e-6)
        assert not torch.allclose(run(a, False)[:, :7], run(b, False)[:, :7], atol=1e-3)
        # per row: a causal row as causal=True, the other as causal=False
        rows = run(a, torch.tensor([True, False]))
        torch.testing.assert_close(rows[0, :10], run(a, True)[0, :10])
        torch.testing.assert_close(rows[1, :10], run(a, False)[1, :10])
        assert not torch.allclose(run(a, True)[:, 7:10], run(a, False)[:, 7:10], atol=1e-3)


def test_modernbert_causal_attention_keeps_the_sliding_window():
    """One local layer (window W = 2 on either side): with causal on, position i sees i - 2 .. i and nothing else."""
    torch.manual_seed(0)
    encoder = ModernBertModel(modernbert_config(VOCAB, num_hidden_layers=1, layer_types=["sliding_attention"])).eval()
    a = torch.randint(5, len(VOCAB), (1, 16))
    i = 9
    with torch.no_grad():
        base = encoder(a, causal=True).last_hidden_state[0, i]
        for j, moves in ((i - 3, False), (i - 2, True), (i, True), (i + 1, False), (i + 2, False)):
            b = a.clone()
            b[0, j] = (a[0, j] + 1 - 5) % (len(VOCAB) - 5) + 5
            changed = not torch.allclose(encoder(b, causal=True).last_hidden_state[0, i], base, atol=1e-6)
            assert changed == moves, (j, changed)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_objective_reads_a_masked_token_at_the_position_before_it(arch):
    """Eval mode: masked rows only; the logits of a masked token j are the head's at j - 1, its label the token at
    j. Training with every row causal: the original tokens in, every next token out, nothing counted as masked."""
    base = _masked_lm(arch)
    base.set_dropout(0.0)  # the training-mode forward below, deterministic
    model = MntpPretraining(base, causal_ratio=1.0).eval()
    torch.manual_seed(2)
    original = torch.randint(5, len(VOCAB), (2, 10))
    mask_id = VOCAB.index("[MASK]")
    chosen = torch.zeros(2, 10, dtype=torch.bool)
    chosen[0, [2, 5]] = chosen[1, [1, 8]] = True
    ids = original.masked_fill(chosen, mask_id)
    labels = original.masked_fill(~chosen, -100)
    encoder, head = models.encoder_of(base), base.mlm_head_module()
    with torch.no_grad():
        out = model(ids, labels=labels)
        full = head(encoder(ids).last_hidden_state)  # [B, T, V], bidirectional
        rows, cols = chosen.nonzero(as_tuple=True)
        torch.testing.assert_close(out.masked_logits, full[rows, cols - 1])
        assert out.masked_labels.tolist() == original[rows, cols].tolist()
        assert out.causal_labels.numel() == 0  # eval: no causal row
        out = model.train()(ids, labels=labels)
        model.eval()
        causal = head(encoder(original, causal=True).last_hidden_state)  # no [MASK] in, causal attention
        torch.testing.assert_close(out.causal_logits, causal[:, :-1].reshape(-1, causal.size(-1)), atol=1e-5, rtol=0)
        assert out.causal_labels.tolist() == original[:, 1:].reshape(-1).tolist()
        assert out.masked_labels.numel() == 0  # a causal row's tokens are never masked-LM figures
        torch.testing.assert_close(out.loss, out.causal_loss)


@pytest.mark.parametrize("arch", ARCHS)
def test_mlm_clm_reads_a_masked_token_where_it_stands_and_marks_no_config(arch):
    """``--objective mlm-clm``: the same mix of masked and causal rows, a masked token's logits the head's at j
    itself (a plain masked LM's reading), its causal rows mntp's; its model's config says nothing of the reading,
    mntp's says ``mntp``."""
    from bertkit.recipes.pretrain import objectives

    base = _masked_lm(arch)
    base.set_dropout(0.0)
    model = MntpPretraining(base, causal_ratio=1.0, reads_next=False).eval()
    torch.manual_seed(2)
    original = torch.randint(5, len(VOCAB), (2, 10))
    chosen = torch.zeros(2, 10, dtype=torch.bool)
    chosen[0, [0, 5]] = chosen[1, [1, 9]] = True  # the first and the last position too: nothing shifts
    ids, labels = original.masked_fill(chosen, VOCAB.index("[MASK]")), original.masked_fill(~chosen, -100)
    encoder, head = models.encoder_of(base), base.mlm_head_module()
    with torch.no_grad():
        out = model(ids, labels=labels)
        rows, cols = chosen.nonzero(as_tuple=True)
        torch.testing.assert_close(out.masked_logits, head(encoder(ids).last_hidden_state)[rows, cols])
        assert out.masked_labels.tolist() == original[rows, cols].tolist()
        out = model.train()(ids, labels=labels)  # every row causal: every next token, nothing masked
        assert out.causal_labels.tolist() == original[:, 1:].reshape(-1).tolist() and out.masked_labels.numel() == 0
    for name, key in (("mlm-clm", None), ("mntp", "mntp")):
        fresh = _masked_lm(arch)
        cfg = type("Cfg", (), {"causal_ratio": 0.5})()
        built, config = objectives.get(name).build(cfg, None, None, 0, "cpu", lambda *a, m=fresh: (m, m.config))
        assert config.extra.get(OBJECTIVE_KEY) == key and built.reads_next == (name == "mntp")


def test_the_config_key_round_trips_and_a_bad_value_is_refused(tmp_path):
    from bertkit.config import BertConfig

    d = _saved(tmp_path, "bert")
    assert json.loads((d / "config.json").read_text())[OBJECTIVE_KEY] == "mntp"
    assert BertConfig.from_pretrained(d).extra[OBJECTIVE_KEY] == "mntp"
    data = json.loads((d / "config.json").read_text())
    with pytest.raises(ConfigError, match="bertkit_objective must be one of"):
        BertConfig.from_dict({**data, OBJECTIVE_KEY: "gpt"})


@pytest.mark.parametrize("arch", ARCHS)
def test_fill_mask_answers_a_mask_from_the_position_before_it(tmp_path, arch):
    d = _saved(tmp_path, arch)
    encoder = Encoder.from_pretrained(d, precision="fp32")
    text = "the cast was [MASK] , the [MASK] was boring ."
    got = encoder.fill_mask([text], top_k=3)[0]
    tok = load_tokenizer(d)
    ids = torch.tensor([encode_with_masks(tok, text)])
    model = _masked_lm(arch)  # the same weights (same seed)
    with torch.no_grad():
        logits = model.mlm_head_module()(models.encoder_of(model)(ids).last_hidden_state)[0]  # [T, V]
    places = (ids[0] == tok.mask_token_id).nonzero().squeeze(1).tolist()
    assert len(places) == len(got) == 2
    for j, answers in zip(places, got):
        probs = logits[j - 1].softmax(-1)
        top = probs.topk(3)
        assert [a["token_id"] for a in answers] == top.indices.tolist()
        assert [a["score"] for a in answers] == pytest.approx(top.values.tolist(), abs=1e-5)
    plain = Encoder.from_pretrained(_saved(tmp_path / "plain", arch, mntp=False), precision="fp32")
    assert plain.fill_mask([text], top_k=3)[0] != got  # the same weights read at j answer otherwise


@pytest.mark.parametrize("arch", ARCHS)
def test_blimp_scores_an_mntp_model_with_the_shifted_read(tmp_path, arch):
    """PLL: token j masked in its own copy, its log-probability read at j - 1; summed, against a naive loop."""
    d = _saved(tmp_path, arch)
    sentences = ["the cast was great .", "the film were good ."]
    scorer = PllScorer.from_pretrained(d)
    got = scorer.sentence_scores(sentences)
    tok = load_tokenizer(d)
    model = _masked_lm(arch)
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    for sentence, score in zip(sentences, got):
        ids = tok.encode_batch([sentence], truncation=False)[0].ids
        total = 0.0
        for j, token in enumerate(ids):
            if token in special:
                continue
            copy = list(ids)
            copy[j] = tok.mask_token_id
            with torch.no_grad():
                logits = model.mlm_head_module()(models.encoder_of(model)(torch.tensor([copy])).last_hidden_state)
            total += float(logits[0, j - 1].float().log_softmax(-1)[token])
        assert score == pytest.approx(total, abs=1e-4)
    plain = PllScorer.from_pretrained(_saved(tmp_path / "plain", arch, mntp=False)).sentence_scores(sentences)
    assert not all(math.isclose(a, b, abs_tol=1e-3) for a, b in zip(plain, got))


def test_packing_with_causal_attention_is_refused():
    from bertkit.modeling import Packing

    encoder = BertModel(tiny_config(len(VOCAB), layers=1)).eval()
    ids = torch.randint(5, len(VOCAB), (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="causal attention needs the padded batch"):
        encoder(ids, mask, packing=Packing(mask), causal=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_finished_runs_meter_reads_an_mntp_model_at_the_position_before(arch):
    """``score_mlm(next_token=True)`` (what ``held_out_accuracy`` passes for an mntp directory): accuracy and loss of
    the tokens at the [MASK] inputs, read at j - 1, against a naive recomputation."""
    from bertkit.tasks.mlm import score_mlm

    model = _masked_lm(arch)
    mask_id = VOCAB.index("[MASK]")
    torch.manual_seed(3)
    original = torch.randint(5, len(VOCAB), (3, 12))
    chosen = torch.rand(3, 12) < 0.3
    chosen[:, 0] = False
    chosen[0, 4] = True
    batch = {"input_ids": original.masked_fill(chosen, mask_id), "labels": original.masked_fill(~chosen, -100)}
    score = score_mlm(model, [batch], mask_id, next_token=True)
    with torch.no_grad():
        logits = model.mlm_head_module()(models.encoder_of(model)(batch["input_ids"]).last_hidden_state)
    rows, cols = chosen.nonzero(as_tuple=True)
    read, truth = logits[rows, cols - 1], original[rows, cols]
    assert score.masked_tokens == len(truth)
    assert score.mlm_acc == pytest.approx(float((read.argmax(-1) == truth).float().mean()))
    assert score.mlm_loss == pytest.approx(float(torch.nn.functional.cross_entropy(read, truth)), abs=1e-5)
