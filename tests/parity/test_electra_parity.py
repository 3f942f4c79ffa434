"""What ``bertkit pretrain --objective electra`` saves, read by ``transformers`` from the same directory: the
discriminator by ``BertModel`` (and bertkit's), the generator by ``BertForMaskedLM``, and the discriminator with its
RTD head by ``ElectraForPreTraining`` (the encoder's keys under ``electra.``): the same numbers as the model that
trained, in fp32 on a padded batch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit import BertConfig  # noqa: E402
from bertkit.modeling import BertForMaskedLM, BertModel  # noqa: E402
from bertkit.recipes.pretrain.objectives.electra import GENERATOR_DIR, RTD_HEAD_NAME, ElectraPretraining  # noqa: E402

TOL = 1e-5


def _trained_like(hidden_act: str) -> ElectraPretraining:
    """A tiny generator/discriminator pair with every weight random (LayerNorms and biases too, so no path is
    trivially the identity)."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        hidden_act=hidden_act,
    )
    model = ElectraPretraining(BertModel(config), BertForMaskedLM(dataclasses.replace(config, num_hidden_layers=1)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 99, (4, 9), generator=g)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    mask[3, 2:] = 0
    ids[mask == 0] = 0
    types = torch.randint(0, 2, (4, 9), generator=g)
    return ids, mask, types


def _close(a, b, mask):
    real = mask.bool()
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (
        float((a - b)[real].abs().max()) if a.dim() >= 2 and a.shape[:2] == mask.shape else float((a - b).abs().max())
    )
    assert diff <= TOL, diff


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_saved_discriminator_generator_and_head_load_in_transformers(tmp_path, hidden_act):
    from safetensors.torch import load_file

    model = _trained_like(hidden_act)
    model.save_pretrained(tmp_path)
    ids, mask, types = _batch()
    with torch.no_grad():
        ours = model.discriminator(ids, mask, types)
        rtd = model.discriminator_predictions(ours.last_hidden_state)
        gen_logits = model.generator(ids, mask, types).logits
        hf = transformers.BertModel.from_pretrained(tmp_path).eval()(
            input_ids=ids, attention_mask=mask, token_type_ids=types
        )
        reloaded = BertModel.from_pretrained(tmp_path)(ids, mask, types)
        hf_gen = transformers.BertForMaskedLM.from_pretrained(tmp_path / GENERATOR_DIR).eval()(
            input_ids=ids, attention_mask=mask, token_type_ids=types
        )
    for theirs in (hf, reloaded):
        _close(theirs.last_hidden_state, ours.last_hidden_state, mask)
        _close(theirs.pooler_output, ours.pooler_output, mask)
    _close(hf_gen.logits, gen_logits, mask)
    # the generator's saved embeddings are the discriminator's (one module while training)
    disc, gen = (
        load_file(str(tmp_path / "model.safetensors")),
        load_file(str(tmp_path / GENERATOR_DIR / "model.safetensors")),
    )
    assert torch.equal(disc["embeddings.word_embeddings.weight"], gen["bert.embeddings.word_embeddings.weight"])

    # the discriminator with its RTD head is ELECTRA's discriminator
    c = model.config
    electra_config = transformers.ElectraConfig(
        vocab_size=c.vocab_size,
        embedding_size=c.hidden_size,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        hidden_act=c.hidden_act,
        max_position_embeddings=c.max_position_embeddings,
        type_vocab_size=c.type_vocab_size,
        layer_norm_eps=c.layer_norm_eps,
    )
    electra = transformers.ElectraForPreTraining(electra_config).eval()
    state = {"electra." + k: v for k, v in disc.items() if not k.startswith("pooler.")}
    state.update(load_file(str(tmp_path / RTD_HEAD_NAME)))
    missing, unexpected = electra.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in k or "token_type_ids" in k for k in missing), (missing, unexpected)
    with torch.no_grad():
        theirs = electra(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    _close(theirs, rtd, mask)
