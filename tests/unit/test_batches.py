"""The one batch planner and the one collate (bertkit.batches), the one batch loop over them (bertkit.runtime), and
the callers that used to have their own: the Encoder (encode, fill-mask), the task pipelines, the layer probe and the
embedding loop's columns. Each caller's outputs are the ones it computes on inputs one at a time."""

from __future__ import annotations

import numpy as np
import pytest
import tinymodels
import torch
from tinymodels import one_thread  # noqa: F401  (autouse fixture)

from bertkit import Encoder
from bertkit.batches import collate, pad, plan_batches

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return Encoder.from_pretrained(tinymodels.make_model_dir(tmp_path_factory.mktemp("tiny"), VOCAB), precision="fp32")


def test_plan_batches_orders_by_length_and_respects_both_limits():
    lengths = [5, 40, 7, 7, 12, 3, 40, 1, 7]
    for longest_first in (True, False):
        for size, budget in ((3, None), (3, 50), (8, 24), (1, None)):
            batches = plan_batches(lengths, size, budget, longest_first=longest_first)
            flat = [i for b in batches for i in b]
            key = (lambda i: -lengths[i]) if longest_first else (lambda i: lengths[i])
            assert flat == sorted(range(len(lengths)), key=key)  # a stable sort: ties keep the input order
            for b in batches:
                assert len(b) <= size and (
                    len(b) == 1 or budget is None or max(lengths[i] for i in b) * len(b) <= budget
                )
            if budget is None:  # no budget: every batch but the last is full
                assert all(len(b) == size for b in batches[:-1])
    assert plan_batches([], 4) == []
    with pytest.raises(ValueError, match="batch_size"):
        plan_batches([1, 2], 0)


def test_batch_loop_runs_the_planners_batches_and_gives_results_back_in_input_order():
    """bertkit.runtime's loop (every inference front door's): the planner's length-sorted batches, each run under
    inference mode and the precision's autocast, results put back in input order; on the CPU threads (parallel) the
    same results as one batch at a time, and the caller's thread count comes back."""
    import threading

    from bertkit import runtime

    lengths = [5, 40, 7, 7, 12, 3, 40, 1, 9, 2, 6]
    weight = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    inputs = [torch.randn(n, 8, generator=torch.Generator().manual_seed(n)) for n in lengths]
    seen = []

    def run(batch: list[int]) -> list[np.ndarray]:
        seen.append(
            (threading.current_thread().name, torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"))
        )
        return [(inputs[i] @ weight).float().sum(0).numpy() for i in batch]

    for longest_first in (True, False):
        pairs = list(runtime.batch_loop(lengths, run, 3, 20, longest_first=longest_first))
        assert [b for b, _ in pairs] == plan_batches(lengths, 3, 20, longest_first)  # sorted by length, cut by both
        out = runtime.in_input_order(len(lengths), pairs)
        for i, row in enumerate(out):
            np.testing.assert_allclose(row, (inputs[i] @ weight).sum(0).numpy(), rtol=1e-5, atol=1e-5)
    assert {(inference, cast) for _, inference, cast in seen} == {(True, False)}
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen.clear()
        serial = runtime.in_input_order(len(lengths), runtime.batch_loop(lengths, run, 2, None, precision="bf16"))
        assert {name for name, *_ in seen} == {threading.current_thread().name}
        seen.clear()
        # the first two batches wait for each other, so two threads must run them at once (an idle pool thread
        # would otherwise take the second batch whenever the first finished before it was handed out)
        gate, first, lock = threading.Barrier(2, timeout=30), iter(range(2)), threading.Lock()

        def side_by_side(batch: list[int]) -> list[np.ndarray]:
            with lock:
                meet = next(first, None) is not None
            if meet:
                gate.wait()
            return run(batch)

        loop = runtime.batch_loop(lengths, side_by_side, 2, None, precision="bf16", parallel=True)
        parallel = runtime.in_input_order(len(lengths), loop)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert all(name.startswith("bertkit-batch") for name, *_ in seen) and len({name for name, *_ in seen}) == 2
    assert {(inference, cast) for _, inference, cast in seen} == {(True, True)}  # per-thread states, entered there
    for a, b in zip(parallel, serial):
        np.testing.assert_array_equal(a, b)


def test_collate_pads_ids_segments_and_mask():
    ids, types, mask = collate([[2, 7, 3], [2, 3], [2, 8, 9, 10, 3]], [[0, 0, 0], [0, 0], [0, 0, 1, 1, 1]], pad_id=5)
    assert ids.tolist() == [[2, 7, 3, 5, 5], [2, 3, 5, 5, 5], [2, 8, 9, 10, 3]]
    assert types.tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 1, 1, 1]]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert ids.dtype == types.dtype == mask.dtype == torch.long
    ids, types, mask = collate([[2, 7, 3]], None, pad_id=0, multiple_of=8)
    assert ids.shape == types.shape == mask.shape == (1, 8) and types.sum() == 0
    assert mask.tolist()[0] == [1] * 3 + [0] * 5
    assert pad([[1], [1, 2, 3]], -100, multiple_of=4).tolist() == [[1, -100, -100, -100], [1, 2, 3, -100]]


