"""The lazy, vectorised instance layout against the generator it replaced (a per-sentence Python loop, kept here
verbatim as the reference): the same NSP balance, the same share of short-sequence instances, as full instances, and
all of the text used over a few epochs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertkit.data.pretraining.instances import Shard, create_instances, permute
from bertkit.data.pretraining.shards import ShardWriter


def _old_create_instances(
    shard: Shard, max_seq_length: int, short_seq_prob: float, nsp: bool, rng: random.Random
) -> np.ndarray:
    """Instances of one shard as token ranges ``[N, 5]``: (a_start, a_end, b_start, b_end, label).

    With NSP, label 0 = IsNext, 1 = NotNext, and ``len(A) + len(B) + 3 <= max_seq_length``; without, B is empty,
    label -1 and ``len(A) + 2 <= max_seq_length``."""
    sent = np.asarray(shard.sentences)
    docs = np.asarray(shard.documents)
    n_docs = len(docs) - 1
    max_tokens = max_seq_length - (3 if nsp else 2)
    if max_tokens < 2:
        raise ValueError(f"max_seq_length {max_seq_length} is too short for an instance")
    out: list[tuple[int, int, int, int, int]] = []

    def target() -> int:
        return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens

    for d in range(n_docs):
        s_lo, s_hi = int(docs[d]), int(docs[d + 1])
        i = s_lo
        chunk_start, length, goal = s_lo, 0, target()
        while i < s_hi:
            length += int(sent[i + 1] - sent[i])
            if i == s_hi - 1 or length >= goal:
                n = i + 1 - chunk_start  # sentences in the chunk
                if not nsp:
                    a_lo, a_hi = int(sent[chunk_start]), int(sent[i + 1])
                    a_hi = min(a_hi, a_lo + max_tokens)
                    out.append((a_lo, a_hi, 0, 0, -1))
                else:
                    is_random = rng.random() < 0.5
                    if is_random or n >= 2:
                        a_end = rng.randint(1, n - 1) if n >= 2 else 1  # sentences in A
                        a_lo, a_hi = int(sent[chunk_start]), int(sent[chunk_start + a_end])
                    else:  # IsNext from a single sentence: split it inside
                        a_lo, whole = int(sent[chunk_start]), int(sent[i + 1])
                        if whole - a_lo < 2:
                            is_random = True
                            a_hi = whole
                        else:
                            a_hi = rng.randint(a_lo + 1, whole - 1)
                    if is_random:
                        goal_b = max(1, goal - (a_hi - a_lo))
                        other = d
                        for _ in range(10):
                            other = rng.randint(0, n_docs - 1)
                            if other != d or n_docs == 1:
                                break
                        o_lo, o_hi = int(docs[other]), int(docs[other + 1])
                        j = rng.randint(o_lo, o_hi - 1)
                        b_lo = b_hi = int(sent[j])
                        while j < o_hi and b_hi - b_lo < goal_b:
                            b_hi = int(sent[j + 1])
                            j += 1
                        # the unused sentences of the chunk go back to the stream
                        if n >= 2:
                            i = chunk_start + (a_end if n >= 2 else 1) - 1
                    else:
                        b_lo = a_hi
                        b_hi = int(sent[i + 1])
                    # truncate the longer segment at a random end until the pair fits
                    while (a_hi - a_lo) + (b_hi - b_lo) > max_tokens:
                        if a_hi - a_lo > b_hi - b_lo:
                            if rng.random() < 0.5:
                                a_lo += 1
                            else:
                                a_hi -= 1
                        elif rng.random() < 0.5:
                            b_lo += 1
                        else:
                            b_hi -= 1
                    if a_hi > a_lo and b_hi > b_lo:
                        out.append((a_lo, a_hi, b_lo, b_hi, int(is_random)))
                chunk_start, length, goal = i + 1, 0, target()
            i += 1
    return np.asarray(out, dtype=np.int64).reshape(-1, 5)


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Shard:
    """One shard of 300 documents of 2-120 sentences of 3-40 tokens (ids are irrelevant to the layout)."""
    d = tmp_path_factory.mktemp("layout")
    rng = np.random.default_rng(5)
    w = ShardWriter(d, "train", np.dtype(np.uint16), 1 << 40)
    for _ in range(300):
        lengths = rng.integers(3, 41, int(rng.integers(2, 121)))
        w.add(rng.integers(10, 100, int(lengths.sum())).astype(np.int32), lengths)
    w.flush()
    return Shard.open(d, "train-00000")


def _stats(table: np.ndarray, max_tokens: int, n_tokens: int) -> dict[str, float]:
    used = (table[:, 1] - table[:, 0]) + (table[:, 3] - table[:, 2])
    own = (table[:, 1] - table[:, 0]) + np.where(table[:, 4] == 0, table[:, 3] - table[:, 2], 0)  # A + IsNext B
    return {
        "notnext": float((table[:, 4] == 1).mean()),
        "short": float((used < max_tokens // 2).mean()),
        "fill": float(used.mean() / max_tokens),
        "own": float(own.sum() / n_tokens),
    }


def _covered(tables: list[np.ndarray], n_tokens: int) -> float:
    """Share of the shard's tokens inside some A or IsNext B of any of the tables."""
    seen = np.zeros(n_tokens + 1, dtype=np.int64)
    for t in tables:
        np.add.at(seen, t[:, 0], 1)
        np.add.at(seen, t[:, 1], -1)
        isnext = t[t[:, 4] == 0]
        np.add.at(seen, isnext[:, 2], 1)
        np.add.at(seen, isnext[:, 3], -1)
    return float((np.cumsum(seen)[:-1] > 0).mean())


