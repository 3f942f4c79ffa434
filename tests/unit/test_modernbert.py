"""ModernBERT in bertkit without transformers: config validation and JSON, the sliding-window kernels (dense band vs
blocked), packed vs padded execution, every head's shapes and losses, checkpoint checks."""

import json

import pytest
import torch

from bertkit import modeling_modernbert as mb
from bertkit.checkpoint import CheckpointError
from bertkit.config import ConfigError

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=4,
    num_attention_heads=4,
    local_attention=8,
    max_position_embeddings=128,
    pad_token_id=0,
)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------------------------- config


def test_presets_and_layer_pattern():
    c = mb.ModernBertConfig.from_preset("modernbert-base")
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (22, 768, 12, 1152)
    assert c.layer_types[:4] == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert c.sliding_window == 64
    tiny = mb.ModernBertConfig.from_preset("modernbert-tiny", vocab_size=30522, pad_token_id=0)
    assert (tiny.hidden_size, tiny.vocab_size) == (128, 30522)
    # a new model pools the mean, as ModernBERT's released configs do; a config without the key keeps
    # transformers' default, the first token
    assert (c.classifier_pooling, mb.ModernBertConfig(**TINY).classifier_pooling) == ("mean", "cls")
    assert mb.ModernBertConfig.from_preset("modernbert-tiny", classifier_pooling="cls").classifier_pooling == "cls"
    # the parameter count from the sizes alone equals the built model's
    model = mb.ModernBertForMaskedLM(mb.ModernBertConfig(**TINY, norm_bias=True))
    assert model.config.num_parameters() == sum(p.numel() for p in model.parameters())
    with pytest.raises(ConfigError, match="modernbert-tiny"):
        mb.ModernBertConfig.from_preset("modernbert-huge")


@pytest.mark.parametrize(
    "field, value",
    [
        ("local_attention", 7),
        ("hidden_activation", "swish"),
        ("classifier_pooling", "max"),
        ("num_hidden_layers", 0),
        ("attention_dropout", 1.5),
        ("norm_bias", "no"),
        ("pad_token_id", 99),
        ("layer_types", ["full_attention"]),
    ],
)
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        mb.ModernBertConfig(**{**TINY, field: value})


