"""ModernBERT parity with Hugging Face ``transformers``: tiny random ``ModernBert*`` models saved by transformers
load in bertkit, and bertkit's save loads in transformers, with the same outputs (fp32, eval mode, padded batches
compared at real positions, sequences several times longer than the sliding window)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit import modeling_modernbert as mb  # noqa: E402

TOL = 1e-5
T = 40  # > local_attention (8): local layers see a band, and bertkit's blocked path runs (T > 4 W)
CONFIGS = {
    # ModernBERT's own choices at a tiny size: no biases, global attention every 3rd layer
    "tiny": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4),
    # every switch turned the other way: biases everywhere, tanh GELU, every 2nd layer global, other thetas,
    # mean pooling, no decoder bias
    "biases": dict(
        hidden_size=48,
        intermediate_size=40,
        num_hidden_layers=3,
        num_attention_heads=6,
        norm_bias=True,
        attention_bias=True,
        mlp_bias=True,
        classifier_bias=True,
        decoder_bias=False,
        hidden_activation="gelu_new",
        classifier_activation="gelu_new",
        global_attn_every_n_layers=2,
        global_rope_theta=1000.0,
        local_rope_theta=50.0,
        classifier_pooling="mean",
        norm_eps=1e-6,
    ),
}
COMMON = dict(
    vocab_size=99,
    local_attention=8,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
CLASSES = [
    "ModernBertModel",
    "ModernBertForMaskedLM",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertForQuestionAnswering",
    "ModernBertForMultipleChoice",
]


def hf_config(name, **extra):
    kw = dict(CONFIGS[name], **COMMON, **extra)
    n = kw.pop("global_attn_every_n_layers", 3)
    rope = {
        "full_attention": {"rope_type": "default", "rope_theta": kw.pop("global_rope_theta", 160000.0)},
        "sliding_attention": {"rope_type": "default", "rope_theta": kw.pop("local_rope_theta", 10000.0)},
    }
    layer_types = ["sliding_attention" if i % n else "full_attention" for i in range(kw["num_hidden_layers"])]
    return transformers.ModernBertConfig(layer_types=layer_types, rope_parameters=rope, **kw)


def make_batch(seed=0, B=4):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 23:] = 0  # padding longer than the window
    mask[3, 3:] = 0  # a row shorter than the window
    ids[mask == 0] = 0
    return ids, mask


def close(a, b, mask=None):
    assert a.shape == b.shape, (a.shape, b.shape)
    if mask is not None and a.dim() >= 2 and a.shape[:2] == mask.shape:
        a, b = a[mask.bool()], b[mask.bool()]
    diff = (a - b).abs().max().item()
    assert diff <= TOL, diff


def compare(hf, bk, name):
    if name == "ModernBertForMultipleChoice":
        ids, mask = make_batch()
        ids, mask = ids.view(2, 2, T), mask.view(2, 2, T)
        with torch.no_grad():
            close(hf(input_ids=ids, attention_mask=mask).logits, bk(ids, attention_mask=mask).logits)
        return
    ids, mask = make_batch()
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        b = bk(ids, attention_mask=mask, output_hidden_states=True)
    assert len(a.hidden_states) == len(b.hidden_states) == hf.config.num_hidden_layers + 1
    for x, y in zip(a.hidden_states, b.hidden_states):
        close(x, y, mask)
    if name == "ModernBertModel":
        close(a.last_hidden_state, b.last_hidden_state, mask)
    elif name == "ModernBertForQuestionAnswering":
        close(a.start_logits, b.start_logits, mask)
        close(a.end_logits, b.end_logits, mask)
    else:
        close(a.logits, b.logits, mask)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@pytest.mark.parametrize("cls_name", CLASSES)
def test_transformers_to_bertkit(tmp_path, cfg_name, cls_name, impl):
    torch.manual_seed(1)
    hf = (
        getattr(transformers, cls_name)
        ._from_config(hf_config(cfg_name, num_labels=3 if "Sequence" in cls_name else 2), attn_implementation=impl)
        .eval()
    )
    hf.save_pretrained(tmp_path)
    bk = getattr(mb, cls_name).from_pretrained(tmp_path).eval()
    compare(hf, bk, cls_name)


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@pytest.mark.parametrize("cls_name", CLASSES)
def test_bertkit_to_transformers(tmp_path, cfg_name, cls_name):
    torch.manual_seed(2)
    cfg = mb.ModernBertConfig(**CONFIGS[cfg_name], **COMMON, num_labels=3 if "Sequence" in cls_name else None)
    bk = getattr(mb, cls_name)(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases, so that a mis-mapped one shows
        for name, p in bk.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    bk.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "modernbert" and saved["architectures"] == [cls_name]
    hf = getattr(transformers, cls_name).from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert hf.config.layer_types == bk.config.layer_types
    compare(hf, bk, cls_name)


def test_decoder_weight_is_saved_once_and_tied_on_both_sides(tmp_path):
    from safetensors import safe_open

    bk = mb.ModernBertForMaskedLM(mb.ModernBertConfig(**CONFIGS["tiny"], **COMMON))
    assert bk.decoder.weight is bk.model.embeddings.tok_embeddings.weight
    bk.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "decoder.weight" not in keys and "model.embeddings.tok_embeddings.weight" in keys
    hf = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path)
    assert hf.decoder.weight.data_ptr() == hf.model.embeddings.tok_embeddings.weight.data_ptr()
    # a file that does carry the alias (older conversions) loads too
    hf_state = {k: v.clone() for k, v in hf.state_dict().items()}
    assert "decoder.weight" in hf_state
    bk2 = mb.ModernBertForMaskedLM(bk.config)
    from bertkit import checkpoint

    state, initialised, dropped = checkpoint.adapt_layout_state_dict(hf_state, bk2, mb.LAYOUT)
    assert not initialised and not dropped and "decoder.weight" not in state


def test_transformers4_config_keys_load(tmp_path):
    """A ModernBERT config.json in transformers 4's keys (as on the Hub: global_attn_every_n_layers,
    global_rope_theta, local_rope_theta, reference_compile ...) means the same model in bertkit as in transformers."""
    torch.manual_seed(3)
    hf = transformers.ModernBertForMaskedLM(hf_config("biases")).eval()
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data.pop("layer_types")
    data.pop("rope_parameters")
    data.update(
        global_attn_every_n_layers=2,
        global_rope_theta=1000.0,
        local_rope_theta=50.0,
        reference_compile=None,
        repad_logits_with_grad=False,
        position_embedding_type="absolute",
    )
    (tmp_path / "config.json").write_text(json.dumps(data))
    hf4 = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    bk = mb.ModernBertForMaskedLM.from_pretrained(tmp_path)
    assert bk.config.layer_types == hf4.config.layer_types == hf.config.layer_types
    assert (bk.config.global_rope_theta, bk.config.local_rope_theta) == (1000.0, 50.0)
    compare(hf4, bk, "ModernBertForMaskedLM")


def test_masked_lm_head_loads_into_classifier_and_encoder(tmp_path):
    """An MLM checkpoint fine-tunes: its encoder and head.* load into a classifier (classifier initialised), and
    into the bare encoder (head and decoder left out), as transformers does."""
    torch.manual_seed(4)
    hf = transformers.ModernBertForMaskedLM(hf_config("tiny")).eval()
    hf.save_pretrained(tmp_path)
    cls, info = mb.ModernBertForSequenceClassification.from_pretrained(tmp_path, num_labels=3, output_loading_info=True)
    assert sorted(info.initialised) == ["classifier.bias", "classifier.weight"]
    assert info.dropped == ["decoder.bias"]
    torch.testing.assert_close(cls.head.dense.weight, hf.head.dense.weight)
    enc, info = mb.ModernBertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info.initialised and set(info.dropped) == {"decoder.bias", "head.dense.weight", "head.norm.weight"}
    ids, mask = make_batch()
    with torch.no_grad():
        close(
            hf.model(input_ids=ids, attention_mask=mask).last_hidden_state,
            enc(ids, attention_mask=mask).last_hidden_state,
            mask,
        )


def test_attention_probabilities_equal_transformers_eager(tmp_path):
    """``output_attentions``: every layer's [B, N, T, T] probabilities, global and sliding-window, at real queries."""
    torch.manual_seed(5)
    hf = transformers.ModernBertModel._from_config(hf_config("tiny"), attn_implementation="eager").eval()
    hf.save_pretrained(tmp_path)
    bk = mb.ModernBertModel.from_pretrained(tmp_path)
    ids, mask = make_batch()
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        b = bk(ids, attention_mask=mask, output_attentions=True).attentions
    assert len(a) == len(b) == 4
    real = mask.bool()
    for x, y in zip(a, b):
        assert x.shape == y.shape == (4, 4, T, T)
        rows = real[:, None, :, None].expand_as(x)
        close(x[rows], y[rows])
    # the sliding layers really are local: nothing beyond 4 positions
    far = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() > 4
    assert b[1][0][:, far].abs().max() == 0 and b[0][0][:, far].abs().max() > 0
