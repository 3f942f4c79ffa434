"""BLiMP (``bertkit evaluate --task blimp``, bertkit.tasks.blimp) against its definition: the command's
metrics.json equals the overall figure recomputed here with a naive loop (one masked copy at a time, full-vocabulary
logits, the word's later pieces found by their ``##``), for both PLLs and both architectures; a model built to tie
every pair scores 0%, not 50%; the probe for pre-training gives the command's number on its sample; bad data is one
line naming file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tinymodels import make_model_dir
from tinymodernbert import fixture_vocab, make_modernbert_dir

from bertkit.cli import main
from bertkit.errors import InputError
from bertkit.tasks.blimp import BlimpProbe, Paradigm, PllScorer, evaluate_blimp, read_blimp, summarize, table
from bertkit.tokenization import load_tokenizer

# three paradigms, two fields; sentences repeat across pairs (as BLiMP's do) and some words split into pieces
PARADIGMS = {
    "agreement_a": (
        "morphology",
        [
            ("the film was good .", "the film were good ."),
            ("alice watches films .", "alice watch films ."),
            ("the film was good .", "the films was good ."),
        ],
    ),
    "island_b": (
        "syntax",
        [
            ("who does bob like ?", "who does bob like carol ?"),
            ("what did dave watch ?", "what did dave watched ?"),
        ],
    ),
    "quantifier_c": (
        "syntax",
        [
            ("the story is wonderful .", "the story are wonderful ."),
            ("bobs lives in rome .", "bobs live in rome ."),
            ("carol smiles .", "carol smile ."),
            ("the cast was great .", "the cast were great ."),
        ],
    ),
}


def write_blimp(directory: Path, paradigms: dict = PARADIGMS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for uid, (field, pairs) in paradigms.items():
        rows = [
            {"sentence_good": g, "sentence_bad": b, "field": field, "UID": uid, "pairID": str(i)}
            for i, (g, b) in enumerate(pairs)
        ]
        (directory / f"{uid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return directory


@pytest.fixture(scope="module", params=["bert", "bert-masked-lm", "modernbert"])
def model_dir(request, tmp_path_factory, fixtures_dir):
    """A random model whose scores depend on context by nats (weights 10x the default spread): what `bertkit
    pretrain` saves (BERT's pre-training heads), a BERT masked LM (an ELECTRA run's generator/), a ModernBERT."""
    from bertkit.modeling import BertForMaskedLM, BertForPreTraining

    vocab = fixture_vocab(fixtures_dir)
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "modernbert":
        return make_modernbert_dir(path, vocab, initializer_range=0.2)
    cls = BertForMaskedLM if request.param == "bert-masked-lm" else BertForPreTraining
    return make_model_dir(path, vocab, cls=cls, layers=2, initializer_range=0.2)


def naive_pll(model, tokenizer, sentence: str, word_l2r: bool) -> float:
    """The definition, one copy at a time: mask token i (and, for word-l2r, the ``##`` pieces right after it), run
    the whole model, log-softmax over the full vocabulary at i, sum over the tokens between [CLS] and [SEP]."""
    enc = tokenizer.encode(sentence)
    total = 0.0
    for i in range(1, len(enc.ids) - 1):
        ids = list(enc.ids)
        ids[i] = tokenizer.mask_token_id
        j = i + 1
        while word_l2r and j < len(ids) - 1 and enc.tokens[j].startswith("##"):
            ids[j] = tokenizer.mask_token_id
            j += 1
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]))
        logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits  # [1, T, V]
        total += float(torch.log_softmax(logits[0, i].double(), -1)[enc.ids[i]])
    return total


@pytest.mark.parametrize("pll", ["original", "word-l2r"])
def test_the_commands_figures_equal_the_definition(model_dir, tmp_path, pll):
    from bertkit import models

    data, out = write_blimp(tmp_path / "blimp"), tmp_path / "out"
    argv = ["evaluate", "--task", "blimp", "--model", str(model_dir), "--data", str(data), "--output", str(out)]
    assert main([*argv, "--pll", pll, "--batch-size", "4", "--quiet", "--precision", "fp32", "--device", "cpu"]) == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))

    arch = models.of_directory(model_dir)
    model = arch.model_class(arch.features_role).from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    naive = {}
    for _field, pairs in PARADIGMS.values():
        for sentence in {s for pair in pairs for s in pair}:
            naive[sentence] = naive_pll(model, tokenizer, sentence, pll == "word-l2r")
    per = {
        uid: 100.0 * sum(naive[g] > naive[b] for g, b in pairs) / len(pairs) for uid, (_f, pairs) in PARADIGMS.items()
    }
    assert metrics["paradigms"] == pytest.approx(per)
    syntax = (per["island_b"] + per["quantifier_c"]) / 2
    assert metrics["fields"] == pytest.approx({"morphology": per["agreement_a"], "syntax": syntax})
    assert metrics["overall"] == pytest.approx(sum(per.values()) / 3)
    assert 0 < metrics["overall"] < 100  # the fixture tells models apart
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["UID"] for r in rows] == [uid for uid, (_f, pairs) in PARADIGMS.items() for _ in pairs]
    for r in rows:
        assert (r["good"], r["bad"]) == pytest.approx((naive[r["sentence_good"]], naive[r["sentence_bad"]]), abs=1e-4)
        assert r["right"] == (naive[r["sentence_good"]] > naive[r["sentence_bad"]])


def test_a_model_that_scores_every_sentence_alike_gets_0_not_50(tmp_path, fixtures_dir):
    """Its MLM head ignores the input (transform output 0, no bias): every token costs log(1/V), so a pair of
    sentences of one length ties, and a tie is wrong."""
    from bertkit.modeling import BertForPreTraining

    path = make_model_dir(tmp_path / "flat", fixture_vocab(fixtures_dir), layers=1)
    model = BertForPreTraining.from_pretrained(path)
    with torch.no_grad():
        model.cls.predictions.transform.LayerNorm.weight.zero_()
        model.cls.predictions.transform.LayerNorm.bias.zero_()
        model.cls.predictions.bias.zero_()
    model.save_pretrained(path)
    same_length = {  # pairs of the same tokens in another order
        "order_a": ("syntax", [("the film was good .", "film the was good ."), ("alice saw bob .", "alice bob saw .")]),
        "order_b": ("morphology", [("carols smiled in rome .", "smiled carols in rome .")]),
    }
    out = tmp_path / "out"
    argv = ["--model", str(path), "--data", str(write_blimp(tmp_path / "blimp", same_length)), "--output", str(out)]
    assert main(["evaluate", "--task", "blimp", *argv, "--quiet", "--precision", "fp32"]) == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["overall"] == 0.0 and set(metrics["paradigms"].values()) == {0.0}
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(r["good"] == r["bad"] for r in rows)  # ties indeed, not a model that prefers the bad sentences


def test_each_distinct_sentence_is_scored_once_and_pairs_per_paradigm_takes_the_first(tmp_path, model_dir):
    asked: list[list[str]] = []
    scorer = PllScorer.from_pretrained(model_dir)
    score = scorer.sentence_scores
    scorer.sentence_scores = lambda sentences: asked.append(list(sentences)) or score(sentences)
    paradigms = read_blimp(write_blimp(tmp_path / "blimp"), pairs_per_paradigm=3)
    assert [len(p.pairs) for p in paradigms] == [3, 2, 3]
    assert paradigms[2].pairs == PARADIGMS["quantifier_c"][1][:3]
    result = evaluate_blimp(scorer.sentence_scores, paradigms)
    sentences = [s for p in paradigms for pair in p.pairs for s in pair]
    assert sorted(asked[0]) == sorted(set(sentences)) and len(asked[0]) < len(sentences)
    assert result.pairs == 8


def test_the_probe_gives_the_commands_number_on_its_sample_and_keeps_the_train_mode(tmp_path, model_dir):
    from bertkit import models

    probe = BlimpProbe(write_blimp(tmp_path / "blimp"), load_tokenizer(model_dir), pairs_per_paradigm=2, seed=1)
    assert [len(p.pairs) for p in probe.paradigms] == [2, 2, 2]
    again = BlimpProbe(tmp_path / "blimp", load_tokenizer(model_dir), pairs_per_paradigm=2, seed=1)
    assert [p.pairs for p in again.paradigms] == [p.pairs for p in probe.paradigms]  # the seed fixes the sample
    sample = {p.uid: (p.field, p.pairs) for p in probe.paradigms}
    out = tmp_path / "out"
    argv = ["--model", str(model_dir), "--data", str(write_blimp(tmp_path / "sample", sample)), "--output", str(out)]
    assert main(["evaluate", "--task", "blimp", *argv, "--quiet", "--precision", "fp32"]) == 0
    expected = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["overall"]

    arch = models.of_directory(model_dir)
    model = arch.model_class(arch.features_role).from_pretrained(model_dir).train()
    assert probe(model) == pytest.approx(expected)
    assert model.training  # back in train mode: dropout did not touch the scores (eval mode inside)
    assert probe(model.eval()) == pytest.approx(expected) and not model.training


def test_the_probes_time_estimate_leaves_out_the_models_first_call(tmp_path, model_dir, monkeypatch):
    """What --max-time sets aside for each probe: its first batches timed after an untimed one, so that a model's
    slow first call (a GPU's lazy initialisation) is not scaled up to the whole probe. The probe's clock is a fake
    one that only the calls move (100 s for the first, 1 s for each later one): no wall time is measured."""
    from types import SimpleNamespace

    import bertkit.tasks.blimp as blimp_module

    probe = BlimpProbe(write_blimp(tmp_path / "blimp"), load_tokenizer(model_dir), pairs_per_paradigm=3, batch_size=4)
    calls, clock = [], [0.0]
    real = probe.result

    def first_call_slow(model, precision="fp32", stop=None):
        calls.append(1)
        clock[0] += 100.0 if len(calls) == 1 else 1.0
        return real(model, precision, stop)

    monkeypatch.setattr(probe, "result", first_call_slow)
    monkeypatch.setattr(blimp_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    from bertkit import models

    arch = models.of_directory(model_dir)
    model = arch.model_class(arch.features_role).from_pretrained(model_dir)
    seconds = probe.seconds(model)
    assert len(calls) == 2
    assert 1.0 <= seconds < 100.0  # the second call's second, scaled to the probe's tokens; not the first's 100


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "a.jsonl:2: not valid JSON"),
        ('{"sentence_good": "a", "field": "f", "UID": "a"}', "a.jsonl:2: no 'sentence_bad' field"),
        (
            '{"sentence_good": "a", "sentence_bad": 3, "field": "f", "UID": "a"}',
            "a.jsonl:2: an empty or non-string 'sentence_bad'",
        ),
        ('{"sentence_good": "a", "sentence_bad": "b", "field": "f", "UID": "other"}', "a.jsonl:2: UID 'other'"),
        ("[1, 2]", "a.jsonl:2: expected a JSON object"),
        ("[" * 100_000, "a.jsonl:2: JSON nested too deeply to read"),
    ],
)
def test_bad_data_is_one_line_naming_file_and_line(tmp_path, line, message, capsys, model_dir):
    good = json.dumps({"sentence_good": "a", "sentence_bad": "b", "field": "f", "UID": "a"})
    (tmp_path / "a.jsonl").write_text(f"{good}\n{line}\n", encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_blimp(tmp_path)
    code = main(["evaluate", "--task", "blimp", "--model", str(model_dir), "--data", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_directory_without_paradigms_or_a_model_without_mlm_head_is_refused(tmp_path, fixtures_dir):
    from bertkit.modeling import BertModel

    with pytest.raises(InputError, match="no \\*.jsonl files"):
        read_blimp(tmp_path)
    bare = tmp_path / "bare"
    torch.manual_seed(0)
    make_model_dir(bare, fixture_vocab(fixtures_dir), cls=BertModel, layers=1)
    with pytest.raises(InputError, match="no masked-LM head"):
        PllScorer.from_pretrained(bare)


def test_bf16_scores_stay_close_to_fp32(model_dir):
    """``bf16`` runs the encoder under bf16 autocast, the MLM head and the log-softmax in fp32: the sums move by a
    small fraction of a nat per token (whether its pair decisions agree is measured on real data: BENCHMARKS.md)."""
    sentences = [s for _f, pairs in PARADIGMS.values() for pair in pairs for s in pair]
    fp32 = PllScorer.from_pretrained(model_dir, precision="fp32").sentence_scores(sentences)
    bf16 = PllScorer.from_pretrained(model_dir, precision="bf16").sentence_scores(sentences)
    tokens = np.array([len(s.split()) for s in sentences])
    assert np.abs(fp32 - bf16).max() > 0  # bf16 did run
    assert (np.abs(fp32 - bf16) / tokens).max() < 0.1


def test_the_probe_scores_a_model_held_in_bf16_weights(model_dir):
    """A bf16 CPU run holds its model in bf16 weights (``precision.MasterWeights``) and probes it in the middle of
    training: the head still scores in fp32 (it raised a dtype error), and the model's weights stay bf16."""
    sentences = [s for _f, pairs in PARADIGMS.values() for pair in pairs for s in pair]
    fp32 = PllScorer.from_pretrained(model_dir, precision="fp32")
    want = fp32.sentence_scores(sentences)
    fp32.model.to(torch.bfloat16)
    got = fp32.sentence_scores(sentences)
    tokens = np.array([len(s.split()) for s in sentences])
    assert (np.abs(want - got) / tokens).max() < 0.1
    assert {p.dtype for p in fp32.model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("task", [["--task", "blimp"], ["--task=blimp"]])
def test_evaluate_hands_blimp_to_its_own_flags(task, capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", *task, "-h"])
    assert "--pll {original,word-l2r}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["evaluate", "-h"])
    assert "--task blimp" in capsys.readouterr().out  # named in evaluate's own help


def test_workers_side_by_side_give_the_scores_of_one_process(tmp_path, model_dir):
    """--workers 2: the distinct sentences dealt to two spawned processes; each pair's two scores are those of the
    one-process run (fp32; within the parity tolerance, since other batches pad to other widths), and so are the
    decisions."""
    data = write_blimp(tmp_path / "blimp")
    argv = ["evaluate", "--task", "blimp", "--model", str(model_dir), "--data", str(data), "--quiet"]
    runs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        assert main([*argv, "--output", str(out), "--workers", workers, "--threads", "1", "--batch-size", "3"]) == 0
        runs[workers] = [json.loads(x) for x in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    two, one = ([(r["good"], r["bad"]) for r in runs[w]] for w in ("2", "1"))
    assert [pytest.approx(pair, abs=1e-4) for pair in one] == two
    assert [r["right"] for r in runs["2"]] == [r["right"] for r in runs["1"]]


def test_the_probe_gives_way_between_two_batches_when_asked(tmp_path, model_dir):
    """Issue 60, item 8: a run signalled (or out of --max-time) in the middle of a probe waited for the whole probe
    (27 s on modernbert-tiny, 60+ s on bert-mini) before its checkpoint; ``stop`` is asked after each batch, and the
    probe ends with Stopped at the first True, the model's mode restored."""
    from bertkit import models
    from bertkit.tasks.blimp import Stopped

    probe = BlimpProbe(write_blimp(tmp_path / "blimp"), load_tokenizer(model_dir), pairs_per_paradigm=4, batch_size=2)
    arch = models.of_directory(model_dir)
    model = arch.model_class(arch.features_role).from_pretrained(model_dir).train()
    asked = []
    with pytest.raises(Stopped):
        probe(model, stop=lambda: asked.append(1) or len(asked) == 3)
    assert len(asked) == 3 and model.training
    assert 0 <= probe(model, stop=lambda: False) <= 100  # never asked to stop: the whole figure


def test_blimps_two_spellings_of_syntax_semantics_are_one_field():
    """BLiMP's principle_A_case_2 names its field "syntax/semantics", the other 13 of that field "syntax_semantics":
    the report has the paper's one field, the mean of all its paradigms."""
    pair = ("a good one .", "a bad one .")
    paradigms = [Paradigm("p1", "syntax_semantics", [pair]), Paradigm("p2", "syntax/semantics", [pair, pair])]
    scores = {pair[0]: -1.0, pair[1]: -2.0}
    paradigms.append(Paradigm("p3", "syntax_semantics", [pair[::-1]]))
    result = summarize(paradigms, scores)
    assert result.fields == {"syntax_semantics": pytest.approx(200 / 3)}
    printed = table(result, paradigms)
    assert "syntax/semantics" not in printed and re.search(r"field: syntax_semantics\s+3 paradigms", printed)
