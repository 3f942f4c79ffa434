"""The task pipelines' request parameters against transformers' own pipelines on the same tiny random model
directories (transformers loads bertkit directories): text classification's ``function_to_apply`` and ``top_k``,
token classification's ``aggregation_strategy`` and ``ignore_labels``, question answering's ``top_k``,
``handle_impossible_answer``, ``doc_stride``, ``max_seq_len``, ``max_question_len``, ``max_answer_len`` and
``align_to_words`` (transformers 4.57.1's pipeline, whose answers for the seeded fixture model are committed in
tests/fixtures/qa/hf_qa_reference.json.gz: see tests/hf_qa.py). Bad values raise InputError naming the parameter."""

from __future__ import annotations

import shutil

import pytest
import torch

from bertkit.errors import InputError
from bertkit.pipelines import load_pipeline

from ..hf_qa import QA_SETTINGS, build_qa_model, qa_runs, reference_answers, tiny_config
from ..hf_qa import qa_items as fixture_qa_items

transformers = pytest.importorskip("transformers")

TEXTS = [
    "Carol lives in Berlin and works for Acme Corp.",
    "Dave works for Globex  in London!",
    "the ending was boring , the cast was great .",
    "Zürich's qwertyuiop is unknown",
    "the film was good",
]


def _save(path, model, ft):
    model.save_pretrained(path)
    shutil.copy(ft / "vocab.txt", path / "vocab.txt")
    return path


def _classifier(tmp_path_factory, ft, labels, seed, problem_type=None):
    from bertkit.modeling import BertForSequenceClassification

    config = tiny_config(ft)
    config.num_labels, config.id2label = len(labels), dict(enumerate(labels))
    config.label2id = {x: i for i, x in enumerate(labels)}
    if problem_type:
        config.extra["problem_type"] = problem_type
    torch.manual_seed(seed)
    return _save(tmp_path_factory.mktemp("clf"), BertForSequenceClassification(config), ft)


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory, ft):
    return {
        "three labels": _classifier(tmp_path_factory, ft, ["neg", "neutral", "pos"], 1),
        "one label": _classifier(tmp_path_factory, ft, ["score"], 2),
        "multi-label": _classifier(tmp_path_factory, ft, ["a", "b", "c", "d"], 3, "multi_label_classification"),
    }


def _hf(directory, cls, pipeline_cls, lowercase):
    model = getattr(transformers, cls).from_pretrained(directory).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(directory, do_lower_case=lowercase)
    return pipeline_cls(model=model, tokenizer=tok, device=-1)


@pytest.mark.parametrize("function", [None, "softmax", "sigmoid", "none"])
def test_function_to_apply_equals_transformers(classifiers, function):
    for name, directory in classifiers.items():
        pipe = load_pipeline(directory, precision="fp32")
        hf = _hf(
            directory,
            "BertForSequenceClassification",
            transformers.TextClassificationPipeline,
            pipe.tokenizer.lowercase,
        )
        kwargs = {} if function is None else {"function_to_apply": function}
        ours = pipe.predict(TEXTS, top_k=pipe.num_labels, **kwargs)
        theirs = hf(TEXTS, top_k=None, **kwargs)
        for a, b in zip(ours, theirs):
            assert [x["label"] for x in a] == [x["label"] for x in b], (name, function)
            assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5), (name, function)
        best = pipe.predict(TEXTS[0], top_k=2, **kwargs)
        assert [x["label"] for x in best] == [x["label"] for x in ours[0][:2]]
        assert [x["score"] for x in best] == pytest.approx([x["score"] for x in ours[0][:2]], abs=1e-6)
        if function == "sigmoid" and pipe.num_labels > 1:  # the bug: softmax scores under "sigmoid"
            assert abs(sum(x["score"] for x in ours[0]) - 1.0) > 1e-3, name


def test_function_to_apply_and_top_k_refused_by_name(classifiers):
    pipe = load_pipeline(classifiers["three labels"], precision="fp32")
    for bad in ("tanh", "Sigmoid", 1):
        with pytest.raises(InputError, match="function_to_apply"):
            pipe.predict("a text", function_to_apply=bad)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InputError, match="top_k"):
            pipe.predict("a text", top_k=bad)
    for name in ("raw_scores", "return_all_scores", "truncate"):
        with pytest.raises(InputError, match=name):
            pipe.predict("a text", **{name: "yes"})