def test_json_round_trip_and_rejections(tmp_path):
    c = mb.ModernBertConfig(**TINY, global_attn_every_n_layers=2, local_rope_theta=77.0, num_labels=3)
    d = c.to_dict()
    assert d["model_type"] == "modernbert" and d["global_attn_every_n_layers"] == 2
    assert d["rope_parameters"]["sliding_attention"]["rope_theta"] == 77.0
    again = mb.ModernBertConfig.from_dict(json.loads(json.dumps(d)))
    assert again.layer_types == c.layer_types and again.local_rope_theta == 77.0 and again.num_labels == 3
    # a key it does not know ('hidden_dropout') is kept and said, as transformers keeps it: test_config.py
    with pytest.raises(ConfigError, match="model_type is 'bert'"):
        mb.ModernBertConfig.from_dict({**d, "model_type": "bert"})
    yarn = {**d, "rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0, "factor": 2.0}}}
    with pytest.raises(ConfigError, match="rope_parameters.full_attention.rope_type"):
        mb.ModernBertConfig.from_dict(yarn)
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        mb.ModernBertConfig.from_dict({**d, "tie_word_embeddings": False})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        mb.ModernBertConfig.from_pretrained(tmp_path)


def test_custom_layer_types_survive_and_drop_the_every_n_key():
    types = ["full_attention", "full_attention", "sliding_attention", "full_attention"]
    d = mb.ModernBertConfig(**TINY, layer_types=types).to_dict()
    assert d["layer_types"] == types and "global_attn_every_n_layers" not in d
    assert mb.ModernBertConfig.from_dict(d).layer_types == types


# --------------------------------------------------------------------------------------------- attention kernels


@pytest.mark.parametrize("T", [9, 33, 64, 70])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_blocked_local_attention_equals_the_dense_band(T, implementation):
    torch.manual_seed(0)
    B, N, D, W = 3, 2, 8, 4
    q, k, v = (torch.randn(B, N, T, D) for _ in range(3))
    key_mask = torch.ones(B, T, dtype=torch.bool)
    key_mask[1, T // 2 :] = False
    key_mask[2, 2:] = False
    pos = torch.arange(T)
    band = ((pos[:, None] - pos[None, :]).abs() <= W) & key_mask[:, None, None, :]
    scores = (q @ k.transpose(-1, -2)) / D**0.5
    want = torch.softmax(scores.masked_fill(~band, float("-inf")), -1) @ v
    kernel = mb.ATTENTION_FUNCTIONS[implementation]
    got = mb.local_attention_blocked(q, k, v, key_mask, W, kernel, 0.0)
    dense, _ = mb.attend(q, k, v, key_mask, W, "eager", 0.0)
    real = key_mask[:, None, :, None].expand_as(want)
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(dense[real], want[real], atol=1e-5, rtol=0)
    assert torch.isfinite(got).all() and torch.isfinite(dense).all()  # padding rows far from real tokens: no NaN


def test_the_window_limits_what_a_token_sees():
    """Changing a token W + 1 positions away leaves a local-only model's output unchanged; W away changes it."""
    torch.manual_seed(0)
    c = mb.ModernBertConfig(**{**TINY, "num_hidden_layers": 1, "layer_types": ["sliding_attention"]})
    model = mb.ModernBertModel(c).eval()
    ids = torch.randint(3, 99, (1, 30))
    with torch.no_grad():
        base = model(ids).last_hidden_state[0, 10]
        far, near = ids.clone(), ids.clone()
        far[0, 10 + 5] = (ids[0, 15] + 1) % 99
        near[0, 10 + 4] = (ids[0, 14] + 1) % 99
        assert torch.equal(model(far).last_hidden_state[0, 10], base)
        assert not torch.allclose(model(near).last_hidden_state[0, 10], base)


# --------------------------------------------------------------------------------------------- packed execution


@pytest.mark.parametrize("groups", [None, [[0, 2], [1, 3]]])
def test_packed_equals_padded(groups):
    torch.manual_seed(0)
    model = mb.ModernBertForMaskedLM(mb.ModernBertConfig(**TINY)).eval()
    lengths = [50, 7, 33, 1]
    ids = torch.randint(3, 99, (4, 50))
    mask = (torch.arange(50)[None] < torch.tensor(lengths)[:, None]).long()
    ids[mask == 0] = 0
    with torch.no_grad():
        padded = model(ids, attention_mask=mask, output_hidden_states=True)
        packed = model(ids, attention_mask=mask, output_hidden_states=True, packing=mb.Packing(mask, groups))
    real = mask.bool()
    torch.testing.assert_close(packed.logits[real], padded.logits[real], atol=1e-5, rtol=0)
    for a, b in zip(packed.hidden_states, padded.hidden_states):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)


def test_packed_training_step_matches_padded_gradients():
    torch.manual_seed(0)
    model = mb.ModernBertForMaskedLM(mb.ModernBertConfig(**TINY))
    ids = torch.randint(3, 99, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, 12:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    labels[0, 15] = 5
    grads, losses = [], []
    for packing in (None, mb.Packing(mask)):
        model.zero_grad()
        loss = model(ids, attention_mask=mask, labels=labels, packing=packing).loss
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append([p.grad.clone() for p in model.parameters()])
    assert abs(losses[1] - losses[0]) <= 1e-3 * abs(losses[0])  # the packed batch's loss is the padded batch's
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


# --------------------------------------------------------------------------------------------- heads


def test_every_head_shapes_and_losses():
    torch.manual_seed(0)
    B, S = 13, 7
    c = mb.ModernBertConfig(**TINY, num_labels=3)
    ids = torch.randint(3, 99, (B, S))
    mask = torch.ones(B, S, dtype=torch.long)
    mask[0, 4:] = 0
    enc = mb.ModernBertModel(c)
    assert enc(ids, mask).last_hidden_state.shape == (B, S, 32)
    out = enc(ids, mask, num_layers=2, output_hidden_states=True)
    assert len(out.hidden_states) == 3
    att = enc(ids, mask, output_attentions=True).attentions
    assert len(att) == 4 and att[0].shape == (B, 4, S, S)
    # no segment embeddings: token_type_ids change nothing
    torch.testing.assert_close(
        enc(ids, mask, token_type_ids=torch.ones_like(ids)).last_hidden_state, enc(ids, mask).last_hidden_state
    )

    mlm = mb.ModernBertForMaskedLM(c)
    assert mlm(ids, mask).logits.shape == (B, S, 99)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    out = mlm(ids, mask, labels=labels)
    assert out.masked_logits.shape == (B, 99) and out.loss.ndim == 0
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.masked_logits, labels[:, 2]))

    seq = mb.ModernBertForSequenceClassification(c)
    out = seq(ids, mask, labels=torch.randint(0, 3, (B,)))
    assert out.logits.shape == (B, 3) and out.loss.ndim == 0
    tok = mb.ModernBertForTokenClassification(c)
    assert tok(ids, mask, labels=torch.randint(0, 3, (B, S))).logits.shape == (B, S, 3)
    qa = mb.ModernBertForQuestionAnswering(mb.ModernBertConfig(**TINY))
    out = qa(ids, mask, start_positions=torch.zeros(B, dtype=torch.long), end_positions=torch.ones(B, dtype=torch.long))
    assert out.start_logits.shape == (B, S) and out.loss.ndim == 0
    mc = mb.ModernBertForMultipleChoice(c)
    out = mc(ids[:12].view(3, 4, S), mask[:12].view(3, 4, S), labels=torch.tensor([0, 1, 3]))
    assert out.logits.shape == (3, 4) and out.loss.ndim == 0
    out.loss.backward()
    assert mc.model.layers[0].attn.Wqkv.weight.grad is not None


