"""Pre-training data: instances, masking statistics, determinism, whole-word masking, shards (no tokenizer needed),
and the run's Feed (data/pretraining/feed.py) resumed at a saved position across ramp stages."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.pretraining.draws import mask_rows
from bertkit.data.pretraining.echoes import draw_echoes
from bertkit.data.pretraining.instances import (
    DataOptions,
    PretrainingData,
    Shard,
    VocabInfo,
    create_instances,
    mask_instance,
    read_meta,
)
from bertkit.data.pretraining.shards import ShardWriter

SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{i}" for i in range(150)]
PIECES = [f"##p{i}" for i in range(50)]
TOKENS = SPECIALS + WORDS + PIECES
BATCH_KEYS = ("input_ids", "token_type_ids", "attention_mask", "labels")


@pytest.fixture(scope="module")
def vocab() -> VocabInfo:
    return VocabInfo.from_tokens(TOKENS)


def _random_doc(rng: np.random.Generator, n_sent: int) -> tuple[np.ndarray, np.ndarray]:
    """A document of words, a third of them followed by one or two ## pieces."""
    ids, lengths = [], []
    for _ in range(n_sent):
        sent = []
        for _ in range(int(rng.integers(3, 25))):
            sent.append(6 + int(rng.integers(0, len(WORDS))))
            for _ in range(int(rng.choice([0, 0, 0, 0, 1, 2]))):
                sent.append(6 + len(WORDS) + int(rng.integers(0, len(PIECES))))
        ids.extend(sent)
        lengths.append(len(sent))
    return np.asarray(ids, np.int32), np.asarray(lengths, np.int64)


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    """Two shards of 40 documents each plus a held-out shard, written by the real writer."""
    import json

    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    train = ShardWriter(d, "train", np.dtype(np.uint16), shard_tokens=12_000)
    held = ShardWriter(d, "eval", np.dtype(np.uint16), 1 << 62)
    for _ in range(80):
        train.add(*_random_doc(rng, int(rng.integers(2, 40))))
    for _ in range(5):
        held.add(*_random_doc(rng, 20))
    train.flush()
    held.flush()
    meta = {"format": 1, "vocab_size": len(TOKENS), "shards": train.shards, "eval": held.shards[0]}
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def test_writer_made_several_shards(shard_dir):
    meta = read_meta(shard_dir)
    assert len(meta["shards"]) >= 2
    shard = Shard.open(shard_dir, meta["shards"][0]["name"])
    assert shard.sentences[-1] == len(shard.tokens) and shard.documents[-1] == len(shard.sentences) - 1
    assert isinstance(shard.tokens, np.memmap)


@pytest.mark.parametrize("seq", [16, 64, 128])
@pytest.mark.parametrize("nsp", [True, False])
def test_lengths_within_max_seq_length(shard_dir, vocab, seq, nsp):
    data = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=seq, batch_size=8, nsp=nsp, short_seq_prob=0.3))
    inst = data.instances(0)
    a = inst[:, 2] - inst[:, 1]
    b = inst[:, 4] - inst[:, 3]
    assert (a >= 1).all()
    assert (a + b + (3 if nsp else 2) <= seq).all()
    if nsp:
        assert (b >= 1).all()
    for i in range(min(3, data.num_batches(0))):
        batch = data.batch(0, i)
        assert batch["input_ids"].shape[1] <= seq and batch["input_ids"].shape[0] == 8
    # filled up to the length: most instances use nearly all of it
    assert np.median(a + b) >= 0.8 * (seq - 3)


def test_nsp_is_fifty_fifty_and_isnext_is_the_continuation(shard_dir, vocab):
    data = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64))
    labels = np.concatenate([data.instances(e)[:, 5] for e in range(4)])
    n = len(labels)
    p = labels.mean()
    assert n > 1000
    assert abs(p - 0.5) < 4 * np.sqrt(0.25 / n), (p, n)
    inst = data.instances(0)
    for s, a_lo, a_hi, b_lo, _b_hi, label in inst[:300]:
        docs = data.shards[s].documents
        sent = data.shards[s].sentences
        doc_of = np.searchsorted(sent[docs], [a_lo, b_lo], side="right") - 1
        if label == 0:  # IsNext: B comes after A in the same document
            assert b_lo >= a_hi and doc_of[0] == doc_of[1]


