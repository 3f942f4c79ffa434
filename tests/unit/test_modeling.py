"""Shape tests for every class (the BertModelTester config), padding invariance, attention paths, init, tying."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from bertkit import (
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

B, T = 13, 7


@pytest.fixture
def batch(tiny_config):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, tiny_config.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0
    mask[5, 2:] = 0
    types = torch.randint(0, 2, (B, T), generator=g)
    return ids, mask, types


def test_bert_model_shapes(tiny_config, batch):
    ids, mask, types = batch
    model = BertModel(tiny_config).eval()
    out = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (B, T, 32)
    assert out.pooler_output.shape == (B, 32)
    assert len(out.hidden_states) == tiny_config.num_hidden_layers + 1
    assert all(h.shape == (B, T, 32) for h in out.hidden_states)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (B, 4, T, T)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    # attention rows sum to one and put no weight on padding
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(B, 4, T), atol=1e-5)
    assert out.attentions[0][1, :, :, 4:].abs().max() == 0


def test_num_layers_stops_early(tiny_config, batch):
    ids, mask, types = batch
    model = BertModel(tiny_config).eval()
    full = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    for n in range(tiny_config.num_hidden_layers):
        early = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, num_layers=n)
        assert len(early.hidden_states) == n + 1 and early.pooler_output is None  # the pooler reads the last layer
        torch.testing.assert_close(early.last_hidden_state, full.hidden_states[n], rtol=0, atol=0)
    last = model(ids, attention_mask=mask, token_type_ids=types, num_layers=tiny_config.num_hidden_layers)
    torch.testing.assert_close(last.pooler_output, full.pooler_output, rtol=0, atol=0)
    # the layers after the stop are never run
    calls = []
    model.encoder.layer[1].register_forward_hook(lambda *a: calls.append(1))
    model(ids, num_layers=1)
    assert calls == []
    for bad in (-1, 3, 1.5, True):
        with pytest.raises(ValueError, match="num_layers"):
            model(ids, num_layers=bad)


def test_defaults_are_optional(tiny_config, batch):
    ids, _, _ = batch
    out = BertModel(tiny_config).eval()(ids)
    assert out.hidden_states is None and out.attentions is None and out.pooler_output.shape == (B, 32)


def test_pretraining_shapes_and_losses(tiny_config, batch):
    ids, mask, types = batch
    model = BertForPreTraining(tiny_config).eval()
    out = model(ids, attention_mask=mask, token_type_ids=types)
    assert out.prediction_logits.shape == (B, T, 99)
    assert out.seq_relationship_logits.shape == (B, 2)
    assert out.loss is None and out.mlm_loss is None
    labels = torch.full((B, T), -100)
    labels[0, 1] = 7
    labels[3, 2] = 9
    nsp = torch.zeros(B).long()
    out = model(ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
    assert out.masked_logits.shape == (2, 99)
    assert out.prediction_logits is None
    assert torch.allclose(out.loss, out.mlm_loss + out.nsp_loss)
    # sparse prediction computes the same loss as the full vocabulary projection
    model.sparse_prediction = False
    full = model(ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
    assert torch.allclose(full.mlm_loss, out.mlm_loss, atol=1e-6)
    assert full.prediction_logits.shape == (B, T, 99)


def test_sparse_and_full_gradients_agree(tiny_config, batch):
    ids, mask, types = batch
    labels = torch.full((B, T), -100)
    labels[:, 3] = 11
    grads = []
    for sparse in (True, False):
        torch.manual_seed(0)
        model = BertForPreTraining(tiny_config).eval()
        model.sparse_prediction = sparse
        model(ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append(model.bert.embeddings.word_embeddings.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_labelled_positions_given_select_what_the_labels_select(tiny_config, batch):
    """The pre-training loop hands the labelled positions over from the host (no device sync): the same loss,
    logits and gradients as selecting them by ``labels != -100``."""
    ids, mask, types = batch
    labels = torch.full((B, T), -100)
    labels[0, 1], labels[2, 5], labels[3, 2] = 7, 8, 9
    positions = torch.tensor(np.flatnonzero(labels.reshape(-1).numpy() != -100))
    results = []
    for given in (None, positions):
        torch.manual_seed(0)
        model = BertForPreTraining(tiny_config).eval()
        out = model(ids, attention_mask=mask, token_type_ids=types, labels=labels, masked_positions=given)
        out.loss.backward()
        results.append((out, model.bert.embeddings.word_embeddings.weight.grad))
    (by_labels, grad_labels), (by_positions, grad_positions) = results
    assert by_positions.masked_labels.tolist() == [7, 8, 9]
    torch.testing.assert_close(by_positions.masked_logits, by_labels.masked_logits, rtol=0, atol=0)
    torch.testing.assert_close(by_positions.loss, by_labels.loss, rtol=0, atol=0)
    torch.testing.assert_close(grad_positions, grad_labels, rtol=0, atol=0)


def test_masked_lm_and_nsp_shapes(tiny_config, batch):
    ids, mask, types = batch
    mlm = BertForMaskedLM(tiny_config).eval()
    assert mlm.bert.pooler is None
    assert mlm(ids, attention_mask=mask).logits.shape == (B, T, 99)
    nsp = BertForNextSentencePrediction(tiny_config).eval()
    out = nsp(ids, attention_mask=mask, labels=torch.ones(B).long())
    assert out.logits.shape == (B, 2) and out.loss.ndim == 0


def test_finetuning_heads_shapes(tiny_config, batch):
    ids, mask, types = batch
    seq = BertForSequenceClassification(replace(tiny_config, num_labels=3)).eval()
    out = seq(ids, attention_mask=mask, labels=torch.randint(0, 3, (B,)))
    assert out.logits.shape == (B, 3) and out.loss.ndim == 0
    tok = BertForTokenClassification(replace(tiny_config, num_labels=5)).eval()
    labels = torch.randint(0, 5, (B, T))
    labels[mask == 0] = -100
    assert tok(ids, attention_mask=mask, labels=labels).logits.shape == (B, T, 5)
    qa = BertForQuestionAnswering(tiny_config).eval()
    ends = torch.tensor([99] + [3] * (B - 1))
    out = qa(ids, attention_mask=mask, start_positions=torch.zeros(B).long(), end_positions=ends)
    assert out.start_logits.shape == (B, T) and out.end_logits.shape == (B, T) and torch.isfinite(out.loss)
    mc = BertForMultipleChoice(tiny_config).eval()
    ids3 = ids[:12].view(3, 4, T)
    out = mc(ids3, attention_mask=mask[:12].view(3, 4, T), labels=torch.tensor([0, 3, 1]))
    assert out.logits.shape == (3, 4) and out.loss.ndim == 0


def test_regression_loss_is_mse(tiny_config, batch):
    ids, mask, _ = batch
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=99, num_labels=1)
    model = BertForSequenceClassification(cfg).eval()
    target = torch.rand(B)
    out = model(ids, attention_mask=mask, labels=target)
    torch.testing.assert_close(out.loss, ((out.logits.squeeze(-1) - target) ** 2).mean())


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_padding_invariance(tiny_config, implementation):
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config).eval()
    model.attn_implementation = implementation
    ids = torch.randint(5, 99, (2, 5))
    short = model(ids, output_hidden_states=True)
    padded_ids = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(2, 5), torch.zeros(2, 4)], dim=1).long()
    long = model(padded_ids, attention_mask=mask, output_hidden_states=True)
    for a, b in zip(short.hidden_states, long.hidden_states):
        torch.testing.assert_close(a, b[:, :5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(short.seq_relationship_logits, long.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(short.prediction_logits, long.prediction_logits[:, :5], atol=1e-5, rtol=1e-5)


def test_padding_changes_nothing_across_a_mixed_batch(tiny_config):
    torch.manual_seed(0)
    model = BertModel(tiny_config).eval()
    a, b = torch.randint(5, 99, (1, 7)), torch.randint(5, 99, (1, 3))
    alone = model(b).last_hidden_state
    batch = torch.cat([a, torch.cat([b, torch.zeros(1, 4, dtype=torch.long)], 1)])
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4])
    together = model(batch, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(alone[0], together[1, :3], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_sdpa_and_eager_agree(tiny_config, batch, act):
    ids, mask, types = batch
    cfg = replace(tiny_config, hidden_act=act)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg).eval()
    model.attn_implementation = "sdpa"
    a = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    model.attn_implementation = "eager"
    b = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    real = mask.bool()
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert (x - y)[real].abs().max() <= 1e-5
    assert (a.prediction_logits - b.prediction_logits)[real].abs().max() <= 1e-5
    assert (a.seq_relationship_logits - b.seq_relationship_logits).abs().max() <= 1e-5


def test_bf16_attention_on_a_cpu_takes_the_eager_path_where_it_is_faster():
    """``sdpa_attention`` on a CPU in bf16: the eager path up to BF16_CPU_EAGER_UP_TO tokens, with gradients or
    without, SDPA's kernel past it and in fp32."""
    from bertkit.modeling import BF16_CPU_EAGER_UP_TO, eager_attention, sdpa_attention

    def routes(T, dtype, grad):
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(2, 2, T, 8, generator=g).to(dtype).requires_grad_(grad) for _ in range(3))
        ours = sdpa_attention(q, k, v, None, 0.0)[0]
        return ours, eager_attention(q, k, v, None, 0.0)[0], torch.nn.functional.scaled_dot_product_attention(q, k, v)

    for T, dtype, grad, expect in (
        (BF16_CPU_EAGER_UP_TO, torch.bfloat16, True, "eager"),
        (BF16_CPU_EAGER_UP_TO + 1, torch.bfloat16, True, "sdpa"),
        (BF16_CPU_EAGER_UP_TO, torch.bfloat16, False, "eager"),
        (BF16_CPU_EAGER_UP_TO + 1, torch.bfloat16, False, "sdpa"),
        (32, torch.float32, True, "sdpa"),
    ):
        ours, eager, sdpa = routes(T, dtype, grad)
        assert not torch.equal(eager, sdpa)  # the two differ in their rounding: the test can tell them apart
        assert torch.equal(ours, eager if expect == "eager" else sdpa), (T, dtype, grad)