# --------------------------------------------------------------------------------------------- token classification


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory, ft):
    from bertkit.modeling import BertForTokenClassification

    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]
    config = tiny_config(ft)
    config.num_labels, config.id2label = len(labels), dict(enumerate(labels))
    config.label2id = {x: i for i, x in enumerate(labels)}
    torch.manual_seed(3)
    return _save(tmp_path_factory.mktemp("ner"), BertForTokenClassification(config), ft)


def _norm(entities):
    return [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in entities]


@pytest.mark.parametrize("strategy", ["simple", "none", "first", "max", "average"])
def test_aggregation_and_ignore_labels_equal_transformers(ner_dir, strategy):
    pipe = load_pipeline(ner_dir, precision="fp32")
    hf = _hf(ner_dir, "BertForTokenClassification", transformers.TokenClassificationPipeline, pipe.tokenizer.lowercase)
    seen = set()
    for ignore in (None, ["O", "LOC"], ["O", "B-LOC", "I-LOC"], []):
        kwargs = {} if ignore is None else {"ignore_labels": ignore}
        ours = pipe.ner(TEXTS, aggregation_strategy=strategy, **kwargs)
        theirs = [hf(t, aggregation_strategy=strategy, **kwargs) for t in TEXTS]
        for text, a, b in zip(TEXTS, ours, theirs):
            a, b = _norm(a), _norm(b)
            assert [{k: v for k, v in x.items() if k != "score"} for x in a] == [
                {k: v for k, v in x.items() if k != "score"} for x in b
            ], (strategy, ignore, text)
            assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)
        key = "entity" if strategy == "none" else "entity_group"
        labels = {e[key] for x in ours for e in x}
        seen |= labels
        for label in ignore if ignore is not None else ["O"]:
            assert label not in labels
    loc = {"B-LOC", "I-LOC"} if strategy == "none" else {"LOC"}
    assert seen & loc and "O" in seen  # the filters removed something that was there


def test_word_strategies_group_pieces(ner_dir):
    pipe = load_pipeline(ner_dir, precision="fp32")
    text = "qwertyuiop asdfgh"  # each word is many pieces in the fixture vocabulary
    pieces = pipe.ner(text, aggregation_strategy="none", ignore_labels=[])
    assert len(pieces) > 4
    for strategy in ("first", "max", "average"):
        words = pipe.ner(text, aggregation_strategy=strategy, ignore_labels=[])
        assert all(text[w["start"] : w["end"]] in ("qwertyuiop", "asdfgh", text) for w in words), (strategy, words)


def test_ner_parameters_refused_by_name(ner_dir):
    pipe = load_pipeline(ner_dir, precision="fp32")
    for bad in ("mean", "SIMPLE", None):
        with pytest.raises(InputError, match="aggregation_strategy"):
            pipe.ner("a text", aggregation_strategy=bad)
    for bad in ("O", [1], 5):
        with pytest.raises(InputError, match="ignore_labels"):
            pipe.ner("a text", ignore_labels=bad)


# --------------------------------------------------------------------------------------------- question answering


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory, ft):
    return build_qa_model(tmp_path_factory.mktemp("qa"), ft)


@pytest.fixture(scope="module")
def qa_items(ft):
    return fixture_qa_items(ft)


@pytest.fixture(scope="module")
def hf_qa(qa_dir, qa_items):
    """transformers 4.57.1's answers, from the committed reference (tests/fixtures/qa/hf_qa_reference.json.gz)."""
    pipe = load_pipeline(qa_dir, precision="fp32")
    return reference_answers(qa_dir, qa_runs(pipe.tokenizer, qa_items), pipe.tokenizer.lowercase)


def _ranked(answers: list[dict]) -> tuple[list[tuple], int]:
    """(answer, start, end) of the candidates with a score above 0, in order, and how many score exactly 0. Spans
    whose probability underflows to 0 are tied, and the order a sort gives ties (so which of them a large top_k keeps)
    differs between machines (on a 2-core AVX2 EPYC the tied tail of top_k=1000 came out in another order than the
    committed reference's, every scored candidate the same): only their number is compared."""
    ranked = [(x["answer"], x["start"], x["end"]) for x in answers if x["score"] > 0]
    return ranked, len(answers) - len(ranked)


