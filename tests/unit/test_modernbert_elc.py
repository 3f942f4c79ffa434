"""The ModernBERT-ELC variant (bertkit/variants/modernbert_elc.py), the proof of the variant seam: at its initial
mix it computes ModernBERT's outputs exactly from ModernBERT's own weights (its only extra keys are the mix: it
reuses the blocks), a mix is the weighted sum of the earlier outputs and every weight of it gets a gradient, its
directory round trips through the registry's loaders and carries its transformers code, and a ModernBERT class
refuses it by name. (transformers' load of that directory: parity/test_modernbert_elc_parity.py; ``bertkit pretrain
--arch modernbert-elc``: integration/test_modernbert_elc_pretrain.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from bertkit import models
from bertkit.config import ConfigError
from bertkit.modeling import BertForMaskedLM, BertModel, Packing
from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertkit.variants.modernbert_elc import ModernBertElcConfig, ModernBertElcForMaskedLM, ModernBertElcModel

SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    local_attention=4,  # windows shorter than the inputs: the sliding layers' own path is in the comparison
    max_position_embeddings=64,
    pad_token_id=0,
    initializer_range=0.2,  # layers that change their input much: a mix of their outputs shows
)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(1, 99, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    return ids, mask


def _mixed(model):
    """``model`` (the encoder or a head) with a mix of its own: every weight random."""
    torch.manual_seed(2)
    with torch.no_grad():
        for w in models.encoder_of(model).layer_mix:
            w.copy_(torch.randn_like(w))
    return model.eval()


def test_at_its_initial_mix_the_variant_is_modernbert_exactly():
    torch.manual_seed(0)
    base = ModernBertForMaskedLM(ModernBertConfig(**SIZES)).eval()
    elc = ModernBertElcForMaskedLM(ModernBertElcConfig(**SIZES)).eval()
    loaded = elc.load_state_dict(base.state_dict(), strict=False)  # ModernBERT's weights, every one of them
    assert loaded.unexpected_keys == []
    assert sorted(loaded.missing_keys) == [f"model.layer_mix.{i}" for i in range(4)]
    assert [w.tolist() for w in elc.model.layer_mix] == [[1.0], [0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]]
    ids, mask = _batch()
    with torch.no_grad():
        a = base(ids, attention_mask=mask, output_hidden_states=True)
        b = elc(ids, attention_mask=mask, output_hidden_states=True)
        assert torch.equal(a.logits, b.logits)
        assert all(torch.equal(x, y) for x, y in zip(a.hidden_states, b.hidden_states, strict=True))
        packed = elc.model(ids, packing=Packing(mask)).last_hidden_state  # packed execution, the same layers
        assert torch.equal(packed, base.model(ids, packing=Packing(mask)).last_hidden_state)
        assert torch.equal(elc.model(ids, mask, num_layers=2).last_hidden_state, a.hidden_states[2])
        _mixed(elc)
        assert (elc.model(ids, mask).last_hidden_state - a.hidden_states[-1]).abs().max() > 0.1  # the mix matters


def test_a_layer_reads_the_weighted_sum_of_the_earlier_outputs_and_every_weight_learns():
    torch.manual_seed(0)
    model = _mixed(ModernBertElcModel(ModernBertElcConfig(**SIZES)))
    ids, mask = _batch()
    with torch.no_grad():
        out = model(ids, mask, output_hidden_states=True)
        # hidden_states: h_0 (embeddings) .. h_L, the last after the final LayerNorm; layer i on the mix of h_0..h_i
        states = list(out.hidden_states[:-1])
        rope = {
            kind: model.rotary_emb(torch.arange(12)[None], kind) for kind in {"full_attention", "sliding_attention"}
        }
        for i, layer in enumerate(model.layers):
            mixed = torch.einsum("j,jbth->bth", model.layer_mix[i], torch.stack(states[: i + 1]))
            h, _ = layer(mixed, rope[layer.attention_type], mask.bool(), "eager")
            real = mask.bool()  # a padded position's state is nobody's input
            torch.testing.assert_close((h if i < 3 else model.final_norm(h))[real], out.hidden_states[i + 1][real])
    model.train()
    model(ids, mask).last_hidden_state.square().mean().backward()
    assert all(bool((w.grad != 0).all()) for w in model.layer_mix)


def test_a_saved_variant_round_trips_through_the_registry_and_carries_its_transformers_code(tmp_path):
    torch.manual_seed(0)
    model = _mixed(ModernBertElcForMaskedLM(ModernBertElcConfig(**SIZES)))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert (config["model_type"], config["architectures"]) == ("modernbert-elc", ["ModernBertElcForMaskedLM"])
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_modernbert_elc.ModernBertElcForMaskedLM"
    shipped = models.REMOTE_CODE / "modeling_modernbert_elc.py"
    assert (tmp_path / "modeling_modernbert_elc.py").read_bytes() == shipped.read_bytes()

    arch = models.of_directory(tmp_path)
    assert arch is models.get("modernbert-elc") and arch.info()["variant_of"] == "modernbert"
    again = models.for_directory(BertForMaskedLM, tmp_path).from_pretrained(tmp_path)
    encoder = models.for_directory(BertModel, tmp_path).from_pretrained(tmp_path)  # the head's keys left out
    assert type(again) is ModernBertElcForMaskedLM and type(encoder) is ModernBertElcModel
    ids, mask = _batch()
    with torch.no_grad():
        assert torch.equal(again(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits)
        assert torch.equal(encoder(ids, mask).last_hidden_state, model.model(ids, mask).last_hidden_state)
    with pytest.raises(ConfigError, match="model_type is 'modernbert-elc', not 'modernbert'"):
        ModernBertForMaskedLM.from_pretrained(tmp_path)
    with pytest.raises(TypeError, match="ModernBertElcForMaskedLM needs a ModernBertElcConfig"):
        ModernBertElcForMaskedLM(ModernBertConfig(**SIZES))