def test_random_next_comes_from_another_document(shard_dir, vocab):
    data = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64))
    inst = data.instances(0)
    shard = data.shards[0]
    starts = shard.sentences[shard.documents]
    rows = inst[(inst[:, 0] == 0) & (inst[:, 5] == 1)]
    same = np.searchsorted(starts, rows[:, 1], "right") == np.searchsorted(starts, rows[:, 3], "right")
    assert same.mean() < 0.05


def _mask_many(vocab, whole_word, n=3000, seq=100, mask_prob=0.15, max_pred=1000, seed=0, rows=False):
    """n rows of seq tokens ([CLS] at 0, [SEP] at 40 and at the end) masked one by one by ``mask_instance``, or
    with ``rows`` all at once by the loader's batch route (``draws.mask_rows``, token masking)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(6, len(TOKENS), (n, seq))
    ids[:, 0], ids[:, 40], ids[:, -1] = 3, 4, 4
    special = np.zeros((n, seq), bool)
    special[:, [0, 40, seq - 1]] = True
    if rows:
        masked, labels = mask_rows(
            ids, special, np.full(n, seq), vocab, mask_prob, max_pred, (0.8, 0.1, 0.1), (seed, 0, np.arange(n))
        )
        return list(zip(ids, special, masked, labels))
    out = []
    for i in range(n):
        strategy = "whole-word" if whole_word else "token"
        masked, labels = mask_instance(
            ids[i], special[i], vocab, mask_prob, max_pred, strategy, np.random.default_rng([seed, i])
        )
        out.append((ids[i], special[i], masked, labels))
    return out


@pytest.mark.parametrize("rows", [False, True], ids=["one by one", "batch"])
def test_masking_rate_and_80_10_10(vocab, rows):
    rows = _mask_many(vocab, whole_word=False, rows=rows)
    picked = sum(int((lab != -100).sum()) for _, _, _, lab in rows)
    total = sum(len(ids) for ids, _, _, _ in rows)
    assert picked / total == pytest.approx(0.15, abs=0.002)  # round(100 * 0.15) = 15 per 100-token row
    as_mask = as_same = as_random = 0
    for ids, _, masked, lab in rows:
        sel = lab != -100
        as_mask += int((masked[sel] == vocab.mask_id).sum())
        as_same += int((masked[sel] == ids[sel]).sum())
        as_random += int(((masked[sel] != vocab.mask_id) & (masked[sel] != ids[sel])).sum())
        assert (lab[sel] == ids[sel]).all()
        assert (masked[~sel] == ids[~sel]).all()
    # random replacements can hit the original token (1 in ~200): allow that in the tolerance
    sd = np.sqrt(0.1 * 0.9 / picked)
    assert as_mask / picked == pytest.approx(0.8, abs=5 * np.sqrt(0.16 / picked))
    assert as_same / picked == pytest.approx(0.1, abs=5 * sd + 0.01)
    assert as_random / picked == pytest.approx(0.1, abs=5 * sd + 0.01)


@pytest.mark.parametrize("rows", [False, True], ids=["one by one", "batch"])
def test_cap_max_predictions(vocab, rows):
    for _, _, _, lab in _mask_many(vocab, whole_word=False, n=50, max_pred=7, rows=rows):
        assert (lab != -100).sum() == 7


def test_batch_masking_picks_every_ordinary_position_alike(vocab):
    """The batch route's picks are uniform over the positions: each of the 97 ordinary columns at 15%."""
    picked = np.stack([lab != -100 for *_, lab in _mask_many(vocab, False, n=4000, rows=True)])
    rate = picked.mean(0)
    assert (rate[[0, 40, 99]] == 0).all()
    ordinary = np.delete(rate, [0, 40, 99])
    assert np.abs(ordinary - 0.15).max() < 5 * np.sqrt(0.15 * 0.85 / 4000), ordinary


@pytest.mark.parametrize("route", ["token", "whole-word", "batch"])
def test_special_tokens_never_masked_nor_introduced(vocab, route):
    for ids, special, masked, lab in _mask_many(vocab, route == "whole-word", n=500, rows=route == "batch"):
        assert (lab[special] == -100).all() and (masked[special] == ids[special]).all()
        sel = lab != -100
        random_ones = masked[sel][(masked[sel] != vocab.mask_id)]
        assert not np.isin(random_ones, [0, 1, 2, 3, 4, 5]).any()


