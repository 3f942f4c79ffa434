"""Example -> features and predictions -> outputs for each task family, with the fixture vocabulary and
hand-made logits (no training)."""

from __future__ import annotations

import pytest
import torch

from bertkit.data.tasks.conll import TaggedSentence
from bertkit.data.tasks.squad import SquadExample
from bertkit.tasks import length_batches, pad
from bertkit.tasks.squad import SquadTask, doc_spans, max_context_flags
from bertkit.tasks.tagging import TaggingTask


@pytest.fixture(scope="module")
def tok(fixtures_dir):
    from bertkit import BertTokenizer

    return BertTokenizer.from_pretrained(fixtures_dir / "finetune" / "vocab.txt", lowercase=True)


def test_doc_spans_cover_everything_with_stride():
    spans = doc_spans(25, 10, 4)
    assert spans[0] == (0, 10) and spans[-1][0] + spans[-1][1] == 25
    assert all(b[0] - a[0] == 4 for a, b in zip(spans, spans[1:]))
    assert doc_spans(5, 10, 4) == [(0, 5)]


def test_max_context_each_token_once_and_central():
    spans = doc_spans(25, 10, 4)
    flags = max_context_flags(spans)
    owners = {}
    for w, ((start, _length), f) in enumerate(zip(spans, flags)):
        for k, flag in enumerate(f):
            if flag:
                assert start + k not in owners
                owners[start + k] = w
    assert sorted(owners) == list(range(25))
    # token 9 is the last of window 0 but central in window 1 (start 4) -> window 1 owns it
    assert owners[9] == 1


