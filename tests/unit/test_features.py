"""Encoder: layer choice, every pooling against a hand computation, padding invariance, order, early stop."""

from __future__ import annotations

import numpy as np
import pytest
import tinymodels
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import BertForPreTraining, BertModel, Encoder
from bertkit.features import encode_with_masks, parse_layers, pool, resolve_layers, resolve_pooling

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
TEXTS = [
    "the cat sat on the mat",
    "hello",
    "we went to the river bank . the dog ran to the big red mat and the small blue cat runs",
    "a dog",
    "",
]


def make_model_dir(path, cls=BertForPreTraining, layers=3, seed=0, **overrides):
    return tinymodels.make_model_dir(path, VOCAB, cls=cls, layers=layers, seed=seed, **overrides)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def encoder(model_dir):
    return Encoder.from_pretrained(model_dir, precision="fp32")


@pytest.fixture(scope="module")
def reference(model_dir, encoder):
    """Every hidden state of the lead's BertModel (and its pooler output), one text at a time (no padding)."""
    model = BertModel.from_pretrained(model_dir).eval()
    out = []
    for text in TEXTS:
        e = encoder.tokenizer.encode(text)
        with torch.no_grad():
            o = model(torch.tensor([e.ids]), output_hidden_states=True)
        out.append(([h[0].numpy() for h in o.hidden_states], o.pooler_output[0].numpy()))
    return out


# ------------------------------------------------------------------ pure pooling


def test_pooling_matches_hand_computation_and_ignores_padding():
    g = torch.Generator().manual_seed(1)
    lengths = [2, 5, 3]
    hidden = torch.randn(3, 5, 4, generator=g)
    mask = torch.zeros(3, 5, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        hidden[b, n:] = 1e6  # huge padding: any leak shows
    hidden[0, 3] = float("nan")  # and a nan in padding must not poison anything
    h = hidden.numpy()
    mean = np.stack([h[b, :n].mean(0) for b, n in enumerate(lengths)])
    mx = np.stack([h[b, :n].max(0) for b, n in enumerate(lengths)])
    np.testing.assert_allclose(pool(hidden, mask, "mean").numpy(), mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pool(hidden, mask, "max").numpy(), mx, rtol=1e-6)
    np.testing.assert_allclose(
        pool(hidden, mask, "mean_max").numpy(), np.concatenate([mean, mx], 1), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_array_equal(pool(hidden, mask, "cls").numpy(), h[:, 0])
    np.testing.assert_array_equal(pool(hidden, mask, "first").numpy(), h[:, 1])
    np.testing.assert_array_equal(
        pool(hidden, mask, "sep").numpy(), np.stack([h[b, n - 1] for b, n in enumerate(lengths)])
    )


def test_max_pooling_of_all_negative_rows_is_not_zero_padding():
    hidden = -torch.ones(2, 4, 3) * torch.arange(1, 5).view(1, 4, 1)  # values -1..-4, padding 0 would win a max
    hidden[1, 2:] = 0.0
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    np.testing.assert_array_equal(pool(hidden, mask, "max").numpy(), [[-1.0] * 3, [-1.0] * 3])
    np.testing.assert_allclose(pool(hidden, mask, "mean").numpy(), [[-2.5] * 3, [-1.5] * 3])


def test_layer_indices():
    assert resolve_layers(-1, 12) == (12,)
    assert resolve_layers(-12, 12) == (1,)
    assert resolve_layers([0, "embeddings", "-2", 3], 12) == (0, 0, 11, 3)
    assert resolve_layers((-1, -2, -3, -4), 12) == (12, 11, 10, 9)
    for bad in (13, -13, "top", [], True, 1.5, "-0"):
        with pytest.raises((ValueError, TypeError)):
            resolve_layers(bad, 12)
    with pytest.raises(ValueError, match=r"-12\.\.-1"):
        resolve_layers(-13, 12)


def test_pooling_names():
    assert resolve_pooling("REDUCE_MEAN") == "mean"
    assert resolve_pooling("REDUCE_MEAN_MAX") == "mean_max"
    assert resolve_pooling("CLS_TOKEN") == "cls"
    assert resolve_pooling("last") == "sep" and resolve_pooling("LAST_TOKEN") == "sep"
    assert resolve_pooling("NONE") == "none"
    with pytest.raises(ValueError, match="mean_max"):
        resolve_pooling("average")


# ------------------------------------------------------------------ the encoder against the model


def test_layers_and_concatenation_order_match_bert_model(reference, encoder):
    ref = reference
    got = encoder.encode(TEXTS, layers=[-1, 0, -3], pooling="mean")
    assert got.shape == (len(TEXTS), 3 * 32) and got.dtype == np.float32
    for i, (states, _) in enumerate(ref):
        want = np.concatenate([states[3].mean(0), states[0].mean(0), states[1].mean(0)])
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5)
    default = encoder.encode(TEXTS)  # layers=(-2,): the second-to-last layer
    for i, (states, _) in enumerate(ref):
        np.testing.assert_allclose(default[i], states[2].mean(0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "cls", "first", "sep", "cls_pooled"])
def test_every_pooling_matches_hand_computation(reference, encoder, pooling):
    ref = reference
    got = encoder.encode(TEXTS, layers=-1, pooling=pooling)
    for i, (states, pooled) in enumerate(ref):
        h = states[-1]
        want = {
            "mean": h.mean(0),
            "max": h.max(0),
            "mean_max": np.concatenate([h.mean(0), h.max(0)]),
            "cls": h[0],
            "first": h[1],
            "sep": h[-1],
            "cls_pooled": pooled,
        }[pooling]
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5)


