"""Metrics: GLUE metrics against sklearn / scipy on random data; SQuAD EM/F1 and conlleval on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.tasks import metrics as M

# sklearn and scipy are imported in the tests that compare with them: at the top they cost every xdist worker 2 s of
# collection for tests only one of them runs


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_match_sklearn(seed):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    p = np.where(rng.random(200) < 0.7, y, 1 - y)
    assert M.accuracy(p, y) == pytest.approx(accuracy_score(y, p))
    assert M.f1_binary(p, y) == pytest.approx(f1_score(y, p))
    assert M.matthews_corrcoef(p, y) == pytest.approx(matthews_corrcoef(y, p))
    y3, p3 = rng.integers(0, 3, 150), rng.integers(0, 3, 150)
    assert M.matthews_corrcoef(p3, y3) == pytest.approx(matthews_corrcoef(y3, p3))


def test_mcc_degenerate_is_zero_like_sklearn():
    from sklearn.metrics import matthews_corrcoef

    assert M.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == matthews_corrcoef([0, 1, 0], [1, 1, 1]) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_correlations_match_scipy(seed):
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = rng.normal(size=100)
    y = x + rng.normal(size=100)
    y_ties = np.round(y)  # ties exercise average ranks
    assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert M.spearman(x, y_ties) == pytest.approx(stats.spearmanr(x, y_ties)[0])


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differ in length"):
        M.accuracy([1, 0], [1])


# ----------------------------------------------------------------------------------------- SQuAD


def test_squad_normalisation():
    assert M.normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert M.normalize_answer("an apple, a pear") == "apple pear"


def test_squad_v1_max_over_gold_and_partial_f1():
    gold = {"q1": ["Denver Broncos", "Broncos"], "q2": ["Carolina Panthers"], "q3": ["1990"]}
    preds = {"q1": "the broncos", "q2": "Panthers team", "q3": "in 1990"}
    out = M.squad_evaluate(gold, preds, "1.1")
    # q1: EM 1 (vs "Broncos"); q2: P 1/2, R 1/2 -> F1 0.5, EM 0; q3: P 1/2, R 1 -> F1 2/3
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * (1 + 0.5 + 2 / 3) / 3)


def test_squad_v1_missing_prediction_scores_zero():
    out = M.squad_evaluate({"a": ["x"], "b": ["y"]}, {"a": "x"}, "1.1")
    assert out["exact_match"] == 50.0 and out["f1"] == 50.0


def test_squad_v2_empty_strings():
    gold = {"has": ["Paris"], "none": [], "none2": []}
    preds = {"has": "", "none": "", "none2": "Paris"}
    out = M.squad_evaluate(gold, preds, "2.0")
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 / 3)
    assert out["HasAns_exact"] == 0.0 and out["NoAns_exact"] == 50.0
    assert out["HasAns_total"] == 1 and out["NoAns_total"] == 2
    # an answer that normalises to nothing counts as empty in v2.0 (only articles / punctuation)
    assert M.squad_f1_v2("the", "") == 1.0 and M.squad_f1_v1("the", "the") == 0.0


# ----------------------------------------------------------------------------------------- conlleval


def test_conlleval_hand_made():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG"]]
    out = M.conlleval(gold, pred)
    # gold chunks: PER(0-1) LOC ORG = 3; pred: PER(0-0) LOC ORG = 3; correct: LOC, ORG
    assert (out["found_gold"], out["found_pred"], out["correct"]) == (3, 3, 2)
    assert out["precision"] == pytest.approx(200 / 3) and out["recall"] == pytest.approx(200 / 3)
    assert out["f1"] == pytest.approx(200 / 3)
    assert out["accuracy"] == pytest.approx(100 * 6 / 7)
    assert out["per_type"]["PER"]["f1"] == 0.0 and out["per_type"]["LOC"]["f1"] == 100.0


def test_conlleval_chunk_rules():
    # conlleval: I- after O starts a chunk (IOB1); a type change ends one; B-X B-X is two chunks
    assert M.get_entities(["O", "I-PER", "I-PER"]) == [("PER", 1, 2)]
    assert M.get_entities(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]
    assert M.get_entities(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
    # a wrongly typed continuation is not a correct chunk
    out = M.conlleval([["B-PER", "I-PER"]], [["B-PER", "I-ORG"]])
    assert out["correct"] == 0 and out["found_pred"] == 2


def test_conlleval_sentences_do_not_merge():
    # chunk at the end of one sentence and I- at the start of the next stay separate
    out = M.conlleval([["B-PER"], ["I-PER"]], [["B-PER"], ["I-PER"]])
    assert out["found_gold"] == 2 and out["f1"] == 100.0


def test_squad_v2_best_thresholds_follow_the_official_search():
    """Worked by hand with find_best_thresh of the official v2.0 script: start from "every question null" (the
    no-answer questions score), switch questions to answered in increasing no-answer score, keep the best."""
    from bertkit.tasks.metrics import squad_v2_best_thresholds

    gold = {"q1": ["Paris"], "q2": [], "q3": ["blue sky"]}
    answers = {"q1": "paris", "q2": "foo", "q3": "red sky"}  # q3: EM 0, F1 0.5
    na_probs = {"q1": -2.0, "q2": 1.0, "q3": 0.5}
    out = squad_v2_best_thresholds(gold, answers, na_probs)
    # EM: 1 (q2 null) -> +1 at q1 (2, thresh -2.0) -> +0 at q3 -> -1 at q2
    assert out["best_exact"] == pytest.approx(200 / 3) and out["best_exact_thresh"] == -2.0
    # F1: 1 -> 2 at q1 -> 2.5 at q3 (thresh 0.5) -> 1.5 at q2
    assert out["best_f1"] == pytest.approx(250 / 3) and out["best_f1_thresh"] == 0.5
    # answering nothing is best when every answer is wrong: threshold stays at the script's 0.0
    out = squad_v2_best_thresholds({"a": ["x"], "b": []}, {"a": "y", "b": "z"}, {"a": -1.0, "b": -0.5})
    assert out["best_exact"] == pytest.approx(50.0) and out["best_exact_thresh"] == 0.0