def test_whole_word_masking_masks_whole_words(vocab):
    rows = _mask_many(vocab, whole_word=True, n=500)
    cont = vocab.is_continuation
    some_multi = 0
    for ids, special, _, lab in rows:
        sel = lab != -100
        for t in range(1, len(ids)):
            if cont[ids[t]] and not special[t] and not special[t - 1]:
                # a continuation piece is masked exactly when the piece before it (same word) is
                assert sel[t] == sel[t - 1], (t, ids[max(0, t - 3) : t + 2], sel[max(0, t - 3) : t + 2])
                some_multi += int(sel[t])
    assert some_multi > 100
    # the token-level mode does split words
    split = 0
    for ids, special, _, lab in _mask_many(vocab, whole_word=False, n=200):
        sel = lab != -100
        split += sum(int(sel[t] != sel[t - 1]) for t in range(1, len(ids)) if cont[ids[t]] and not special[t - 1])
    assert split > 0


def test_batches_identical_for_same_seed_and_differ_otherwise(shard_dir, vocab):
    def batches(seed, epoch):
        d = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64, batch_size=4, seed=seed))
        return [d.batch(epoch, i) for i in range(3)]

    a, b, c = batches(1, 0), batches(1, 0), batches(2, 0)
    for x, y in zip(a, b):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    assert any(not np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, c))
    # dynamic masking: another epoch, another order and masks
    e1 = batches(1, 1)
    assert any(not np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, e1))


def test_static_masking_repeats_every_dupe_factor_epochs(shard_dir, vocab):
    d = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64, masking="static", dupe_factor=2, seed=3))
    i = 5
    e0, e1, e2 = (d.example(e, i) for e in (0, 1, 2))
    np.testing.assert_array_equal(e0["input_ids"], e2["input_ids"])
    np.testing.assert_array_equal(e0["labels"], e2["labels"])
    assert not (len(e0["input_ids"]) == len(e1["input_ids"]) and np.array_equal(e0["input_ids"], e1["input_ids"]))


def test_ranks_read_disjoint_parts(shard_dir, vocab):
    opts = DataOptions(max_seq_length=64, batch_size=4)
    r0 = PretrainingData(shard_dir, vocab, opts, rank=0, world_size=2)
    r1 = PretrainingData(shard_dir, vocab, opts, rank=1, world_size=2)
    o0, o1 = set(r0.order(0).tolist()), set(r1.order(0).tolist())
    assert not (o0 & o1) and len(o0) == len(o1) and len(o0) * 2 >= len(r0.instances(0)) - 1
    assert r0.num_batches(0) == r1.num_batches(0)


def test_batch_layout(shard_dir, vocab):
    d = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64, batch_size=4))
    b = d.batch(0, 0)
    for r in range(4):
        n = int(b["attention_mask"][r].sum())
        row = b["input_ids"][r]
        assert row[0] == vocab.cls_id and row[n - 1] == vocab.sep_id and (row[n:] == vocab.pad_id).all()
        seps = np.flatnonzero(row[:n] == vocab.sep_id)
        assert len(seps) == 2
        assert (b["token_type_ids"][r, : seps[0] + 1] == 0).all() and (
            b["token_type_ids"][r, seps[0] + 1 : n] == 1
        ).all()
        assert (b["labels"][r, n:] == -100).all()
    assert b["input_ids"].shape[1] % 8 == 0
    assert set(b["next_sentence_label"].tolist()) <= {0, 1}