def test_unknown_attention_implementation(tiny_config):
    with pytest.raises(ValueError, match="attn_implementation"):
        BertModel(tiny_config).attn_implementation = "flash9"


def test_google_initialisation(tiny_config):
    cfg = BertConfig.from_preset("bert-mini", vocab_size=2000)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    w = model.bert.encoder.layer[0].intermediate.dense.weight
    std = cfg.initializer_range
    assert w.abs().max() <= 2 * std + 1e-7  # truncated at 2 std
    assert abs(w.std().item() - std * 0.8796) < 0.002  # std of a normal truncated at +-2 sigma
    assert torch.count_nonzero(model.bert.encoder.layer[0].intermediate.dense.bias) == 0
    assert torch.all(model.bert.embeddings.LayerNorm.weight == 1)
    assert torch.count_nonzero(model.cls.predictions.bias) == 0


def test_decoder_is_tied_to_word_embeddings(tiny_config):
    model = BertForPreTraining(tiny_config)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    n_unique = len({id(p) for p in model.parameters()})
    assert n_unique == len(list(model.parameters()))


def test_sinusoidal_positions(tiny_config):
    cfg = replace(tiny_config, position_embedding_type="sinusoidal")
    model = BertModel(cfg).eval()
    assert not hasattr(model.embeddings, "position_embeddings")
    assert "embeddings.sinusoidal" not in model.state_dict()
    table = model.embeddings.sinusoidal
    assert table.shape == (512, 32)
    torch.testing.assert_close(table[0, 0::2], torch.zeros(16))
    torch.testing.assert_close(table[0, 1::2], torch.ones(16))
    torch.testing.assert_close(table[3, 0], torch.sin(torch.tensor(3.0)))
    out = model(torch.randint(5, 99, (2, 6)))
    assert out.last_hidden_state.shape == (2, 6, 32)


