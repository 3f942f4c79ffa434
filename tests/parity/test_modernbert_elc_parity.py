"""ModernBERT-ELC's saved directory loads in ``transformers`` through the code bertkit ships in it (config.json's
``auto_map``, ``trust_remote_code=True``, local files only) with bertkit's outputs: the encoder, the masked LM and a
classifier head, each with a random layer mix (fp32, eval mode, a padded batch compared at real positions, inputs
several times longer than the sliding window). The variant's own maths: unit/test_modernbert_elc.py."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.variants import modernbert_elc as elc  # noqa: E402

TOL = 1e-5
SIZES = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    local_attention=8,
    max_position_embeddings=64,
    pad_token_id=0,
    initializer_range=0.2,  # layers that change their input much: a mix of their outputs shows
)
CASES = [  # bertkit class, transformers Auto class, the output compared
    ("ModernBertElcModel", "AutoModel", "last_hidden_state"),
    ("ModernBertElcForMaskedLM", "AutoModelForMaskedLM", "logits"),
    ("ModernBertElcForSequenceClassification", "AutoModelForSequenceClassification", "logits"),
]


@pytest.fixture(autouse=True)
def modules_cache(tmp_path_factory, monkeypatch):
    """transformers copies a directory's code into its modules cache before importing it: a temporary one here."""
    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path_factory.getbasetemp() / "hf_modules"))


@pytest.mark.parametrize(("name", "auto", "output"), CASES)
def test_transformers_loads_a_saved_variant_with_its_shipped_code_and_gives_bertkits_outputs(
    tmp_path, name, auto, output
):
    torch.manual_seed(0)
    model = getattr(elc, name)(elc.ModernBertElcConfig(**SIZES, num_labels=3)).eval()
    with torch.no_grad():
        for w in model.get_submodule("model" if model.base_model_prefix else "").layer_mix:
            w.copy_(torch.randn_like(w))
    model.save_pretrained(tmp_path)

    config = transformers.AutoConfig.from_pretrained(tmp_path, trust_remote_code=True, local_files_only=True)
    assert (type(config).__name__, config.model_type) == ("ModernBertElcConfig", "modernbert-elc")
    hf = getattr(transformers, auto).from_pretrained(tmp_path, trust_remote_code=True, local_files_only=True).eval()
    assert type(hf).__name__ == name and type(hf).__module__.endswith(".modeling_modernbert_elc")

    ids = torch.randint(3, 99, (3, 40))
    mask = torch.ones_like(ids)
    mask[1, 29:] = 0
    mask[2, 5:] = 0
    with torch.no_grad():
        theirs = getattr(hf(input_ids=ids, attention_mask=mask), output)
        ours = getattr(model(ids, attention_mask=mask), output)
    if output != "logits" or theirs.dim() == 3:  # per token: the real ones
        theirs, ours = theirs[mask.bool()], ours[mask.bool()]
    assert ours.abs().max() > 0.1  # not a comparison of zeros
    torch.testing.assert_close(theirs, ours, atol=TOL, rtol=0)