@pytest.mark.parametrize("short_seq_prob", [0.0, 0.1])
def test_a_batch_built_at_once_is_its_instances_built_one_by_one(shard_dir, vocab, short_seq_prob):
    """The loader's array route (one segment, no NSP, token masking) gives each row what the instance alone gives:
    its tokens are ``instance_tokens``' (the layout's A, an echo's A'), its masks :meth:`example`'s."""
    options = DataOptions(
        max_seq_length=48, batch_size=16, nsp=False, mask_prob=0.3, echo_share=0.4, short_seq_prob=short_seq_prob
    )
    d = PretrainingData(shard_dir, vocab, options)
    assert d.vectorised and not PretrainingData(shard_dir, vocab, DataOptions(nsp=True)).vectorised
    echoes = 0
    for index in range(3):
        b = d.batch(1, index)
        ids = d.ids_at(1, np.arange(index * 16, index * 16 + 16))
        assert b["input_ids"].shape[1] % 8 == 0 and set(b) == set(BATCH_KEYS)
        for r, i in enumerate(ids):
            n = int(b["attention_mask"][r].sum())
            tokens, types, special, _ = d.instance_tokens(1, int(i))
            alone = d.example(1, int(i))
            assert n == len(tokens) and (b["attention_mask"][r, n:] == 0).all()
            np.testing.assert_array_equal(alone["original_ids"], tokens)
            np.testing.assert_array_equal(b["token_type_ids"][r, :n], types)
            for k in ("input_ids", "labels"):
                np.testing.assert_array_equal(b[k][r, :n], alone[k])
            labelled = b["labels"][r] != -100
            budget = min(15, max(1, round(n * 0.3)), n - int(special.sum()))  # max_predictions: ceil(48 * 0.3)
            assert not labelled[:n][special].any() and labelled.sum() == budget
            echoes += int(types.any())
    assert 8 < echoes < 32, echoes  # 0.4 of 48 rows


@pytest.mark.parametrize("mode", ["coupled", "apart"])
def test_echo_masks_choose_twins_together_or_apart(shard_dir, vocab, mode):
    """``--echo-mask``, against the independent batch of the same draws, twin by twin (each A' column's twin found
    here from the echo's kept tokens). ``coupled``: each chosen token of A's twin is chosen too, shown as [MASK];
    A''s own choices with an unchosen twin stay (the copy). ``apart``: where both twins were chosen, A''s is not (its
    token shown as it is); nothing else changes."""
    options = dict(max_seq_length=48, batch_size=16, nsp=False, mask_prob=0.3, echo_share=0.6)
    free = PretrainingData(shard_dir, vocab, DataOptions(**options))
    tied = PretrainingData(shard_dir, vocab, DataOptions(**options, echo_mask=mode))
    both, copies = 0, 0
    for index in range(3):
        x, y, ids = free.batch(0, index), tied.batch(0, index), free.ids_at(0, np.arange(index * 16, index * 16 + 16))
        lo_hi = free._spans(0, ids)
        echo, a_len, kept = draw_echoes(free.options, free._key(0), ids, lo_hi[2] - lo_hi[1])
        assert np.array_equal(x["token_type_ids"], y["token_type_ids"]) and echo.any()
        changed = (x["labels"] != y["labels"]) | (x["input_ids"] != y["input_ids"])
        assert not changed[y["token_type_ids"] == 0].any()  # A and plain rows as the independent batch's
        for r in np.flatnonzero(echo):
            b_first, b_len = a_len[r] + 2, int(y["token_type_ids"][r].sum()) - 1
            twin_cols = set()
            for k, j in enumerate(np.flatnonzero(kept[r])[:b_len]):  # A''s k-th token is A's j-th
                a_col, b_col = j + 1, b_first + k
                twin_cols.add(b_col)
                chosen = x["labels"][r, b_col] != -100
                original = x["labels"][r, b_col] if chosen else x["input_ids"][r, b_col]
                if x["labels"][r, a_col] != -100 and (mode == "coupled" or chosen):
                    both += 1
                    if mode == "coupled":
                        assert y["labels"][r, b_col] == original and y["input_ids"][r, b_col] == vocab.mask_id
                    else:
                        assert y["labels"][r, b_col] == -100 and y["input_ids"][r, b_col] == original
                else:
                    copies += int(chosen)
                    assert not changed[r, b_col]
            assert not changed[r, [c for c in range(b_first, b_first + b_len) if c not in twin_cols]].any()
    assert both > 20 and copies > 20, (both, copies)
    alone = tied.example(0, int(ids[-1]))["labels"]  # an instance alone is masked as in its batch
    assert np.array_equal(alone, y["labels"][-1, : len(alone)])
    with pytest.raises(ValueError, match="echo_mask"):
        DataOptions(nsp=False, echo_share=0.2, echo_mask="tied")