@pytest.mark.parametrize(
    "k", range(len(QA_SETTINGS)), ids=[",".join(f"{k}={v}" for k, v in s.items()) or "defaults" for s in QA_SETTINGS]
)
def test_qa_parameters_equal_transformers(qa_dir, qa_items, hf_qa, k):
    pipe = load_pipeline(qa_dir, precision="fp32")
    items, settings = qa_runs(pipe.tokenizer, qa_items)[k]
    ours = pipe.answer(items, **settings)
    for item, a, b in zip(items, ours, hf_qa[k]):
        a = a if isinstance(a, list) else [a]
        b = b if isinstance(b, list) else [b]
        assert _ranked(a) == _ranked(b), item
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], rel=1e-4, abs=1e-7)
    top_k = settings.get("top_k", 1)
    if top_k > 1:
        assert all(isinstance(a, list) and 1 < len(a) <= top_k for a in ours)
        scored = [[x for x in a if x["score"] > 0] for a in ours]  # (beyond them: spans with [CLS], score 0)
        assert all(len({x["answer"].lower() for x in a}) == len(a) for a in scored)  # distinct answers
        if top_k < 10:
            assert all(len(a) == top_k for a in ours)
    null = [x for a in ours for x in (a if isinstance(a, list) else [a]) if x["answer"] == "" and x["score"] > 0]
    assert bool(null) == bool(settings.get("handle_impossible_answer"))  # the empty answer competes when asked for
    if "max_seq_len" in settings:
        from bertkit.data.tasks.squad import SquadExample
        from bertkit.tasks.squad import hf_features

        windows = hf_features([SquadExample("x", items[0]["question"], items[0]["context"])], pipe.tokenizer, 40, 12)
        assert len(windows) > 2


def test_qa_top_k_and_handle_impossible_answer(qa_dir, qa_items):
    pipe = load_pipeline(qa_dir, precision="fp32")
    q, c = qa_items[0]["question"], qa_items[0]["context"]
    one = pipe.answer(q, c)
    assert isinstance(one, dict) and c[one["start"] : one["end"]] == one["answer"] != ""
    three = pipe.answer(q, c, top_k=3)
    assert isinstance(three, list) and len(three) == 3 and three[0] == one
    assert [x["score"] for x in three] == sorted((x["score"] for x in three), reverse=True)
    many = pipe.answer(q, c, top_k=1000, handle_impossible_answer=True)
    empty = [x for x in many if x["answer"] == "" and x["score"] > 0]  # (spans with [CLS] score 0, as transformers')
    assert len(empty) == 1 and (empty[0]["start"], empty[0]["end"]) == (0, 0) and 0 < empty[0]["score"] < 1
    assert not any(x["answer"] == "" and x["score"] > 0 for x in pipe.answer(q, c, top_k=1000))
    google = pipe.answer(q, c, top_k=3, convention="google")
    assert isinstance(google, list) and len(google) == 3 and len({x["answer"] for x in google}) == 3


@pytest.mark.parametrize(
    "name,value",
    [
        ("top_k", 0),
        ("top_k", True),
        ("top_k", "3"),
        ("doc_stride", -1),
        ("doc_stride", 400),
        ("max_seq_len", 10_000),
        ("max_seq_len", 2),
        ("max_question_len", 0),
        ("max_answer_len", 0),
        ("handle_impossible_answer", "yes"),
        ("align_to_words", 1),
        ("convention", "squad"),
    ],
)
def test_qa_parameters_refused_by_name(qa_dir, name, value):
    pipe = load_pipeline(qa_dir, precision="fp32")
    with pytest.raises(InputError, match=name):
        pipe.answer("who?", "Carol lives in Berlin.", **{name: value})


def test_qa_convention_is_chosen_at_load_and_per_call(qa_dir, qa_items):
    hf = load_pipeline(qa_dir, precision="fp32")
    google = load_pipeline(qa_dir, precision="fp32", qa_convention="google")
    assert (hf.convention, google.convention) == ("hf", "google")
    q, c = qa_items[0]["question"], qa_items[0]["context"]
    assert google.answer(q, c) == hf.answer(q, c, convention="google")
    assert hf.answer(q, c) == google.answer(q, c, convention="hf")
    # Google's convention: handle_impossible_answer turns on SQuAD 2.0's null answer among the n-best
    with_null = google.answer(q, c, top_k=100, handle_impossible_answer=True)
    assert [x["answer"] for x in with_null].count("") == 1
    assert "" not in [x["answer"] for x in google.answer(q, c, top_k=100)]
    with pytest.raises(InputError, match="qa_convention"):
        load_pipeline(qa_dir, qa_convention="squad")