@pytest.mark.parametrize("seq,short_seq_prob", [(128, 0.1), (64, 0.3), (256, 0.2)])
def test_nsp_and_short_sequences_match_the_old_generator(shard, seq, short_seq_prob):
    olds = [_old_create_instances(shard, seq, short_seq_prob, True, random.Random(e)) for e in range(6)]
    news = [create_instances(shard, seq, short_seq_prob, True, e) for e in range(6)]
    old, new = np.concatenate(olds), np.concatenate(news)
    m, n_tok = seq - 3, len(shard.tokens) * 6
    o, w = _stats(old, m, n_tok), _stats(new, m, n_tok)
    # NotNext is 50/50 in both (two binomial proportions: within 4 standard errors of each other and of 0.5)
    se = np.sqrt(0.25 / len(old) + 0.25 / len(new))
    assert abs(w["notnext"] - o["notnext"]) < 4 * se, (o, w)
    assert abs(w["notnext"] - 0.5) < 4 * np.sqrt(0.25 / len(new)), w
    # short_seq_prob gives as many short instances (under half the length) as before
    p = (o["short"] + w["short"]) / 2
    assert abs(w["short"] - o["short"]) < 4 * np.sqrt(p * (1 - p) * (1 / len(old) + 1 / len(new))) + 0.01, (o, w)
    # instances are as full (the old loop overfilled then truncated; the grid's chunks end nearer the target)
    assert w["fill"] > o["fill"] - 0.04, (o, w)
    # NotNext leftovers are not put back into the stream as the old loop did, so one epoch's A and IsNext B cover
    # less of the text (about 2/3 against 9/10; B of NotNext is text too, drawn from the shard); the layout is
    # drawn afresh each epoch, so a few epochs cover nearly all of it
    assert w["own"] > 0.65 * o["own"], (o, w)
    assert _covered(news, len(shard.tokens)) > 0.93


def test_without_nsp_matches_the_old_generator(shard):
    old = np.concatenate([_old_create_instances(shard, 128, 0.1, False, random.Random(e)) for e in range(4)])
    new = np.concatenate([create_instances(shard, 128, 0.1, False, e) for e in range(4)])
    assert (new[:, 4] == -1).all() and (new[:, 3] == new[:, 2]).all() and (new[:, 1] > new[:, 0]).all()
    o, w = _stats(old, 126, len(shard.tokens) * 4), _stats(new, 126, len(shard.tokens) * 4)
    assert abs(w["short"] - o["short"]) < 0.03, (o, w)
    assert w["fill"] > o["fill"] - 0.04 and w["own"] > 0.95 * o["own"], (o, w)


def test_layout_changes_with_the_epoch_and_is_reproducible(shard):
    a, b, c = (create_instances(shard, 128, 0.1, True, e) for e in (0, 0, 1))
    np.testing.assert_array_equal(a, b)
    # the same chunks, laid out afresh: other A/B splits, NotNext draws, random Bs and short targets
    assert len(a) == len(c)
    assert (a != c).any(axis=1).mean() > 0.5


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 4097])
def test_permute_is_a_bijection(n):
    out = permute(np.arange(n), n, [1, 2])
    assert sorted(out.tolist()) == list(range(n))
    if n >= 17:
        assert not np.array_equal(out, np.arange(n))
        assert not np.array_equal(out, permute(np.arange(n), n, [1, 3]))
    np.testing.assert_array_equal(permute(np.arange(n)[::-1], n, [1, 2]), out[::-1])