def test_pair_segments_without_nsp_split_a_run_at_a_sentence_boundary(shard_dir, vocab):
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain.config import PretrainConfig
    from bertkit.recipes.pretrain.setup import data_options

    cfg = PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=False, segments="pair", short_seq_prob=0.1)
    options = data_options(cfg, 64, 8)  # the flag reaches the data
    assert options.segments == "pair" and not options.nsp
    data = PretrainingData(shard_dir, vocab, options)
    inst = data.instances(0)
    a, b = inst[:, 2] - inst[:, 1], inst[:, 4] - inst[:, 3]
    pairs = b > 0
    assert (inst[:, 5] == -1).all() and (a >= 1).all() and (a + b + 3 <= 64).all()
    assert 0.5 < pairs.mean() < 1.0, pairs.mean()  # a one-sentence run stays one segment
    whole = 0
    for s, a_lo, a_hi, b_lo, b_hi, _ in inst[pairs][:400]:
        sent, docs = data.shards[s].sentences, data.shards[s].documents
        doc_of = np.searchsorted(sent[docs], [a_lo, b_hi - 1], side="right") - 1
        assert b_lo >= a_hi and doc_of[0] == doc_of[1]  # B follows A in its document
        if b_lo == a_hi:  # not truncated at the split: it lies on a sentence boundary
            whole += 1
            assert a_hi in sent
    assert whole > 100
    # the tokens: [CLS] A [SEP] B [SEP], B's types 1, neither [SEP] ever masked; a single run keeps one [SEP]
    batch, two = data.batch(0, 0), 0
    for r in range(8):
        n = int(batch["attention_mask"][r].sum())
        seps = np.flatnonzero(batch["input_ids"][r, :n] == vocab.sep_id)
        assert seps[-1] == n - 1 and len(seps) in (1, 2)
        two += len(seps) == 2
        assert (batch["labels"][r, seps] == -100).all()
        assert (batch["token_type_ids"][r, : seps[0] + 1] == 0).all() and (
            batch["token_type_ids"][r, seps[0] + 1 : n] == 1
        ).all()
    assert two >= 3 and "next_sentence_label" not in batch
    with pytest.raises(ValueError, match="segments"):
        DataOptions(segments="three")
    # a pair's B is the text after A, an echo's is A again: none beside pairs (they were built silently as none)
    with pytest.raises(InputError, match="--echo-share 0.2 with --segments pair"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=False, segments="pair", echo_share=0.2)
    with pytest.raises(InputError, match="--echo-mask apart: no instance is an echo"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=False, segments="pair", echo_mask="apart")
    with pytest.raises(InputError, match="segments='pair'"):
        DataOptions(nsp=False, segments="pair", echo_share=0.2)


