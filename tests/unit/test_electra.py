"""ELECTRA's objective (``bertkit.recipes.pretrain.objectives.electra``): the replaced-token labels, the loss and
where its gradient goes,
the sampling, the RTD figures against predictors built to cheat them, and a discriminator that learns on a tiny
corpus beyond calling every token original."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from tinycorpus import TOKENIZER_VOCAB, mixed_corpus

from bertkit.config import BertConfig
from bertkit.modeling import BertForMaskedLM, BertModel
from bertkit.recipes.pretrain.objectives import electra
from bertkit.recipes.pretrain.objectives.electra import ElectraPretraining, RtdScore, auc, corrupt, rtd_loss

CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


def _model(seed: int = 0, arch: str = "bert", **overrides) -> ElectraPretraining:
    torch.manual_seed(seed)
    if arch == "bert":
        config = BertConfig(**{**CONFIG, **overrides})
        return ElectraPretraining(BertModel(config), BertForMaskedLM(dataclasses.replace(config, num_hidden_layers=1)))
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel

    ids = dict(pad_token_id=0, cls_token_id=2, bos_token_id=2, sep_token_id=3, eos_token_id=3)
    config = ModernBertConfig(**{**CONFIG, "intermediate_size": 36, **ids, **overrides})
    one = dataclasses.replace(config, num_hidden_layers=1, layer_types=config.layer_types[:1])
    return ElectraPretraining(ModernBertModel(config), ModernBertForMaskedLM(one))


def _batch(seed: int = 0, B: int = 13, T: int = 7) -> dict[str, torch.Tensor]:
    """A padded batch with two [MASK] (id 4) positions per row (labels: the original ids there)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG["vocab_size"], (B, T), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 1:3] = ids[:, 1:3]
    ids[:, 1:3] = 4
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0
    mask[3, 5:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_rtd_labels_replaced_original_sample_equal_to_original_and_pads():
    ids = torch.tensor([[2, 4, 11, 4, 3, 0], [2, 12, 4, 13, 3, 0]])
    labels = torch.tensor([[-100, 20, -100, 21, -100, -100], [-100, 30, 22, -100, -100, -100]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]])
    # row 0: [MASK] -> 20 (the original: "original"), [MASK] -> 50 (replaced); row 1: a kept token 12 -> 30 (its
    # original: the sample is 30 again), [MASK] -> 23 (replaced)
    sampled = torch.tensor([20, 50, 30, 23])
    fake, rtd = corrupt(ids, labels, mask, sampled)
    assert fake.tolist() == [[2, 20, 11, 50, 3, 0], [2, 30, 23, 13, 3, 0]]
    assert rtd.tolist() == [[0, 0, 0, 1, 0, -100], [0, 0, 1, 0, 0, -100]]
    assert ids[0, 1] == 4  # the generator's input is left as it was
    # without an attention mask nothing is ignored
    assert (corrupt(ids, labels, None, sampled)[1] != -100).all()


def test_rtd_loss_is_the_mean_over_non_pad_tokens():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]], requires_grad=True)
    labels = torch.tensor([[1, 0, -100], [0, 1, -100]])
    want = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor([2.0, -1.0, 0.0, 3.0]), torch.tensor([1.0, 0.0, 0.0, 1.0])
    )
    torch.testing.assert_close(rtd_loss(logits, labels), want)
    empty = rtd_loss(logits, torch.full_like(labels, -100))
    assert float(empty.detach()) == 0.0 and empty.requires_grad


def test_loss_shares_embeddings_and_no_gradient_flows_through_the_sampling():
    model = _model()
    assert model.generator.bert.embeddings is model.discriminator.embeddings
    assert model.generator.cls.predictions.decoder.weight is model.discriminator.embeddings.word_embeddings.weight
    out = model(**_batch())
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    assert out.rtd_labels.shape == (13, 7) and int((out.rtd_labels == -100).sum()) == 3 + 2
    assert out.masked_labels.numel() == 26 and out.masked_logits.shape == (26, 99)
    out.rtd_loss.backward()  # the discriminator's loss alone
    gen_layer = model.generator.bert.encoder.layer[0].attention.self.query.weight
    assert gen_layer.grad is None or float(gen_layer.grad.abs().max()) == 0.0  # no gradient through the samples
    assert model.generator.cls.predictions.transform.dense.weight.grad is None
    assert float(model.discriminator.encoder.layer[0].attention.self.query.weight.grad.abs().max()) > 0
    assert float(model.discriminator.embeddings.word_embeddings.weight.grad.abs().max()) > 0  # shared: both train it


def test_a_modernbert_discriminator_shares_embeddings_and_saves_as_a_modernbert_encoder(tmp_path):
    from bertkit.modeling_modernbert import ModernBertForMaskedLM, ModernBertModel

    model = _model(arch="modernbert")
    assert model.generator.model.embeddings is model.discriminator.embeddings
    assert model.generator.decoder.weight is model.discriminator.embeddings.tok_embeddings.weight
    out = model(**_batch())
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    out.rtd_loss.backward()
    assert model.generator.model.layers[0].attn.Wqkv.weight.grad is None  # no gradient through the samples
    assert float(model.discriminator.layers[0].attn.Wqkv.weight.grad.abs().max()) > 0
    model.eval().save_pretrained(tmp_path)
    ids = _batch()["input_ids"]
    torch.testing.assert_close(
        ModernBertModel.from_pretrained(tmp_path).eval()(ids).last_hidden_state,
        model.discriminator(ids).last_hidden_state,
        rtol=0,
        atol=0,
    )
    generator = ModernBertForMaskedLM.from_pretrained(tmp_path / electra.GENERATOR_DIR)
    assert len(generator.model.layers) == 1