def test_length_batches_group_lengths_and_cover_all():
    lengths = [5, 50, 6, 51, 7, 52, 8, 53]
    batches = length_batches(lengths, 2, shuffle=True, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert all(max(lengths[i] for i in b) - min(lengths[i] for i in b) <= 3 for b in batches)
    assert length_batches(lengths, 4, shuffle=False)[0] == [0, 2, 4, 6]
    assert pad([[1, 2], [3]], 0).shape == (2, 8)


def _squad_example(context: str, answer: str, qid: str = "q0", impossible: bool = False) -> SquadExample:
    start = context.index(answer)
    return SquadExample(qid, "where does alice live ?", context, [] if impossible else [(answer, start)], impossible)


def test_squad_features_mark_the_answer_in_windows(tok):
    context = " ".join(["the film was good ."] * 8) + " Alice lives in Paris . " + " ".join(["the plot is dull ."] * 8)
    ex = _squad_example(context, "Paris")
    task = SquadTask("squad", max_seq_length=32, doc_stride=8, max_query_length=8)
    feats = task.featurize([ex], tok, training=True)
    assert len(feats) > 3 and all(len(f["input_ids"]) <= 32 for f in feats)
    inside = [f for f in feats if f["start_position"] > 0]
    assert inside, "the answer lies inside at least one window"
    for f in inside:
        toks = tok.convert_ids_to_tokens(f["input_ids"][f["start_position"] : f["end_position"] + 1])
        assert toks == ["paris"]
    assert all(f["start_position"] == f["end_position"] == 0 for f in feats if f not in inside)
    imp = task.featurize([_squad_example(context, "Paris", impossible=True)], tok, training=True)
    assert all(f["start_position"] == 0 for f in imp)


def _logits_for(feats, task, ex, answer_char_start, other_window_bonus=0.0):
    """Hand-made logits: high at the answer token in every window; optionally higher outside max-context."""
    logits = []
    for f in feats:
        n = len(f["input_ids"])
        s = torch.full((n,), -5.0)
        e = torch.full((n,), -5.0)
        for k in range(len(f["max_context"])):
            b, _ = f["offsets"][f["span_start"] + k]
            if b == answer_char_start:
                s[f["offset"] + k] = 5.0
                e[f["offset"] + k] = 5.0
                if not f["max_context"][k]:
                    s[f["offset"] + k] += other_window_bonus  # only counts if max-context were ignored
        logits.append((s.numpy(), e.numpy()))
    return logits


def test_squad_postprocess_text_nbest_and_null(tok):
    context = " ".join(["the film was good ."] * 8) + " Alice lives in Paris . " + " ".join(["the plot is dull ."] * 8)
    ex = _squad_example(context, "Paris")
    task = SquadTask("squad", max_seq_length=32, doc_stride=8, max_query_length=8, n_best_size=5)
    feats = task.featurize([ex], tok)
    pred = task._postprocess(ex, feats, _logits_for(feats, task, ex, context.index("Paris"), other_window_bonus=3))
    assert pred["text"] == "Paris"
    assert pred["nbest"][0]["text"] == "Paris" and pred["nbest"][0]["start_logit"] == 5.0  # max-context window
    assert len(pred["nbest"]) <= 5 and abs(sum(n["probability"] for n in pred["nbest"]) - 1) < 1e-6
    v2 = SquadTask("squad_v2", max_seq_length=32, doc_stride=8, max_query_length=8)
    logits = _logits_for(feats, v2, ex, context.index("Paris"))
    for s, e in logits:
        s[0] = e[0] = 4.0  # null score 8 < span score 10
    assert v2._postprocess(ex, feats, logits)["text"] == "Paris"
    v2.null_score_diff_threshold = -3.0  # null - best = -2 > -3 -> predict no answer
    out = v2._postprocess(ex, feats, logits)
    assert out["text"] == "" and out["null_odds"] == pytest.approx(-2.0)


def test_tagging_first_subtoken_labels_and_word_predictions(tok):
    # "globexcorp" is not in the vocabulary: several wordpieces; only the first carries B-ORG
    sent = TaggedSentence(["Alice", "works", "for", "Globexcorp"], ["B-PER", "O", "O", "B-ORG"], 1)
    task = TaggingTask("conll2003", max_seq_length=32)
    f = task.featurize([sent], tok)[0]
    pieces = tok.convert_ids_to_tokens(f["input_ids"])
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and len(pieces) > 7
    labelled = [(pieces[i], task.labels[lab]) for i, lab in enumerate(f["labels"]) if lab != -100]
    assert [p for p, _ in labelled] == ["alice", "works", "for", pieces[f["word_starts"][3]]]
    assert [t for _, t in labelled] == sent.tags
    assert all(p.startswith("##") for p in pieces[f["word_starts"][3] + 1 : -1])
    # predictions come back per word from the first sub-token; entity spanning sub-tokens scores as one chunk
    logits = torch.zeros(1, len(f["input_ids"]), len(task.labels))
    for pos, tag in zip(f["word_starts"], ["B-PER", "O", "O", "B-ORG"]):
        logits[0, pos, task.labels.index(tag)] = 1.0
    logits[0, f["word_starts"][3] + 1, task.labels.index("B-LOC")] = 9.0  # a later sub-token: ignored

    class Fake(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            from bertkit.modeling import SequenceClassifierOutput

            return SequenceClassifierOutput(None, logits[:, : input_ids.size(1)], None, None)

    preds = task.predict(Fake(), [sent], [f])
    assert preds == [["B-PER", "O", "O", "B-ORG"]]
    assert task.metrics([sent], preds)["f1"] == 100.0


def test_tagging_truncated_words_are_predicted_o(tok, caplog):
    sent = TaggedSentence(["alice"] * 20, ["B-PER"] * 20, 1)
    task = TaggingTask("conll2003", max_seq_length=8)
    with caplog.at_level("WARNING", logger="bertkit"):  # a log record: on stderr only once cli.main has set it up
        f = task.featurize([sent], tok)[0]
    assert len(f["input_ids"]) == 8 and len(f["word_starts"]) == 6
    assert "did not fit" in caplog.text


@pytest.mark.parametrize("kind", ["bilstm", "mlp"])
def test_feature_tagger_frozen_layers_and_padding(tiny_config, kind):
    from bertkit.modeling import BertModel
    from bertkit.tasks.tagging import FeatureTagger

    torch.manual_seed(0)
    bert = BertModel(tiny_config)
    model = FeatureTagger(bert, ["O", "B-X", "I-X"], layers=[-1, -2, 0], tagger=kind, hidden=8).eval()
    ids = torch.randint(5, 99, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    feats = model.features(ids, mask)
    hs = bert(ids, mask, output_hidden_states=True).hidden_states
    torch.testing.assert_close(feats, torch.cat([hs[-1], hs[-2], hs[0]], -1))
    # padding does not change a sentence's logits (packed BiLSTM / per-token MLP)
    alone = model(ids[1:, :4]).logits
    torch.testing.assert_close(model(ids, mask).logits[1:, :4], alone, atol=1e-5, rtol=1e-4)
    # only the tagger learns
    model.train()
    labels = torch.full((2, 7), -100)
    labels[:, 1:3] = 1
    model(ids, mask, labels=labels).loss.backward()
    assert all(p.grad is None for p in bert.parameters())
    assert model.classifier.weight.grad is not None and not bert.training
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        FeatureTagger(bert, ["O"], layers=[5])


# Google's run_squad.py get_final_text as published (tensorflow logging removed; its BasicTokenizer(do_lower_case)
# is bertkit's line-by-line reference port), to hold bertkit's port to it.
def _google_get_final_text(pred_text, orig_text, do_lower_case):
    import collections

    from bertkit.tokenization.normalizer import reference_basic_tokenize

    def _strip_spaces(text):
        ns_chars = []
        ns_to_s_map = collections.OrderedDict()
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        ns_text = "".join(ns_chars)
        return (ns_text, ns_to_s_map)

    tok_text = " ".join(reference_basic_tokenize(orig_text, lowercase=do_lower_case))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1
    (orig_ns_text, orig_ns_to_s_map) = _strip_spaces(orig_text)
    (tok_ns_text, tok_ns_to_s_map) = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text
    tok_s_to_ns_map = {}
    for i, tok_index in tok_ns_to_s_map.items():
        tok_s_to_ns_map[tok_index] = i
    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]
    if orig_start_position is None:
        return orig_text
    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]
    if orig_end_position is None:
        return orig_text
    output_text = orig_text[orig_start_position : (orig_end_position + 1)]
    return output_text


def test_get_final_text_equals_googles():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from bertkit.tasks.squad import get_final_text
    from bertkit.tokenization.normalizer import reference_basic_tokenize

    alphabet = st.sampled_from(list("abcXYZ  .,'\"-éÉ\u0301ß中") + ["\u00a0", "\t"])

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet, max_size=24), st.integers(0, 30), st.integers(0, 30), st.booleans(), st.booleans())
    def check(orig, a, b, lower, from_orig):
        tok = " ".join(reference_basic_tokenize(orig, lowercase=lower))
        pred = tok[min(a, b) : max(a, b)].strip() if from_orig else tok[::-1][:a]
        ours = get_final_text(pred, orig, lambda t: reference_basic_tokenize(t, lowercase=lower))
        assert ours == _google_get_final_text(pred, orig, lower)

    check()
    # the example of Google's comment: the tokenized prediction loses what the original word adds
    assert get_final_text("steve smith", "Steve Smith's", reference_basic_tokenize) == "Steve Smith"


