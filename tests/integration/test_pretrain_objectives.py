"""The pre-training objectives' registry (``recipes/pretrain/objectives``): a new objective is one file plus its
line in ``OBJECTIVES``. A toy objective written in a file of its own, registered, runs through the one loop with
its defaults, its figures in metrics.jsonl and its refusals; a name outside the registry is refused naming the
choices; and every file of the package is registered. The BLiMP probe reads each objective's masked LM as the scorer
does, and an mntp run (with LAMB) resumes exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

TOY = '''
"""A toy objective: masked LM with half the tokens chosen, and one figure of its own, the masked share."""
from bertkit.errors import InputError
from bertkit.recipes.pretrain.objectives import Objective


class Toy(Objective):
    defaults = {"mask_prob": 0.5, "nsp": False}

    def check(self, cfg):
        if cfg.whole_word_mask:
            raise InputError("--whole-word-mask: the toy objective masks pieces")

    def count(self, meter, output, batch, cfg):
        meter.add(toy_masked=output.masked_labels.numel(), toy_tokens=int(batch["attention_mask"].sum()))

    def window(self, ctx, meter, cfg):
        return {"toy_masked_share": meter.ratio("toy_masked", "toy_tokens")}


OBJECTIVE = Toy()
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    from bertkit.recipes.pretrain import objectives

    (tmp_path / "toy_objective.py").write_text(TOY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(objectives.OBJECTIVES, "toy", "toy_objective")
    yield "toy"
    sys.modules.pop("toy_objective", None)


def _config(corpus, out: Path, **extra):
    from bertkit.recipes.pretrain import PretrainConfig

    path, vocab = corpus
    return PretrainConfig(
        corpus=[str(path)],
        vocab=str(vocab),
        output=str(out),
        model_size="bert-tiny",
        config_overrides={"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64},
        seq_len=32,
        batch_size=4,
        max_steps=4,
        log_every=2,
        eval_batches=1,
        quiet=True,
        workers=1,
        precision="fp32",
        threads=1,
        **extra,
    )


def test_a_new_objective_is_one_file_and_one_registry_entry(alice_corpus, tmp_path, toy):
    from bertkit.recipes.pretrain import pretrain

    out = pretrain(_config(alice_corpus, tmp_path / "run", objective=toy))
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["objective"] == "toy" and record["config"]["mask_prob"] == 0.5  # its defaults
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    shares = [x["toy_masked_share"] for x in lines if "loss" in x]
    assert len(shares) == 2  # its figure on every log line (steps 2 and 4)
    # about half the tokens chosen (rounded up per sequence): far from the 15% of a run with MLM's own masking
    assert all(0.4 < s < 0.6 for s in shares), shares
    assert (out / "model.safetensors").is_file()


def test_an_objective_refuses_what_it_cannot_do_before_writing(alice_corpus, tmp_path, toy):
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain import pretrain

    out = tmp_path / "refused"
    with pytest.raises(InputError, match="--whole-word-mask: the toy objective"):
        pretrain(_config(alice_corpus, out, objective=toy, whole_word_mask=True))
    assert not out.exists()


def test_the_registry_names_every_objective_file_and_refuses_others():
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain import objectives
    from bertkit.recipes.pretrain.config import PretrainConfig

    files = {p.stem for p in Path(objectives.__file__).parent.glob("*.py")} - {"__init__"}
    assert {m.rpartition(".")[2] for m in objectives.OBJECTIVES.values()} == files
    assert all(isinstance(objectives.get(name), objectives.Objective) for name in objectives.OBJECTIVES)
    with pytest.raises(InputError, match="--objective nope: .*choose one of mlm, electra, mntp"):
        objectives.get("nope")
    field = next(f for f in PretrainConfig.__dataclass_fields__.values() if f.name == "objective")
    assert field.metadata["choices"] == tuple(objectives.OBJECTIVES)  # the flag's choices are the registry's


BLIMP_PAIRS = {  # (field, pairs) per paradigm: words of the Alice corpus, so the vocabulary holds them
    "agreement_a": ("morphology", [("alice was very tired .", "alice were very tired ."), ("she is .", "she are .")]),
    "order_b": ("syntax", [("the rabbit ran away .", "the away ran rabbit ."), ("it was a cat .", "it a was cat .")]),
}


@pytest.mark.parametrize("objective", ["mlm", "electra", "mntp"])
def test_the_blimp_probe_scores_the_runs_masked_lm_as_the_scorer_does(alice_corpus, tmp_path, objective):
    """--blimp DIR: at each held-out evaluation, the probe's figure goes to metrics.jsonl; at the last step it is
    exactly what BLiMP's scorer gives the saved masked LM (ELECTRA's: its generator; mntp's read at j - 1, as its
    config.json says) on the same sample."""
    from bertkit.recipes.pretrain import objectives, pretrain
    from bertkit.tasks.blimp import BlimpProbe, PllScorer
    from bertkit.tokenization import load_tokenizer

    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for uid, (field, pairs) in BLIMP_PAIRS.items():
        rows = [{"sentence_good": g, "sentence_bad": b, "field": field, "UID": uid} for g, b in pairs]
        (blimp / f"{uid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    mixed = {"causal_ratio": 0.5} if objective == "mntp" else {}  # half the rows causal: some in 4 batches of 4
    out = pretrain(
        _config(
            alice_corpus, tmp_path / "run", objective=objective, blimp=str(blimp), blimp_pairs=2, eval_every=2, **mixed
        )
    )
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    if objective == "mntp":  # the causal rows' figures beside the masked ones; config.json says how the head reads
        assert all({"causal_loss", "train_causal_acc"} <= set(x) for x in lines if "loss" in x)
        assert any(x["causal_loss"] > 0 for x in lines if "loss" in x)
        assert json.loads((out / "config.json").read_text())["bertkit_objective"] == "mntp"
    probed = {x["step"]: x["eval_blimp"] for x in lines if "eval_blimp" in x}
    assert sorted(probed) == [2, 4] and all(0 <= v <= 100 for v in probed.values())
    masked_lm = out / objectives.get(objective).masked_lm_dir
    scorer = PllScorer.from_pretrained(masked_lm)
    probe = BlimpProbe(blimp, load_tokenizer(masked_lm), pairs_per_paradigm=2)
    assert probe.pairs == 4
    assert probe(scorer.model) == pytest.approx(probed[4], abs=1e-9)


def test_a_bad_blimp_directory_is_refused_before_the_run_writes(alice_corpus, tmp_path):
    """--blimp's files are read before OUTPUT is touched: a bad row is one line naming file and line, and the
    run leaves nothing (no vocabulary trained, no shards written)."""
    from bertkit.errors import InputError
    from bertkit.recipes.pretrain import pretrain

    blimp = tmp_path / "blimp"
    blimp.mkdir()
    (blimp / "broken.jsonl").write_text("{not json\n", encoding="utf-8")
    out = tmp_path / "run"
    with pytest.raises(InputError, match=r"broken\.jsonl:1: not valid JSON"):
        pretrain(_config(alice_corpus, out, blimp=str(blimp), blimp_pairs=2))
    assert not out.exists()


def test_mntp_with_lamb_resumed_from_a_checkpoint_ends_as_the_uninterrupted_run(alice_corpus, tmp_path):
    """The causal rows are drawn from torch's RNG and LAMB's moments are optimizer state: both are in the checkpoint.
    A copy of a finished 4-step run put back to its step-2 checkpoint (as a run killed after it) and resumed ends with
    the uninterrupted run's weights, bit for bit (dropout on, half the rows causal)."""
    import shutil

    from safetensors.torch import load_file

    from bertkit.recipes.pretrain import pretrain

    settings = dict(objective="mntp", optimizer="lamb", causal_ratio=0.5, dropout=0.1, save_every=2)
    whole = pretrain(_config(alice_corpus, tmp_path / "whole", **settings))
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    (cut / "checkpoints" / "step-00000004.pt").unlink()
    (cut / "checkpoints" / "latest").write_text("step-00000002.pt\n", encoding="utf-8")
    for name in ("model.safetensors", "config.json"):  # what only the run's end writes
        (cut / name).unlink()
    record = json.loads((cut / "run.json").read_text())
    record.pop("finished")
    (cut / "run.json").write_text(json.dumps(record), encoding="utf-8")
    pretrain(_config(alice_corpus, cut, resume=True, **settings))
    a, b = load_file(whole / "model.safetensors"), load_file(cut / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
