"""The honest held-out MLM meter (bertkit.tasks.mlm): a model built to cheat it scores the baseline, not more."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertkit.data.pretraining.instances import HONEST_MIX, DataOptions, PretrainingData, VocabInfo
from bertkit.data.pretraining.prepare import build_shards_from_documents
from bertkit.tasks.mlm import check_honest, score_mlm


class CopyOrUnigram(torch.nn.Module):
    """The cheat: at every labelled position it predicts the visible input token unless that is [MASK], and otherwise
    the unigram distribution of the training text. It knows nothing of context."""

    def __init__(self, unigram: torch.Tensor, mask_id: int):
        super().__init__()
        self.log_unigram, self.mask_id = unigram.clamp_min(1e-9).log(), mask_id

    def forward(self, input_ids, labels, **_):
        sel = labels != -100
        seen = input_ids[sel]
        logits = self.log_unigram.expand(len(seen), -1).clone()
        copy = seen != self.mask_id
        logits[copy.nonzero().squeeze(-1), seen[copy]] = 1e4  # copies what it sees
        return SimpleNamespace(masked_logits=logits, masked_labels=labels[sel])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Held-out and training data from a Zipf-like synthetic corpus (token ids, no text)."""
    rng = np.random.default_rng(0)
    vocab = [f"[unused{i}]" for i in range(5)] + ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [f"w{i}" for i in range(200)]
    info = VocabInfo.from_tokens(vocab)
    p = 1.0 / np.arange(1, 201)
    p /= p.sum()
    docs = [
        [" ".join(f"w{j}" for j in rng.choice(200, size=rng.integers(5, 20), p=p)) for _ in range(6)]
        for _ in range(300)
    ]
    root = tmp_path_factory.mktemp("meter")
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    out = root / "shards"
    build_shards_from_documents(
        docs, root / "vocab.txt", out, eval_fraction=0.25, workers=1, progress=False
    )  # 64+ instances
    counts = torch.zeros(len(vocab))
    counts[10:] = torch.from_numpy(p)
    return out, info, counts


def _batches(directory, info, mix=None, n=4):
    data = PretrainingData(
        directory, info, DataOptions(max_seq_length=64, batch_size=16, nsp=False, seed=3), split="eval"
    )
    if mix is None:
        raw = data.eval_batches(n)
    else:  # the training inputs' 80/10/10 at the same positions: what the old meter scored
        from bertkit.data.pretraining.instances import collate

        raw = [
            collate([data.example(0, i, mix) for i in range(s, s + 16)], info.pad_id, False)
            for s in range(0, 16 * n, 16)
        ]
    return [{k: torch.from_numpy(v) for k, v in b.items()} for b in raw]


def test_copy_model_scores_the_baseline_not_more(data):
    directory, info, unigram = data
    cheat = CopyOrUnigram(unigram, info.mask_id)
    honest = score_mlm(cheat, _batches(directory, info), mask_id=info.mask_id)
    assert honest.masked_tokens > 300
    assert 0.02 < honest.mlm_baseline < 0.5
    assert honest.mlm_acc <= honest.mlm_baseline + 1e-9  # knows no context: at most the best constant guess
    # the same cheat on the 80/10/10 inputs (the old meter) scores ~10 points above: the given-away tokens
    leaky = score_mlm(cheat, _batches(directory, info, mix=(0.8, 0.1, 0.1)))
    assert leaky.mlm_acc > honest.mlm_acc + 0.05


def test_meter_refuses_batches_that_give_tokens_away(data):
    directory, info, unigram = data
    leaky = _batches(directory, info, mix=(0.8, 0.1, 0.1))
    with pytest.raises(ValueError, match="MASK"):
        score_mlm(CopyOrUnigram(unigram, info.mask_id), leaky, mask_id=info.mask_id)
    for b in _batches(directory, info):
        check_honest(b, info.mask_id)  # eval_batches are honest by construction