@pytest.mark.parametrize(
    "context,first,last,google,chars,words",
    [
        # Google's projection does not widen a span that starts or ends inside a word; `words` does
        ('the "imperium" fell', 1, 4, '"imp', '"imp', '"imperium'),
        ('the "imperium" fell', 3, 8, "mperium", "mperium", "imperium"),
        ("Steve Smith's film", 0, 9, "Steve Smith", "Steve Smith", "Steve Smith"),
        # original words are re-joined with one space
        ("New  York \u2603!", 0, 6, "New York", "New  York", "New  York"),
        # an [UNK] piece cannot be found in the original: Google returns the whole whitespace-separated words
        ("New  York \u2603!", 7, 7, "\u2603!", "\u2603", "\u2603"),
        # accents stripped by the tokenizer change the length: again the whole original words
        ("cafe\u0301, noir", 0, 3, "cafe\u0301,", "cafe\u0301", "cafe\u0301"),
    ],
)
def test_squad_answer_text_modes(tok, context, first, last, google, chars, words):
    """The answer text of context pieces first..last in each --answer-text mode, through featurize and postprocess
    with hand-made logits (google = run_squad.py's get_final_text, the default)."""
    ex = SquadExample("q0", "where ?", context, [], False)
    assert SquadTask("squad").answer_text == "google"
    for mode, expected in (("google", google), ("chars", chars), ("words", words)):
        task = SquadTask("squad", max_seq_length=64, max_query_length=8, answer_text=mode)
        (f,) = task.featurize([ex], tok)
        start, end = torch.zeros(len(f["input_ids"])).numpy(), torch.zeros(len(f["input_ids"])).numpy()
        start[f["offset"] + first] = end[f["offset"] + last] = 10.0
        (pred,) = task.postprocess([ex], [f], [(start, end)])
        assert pred["text"] == expected, mode
