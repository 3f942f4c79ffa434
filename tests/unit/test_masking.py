"""Masking strategies (data/pretraining/masking.py): the registry's token and whole-word entries give bit for bit the
masks of the function they replaced (so a run, and its resume, is unchanged); every strategy's invariants."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.pretraining.instances import VocabInfo
from bertkit.data.pretraining.masking import NO_LABEL, STRATEGIES, mask_instance

SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TOKENS = SPECIALS + [f"w{i}" for i in range(150)] + [f"##p{i}" for i in range(50)]


@pytest.fixture(scope="module")
def vocab() -> VocabInfo:
    return VocabInfo.from_tokens(TOKENS)


def _before_the_seam(ids, special, vocab, mask_prob, max_predictions, whole_word, rng, mix=(0.8, 0.1, 0.1)):
    """instances.mask_instance as it was before the strategies' registry (commit 04e9354), verbatim: the reference
    the registry's token and whole-word entries must reproduce draw for draw."""
    cand = np.flatnonzero(~special)
    labels = np.full(len(ids), NO_LABEL, dtype=np.int64)
    if len(cand) == 0:
        return ids.copy(), labels
    num = min(max_predictions, max(1, round(len(ids) * mask_prob)))
    if whole_word:
        starts = ~vocab.is_continuation[ids[cand]]
        starts[0] = True
        starts[1:] |= np.diff(cand) != 1
        word_of = np.cumsum(starts) - 1
        n_words = int(word_of[-1]) + 1
        bounds = np.concatenate([np.flatnonzero(starts), [len(cand)]])
        chosen: list[int] = []
        for w in rng.permutation(n_words):
            size = int(bounds[w + 1] - bounds[w])
            if len(chosen) >= num:
                break
            if len(chosen) + size > num:
                continue
            chosen.extend(cand[bounds[w] : bounds[w + 1]].tolist())
        picked = np.asarray(sorted(chosen), dtype=np.int64)
    else:
        picked = np.sort(rng.choice(cand, size=min(num, len(cand)), replace=False))
    out = ids.copy()
    labels[picked] = ids[picked]
    r = rng.random(len(picked))
    out[picked[r < mix[0]]] = vocab.mask_id
    rand_pos = picked[r >= mix[0] + mix[2]]
    out[rand_pos] = vocab.random_pool[rng.integers(0, len(vocab.random_pool), len(rand_pos))]
    return out, labels


