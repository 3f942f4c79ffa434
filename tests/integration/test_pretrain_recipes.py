"""Pre-training runs end to end (tiny model, bundled text): fp16 with a live loss scaler in its checkpoints, the paper
and budget recipes, the unigram output bias. The loop's parts alone are in tests/unit/test_pretrain_parts.py; resume:
tests/integration/test_pretrain_run.py (end to end, through ramps), tests/unit/test_training_core.py and
test_pretrain_data.py (each restored piece)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
from tinymodels import TINY_OVERRIDES


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(the first ~30 KB of the bundled Alice, a 600-token vocab.txt trained on it)."""
    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    d = tmp_path_factory.mktemp("corpus")
    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    path = d / "alice.txt"
    path.write_text(gzip.decompress(alice.read_bytes()).decode("utf-8")[:30_000], encoding="utf-8")
    train_vocab([path], vocab_size=600, output=d / "vocab", show_progress=False)
    return path, d / "vocab" / "vocab.txt"


def _config(corpus, out, **kw):
    from bertkit.recipes.pretrain import PretrainConfig

    base = dict(
        corpus=[str(corpus[0])],
        vocab=str(corpus[1]),
        output=str(out),
        model_size="bert-tiny",
        config_overrides=dict(TINY_OVERRIDES),
        seq_len=32,
        batch_size=4,
        quiet=True,
        workers=1,
        precision="fp32",
        lr=1e-3,
        device="cpu",
    )  # the tests compare with loops on the CPU, also on a machine with a GPU
    base.update(kw)
    return PretrainConfig(**base)


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


# --------------------------------------------------------------------------------------------- fp16


def test_fp16_run_scales_the_loss_and_checkpoints_the_scaler(corpus, tmp_path):
    """An fp16 run (allowed on the CPU) trains with a live loss scaler whose state its checkpoints hold. Restoring
    that state exactly: TrainState's round trip, tests/unit/test_training_core.py."""
    from bertkit.recipes.pretrain import pretrain
    from bertkit.training.checkpointing import load_checkpoint

    run = tmp_path / "fp16"
    pretrain(_config(corpus, run, precision="fp16", max_steps=4, save_every=2, keep_checkpoints=5))
    states = [load_checkpoint(run / "checkpoints" / f"step-{s:08d}.pt")["scaler"] for s in (2, 4)]
    assert states[0]["scale"] > 1.0  # a live loss scaler, its state in the checkpoint
    assert [x["_growth_tracker"] for x in states] == [2, 4]  # counted step by step: 4 finite steps
    assert all(torch.isfinite(w).all() for w in _weights(run).values())


# --------------------------------------------------------------------------------------------- time budget, meter


# --------------------------------------------------------------------------------------------- ramps and schedules


# --------------------------------------------------------------------------------------------- the recipes


