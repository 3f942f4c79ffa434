"""Parity with Hugging Face ``transformers``: tiny random HF models, converted with the code users run, compared
number for number (fp32, eval mode, padded batches, real positions only), in both directions."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit import BertConfig  # noqa: E402

CONFIGS = {
    "tiny-gelu": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
    "tanh-3types": dict(
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=6,
        intermediate_size=64,
        hidden_act="gelu_new",
        type_vocab_size=3,
    ),
    "relu-1head": dict(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=20,
        hidden_act="relu",
        layer_norm_eps=1e-7,
    ),
}
CLASSES = ["BertModel", "BertForPreTraining", "BertForMaskedLM"]
TOL = 1e-5


def hf_config(**kw):
    return transformers.BertConfig(vocab_size=99, max_position_embeddings=64, **kw)


def make_batch(type_vocab_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 99, (4, 9), generator=g)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    mask[3, 2:] = 0
    ids[mask == 0] = 0
    types = torch.randint(0, type_vocab_size, (4, 9), generator=g)
    return ids, mask, types


def close_at_real(a, b, mask):
    real = mask.bool()
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a - b)[real].abs().max().item() if a.dim() == 3 else (a - b).abs().max().item()
    assert diff <= TOL, diff


def compare(hf_model, bk_model, type_vocab_size):
    ids, mask, types = make_batch(type_vocab_size)
    with torch.no_grad():
        a = hf_model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        b = bk_model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    assert len(a.hidden_states) == len(b.hidden_states)
    for x, y in zip(a.hidden_states, b.hidden_states):
        close_at_real(x, y, mask)
    name = type(bk_model).__name__
    if name == "BertModel":
        close_at_real(a.last_hidden_state, b.last_hidden_state, mask)
        close_at_real(a.pooler_output, b.pooler_output, mask)
    if name == "BertForPreTraining":
        close_at_real(a.prediction_logits, b.prediction_logits, mask)
        close_at_real(a.seq_relationship_logits, b.seq_relationship_logits, mask)
    if name == "BertForMaskedLM":
        close_at_real(a.logits, b.logits, mask)


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@pytest.mark.parametrize("cls_name", CLASSES)
def test_hf_to_bertkit(tmp_path, cfg_name, cls_name):
    torch.manual_seed(1)
    hf = getattr(transformers, cls_name)(hf_config(**CONFIGS[cfg_name])).eval()
    hf.save_pretrained(tmp_path)
    bk = getattr(bertkit, cls_name).from_pretrained(tmp_path).eval()
    compare(hf, bk, hf.config.type_vocab_size)


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@pytest.mark.parametrize("cls_name", CLASSES)
def test_bertkit_to_hf(tmp_path, cfg_name, cls_name):
    torch.manual_seed(2)
    cfg = BertConfig(vocab_size=99, max_position_embeddings=64, **CONFIGS[cfg_name])
    bk = getattr(bertkit, cls_name)(cfg).eval()
    bk.save_pretrained(tmp_path)
    hf = getattr(transformers, cls_name).from_pretrained(tmp_path).eval()
    compare(hf, bk, cfg.type_vocab_size)
    # the tied decoder survived the trip: HF's decoder is our word-embedding matrix
    if cls_name != "BertModel":
        torch.testing.assert_close(hf.cls.predictions.decoder.weight, bk.bert.embeddings.word_embeddings.weight)


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
def test_losses_equal_hf(tmp_path, cfg_name):
    torch.manual_seed(3)
    hf = transformers.BertForPreTraining(hf_config(**CONFIGS[cfg_name])).eval()
    hf.save_pretrained(tmp_path)
    bk = bertkit.BertForPreTraining.from_pretrained(tmp_path).eval()
    ids, mask, types = make_batch(hf.config.type_vocab_size, seed=5)
    g = torch.Generator().manual_seed(7)
    labels = torch.where((torch.rand(ids.shape, generator=g) < 0.3) & mask.bool(), ids, torch.full_like(ids, -100))
    labels[0, 1] = ids[0, 1]
    nsl = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsl)
        b = bk(ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsl)
        a_mlm = torch.nn.functional.cross_entropy(a.prediction_logits.view(-1, 99), labels.view(-1))
        a_nsp = torch.nn.functional.cross_entropy(a.seq_relationship_logits, nsl)
        m = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()(
            input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels
        )
    assert abs(a.loss.item() - b.loss.item()) <= TOL
    assert abs(a_mlm.item() - b.mlm_loss.item()) <= TOL
    assert abs(a_nsp.item() - b.nsp_loss.item()) <= TOL
    assert abs(m.loss.item() - b.mlm_loss.item()) <= TOL


@pytest.mark.parametrize(
    "cls_name, kwargs",
    [
        ("BertForSequenceClassification", {"num_labels": 3}),
        ("BertForTokenClassification", {"num_labels": 5}),
        ("BertForQuestionAnswering", {}),
        ("BertForMultipleChoice", {}),
        ("BertForNextSentencePrediction", {}),
    ],
)
def test_finetuning_heads_roundtrip(tmp_path, cls_name, kwargs):
    torch.manual_seed(4)
    hf = getattr(transformers, cls_name)(hf_config(**CONFIGS["tiny-gelu"], **kwargs)).eval()
    hf.save_pretrained(tmp_path / "hf")
    bk = getattr(bertkit, cls_name).from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = make_batch(2)
    if cls_name == "BertForMultipleChoice":
        ids, mask, types = (t.view(2, 2, 9) for t in (ids, mask, types))
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        b = bk(ids, attention_mask=mask, token_type_ids=types)
    for field in ("logits", "start_logits", "end_logits"):
        if hasattr(a, field) and getattr(a, field) is not None:
            x, y = getattr(a, field), getattr(b, field)
            if x.dim() == 3:
                close_at_real(x, y, mask)
            else:
                assert (x - y)[mask.bool()].abs().max() <= TOL if x.shape == mask.shape else (x - y).abs().max() <= TOL
    bk.save_pretrained(tmp_path / "bk")
    back = getattr(transformers, cls_name).from_pretrained(tmp_path / "bk").eval()
    for (k1, v1), (k2, v2) in zip(sorted(hf.state_dict().items()), sorted(back.state_dict().items())):
        assert k1 == k2
        torch.testing.assert_close(v1, v2)


@pytest.mark.parametrize("cls_name", ["BertForSequenceClassification", "BertForTokenClassification"])
def test_head_with_a_label_count_and_no_names_loads_in_hf(tmp_path, cls_name):
    """A head built in bertkit with num_labels only (no names) saves a config transformers loads at that size
    (it reads the label count from id2label, and refused the weights when only num_labels was known here)."""
    torch.manual_seed(6)
    bk = getattr(bertkit, cls_name)(
        BertConfig(vocab_size=99, max_position_embeddings=64, num_labels=3, **CONFIGS["tiny-gelu"])
    ).eval()
    bk.save_pretrained(tmp_path)
    hf = getattr(transformers, cls_name).from_pretrained(tmp_path).eval()
    assert hf.config.num_labels == 3 and hf.config.id2label[2] == "LABEL_2"
    ids, mask, types = make_batch(2)
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        b = bk(ids, attention_mask=mask, token_type_ids=types).logits
    assert a.shape == b.shape and a.shape[-1] == 3
    assert (a - b).abs()[mask.bool()].max() <= TOL if a.dim() == 3 else (a - b).abs().max() <= TOL
    assert getattr(bertkit, cls_name).from_pretrained(tmp_path).config.num_labels == 3


def test_bare_bertmodel_into_head_class(tmp_path):
    torch.manual_seed(5)
    hf = transformers.BertModel(hf_config(**CONFIGS["tiny-gelu"])).eval()
    hf.save_pretrained(tmp_path)
    bk, info = bertkit.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    # encoder kept ...
    torch.testing.assert_close(bk.bert.encoder.layer[1].output.dense.weight, hf.encoder.layer[1].output.dense.weight)
    torch.testing.assert_close(bk.bert.pooler.dense.weight, hf.pooler.dense.weight)
    # ... head initialised (and still tied)
    assert bk.cls.predictions.decoder.weight is bk.bert.embeddings.word_embeddings.weight
    assert "cls.seq_relationship.weight" in info.initialised and info.dropped == []
    ids, mask, types = make_batch(2)
    with torch.no_grad():
        a = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        b = bk.bert(ids, attention_mask=mask, token_type_ids=types)
    close_at_real(a.last_hidden_state, b.last_hidden_state, mask)
    # and the HF pre-training checkpoint into a bare bertkit BertModel
    hf_pt = transformers.BertForPreTraining(hf_config(**CONFIGS["tiny-gelu"])).eval()
    hf_pt.save_pretrained(tmp_path / "pt")
    base = bertkit.BertModel.from_pretrained(tmp_path / "pt").eval()
    with torch.no_grad():
        close_at_real(
            hf_pt.bert(input_ids=ids, attention_mask=mask).last_hidden_state,
            base(ids, attention_mask=mask).last_hidden_state,
            mask,
        )


def test_masked_lm_directory_without_pooler_loads_into_bert_model(tmp_path, capsys):
    """transformers' BertForMaskedLM has no pooler: BertModel.from_pretrained on its directory initialises the pooler
    and says so (in the returned info), as transformers does, instead of refusing a missing key."""
    torch.manual_seed(7)
    hf = transformers.BertForMaskedLM(hf_config(**CONFIGS["tiny-gelu"])).eval()
    hf.save_pretrained(tmp_path)
    assert not any("pooler" in k for k in hf.state_dict())
    base, info = bertkit.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info.initialised == ["pooler.dense.bias", "pooler.dense.weight"]
    assert "cls.predictions.transform.dense.weight" in info.dropped
    ids, mask, _ = make_batch(2)
    with torch.no_grad():
        out = base(ids, attention_mask=mask)
        close_at_real(hf.bert(input_ids=ids, attention_mask=mask).last_hidden_state, out.last_hidden_state, mask)
    assert out.pooler_output.shape == (4, 32)
    reference = transformers.BertModel.from_pretrained(tmp_path)  # transformers too loads it, pooler initialised
    assert sorted(reference.state_dict()) == sorted(base.state_dict())
    assert capsys.readouterr().out == ""  # the library reports, never prints


def test_pytorch_model_bin_loads_with_weights_only(tmp_path):
    torch.manual_seed(6)
    hf = transformers.BertForMaskedLM(hf_config(**CONFIGS["tiny-gelu"])).eval()
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    bk = bertkit.BertForMaskedLM.from_pretrained(tmp_path).eval()
    compare(hf, bk, 2)