def _instances(n: int, seed: int = 0, lengths=(3, 130)):
    """Random instances with [CLS] .. [SEP] .. [SEP], words followed by ## pieces a third of the time."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        t = int(rng.integers(*lengths))
        ids = np.where(rng.random(t) < 0.3, rng.integers(156, 206, t), rng.integers(6, 156, t))
        special = np.zeros(t, bool)
        special[[0, t - 1, int(rng.integers(0, t))]] = True
        ids[special] = 4
        ids[0] = 3
        yield ids, special


@pytest.mark.parametrize("strategy", ["token", "whole-word"])
@pytest.mark.parametrize("mix", [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.85, 0.0, 0.15)])
def test_token_and_whole_word_are_the_masks_of_before_the_seam(vocab, strategy, mix):
    """Same ids, rates, caps and seeds: the same inputs and labels, and the generator left in the same state (a
    later draw from it agrees too)."""
    for k, (ids, special) in enumerate(_instances(400, seed=len(strategy))):
        prob, cap = (0.15, 0.3, 0.5)[k % 3], (20, 7, 1000)[k % 3]
        a_rng, b_rng = np.random.default_rng([7, k]), np.random.default_rng([7, k])
        got = mask_instance(ids, special, vocab, prob, cap, strategy, a_rng, mix)
        want = _before_the_seam(ids, special, vocab, prob, cap, strategy == "whole-word", b_rng, mix)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert a_rng.random() == b_rng.random()


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_keeps_the_budget_and_never_picks_a_special_token(vocab, strategy):
    for ids, special in _instances(300, seed=3, lengths=(8, 200)):
        rng, weights = np.random.default_rng(1), np.ones(len(ids))
        masked, labels = mask_instance(ids, special, vocab, 0.2, 30, strategy, rng, weights=weights)
        picked = labels != NO_LABEL
        assert not picked[special].any() and (masked[special] == ids[special]).all()
        assert 1 <= picked.sum() <= min(30, max(1, round(len(ids) * 0.2)))
        assert (labels[picked] == ids[picked]).all() and (masked[~picked] == ids[~picked]).all()


def _config(**kw):
    from bertkit.recipes.pretrain.config import PretrainConfig

    return PretrainConfig(corpus=["c"], output="o", max_steps=5, **kw)


def test_the_flag_takes_the_registry_names_and_whole_word_mask_means_whole_word():
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain.config import PretrainConfig

    assert dataclass_choices(PretrainConfig, "mask_strategy") == tuple(STRATEGIES)
    assert _config().mask_strategy == "token"
    assert _config(whole_word_mask=True).mask_strategy == "whole-word"
    assert _config(whole_word_mask=True, mask_strategy="whole-word").mask_strategy == "whole-word"
    others = [s for s in STRATEGIES if s not in ("token", "whole-word")]
    for other in others:
        with pytest.raises(InputError, match=f"--whole-word-mask with --mask-strategy {other}: "):
            _config(whole_word_mask=True, mask_strategy=other)


def dataclass_choices(cls, name: str) -> tuple:
    import dataclasses

    return tuple(next(f for f in dataclasses.fields(cls) if f.name == name).metadata["choices"])


def test_span_lengths_follow_the_clipped_geometric():
    from bertkit.data.pretraining.masking import SPAN_MAX, SPAN_P, span_lengths

    lengths = span_lengths(np.random.default_rng(0), 200_000)
    assert lengths.min() == 1 and lengths.max() == SPAN_MAX
    mean = (1 - (1 - SPAN_P) ** SPAN_MAX) / SPAN_P  # E[min(G, m)] = sum over k < m of P(G > k): 2.948
    assert lengths.mean() == pytest.approx(mean, abs=0.03)  # 4 standard errors
    assert (lengths == 1).mean() == pytest.approx(SPAN_P, abs=0.005)


def _runs(picked: np.ndarray, ids: np.ndarray, vocab) -> list[int]:
    """Lengths in words of the maximal runs of picked positions."""
    runs, n = [], 0
    for t in range(len(ids)):
        if picked[t]:
            n += int(not vocab.is_continuation[ids[t]] or n == 0)
        elif n:
            runs, n = runs + [n], 0
    return runs + ([n] if n else [])


@pytest.mark.parametrize("strategy", ["whole-word", "span"])
def test_word_strategies_keep_words_whole_and_span_picks_runs_near_its_budget(vocab, strategy):
    runs, picked_n, budget_n = [], 0, 0
    for k, (ids, special) in enumerate(_instances(400, seed=5, lengths=(60, 200))):
        _, labels = mask_instance(ids, special, vocab, 0.15, 1000, strategy, np.random.default_rng(k))
        picked = labels != NO_LABEL
        for t in range(1, len(ids)):  # a ## piece is picked exactly when the piece before it (same word) is
            if vocab.is_continuation[ids[t]] and not special[t] and not special[t - 1]:
                assert picked[t] == picked[t - 1]
        runs += _runs(picked, ids, vocab)
        picked_n, budget_n = picked_n + int(picked.sum()), budget_n + max(1, round(len(ids) * 0.15))
    assert picked_n / budget_n > 0.9
    # single words, adjacent only by chance; spans of ~3 words (less where a budget's end or a [SEP] cuts one)
    assert np.mean(runs) < 1.3 if strategy == "whole-word" else np.mean(runs) > 2.2


def test_the_rate_schedule_runs_from_start_to_end_and_the_flag_reads_one_rate_or_two():
    from bertkit.data.pretraining.masking import mask_prob_at, mask_prob_flag, parse_mask_prob
    from bertkit.errors import InputError

    rates = [mask_prob_at(0.4, 0.15, step, 101) for step in range(101)]
    assert rates[0] == 0.4 and rates[-1] == pytest.approx(0.15) and rates[50] == pytest.approx(0.275)
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert mask_prob_at(0.1, 0.3, 9, 10) == pytest.approx(0.3) and mask_prob_at(0.2, 0.2, 3, 10) == 0.2
    assert (mask_prob_flag("0.3"), mask_prob_flag("0.40:0.15")) == (0.3, "0.4:0.15")
    assert parse_mask_prob(None) == (0.15, 0.15) and parse_mask_prob("0.4:0.15") == (0.4, 0.15)
    for bad in ("0.4:", "1.2", "0.4:0:0.1", "a:b", "0.3:1"):
        with pytest.raises((InputError, ValueError), match="expected a rate in"):
            parse_mask_prob(bad) if ":" in bad else mask_prob_flag(bad)


def test_a_scheduled_rate_sizes_max_predictions_by_its_larger_end_and_is_refused_with_static_masks():
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain.setup import data_options

    cfg = _config(mask_prob="0.15:0.4", nsp=False, short_seq_prob=0.0)
    assert data_options(cfg, 128, 8).max_predictions == 52 and data_options(cfg, 128, 8).mask_prob == 0.15
    assert data_options(_config(mask_prob=0.3, nsp=False, short_seq_prob=0.0), 128, 8).max_predictions == 39
    with pytest.raises(InputError, match="--mask-prob 0.4:0.15 with --masking static: "):
        _config(mask_prob="0.4:0.15", masking="static")
    with pytest.raises(InputError, match="--mask-prob 0.4:2: expected"):
        _config(mask_prob="0.4:2")


def test_adaptive_masks_the_ids_the_model_misses_more_often(vocab):
    """HardTokens after steps where the model always misses ids 6-55 and gets the rest right: those ids are masked
    several times as often, per occurrence, as the others; the count per row stays the budget."""
    from bertkit.data.pretraining.masking import HardTokens

    hard_ids = np.arange(6, 56)
    state = HardTokens(len(TOKENS))
    rng = np.random.default_rng(0)
    for _ in range(30):  # 30 steps of masked predictions, every id seen
        labels = rng.integers(6, len(TOKENS), 2000)
        state.observe(labels, np.isin(labels, hard_ids))
        state.update()
    assert state.error[hard_ids].min() > 0.9 and np.delete(state.error, hard_ids)[6:].max() < 0.1
    picked = np.zeros(len(TOKENS))
    seen = np.zeros(len(TOKENS))
    for k, (ids, special) in enumerate(_instances(400, seed=9, lengths=(40, 120))):
        rng, weights = np.random.default_rng(k), 0.05 + state.error[ids]
        _, labels = mask_instance(ids, special, vocab, 0.15, 1000, "adaptive", rng, weights=weights)
        assert (labels != NO_LABEL).sum() == max(1, round(len(ids) * 0.15))
        np.add.at(seen, ids[~special], 1)
        np.add.at(picked, ids[labels != NO_LABEL], 1)
    rate = picked / np.maximum(seen, 1)
    hard, easy = rate[hard_ids].mean(), np.delete(rate, hard_ids)[6:].mean()
    assert hard > 3 * easy, (hard, easy)  # about 0.4 against 0.04 here


def test_adaptive_state_saved_and_restored_gives_the_same_masks(vocab):
    """What the checkpoint keeps (HardTokens.state, plain floats) restores the state exactly: the next masks equal
    the uninterrupted state's; another state (one more update) masks otherwise."""
    from bertkit.data.pretraining.masking import HardTokens

    def batch():
        ids = np.random.default_rng(4).integers(6, len(TOKENS), (8, 40))
        ids[:, 0], ids[:, -1] = 3, 4
        special = np.zeros_like(ids, dtype=bool)
        special[:, [0, -1]] = True
        return {"input_ids": ids, "labels": np.full_like(ids, NO_LABEL), "attention_mask": np.ones_like(ids),
                "special_tokens_mask": special}  # fmt: skip

    state = HardTokens(len(TOKENS))
    labels = np.random.default_rng(1).integers(6, len(TOKENS), 500)
    state.observe(labels, labels % 3 == 0)
    state.update()
    restored = HardTokens(len(TOKENS))
    restored.load(state.state())
    mix = (0.8, 0.1, 0.1)
    masked = [s.mask_batch(batch(), vocab, 0.3, 20, mix, np.random.default_rng(5)) for s in (state, restored)]
    assert "special_tokens_mask" not in masked[0]
    assert all(np.array_equal(masked[0][k], masked[1][k]) for k in masked[0])
    state.observe(labels, labels % 2 == 0)
    state.update()
    other = state.mask_batch(batch(), vocab, 0.3, 20, (0.8, 0.1, 0.1), np.random.default_rng(5))
    assert not np.array_equal(other["labels"], masked[0]["labels"])
