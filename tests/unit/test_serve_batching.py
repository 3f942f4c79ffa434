"""BatchQueue without HTTP: mixed specs in shared batches (fp32, tight), token budget, back-pressure, cancellation,
shutdown."""

from __future__ import annotations

import concurrent.futures
import random
import threading

import numpy as np
import pytest
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.serve.core.batching import BatchQueue, QueueFull

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    path = make_model_dir(tmp_path_factory.mktemp("queue-model"), VOCAB, max_position_embeddings=128)
    return Encoder.from_pretrained(path, precision="fp32")


def test_mixed_specs_share_batches_and_never_mix(encoder):
    rng = random.Random(0)
    specs = [
        encoder.spec(-2, "mean"),
        encoder.spec([-1, 0], "max"),
        encoder.spec(1, "cls", normalize=True),
        encoder.spec(-1, "cls_pooled"),
        encoder.spec([0, -1], "none"),
        encoder.spec(-3, "first"),
    ]
    queue = BatchQueue(encoder, max_batch_tokens=512, max_batch_size=16, max_wait_ms=20).start()
    try:
        jobs = []
        lock = threading.Lock()

        def client(seed):
            r = random.Random(seed)
            for _ in range(15):
                spec = r.choice(specs)
                texts = [" ".join(r.choice(WORDS) for _ in range(r.randint(1, 40))) for _ in range(r.randint(1, 5))]
                fut = queue.submit(encoder.tokenize(texts), spec)
                with lock:
                    jobs.append((spec, texts, fut))

        threads = [threading.Thread(target=client, args=(rng.random(),)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for spec, texts, fut in jobs:
            got = fut.result(timeout=60)
            want = encoder.encode(
                texts,
                layers=[i if i else "embeddings" for i in spec.layers],
                pooling=spec.pooling,
                normalize=spec.normalize,
            )
            assert len(got) == len(texts)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        stats = queue.stats
        assert stats.batches < sum(len(t) for _, t, _ in jobs)  # inputs really shared forward passes
        assert stats.padded_tokens <= stats.batches * 512 or stats.batches == 0
    finally:
        queue.stop()


def test_back_pressure_cancellation_and_shutdown(encoder):
    queue = BatchQueue(encoder, max_batch_tokens=512, max_pending=4, max_wait_ms=0)
    with pytest.raises(RuntimeError, match="not running"):
        queue.submit(encoder.tokenize(["a"]), encoder.spec())
    gate = threading.Event()
    queue.start()
    started = threading.Event()
    blocker = queue.call(lambda enc: (started.set(), gate.wait(30))[1])  # hold the worker so requests pile up
    assert started.wait(30)  # else the worker could take the next request in the same wake-up as this call
    first = queue.submit(encoder.tokenize(["the cat", "a dog"]), encoder.spec())
    cancelled = queue.submit(encoder.tokenize(["red mat"]), encoder.spec())
    with pytest.raises(QueueFull, match="limit 4"):
        queue.submit(encoder.tokenize(["x", "y"]), encoder.spec())
    assert cancelled.cancel()
    gate.set()
    assert blocker.result(timeout=30) is True
    assert len(first.result(timeout=30)) == 2
    assert queue.stats.batch_inputs == 2  # the cancelled request cost no compute
    assert queue.submit([], encoder.spec()).result(timeout=1) == []
    gate2, entered = threading.Event(), threading.Event()
    queue.call(lambda enc: (entered.set(), gate2.wait(30)))
    assert entered.wait(30)  # the worker is busy: what is submitted now stays pending
    pending = queue.submit(encoder.tokenize(["the cat"]), encoder.spec())
    threading.Timer(0.2, gate2.set).start()
    queue.stop()
    with pytest.raises((RuntimeError, concurrent.futures.CancelledError)):
        pending.result(timeout=30)  # failed by shutdown, never left waiting
    assert not queue.alive


def test_idle_worker_hands_memory_back(encoder):
    """After work, an idle worker calls malloc_trim (glibc), at most once per interval, and not when there was no
    work since the last one."""
    import time

    from bertkit.serve.core.batching import MALLOC_TRIM

    if MALLOC_TRIM is None:
        pytest.skip("no glibc malloc_trim here")
    queue = BatchQueue(encoder, max_batch_tokens=512, max_wait_ms=0, trim_interval_s=0.2).start()
    try:
        time.sleep(0.5)
        assert queue.stats.trims == 0  # nothing done yet: nothing to hand back
        queue.submit(encoder.tokenize(["the cat sat"]), encoder.spec()).result(timeout=30)
        deadline = time.monotonic() + 10
        while queue.stats.trims == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue.stats.trims == 1
        time.sleep(0.6)
        assert queue.stats.trims == 1  # idle without new work: no further trims
    finally:
        queue.stop()
    off = BatchQueue(encoder, max_batch_tokens=512, max_wait_ms=0, trim_interval_s=0).start()
    try:
        off.submit(encoder.tokenize(["the cat sat"]), encoder.spec()).result(timeout=30)
        time.sleep(0.5)
        assert off.stats.trims == 0
    finally:
        off.stop()