def test_an_oracle_scores_one_and_loss_is_cross_entropy(data):
    directory, info, _ = data
    batches = _batches(directory, info)

    def oracle(input_ids, labels, **_):
        sel = labels != -100
        logits = torch.zeros(int(sel.sum()), len(info.is_continuation))
        logits[torch.arange(len(logits)), labels[sel]] = 5.0
        return SimpleNamespace(masked_logits=logits, masked_labels=labels[sel])

    score = score_mlm(oracle, batches, mask_id=info.mask_id)
    assert score.mlm_acc == 1.0
    v = len(info.is_continuation)
    assert score.mlm_loss == pytest.approx(-np.log(np.exp(5.0) / (np.exp(5.0) + v - 1)), rel=1e-5)


def test_honest_mix_masks_every_chosen_position(data):
    directory, info, _ = data
    assert HONEST_MIX == (1.0, 0.0, 0.0)
    for b in _batches(directory, info):
        sel = b["labels"] != -100
        assert bool(sel.any()) and bool((b["input_ids"][sel] == info.mask_id).all())


def test_mask_mix_option_is_validated_and_honoured(data):
    directory, info, _ = data
    with pytest.raises(ValueError, match="mask_mix"):
        DataOptions(mask_mix=(0.5, 0.1, 0.1))
    data_ = PretrainingData(
        directory, info, DataOptions(max_seq_length=64, batch_size=16, nsp=False, mask_mix=(1.0, 0.0, 0.0))
    )
    b = data_.batch(0, 0)
    sel = b["labels"] != -100
    assert (b["input_ids"][sel] == info.mask_id).all()


# ------------------------------------------------------------------------------------------------ the cloze probe


class _FakeEncoder:
    """fill_mask answers from a function of the sentence; a vocabulary of the given words."""

    def __init__(self, words, guess):
        self.tokenizer = SimpleNamespace(vocab={w: i for i, w in enumerate(words)})
        self.guess, self.seen = guess, []

    def fill_mask(self, texts, top_k=5):
        self.seen += list(texts)
        return [[[{"token": t, "token_id": 0, "score": 0.2} for t in self.guess(s)[:top_k]]] for s in texts]


def test_cloze_probe_scores_oracle_constant_and_skips_unknown_words():
    from bertkit.tasks.cloze import CLOZE_ITEMS, cloze_probe

    answers = {s: list(a) for s, a in CLOZE_ITEMS}
    words = {w for a in answers.values() for w in a} | {"the", ",", "."}
    oracle = cloze_probe(_FakeEncoder(words, lambda s: answers[s] + ["the"] * 5))
    assert oracle.top1 == oracle.top5 == oracle.scored == oracle.total == len(CLOZE_ITEMS)
    constant = cloze_probe(_FakeEncoder(words, lambda s: ["the", ",", ".", "and", "of"]))
    assert constant.top1 == constant.top5 == 0 and constant.scored == len(CLOZE_ITEMS)
    fifth = cloze_probe(_FakeEncoder(words, lambda s: ["the", ",", ".", "of"] + answers[s][:1]))
    assert fifth.top1 == 0 and fifth.top5 == len(CLOZE_ITEMS)
    no_holmes = cloze_probe(_FakeEncoder(words - {"holmes"}, lambda s: answers[s]))
    assert no_holmes.scored == len(CLOZE_ITEMS) - 1 and "skipped" in no_holmes.line()


def test_cloze_probe_runs_on_a_real_encoder(tmp_path):
    from tinymodels import make_model_dir

    from bertkit.features import Encoder
    from bertkit.tasks.cloze import CLOZE_ITEMS, cloze_probe

    words = sorted({w for s, _ in CLOZE_ITEMS for w in s.split() if w != "[MASK]"} | {"holmes", "deal", "head"})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    make_model_dir(tmp_path, vocab)
    score = cloze_probe(Encoder.from_pretrained(tmp_path, precision="fp32"))
    assert score.scored == sum(any(a in vocab for a in answers) for _, answers in CLOZE_ITEMS) >= 3
    assert 0 <= score.top1 <= score.top5 <= score.scored
    assert all(len(guesses) == 5 and all(g in vocab for g in guesses) for _, guesses, _ in score.answers)