def test_batched_equals_single_and_keeps_input_order(encoder):
    """Padding invariance: a short text batched next to a long one gives its single-text result."""
    for pooling in ("mean", "max", "cls", "sep", "first"):
        batched = encoder.encode(TEXTS, layers=[-1, -2], pooling=pooling, batch_size=5)
        singles = np.concatenate([encoder.encode([t], layers=[-1, -2], pooling=pooling) for t in TEXTS])
        np.testing.assert_allclose(batched, singles, rtol=1e-4, atol=1e-5)
    small_batches = encoder.encode(TEXTS, batch_size=2, max_batch_tokens=40)
    np.testing.assert_allclose(small_batches, encoder.encode(TEXTS, batch_size=64), rtol=1e-4, atol=1e-5)


def test_none_pooling_gives_tokens_and_unpadded_vectors(reference, encoder):
    ref = reference
    vectors, tokens = encoder.encode(TEXTS, layers=[-1, 0], pooling="none", show_tokens=True)
    assert len(vectors) == len(tokens) == len(TEXTS)
    for i, (states, _) in enumerate(ref):
        assert tokens[i][0] == "[CLS]" and tokens[i][-1] == "[SEP]"
        assert vectors[i].shape == (len(tokens[i]), 64)
        np.testing.assert_allclose(vectors[i], np.concatenate([states[3], states[0]], 1), rtol=1e-4, atol=1e-5)
    assert tokens[0] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]


def test_pairs_normalize_truncation(encoder):
    v = encoder.encode(["the cat", "a dog"], pairs=["sat on", "the mat"], normalize=True, pooling="max")
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    solo = encoder.encode(["the cat", "a dog"], normalize=True, pooling="max")
    assert not np.allclose(v, solo)  # the pair changes the context
    vectors, tokens = encoder.encode([TEXTS[2]], pooling="none", max_length=6, show_tokens=True)
    assert vectors[0].shape[0] == 6 and tokens[0][-1] == "[SEP]"
    empty = encoder.encode([], layers=[-1, -2], pooling="mean_max")
    assert empty.shape == (0, 128)


def test_forward_stops_after_the_deepest_requested_layer(encoder):
    calls = []
    hooks = [
        layer.register_forward_hook(lambda m, i, o, k=k: calls.append(k))
        for k, layer in enumerate(encoder.bert.encoder.layer)
    ]
    try:
        encoder.encode(TEXTS, layers="embeddings", batch_size=64)
        assert calls == []
        encoder.encode(TEXTS, layers=[1, -3], batch_size=64)
        assert calls == [0]
        calls.clear()
        encoder.encode(TEXTS, layers=-1, batch_size=64)
        assert calls == [0, 1, 2]
    finally:
        for h in hooks:
            h.remove()