def test_samples_follow_the_generator_and_eval_is_seeded():
    logits = torch.full((4, 99), -30.0)
    logits[torch.arange(4), torch.tensor([7, 8, 9, 10])] = 30.0
    assert electra.sample(logits).tolist() == [7, 8, 9, 10]
    counts = torch.bincount(electra.sample(torch.zeros(20000, 3)), minlength=3).float() / 20000
    assert (counts - 1 / 3).abs().max() < 0.02  # a uniform softmax is sampled uniformly, not argmax'd
    model, batch = _model(), _batch()
    model.eval()
    state = torch.get_rng_state()
    first, second = model(**batch), model(**batch)
    assert torch.equal(first.rtd_labels, second.rtd_labels) and torch.equal(torch.get_rng_state(), state)
    model.train()
    model(**batch)
    assert not torch.equal(torch.get_rng_state(), state)  # training draws from the run's RNG (checkpointed)


def test_rtd_figures_cannot_be_gamed_by_calling_every_token_original():
    truth = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0, 0, 1]).bool()
    lazy = torch.full((10,), -5.0)  # "original" everywhere: 80% accuracy
    score = RtdScore()
    score.add(
        electra.ElectraOutput(*[torch.zeros(())] * 5, rtd_logits=lazy[None], rtd_labels=truth.long()[None])  # type: ignore[arg-type]
    )
    figures = score.as_record()
    assert figures["eval_rtd_acc"] == pytest.approx(0.8) and figures["eval_replaced"] == pytest.approx(0.2)
    assert figures["eval_rtd_balanced_acc"] == 0.5 and figures["eval_rtd_auc"] == 0.5
    assert figures["eval_rtd_recall"] == 0.0
    # a perfect detector, and the AUC against the pairwise definition on scores with ties
    assert auc(truth.float(), truth) == 1.0 and auc(-truth.float(), truth) == 0.0
    g = torch.Generator().manual_seed(1)
    scores, labels = torch.randint(0, 5, (60,), generator=g).float(), torch.rand(60, generator=g) < 0.3
    pos, neg = scores[labels], scores[~labels]
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos.tolist(), neg.tolist())]
    assert auc(scores, labels) == pytest.approx(sum(pairs) / len(pairs))
    r = electra.rates(tp=3, pos=4, pred=6, ok=90, n=100)
    assert r["rtd_precision"] == 0.5 and r["rtd_recall"] == 0.75
    assert r["rtd_balanced_acc"] == pytest.approx((0.75 + 87 / 96) / 2)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_discriminator_learns_beyond_the_all_original_baseline(tmp_path, arch):
    """20 steps on the tiny corpus's random sentences of 17 words. Scored on fresh masks and samples of a later epoch:
    the held-out split of so small a corpus is a few sequences. (Trained longer, the generator learns the 17 words
    and its samples become as likely as the originals in sentences without context: the figures then fall, as
    ELECTRA's do with too strong a generator.)"""
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.training.optim import build_optimizer

    shards = tmp_path / "shards"
    prepare_corpus([mixed_corpus(tmp_path)], shards, TOKENIZER_VOCAB, workers=1, progress=False, use_cache=False)
    vocab = VocabInfo.from_tokens(TOKENIZER_VOCAB.read_text(encoding="utf-8").splitlines())
    opts = DataOptions(max_seq_length=32, batch_size=16, nsp=False, mask_prob=0.15, mask_mix=(0.85, 0.0, 0.15))
    data = PretrainingData(shards, vocab, opts)
    model = _model(arch=arch, vocab_size=vocab.vocab_size)
    optimizer = build_optimizer(model, lr=3e-3)
    scored = [{k: torch.from_numpy(v) for k, v in data.batch(50, i).items()} for i in range(8)]

    def figures() -> dict[str, float]:
        model.eval()
        score = RtdScore()
        with torch.no_grad():
            for b in scored:
                score.add(model(**b))
        model.train()
        return score.as_record()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small: one thread is fastest, and 10x faster on a loaded machine
    try:
        before = figures()
        for step in range(20):
            batch = {k: torch.from_numpy(v) for k, v in data.batch(0, step % data.num_batches(0)).items()}
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        after = figures()
    finally:
        torch.set_num_threads(threads)
    assert 0.1 < after["eval_replaced"] < 0.2  # 15% chosen, nearly all replaced by a generator this young
    assert before["eval_rtd_auc"] < 0.65 and after["eval_rtd_auc"] > 0.8
    assert after["eval_rtd_balanced_acc"] > 0.75 and after["eval_rtd_acc"] > 1 - after["eval_replaced"] + 0.05