def test_echo_instances_repeat_their_first_segment_with_tokens_dropped(shard_dir, vocab):
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain.config import PretrainConfig
    from bertkit.recipes.pretrain.setup import data_options

    cfg = PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=False, echo_share=0.5, short_seq_prob=0.1)
    options = data_options(cfg, 64, 8)  # the flag reaches the data
    assert options.echo_share == 0.5
    echoed = PretrainingData(shard_dir, vocab, options)
    plain = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64, batch_size=8, nsp=False))
    n_echo, dropped, kept = 0, 0, 0
    for i in range(300):
        ids, types, special, _ = echoed.instance_tokens(0, i)
        seps = np.flatnonzero(ids == vocab.sep_id)
        if len(seps) == 1:  # not an echo: the plain instance, token for token
            assert np.array_equal(ids, plain.instance_tokens(0, i)[0])
            continue
        n_echo += 1
        a, b = ids[1 : seps[0]], ids[seps[0] + 1 : -1]
        assert 1 <= len(a) <= int(61 / 1.8) and 1 <= len(b) <= len(a) and len(ids) <= 64
        assert np.array_equal(a, plain.instance_tokens(0, i)[0][1 : 1 + len(a)])  # A: the instance's first tokens
        j = 0  # B: A with tokens dropped, in A's order
        for t in b:
            while a[j] != t:
                j += 1
            j += 1
        dropped, kept = dropped + len(a) - len(b), kept + len(b)
        assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1 :] == 1).all()
        assert special[[0, seps[0], len(ids) - 1]].all() and special.sum() == 3
        assert np.array_equal(ids, echoed.instance_tokens(0, i)[0])  # the same draw every time
    assert 100 < n_echo < 200, n_echo
    assert 0.1 < dropped / (dropped + kept) < 0.3  # about 1 - ECHO_KEEP of A's tokens
    # the held-out batches score no echo: the same as a run without them
    for x, y in zip(echoed.eval_batches(3), plain.eval_batches(3)):
        assert np.array_equal(x["input_ids"], y["input_ids"]) and np.array_equal(x["labels"], y["labels"])
    # --echo-keep: a short A' leaves more of the sequence to A
    cfg = PretrainConfig(
        corpus=["c"], output="o", max_steps=5, nsp=False, echo_share=0.5, echo_keep=0.25, short_seq_prob=0.1
    )
    short = PretrainingData(shard_dir, vocab, data_options(cfg, 64, 8))
    sizes = [np.flatnonzero(short.instance_tokens(0, i)[0] == vocab.sep_id) for i in range(300)]
    a_len = [s[0] - 1 for s in sizes if len(s) == 2]
    b_len = [s[1] - s[0] - 1 for s in sizes if len(s) == 2]
    assert max(a_len) == int(61 / 1.25) and 0.15 < sum(b_len) / sum(a_len) < 0.35
    with pytest.raises(InputError, match=r"--echo-keep 0.5: no instance is an echo here \(with --echo-share 0\)"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, echo_share=0.0, echo_keep=0.5)
    with pytest.raises(InputError, match=r"--echo-stage last: no instance is an echo here \(beside --nsp\)"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=True, echo_stage="last")
    with pytest.raises(InputError, match="--echo-mask coupled: no instance is an echo"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, echo_share=0.0, echo_mask="coupled")
    for mode in ("coupled", "apart"):  # adaptive masks after the loader: neither mode would act
        with pytest.raises(InputError, match=f"--echo-mask {mode} with --mask-strategy adaptive"):
            PretrainConfig(
                corpus=["c"],
                output="o",
                max_steps=5,
                nsp=False,
                echo_share=0.2,
                echo_mask=mode,
                mask_strategy="adaptive",
            )
    # --echo-stage last: none in a ramp's shorter stage, the share at the final length
    cfg = PretrainConfig(
        corpus=["c"], output="o", max_steps=5, nsp=False, echo_share=0.5, echo_stage="last", seq_len=64
    )
    assert data_options(cfg, 32, 16).echo_share == 0.0 and data_options(cfg, 64, 8).echo_share == 0.5
    first = PretrainConfig(  # --echo-stage first: the other way round
        corpus=["c"], output="o", max_steps=5, nsp=False, echo_share=0.5, echo_stage="first", seq_len=64
    )
    assert data_options(first, 32, 16).echo_share == 0.5 and data_options(first, 64, 8).echo_share == 0.0
    with pytest.raises(InputError, match="echo_keep"):
        DataOptions(nsp=False, echo_share=0.2, echo_keep=0.0)
    with pytest.raises(InputError, match="--echo-share 0.2 with --nsp"):
        PretrainConfig(corpus=["c"], output="o", max_steps=5, nsp=True, echo_share=0.2)
    with pytest.raises(InputError, match="echo_share=0.2 with nsp=True: .*; use --no-nsp"):
        DataOptions(nsp=True, echo_share=0.2)


def test_eval_batches_are_fixed_and_held_out(shard_dir, vocab):
    d = PretrainingData(shard_dir, vocab, DataOptions(max_seq_length=64, batch_size=4), split="eval")
    a, b = d.eval_batches(3), d.eval_batches(3)
    assert len(a) == 3
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])


def test_single_sentence_document_and_tiny_seq(vocab, tmp_path):
    w = ShardWriter(tmp_path, "train", np.dtype(np.uint16), 1 << 30)
    w.add(np.arange(6, 46, dtype=np.int32), np.array([40]))
    w.add(np.arange(6, 16, dtype=np.int32), np.array([10]))
    w.flush()
    shard = Shard.open(tmp_path, "train-00000")
    inst = create_instances(shard, 8, 0.0, True, 0)
    assert len(inst) > 0 and ((inst[:, 2] - inst[:, 1]) + (inst[:, 4] - inst[:, 3]) <= 5).all()
    with pytest.raises(ValueError, match="too short"):
        create_instances(shard, 4, 0.0, True, 0)


def test_options_validated():
    with pytest.raises(ValueError, match="mask_prob"):
        DataOptions(mask_prob=1.5)
    with pytest.raises(ValueError, match="masking"):
        DataOptions(masking="sometimes")
    assert DataOptions(max_seq_length=128).max_predictions == 20