def test_bf16_autocast_stays_close_to_fp32(model_dir, encoder):
    bf16 = Encoder.from_pretrained(model_dir, precision="bf16")
    a, b = bf16.encode(TEXTS, layers=-1), encoder.encode(TEXTS, layers=-1)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.999


def test_bad_input_is_refused_with_a_message(encoder):
    with pytest.raises(TypeError, match="list of strings"):
        encoder.encode("a bare string")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        encoder.encode(["ok", 3])
    with pytest.raises(ValueError, match="pairs has 1"):
        encoder.encode(["a", "b"], pairs=["c"])
    with pytest.raises(ValueError, match="out of range"):
        encoder.encode(["a"], layers=4)
    with pytest.raises(ValueError, match="unknown pooling"):
        encoder.encode(["a"], pooling="avg")


def test_fill_mask_and_missing_heads(tmp_path, encoder):
    out = encoder.fill_mask(["the [MASK] sat on the [MASK]", "[MASK] dog"], top_k=3)
    assert [len(x) for x in out] == [2, 1]
    for per_mask in out[0] + out[1]:
        scores = [p["score"] for p in per_mask]
        assert len(per_mask) == 3 and scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1.0
        assert all(p["token"] == VOCAB[p["token_id"]] for p in per_mask)
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        encoder.fill_mask(["nothing to fill"])
    from bertkit import BertForTokenClassification

    bare = Encoder.from_pretrained(
        make_model_dir(tmp_path / "tagger", BertForTokenClassification, num_labels=3), precision="fp32"
    )
    assert bare.mlm_head is None and not bare.has_pooler
    with pytest.raises(ValueError, match="MLM head"):
        bare.fill_mask(["the [MASK]"])
    with pytest.raises(ValueError, match="pooler"):
        bare.encode(["the cat"], pooling="cls_pooled")
    assert bare.encode(["the cat"], pooling="cls").shape == (1, 32)


def test_fill_mask_encoding():
    class Tok:
        cls_token_id, sep_token_id, mask_token_id = 2, 3, 4

        def tokenize(self, text):
            return text.split()

        def convert_tokens_to_ids(self, tokens):
            return [len(t) + 10 for t in tokens]

    assert encode_with_masks(Tok(), "the [MASK] sat [MASK]") == [2, 13, 4, 13, 4, 3]
    assert encode_with_masks(Tok(), "[MASK][MASK]") == [2, 4, 4, 3]


def test_parse_layers():
    assert parse_layers("-1, -2,-3,") == (-1, -2, -3)
    assert parse_layers("embeddings,4") == ("embeddings", 4)
    assert parse_layers([0, -1]) == (0, -1)


@pytest.mark.parametrize(
    "text,words",
    [("1,,2", "item 2 is empty"), (",", "item 1 is empty"), ("-0", "-0 is not a layer"), ("a", "'a' is neither")],
)
def test_parse_layers_refuses_what_names_no_layer(text, words):
    """An empty item, -0 (0 is the embeddings, -1 the last layer: which was meant?) and a word are refused when
    parsed, naming the value (``1,,2`` was read as ``1,2``, ``-0`` as the embedding output)."""
    from bertkit.errors import InputError

    with pytest.raises(InputError, match=words) as e:
        parse_layers(text)
    assert repr(text) in str(e.value)


def test_encoder_uses_the_models_forward(encoder):
    """Encoder.forward is BertModel.forward(num_layers=...): the same hidden states, and no layer past the depth."""
    ids, types, mask = encoder.collate(encoder.tokenize(TEXTS[:3]))
    calls = []
    hook = encoder.bert.encoder.layer[2].register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.inference_mode():
            states, pooled = encoder.forward(ids, types, mask, depth=2)
            full = encoder.bert(ids, mask, types, output_hidden_states=True)
    finally:
        hook.remove()
    assert calls == [1] and len(states) == 3 and pooled is None  # only the full forward ran layer 3
    for a, b in zip(states, full.hidden_states):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_missing_vocab_is_named(tmp_path):
    d = make_model_dir(tmp_path / "m")
    (d / "vocab.txt").unlink()
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        Encoder.from_pretrained(d)


def test_plan_batches_respects_size_and_token_budget(encoder):
    lengths = [5, 40, 7, 7, 12, 3, 40, 1]
    batches = encoder.plan_batches(lengths, batch_size=3, max_batch_tokens=50)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 50
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)