def test_task_collate_and_inference_batches_come_from_the_planner():
    from bertkit.tasks import collate_inputs, length_batches

    feats = [{"input_ids": [2] + [7] * n + [3], "token_type_ids": [0] * (n + 2)} for n in (4, 1, 9)]
    batch = collate_inputs(feats, pad_id=0)
    assert batch["input_ids"].shape == (3, 16)  # the longest (11) rounded up to 8
    assert batch["attention_mask"].sum(1).tolist() == [6, 3, 11]
    lengths = [6, 3, 11, 3, 8]
    assert length_batches(lengths, 2, shuffle=False) == plan_batches(lengths, 2, longest_first=False)


def test_fill_mask_batches_by_length_under_the_token_budget(encoder):
    """fill-mask used fixed chunks of 32 texts in input order, whatever their length; it now plans its batches
    as encode does (sorted by length, under the CPU token budget) and answers in input order."""
    texts = [
        "the [MASK] sat on the mat",
        "[MASK] dog",
        "we went to the river bank . the dog ran to the big red mat and the [MASK] blue cat runs",
        "a [MASK]",
        "the cat [MASK] on the [MASK] mat",
    ] * 3
    alone = [encoder.fill_mask([t], top_k=3)[0] for t in texts]
    shapes = []
    hook = encoder.bert.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    saved = encoder.forward_tokens
    try:
        encoder.forward_tokens = 40
        together = encoder.fill_mask(texts, top_k=3)
    finally:
        encoder.forward_tokens = saved
        hook.remove()
    assert len(shapes) > 1 and all(b * t <= 40 or b == 1 for b, t in shapes)
    assert len(together) == len(texts)
    for a, b in zip(together, alone):
        assert [[p["token_id"] for p in m] for m in a] == [[p["token_id"] for p in m] for m in b]
        np.testing.assert_allclose(
            [[p["score"] for p in m] for m in a], [[p["score"] for p in m] for m in b], rtol=1e-5, atol=1e-6
        )


def test_probe_word_features_run_through_the_encoders_forward(encoder):
    """The probe used to hand-collate and call ``encoder.bert`` itself; it now goes through the Encoder's forward
    (and so through its backend), and each word's vectors are those of its sentence encoded alone."""
    from bertkit.data.tasks.conll import TaggedSentence
    from bertkit.experiments.probe import word_features

    sentences = [
        TaggedSentence("the cat sat on the mat".split(), None),
        TaggedSentence(["dog"], None),
        TaggedSentence("we went to the river bank and the big red dog ran".split(), None),
    ]
    calls = []
    forward = encoder.forward
    encoder.forward = lambda *a, **k: calls.append(a[0].shape) or forward(*a, **k)
    try:
        feats, offsets = word_features(encoder, sentences, max_length=64, batch_size=2)
    finally:
        del encoder.forward
    assert len(calls) == 2 and offsets.tolist() == [0, 6, 7, 19]
    for s, sentence in enumerate(sentences):
        ids = (
            [encoder.tokenizer.cls_token_id]
            + encoder.tokenizer.convert_tokens_to_ids(sentence.words)
            + [encoder.tokenizer.sep_token_id]
        )
        with torch.inference_mode():
            hidden = encoder.bert(torch.tensor([ids]), output_hidden_states=True).hidden_states
        alone = torch.stack([h[0, 1:-1] for h in hidden], dim=1).numpy()  # [W, L+1, H]: one piece per word here
        np.testing.assert_allclose(feats[offsets[s] : offsets[s + 1]], alone, rtol=1e-5, atol=1e-5)


def test_embedding_loop_column_is_the_one_collate():
    from bertkit.embeddings.data import column
    from bertkit.embeddings.gradcache import Column

    c = column([[2, 9, 3], [2, 3]], pad_id=0)
    assert isinstance(c, Column) and len(c) == 2
    assert c.ids.tolist() == [[2, 9, 3], [2, 3, 0]] and c.types.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert c.mask.tolist() == [[1, 1, 1], [1, 1, 0]]