def test_init_scales_and_dropout_switch():
    torch.manual_seed(0)
    c = mb.ModernBertConfig(**{**TINY, "hidden_size": 256, "num_attention_heads": 4})
    m = mb.ModernBertForMaskedLM(c)
    wo = m.model.layers[1].mlp.Wo.weight
    cut = c.initializer_cutoff_factor * c.initializer_range / (2 * c.num_hidden_layers) ** 0.5
    assert wo.abs().max() <= cut + 1e-7 and wo.std() < c.initializer_range * 0.6
    assert m.model.layers[0].attn.Wqkv.weight.std() > c.initializer_range * 0.8
    m.set_dropout(0.2)
    assert m.config.attention_dropout == 0.2 and m.model.layers[2].attn.dropout_prob == 0.2


# --------------------------------------------------------------------------------------------- checkpoints


def test_checkpoint_mismatch_names_the_field(tmp_path):
    mb.ModernBertForMaskedLM(mb.ModernBertConfig(**TINY)).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    loaded = mb.ModernBertForMaskedLM.from_pretrained(tmp_path)
    assert loaded.config.layer_types == mb.ModernBertConfig(**TINY).layer_types
    for field, value in (("intermediate_size", 40), ("vocab_size", 100), ("num_hidden_layers", 3)):
        bad = {**data, field: value}
        if field == "num_hidden_layers":
            bad["layer_types"] = bad["layer_types"][:3]
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=field):
            mb.ModernBertForMaskedLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 2**-6), (torch.float32, 1e-6)])
def test_cpu_training_rotary_is_the_reference_rotation(dtype, tol):
    """Training on a CPU rotates q and k through its own function (in place, its backward the rotation by minus the
    angle): a bf16 model's within bf16's rounding of the reference formula in fp32 (transformers' ``q * cos +
    rotate_half(q) * sin``) and of autograd's gradient through it, an fp32 model's within 1e-6, on q and k as the
    layer cuts them from its strided qkv projection."""
    cos, sin = mb.ModernBertRotaryEmbedding(mb.ModernBertConfig(**TINY))(torch.arange(16)[None], mb.GLOBAL)
    cos, sin = cos[:, None], sin[:, None]  # [1, 1, T, D]: over the heads
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 16, 3, 3, cos.size(-1), generator=g)  # [B, T, 3, N, D], as Wqkv's output viewed
    upstream = torch.randn(2, 3, 16, cos.size(-1), generator=g)
    x = qkv.permute(2, 0, 3, 1, 4)[1].requires_grad_()  # k: [B, N, T, D], not contiguous
    exact = x * cos + mb.rotate_half(x) * sin  # the reference's formula, autograd's backward
    (exact * upstream).sum().backward()
    qkv_d = qkv.to(dtype).requires_grad_()
    rotated = mb.apply_rotary(qkv_d.permute(2, 0, 3, 1, 4)[1], cos, sin)
    assert rotated.dtype == dtype and rotated.grad_fn.name().endswith("_CpuRotaryBackward")
    torch.testing.assert_close(rotated.float(), exact, rtol=tol, atol=tol)
    (rotated.float() * upstream).sum().backward()
    grad = qkv_d.grad.permute(2, 0, 3, 1, 4)
    torch.testing.assert_close(grad[1].float(), x.grad, rtol=tol, atol=tol)  # R(-angle) of the upstream
    assert not grad[0].any() and not grad[2].any()  # q and v untouched


def test_fp32_inference_rotary_is_the_reference_formula_bit_for_bit():
    """Without gradients an fp32 rotation is transformers' formula itself, so inference matches it to the bit."""
    cos, sin = mb.ModernBertRotaryEmbedding(mb.ModernBertConfig(**TINY))(torch.arange(16)[None], mb.GLOBAL)
    x = torch.randn(2, 3, 16, cos.size(-1), generator=torch.Generator().manual_seed(1))
    assert torch.equal(
        mb.apply_rotary(x, cos[:, None], sin[:, None]), x * cos[:, None] + mb.rotate_half(x) * sin[:, None]
    )