def test_cpu_forward_token_cap_splits_batches_without_changing_vectors(model_dir, monkeypatch):
    """On a CPU the Encoder cuts batches at ``forward_tokens`` padded tokens even when the caller allows more (large
    batches run slower there); the vectors are the ones an uncapped run gives."""
    enc = Encoder.from_pretrained(model_dir, precision="fp32")
    assert enc.forward_tokens is not None and enc.forward_tokens > 0
    texts = [" ".join(["word"] * n) for n in (3, 9, 1, 14, 6, 2, 11, 5)]
    calls: list[tuple[int, int]] = []
    hook = enc.bert.register_forward_hook(lambda m, args, out: calls.append(tuple(args[0].shape)))
    try:
        enc.forward_tokens = None
        free = enc.encode(texts, layers=-1, pooling="mean", batch_size=64, max_batch_tokens=16384)
        assert len(calls) == 1
        calls.clear()
        enc.forward_tokens = 24
        capped = enc.encode(texts, layers=-1, pooling="mean", batch_size=64, max_batch_tokens=16384)
    finally:
        hook.remove()
    assert len(calls) > 1 and all(b * t <= 24 or b == 1 for b, t in calls)
    np.testing.assert_allclose(capped, free, rtol=1e-5, atol=1e-6)


def test_cut_batches_and_task_inference_under_the_cap(monkeypatch):
    from bertkit.features import cut_batches

    lengths = [2, 3, 3, 5, 8, 8, 9, 30]
    batches = [part for b in ([0, 1, 2, 3], [4, 5, 6, 7]) for part in cut_batches(b, lengths, len(b), 16)]
    assert [i for b in batches for i in b] == list(range(8))  # same order, nothing lost
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 16
    assert [7] in batches  # longer than the cap: alone

    # run_inference (the task pipelines' loop) cuts its CPU batches the same way, with the same outputs
    import bertkit.runtime
    from bertkit import BertConfig, BertForSequenceClassification
    from bertkit.tasks import collate_inputs, run_inference

    torch.manual_seed(0)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            num_labels=2,
        )
    )
    g = torch.Generator().manual_seed(1)
    feats = [
        {
            "input_ids": torch.randint(5, 50, (n,), generator=g).tolist(),
            "token_type_ids": [0] * n,
            "attention_mask": [1] * n,
        }
        for n in lengths
    ]

    def run(cap):
        monkeypatch.setattr(bertkit.runtime, "cpu_forward_tokens", lambda width=3072: cap)
        out, shapes = {}, []
        for idx, o in run_inference(model, feats, collate_inputs, batch_size=8):
            shapes.append(len(idx))
            out.update({i: o.logits[j] for j, i in enumerate(idx)})
        return torch.stack([out[i] for i in range(len(feats))]), shapes

    free, one = run(10**9)
    capped, many = run(16)
    assert one == [8] and len(many) == len(cut_batches(list(range(8)), lengths, 8, 16)) > 1
    torch.testing.assert_close(capped, free, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "depth,defaults,used",
    [(1, (-2,), (-1,)), (2, (-1, -2, -3, -4), (-1, -2)), (3, (-2,), (-2,)), (1, (2, 3), (-1,))],
)
def test_default_layers_fall_back_to_the_layers_the_model_has_and_say_so_once(tmp_path, caplog, depth, defaults, used):
    from dataclasses import replace

    encoder = Encoder.from_pretrained(make_model_dir(tmp_path, layers=depth), precision="fp32")
    encoder.defaults = replace(encoder.defaults, layers=defaults)
    with caplog.at_level("WARNING", logger="bertkit"):
        first, second = encoder.encode(["the cat"]), encoder.encode(["a dog"])
    assert encoder.default_layers() == used
    assert first.shape == second.shape == (1, 32 * len(used))
    np.testing.assert_allclose(first, encoder.encode(["the cat"], layers=used))  # the same vectors as asked for
    warned = [r.getMessage() for r in caplog.records if "default layers" in r.getMessage()]
    assert warned == ([] if used == defaults else [warned[0]]) and all(f"{depth}-layer" in w for w in warned)
