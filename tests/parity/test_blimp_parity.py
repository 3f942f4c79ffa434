"""BLiMP's meter is exact to BabyLM's scorer (docs/design.md, habit 22): on one tiny random model directory, BERT and
ModernBERT, bertkit's batched pseudo-log-likelihood (``bertkit.tasks.blimp.PllScorer``) gives minicons'
``MaskedLMScorer`` per-token log-probabilities and summed sentence scores within 1e-4 in fp32, for the original PLL
and for the within-word left-to-right one (``--pll word-l2r``). minicons loads the same directory through
transformers' ``AutoModelForMaskedLM`` and ``AutoTokenizer``, offline."""

from __future__ import annotations

import pytest
import torch
from tinymodels import make_model_dir
from tinymodernbert import fixture_vocab, make_modernbert_dir

transformers = pytest.importorskip("transformers")
scorer_module = pytest.importorskip("minicons.scorer")

from bertkit.tasks.blimp import PllScorer  # noqa: E402
from bertkit.tokenization import BertTokenizer  # noqa: E402

# multi-piece words (bobs -> bob ##s, wonderful -> w ##o ##n ...), punctuation, an unknown character, lengths 3..20
SENTENCES = [
    "the film was good .",
    "Alice watched wonderful movies in Paris .",
    "bobs lives where the carols smiled ?",
    "a",
    "dave's script does dull scenes , zzq ! é ✓",
    "the ending was boring because the cast was awful and grim .",
]
# weights 10x the default spread: the token scores then depend on context by nats, not by 1e-4 (the size of the
# tolerance), so masking one more piece shows
SPREAD = dict(initializer_range=0.2)
PLL = {"original": "original", "word-l2r": "within_word_l2r"}  # bertkit's name -> minicons' PLL_metric


@pytest.fixture(scope="module", params=["bert", "modernbert"])
def model_dir(request, tmp_path_factory, fixtures_dir):
    vocab = fixture_vocab(fixtures_dir)
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "modernbert":
        make_modernbert_dir(path, vocab, **SPREAD)
    else:
        make_model_dir(path, vocab, layers=2, **SPREAD)  # BertForPreTraining, as `bertkit pretrain` saves
    BertTokenizer.from_pretrained(path).save_pretrained(path)  # the tokenizer files transformers opens
    return path


@pytest.fixture(scope="module")
def minicons_scorer(model_dir):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir), use_fast=True)  # as minicons does
        # minicons (0.3.39) encodes with batch_encode_plus, which transformers 5 removed: the call it was an alias of
        tokenizer.batch_encode_plus = tokenizer.__call__
        return scorer_module.MaskedLMScorer(str(model_dir), device="cpu", tokenizer=tokenizer)


@pytest.mark.parametrize("pll", sorted(PLL))
def test_token_log_probs_and_sums_equal_minicons(model_dir, minicons_scorer, pll):
    torch.set_num_threads(1)
    ours = PllScorer.from_pretrained(model_dir, device="cpu", precision="fp32", pll=pll, batch_size=5)
    copies = ours.copies(SENTENCES)
    per_copy = ours.token_log_probs(copies)
    theirs = minicons_scorer.token_score(SENTENCES, PLL_metric=PLL[pll])
    assert len(copies) == sum(len(t) for t in theirs)
    for i, tokens in enumerate(theirs):
        mine = per_copy[copies.sentence == i]
        assert mine.tolist() == pytest.approx([score for _token, score in tokens], abs=1e-4), SENTENCES[i]
    sums = minicons_scorer.sequence_score(SENTENCES, reduction=lambda x: x.sum(0).item(), PLL_metric=PLL[pll])
    assert ours.sentence_scores(SENTENCES).tolist() == pytest.approx(sums, abs=1e-4)


def test_word_l2r_differs_from_original_on_multi_piece_words(model_dir):
    """The two PLLs agree on a sentence of one-piece words and differ, by tenths of a nat per token, on one with
    multi-piece words: the parity above checks the within-word masking, not the original PLL twice."""
    scores = {}
    for pll in PLL:
        scorer = PllScorer.from_pretrained(model_dir, precision="fp32", pll=pll)
        scores[pll] = scorer.token_log_probs(scorer.copies(SENTENCES[:2]))
    one_piece = slice(0, 5)  # "the film was good ." : 5 tokens, none split
    assert scores["original"][one_piece].tolist() == pytest.approx(scores["word-l2r"][one_piece].tolist(), abs=1e-6)
    assert abs(scores["original"][5:] - scores["word-l2r"][5:]).max() > 0.1