def test_feed_resumed_at_a_saved_position_gives_the_same_batches_across_ramp_stages(shard_dir, vocab):
    """data/pretraining/feed.py: the data position a checkpoint saves, (stage, epoch, index), puts a fresh Feed where
    the
        uninterrupted one was. Resumed before, at or after a ramp's stage boundary (sequence length 32 -> 64, batch size
        2 -> 4), it gives the same batches as the run that was not stopped. (The loop's order, as pretrain runs it:
        ``advance(step)`` to enter a stage, then ``next``; a checkpoint after N steps holds ``position()``.)"""
    from types import SimpleNamespace

    from bertkit.data.pretraining.feed import Feed
    from bertkit.training.distributed import DistContext

    total = 40  # stages: (32, 2) for steps 0-9, (32, 4) for 10-19, (64, 4) from 20
    cfg = SimpleNamespace(
        seq_len=64,
        batch_size=4,
        seq_ramp="32:0.5",
        batch_ramp="2:0.25",
        two_phase=False,
        phase2_seq_len=None,
        phase2_batch_size=None,
    )
    loader = SimpleNamespace(get=lambda data, epoch, index: data.batch(epoch, index))

    def feed(position=None) -> Feed:
        f = Feed(cfg, shard_dir, vocab, DistContext(), lambda s, b: DataOptions(max_seq_length=s, batch_size=b, seed=1))
        f.start(total, position)
        return f

    def run(f: Feed, start: int, saved: dict | None = None) -> list[dict]:
        out = []
        for step in range(start, total):
            if saved is not None:
                saved[step] = f.position()  # what a checkpoint after `step` steps holds
            f.advance(step, total)
            out.append(f.next(loader))
        return out

    positions: dict[int, dict] = {}
    whole = run(feed(), 0, positions)
    assert [b["input_ids"].shape[0] for b in (whole[9], whole[10], whole[20])] == [2, 4, 4]
    assert whole[19]["input_ids"].shape[1] <= 32 < whole[20]["input_ids"].shape[1] <= 64
    for at in (5, 10, 11, 19, 20, 33):
        resumed = run(feed(positions[at]), at)
        assert len(resumed) == total - at
        for step, (a, b) in enumerate(zip(resumed, whole[at:]), start=at):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), (at, step)
    off_by_one = run(feed(positions[11]), 10)[0]  # the comparison can fail: the next position's batch differs
    assert not np.array_equal(off_by_one["input_ids"], whole[10]["input_ids"])