def test_paper_recipe_is_the_plain_bert_loop(corpus, tmp_path):
    """--recipe paper computes what a plain loop does (Devlin et al.: lr 1e-4 with 5% linear warmup and linear decay,
    dropout 0.1, MLM + NSP, 15% masks, 10% short sequences, zero output bias), bit for bit."""
    from bertkit import BertConfig, BertForPreTraining
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.recipes.pretrain import pretrain
    from bertkit.tokenization import BertTokenizer
    from bertkit.training.optim import build_optimizer, linear_schedule

    out, steps, seed = tmp_path / "paper", 6, 5
    pretrain(_config(corpus, out, recipe="paper", lr=None, max_steps=steps, seed=seed, eval_batches=1))
    tok = BertTokenizer.from_pretrained(out)
    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=len(tok), **TINY_OVERRIDES)).train()
    assert model.config.hidden_dropout_prob == 0.1
    opt = build_optimizer(model, lr=1e-4, weight_decay=0.01)
    sched = linear_schedule(opt, 1, steps)
    data = PretrainingData(
        out / "data" / "shards",
        VocabInfo.from_tokenizer(tok),
        DataOptions(max_seq_length=32, batch_size=4, nsp=True, mask_prob=0.15, short_seq_prob=0.1, seed=seed),
    )
    torch.manual_seed(seed)
    for i in range(steps):
        loss = model(**{k: torch.from_numpy(v) for k, v in data.batch(0, i).items()}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    ours = _weights(out)
    theirs = model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert float((ours["cls.predictions.bias"]).abs().max()) < 0.01  # started at zero


def test_unigram_output_bias_starts_training_at_the_unigram_entropy(corpus, tmp_path):
    """With --output-bias unigram the first held-out loss is the cross-entropy of the held-out tokens under the
    training text's unigram distribution (the plateau a zero-bias model needs many steps to reach); with zero bias
    it is about log(V)."""
    import math

    import numpy as np

    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo, read_meta
    from bertkit.recipes.pretrain import pretrain
    from bertkit.tokenization import BertTokenizer

    losses = {}
    for bias in ("unigram", "zero"):
        out = tmp_path / bias
        pretrain(
            _config(
                corpus,
                out,
                recipe="budget",
                output_bias=bias,
                max_steps=1,
                lr=1e-12,
                eval_batches=25,
                nsp=False,
                short_seq_prob=0.0,
                mask_prob=0.15,
            )
        )
        evals = [x for x in map(eval_line, (out / "metrics.jsonl").read_text().splitlines()) if "eval_loss" in x]
        losses[bias] = evals[0]["eval_loss"]
    shards = tmp_path / "unigram" / "data" / "shards"
    tok = BertTokenizer.from_pretrained(tmp_path / "unigram")
    v = VocabInfo.from_tokenizer(tok)
    train = np.concatenate(
        [np.load(shards / f"{s['name']}.tokens.npy").astype(np.int64) for s in read_meta(shards)["shards"]]
    )
    p = np.bincount(train, minlength=len(tok)) / len(train)
    held = PretrainingData(
        shards, v, DataOptions(max_seq_length=32, batch_size=4, nsp=False, short_seq_prob=0.0), split="eval"
    ).eval_batches(25)
    labels = np.concatenate([b["labels"][b["labels"] != -100] for b in held])
    cross_entropy = float(-np.log(np.maximum(p[labels], 1e-12)).mean())
    entropy = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    assert losses["unigram"] == pytest.approx(cross_entropy, rel=0.03)
    assert losses["unigram"] == pytest.approx(entropy, rel=0.15)
    assert losses["zero"] == pytest.approx(math.log(len(tok)), rel=0.03)
    assert losses["zero"] - cross_entropy > 0.3  # (a 600-token vocabulary on 30 KB is far from uniform, not very)


def eval_line(text: str) -> dict:
    import json

    return json.loads(text)


def test_cooccurrence_embedding_init_fills_the_seen_rows_before_the_first_step(corpus, tmp_path):
    """--embedding-init cooccurrence: the token embeddings (the tied decoder) start as the shards' PPMI-SVD rows at
    the model's own scale; [MASK], which the shards never hold, keeps a random row. With a vanishing lr the saved
    model is the initialisation."""
    from bertkit.data.pretraining.cooccurrence import ppmi_embeddings
    from bertkit.modeling import BertForPreTraining
    from bertkit.recipes.pretrain import pretrain
    from bertkit.tokenization import BertTokenizer

    out = tmp_path / "cooc"
    pretrain(_config(corpus, out, recipe="budget", embedding_init="cooccurrence", max_steps=1, lr=1e-12))
    table = BertForPreTraining.from_pretrained(out).bert.embeddings.word_embeddings.weight.detach()
    expected, seen = ppmi_embeddings(out / "data" / "shards", *table.shape, std=0.02)
    mask_id = BertTokenizer.from_pretrained(out).vocab["[MASK]"]
    assert not seen[mask_id] and float(table[mask_id].abs().max()) > 0
    assert int(seen.sum()) > 400  # most of the 600-token vocabulary occurs in 30 KB
    assert float(table[seen].std()) == pytest.approx(0.02 * 0.8796, rel=0.03)  # the random table's: Google's
    # normal truncated at 2 sigma
    ours, theirs = table[seen] / table[seen].std(), expected[seen] / expected[seen].std()
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-3)