def test_too_long_sequence_is_a_clear_error(tiny_config):
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=99, max_position_embeddings=8)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        BertModel(cfg)(torch.ones(1, 9, dtype=torch.long))


def test_config_is_required():
    with pytest.raises(TypeError, match="BertConfig"):
        BertModel({"hidden_size": 32})


def test_forward_does_not_touch_config(tiny_config, batch):
    ids, mask, _ = batch
    model = BertForPreTraining(tiny_config).eval()
    before = tiny_config.to_dict()
    model(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    assert tiny_config.to_dict() == before


def test_training_path_equals_eval_path_without_dropout(tiny_config, batch):
    """Training fuses the q/k/v projections into one GEMM; with dropout off it must compute what eval computes."""
    ids, mask, types = batch
    cfg = replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    model.eval()
    a = model(ids, attention_mask=mask, token_type_ids=types, labels=labels, output_hidden_states=True)
    model.train()
    b = model(ids, attention_mask=mask, token_type_ids=types, labels=labels, output_hidden_states=True)
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert (x - y)[mask.bool()].abs().max() <= 1e-5
    assert abs(a.loss.item() - b.loss.item()) <= 1e-5


def test_set_dropout_reaches_every_module_and_the_config(tiny_config, batch):
    """A model pre-trained with dropout off fine-tunes with dropout on (``bertkit finetune --dropout``)."""
    ids, mask, types = batch
    cfg = replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(cfg).train()
    torch.manual_seed(1)
    a = model(ids, attention_mask=mask, token_type_ids=types).logits
    b = model(ids, attention_mask=mask, token_type_ids=types).logits
    assert torch.equal(a, b)  # no dropout: deterministic
    model.set_dropout(0.3)
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.3
    assert all(m.p == 0.3 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert all(layer.attention.self.dropout_prob == 0.3 for layer in model.bert.encoder.layer)
    c = model(ids, attention_mask=mask, token_type_ids=types).logits
    assert not torch.equal(a, c)
    with pytest.raises(ValueError, match="dropout"):
        model.set_dropout(1.0)