def test_feed_schedules_the_mask_rate_by_step_through_the_prefetcher_and_resumes_exactly(shard_dir, vocab):
    """--mask-prob 0.5:0.1 with two micro-batches a step: each batch is masked at its step's rate (both micro-batches
    of a step alike), the prefetcher's batches built ahead equal those built when asked, and a Feed resumed at a
    saved position and step gives the uninterrupted run's batches; the prefetcher counts the tokens it handed over."""
    from types import SimpleNamespace

    from bertkit.data.pretraining.feed import Feed
    from bertkit.data.pretraining.masking import mask_prob_at
    from bertkit.data.pretraining.prefetch import Prefetcher
    from bertkit.training.distributed import DistContext

    total, accum = 12, 2
    cfg = SimpleNamespace(
        seq_len=64, batch_size=8, seq_ramp=None, batch_ramp=None, two_phase=False, phase2_seq_len=None,
        phase2_batch_size=None, mask_prob="0.5:0.1", grad_accum=accum,
    )  # fmt: skip
    options = lambda s, b: DataOptions(max_seq_length=s, batch_size=b, seed=1, max_predictions=64)  # noqa: E731

    def run(start: int, position=None, saved=None, loader=None) -> list[dict]:
        f = Feed(cfg, shard_dir, vocab, DistContext(), options)
        f.start(total, position)
        loader = loader or SimpleNamespace(get=lambda data, e, i, ahead=None, **kw: data.batch(e, i, **kw))
        out = []
        for step in range(start, total):
            if saved is not None:
                saved[step] = f.position()
            f.advance(step, total)
            out += [f.next(loader) for _ in range(accum)]
        return out

    positions: dict[int, dict] = {}
    whole = run(0, saved=positions)
    share = [float((b["labels"] != -100).sum() / b["attention_mask"].sum()) for b in whole]
    for m in range(0, len(whole), 2):  # a step's two micro-batches share its rate (round(len * p) per row)
        assert share[m] == pytest.approx(mask_prob_at(0.5, 0.1, m // 2, total), abs=0.02)
    assert share[0] > 0.45 and share[-1] < 0.13 and all(a >= b - 0.02 for a, b in zip(share, share[2:]))
    prefetcher = Prefetcher(0)
    try:
        ahead = run(0, loader=prefetcher)
    finally:
        prefetcher.close()
    # the loader's own rate over what it handed over (the log line's loader_tokens_per_s), then a fresh window
    handed = prefetcher.tokens
    rates = prefetcher.rates()
    assert handed == sum(int(b["attention_mask"].sum()) for b in ahead) and rates["loader_tokens_per_s"] > 0
    assert rates["loader_wait_s"] >= 0 and prefetcher.rates() == {"loader_wait_s": 0.0}
    for at in (3, 7):
        resumed = run(at, positions[at])
        for a, b, c in zip(resumed, whole[at * accum :], ahead[at * accum :]):
            assert all(np.array_equal(a[k], b[k]) and np.array_equal(c[k], b[k]) for k in a)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(ahead, whole) for k in a)


def test_held_out_batches_are_masked_by_token_at_the_papers_rate_whatever_the_run_trains_with(shard_dir, vocab):
    from types import SimpleNamespace

    from bertkit.data.pretraining.feed import Feed
    from bertkit.data.pretraining.masking import EVAL_MASK_PROB
    from bertkit.training.distributed import DistContext

    cfg = SimpleNamespace(seq_len=64, batch_size=4, seq_ramp=None, batch_ramp=None, two_phase=False)
    trained = lambda s, b: DataOptions(s, b, mask_prob=0.4, mask_strategy="whole-word")  # noqa: E731
    feed = Feed(cfg, shard_dir, vocab, DistContext(), trained)
    held, train = feed.make(64, 4, "eval").options, feed.make(64, 4).options
    assert (held.mask_strategy, held.mask_prob, held.max_predictions) == ("token", EVAL_MASK_PROB, 10)
    assert (train.mask_strategy, train.mask_prob, train.max_predictions) == ("whole-word", 0.4, 26)


def test_feed_with_adaptive_masking_resumes_exactly_from_its_saved_state(shard_dir, vocab):
    """--mask-strategy adaptive: batches come unmasked from the (prefetching) loader and the Feed masks them from
    HardTokens, which a fake model's misses update each step; a Feed resumed from a saved position (its state in
    it) gives the uninterrupted run's batches, and the masks do follow the state (they differ from uniform ones)."""
    from types import SimpleNamespace

    from bertkit.data.pretraining.feed import Feed
    from bertkit.data.pretraining.prefetch import Prefetcher
    from bertkit.training.distributed import DistContext

    total = 10
    cfg = SimpleNamespace(seq_len=64, batch_size=4, seq_ramp=None, batch_ramp=None, two_phase=False,
                          mask_strategy="adaptive", mask_prob="0.4:0.2", grad_accum=1)  # fmt: skip
    options = lambda s, b: DataOptions(max_seq_length=s, batch_size=b, seed=1, mask_strategy="adaptive")  # noqa: E731

    def run(start: int, position=None, saved=None) -> list[dict]:
        f = Feed(cfg, shard_dir, vocab, DistContext(), options)
        f.start(total, position)
        loader, out = Prefetcher(0), []
        try:
            for step in range(start, total):
                f.advance(step, total)
                out.append(b := f.next(loader))
                labels = b["labels"][b["labels"] != -100]
                f.hard.observe(labels, labels % 4 != step % 4)  # the "model" misses 3 ids in 4, changing
                f.learned()
                if saved is not None:
                    saved[step + 1] = f.position()  # the checkpoint after this step
        finally:
            loader.close()
        return out

    positions: dict[int, dict] = {}
    whole = run(0, saved=positions)
    assert "special_tokens_mask" not in whole[0] and len(positions[4]["hard_tokens"]) == vocab.vocab_size
    for at in (1, 4, 9):
        resumed = run(at, positions[at])
        for a, b in zip(resumed, whole[at:]):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    fresh = run(4, {k: v for k, v in positions[4].items() if k != "hard_tokens"})  # the state lost: other masks
    assert not np.array_equal(fresh[0]["labels"], whole[4]["labels"])
