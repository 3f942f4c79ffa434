"""The budget recipe sized to the corpus and the machine (issue 62, item 4): before anything is read, how many
tokens the corpus holds (:func:`corpus_tokens`, from its files' text sizes), how many a step of each model size
reads in a second on this machine (:func:`tokens_per_second`, from ``flops.py``'s count and the CPU's measured
matmul peak), and so how often the budget would read the corpus over at each size (:class:`Sizing`).

The rule (:func:`choose`): ModernBERT-tiny, and a size up (mini) where mini would read at least
``MINI_FROM_TOKENS`` tokens in the budget, or where tiny would read the corpus more than ``MAX_PASSES`` times (more
capacity pays once the text repeats: tiny passed over the 12 books about 57 times in 30 minutes and fine-tuned worse
than mini at 18). The first half is a compute rule, not a time rule: 30 minutes on the shared corpus (books and
Wikipedia, read less than once) put tiny ahead on BLiMP where mini read 6.7 M tokens (one thread of the EPYC-BF16,
about the pace of two AVX2 cores: 59.31 against 58.33, and +2.28 CoLA MCC over random initialisation against
+0.79) and mini ahead where it read 11.5 M (both threads: 60.00 against 58.68, +3.57 against +1.58;
BENCHMARKS.md, "Which size at 30 minutes"). A corpus of unknown size (a table file) is sized by the first half
alone. What it estimated is printed with the recipe's choices, so a user sees why."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

import torch

from bertkit import models
from bertkit.data.pretraining.corpus import detect_format, expand_corpus
from bertkit.data.pretraining.masking import parse_mask_prob
from bertkit.errors import InputError
from bertkit.precision import resolve_precision
from bertkit.recipes.pretrain import flops

# bytes of text per token of the budget's 8,000-token vocabulary, measured on the shared corpus (books and
# Wikipedia, 351 MB of text once decompressed): estimates the corpus's tokens before any is read
BYTES_PER_TOKEN = 4.0
# a compressed file whose header does not say its size (bzip2, xz, a streamed zstd): text is about this many
# times its compressed size
COMPRESSION_RATIO = 4.0
# the budget step's share of the measured matmul peak over a whole run, seq ramp included, on the EPYC-BF16:
# modernbert-mini on 2 threads read 11.5M tokens in 30 minutes (about 40%), modernbert-tiny on 1 thread 3.7M in 10
# (about 28%): a rate estimate for choosing, not a figure reported
BUDGET_MFU = 0.35
# the share of --max-time spent stepping (the rest: warm-up, evaluations, the final save)
TRAINING_SHARE = 0.9
# a size up when the smaller model would read the corpus more often than this
MAX_PASSES = 20.0
# a size up when mini would read at least this many tokens in the budget (estimated as ``reads``): between the
# estimates of the two measured 30-minute runs on the shared corpus, 4.9 M (one thread: tiny ahead on BLiMP) and
# 10.1 M (two threads: mini ahead), at their geometric mean
MINI_FROM_TOKENS = 7e6
# the mean sequence length over the budget's seq ramp (32 tokens for 70% of the steps, then 128), in tokens
MEAN_LENGTH = 60.0
LADDER = ("bert-tiny", "bert-mini")  # the budget's sizes, by BERT name (tables.bert_size); its own first


def text_bytes(path: str | os.PathLike) -> int:
    """The size of ``path``'s text once decompressed: a zstd frame's or a gzip member's recorded size, else the
    compressed size times ``COMPRESSION_RATIO``; a plain file's own size."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(18)
        if head.startswith(b"\x28\xb5\x2f\xfd"):  # zstd
            import zstandard  # a run dependency, needed only for a zstd file

            with contextlib.suppress(zstandard.ZstdError):
                n = zstandard.frame_content_size(head)
                if n >= 0:
                    return int(n)
            return int(size * COMPRESSION_RATIO)
        if head.startswith(b"\x1f\x8b"):  # gzip: ISIZE, the text's size mod 2**32, ends the (last) member
            f.seek(max(0, size - 4))
            n = int.from_bytes(f.read(4), "little")
            return n if n >= size else int(size * COMPRESSION_RATIO)
        if head.startswith((b"BZh", b"\xfd7zXZ")):
            return int(size * COMPRESSION_RATIO)
    return size


def corpus_tokens(paths, follow_symlinks: bool = False) -> int | None:
    """The corpus's tokens, estimated from its files' text sizes; None for a corpus with table files (Parquet,
    Arrow: their sizes say little of their text) or one that cannot be listed (its reader names the fault)."""
    try:
        files = expand_corpus(paths, follow_symlinks)
        if any(detect_format(f) in ("parquet", "arrow") for f in files):
            return None
        return int(sum(text_bytes(f) for f in files) / BYTES_PER_TOKEN)
    except (InputError, OSError):  # a CorpusError: the preparation names it
        return None


def preset_config(arch: str, model_size: str, vocab_size: int) -> dict:
    """A size preset's config as ``flops.py`` reads it (no model built)."""
    sizes = models.get(arch).presets[model_size]
    layers, hidden = sizes[0], sizes[1]
    intermediate = sizes[3] if len(sizes) > 3 else 4 * hidden
    return {"model_type": arch, "num_hidden_layers": layers, "hidden_size": hidden,
            "intermediate_size": intermediate, "vocab_size": vocab_size}  # fmt: skip


@contextlib.contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tokens_per_second(config: dict, mask_prob: float, precision: str, threads: int | None) -> float:
    """Tokens a second the budget's step reads with ``config`` on this CPU: its measured matmul peak (cached by
    ``flops.cpu_peak``) times ``BUDGET_MFU`` over the step's FLOPs per token."""
    with _threads(threads):
        peak = flops.cpu_peak(precision)
    return peak * BUDGET_MFU / flops.flops_per_token(config, MEAN_LENGTH, mask_prob, nsp=False)


@dataclasses.dataclass(frozen=True)
class Sizing:
    """What the choice saw: the corpus's estimated tokens and, per size, the tokens the budget reads."""

    corpus_tokens: int | None
    reads: dict[str, float]  # size (its BERT name) -> tokens the budget reads with it

    def passes(self, size: str) -> float | None:
        return self.reads[size] / self.corpus_tokens if self.corpus_tokens else None


def choose(sizing: Sizing) -> tuple[str, str]:
    """(size, why): the smallest of the ladder (the recipe's own size), or a size up where the larger would read at
    least ``MINI_FROM_TOKENS`` tokens or the smaller would pass over the corpus more than ``MAX_PASSES`` times."""
    small, large = LADDER
    if sizing.reads[large] >= MINI_FROM_TOKENS:
        return large, f"{describe(sizing, large)}; at least {_count(MINI_FROM_TOKENS)} tokens for the larger"
    if (sizing.passes(small) or 0.0) > MAX_PASSES:
        return large, f"{describe(sizing, large)}; the smaller would read it {sizing.passes(small):.0f} times"
    return small, describe(sizing, small)


def describe(sizing: Sizing, size: str) -> str:
    """The line the recipe prints: the corpus's size and what the chosen model reads of it."""
    reads = sizing.reads[size]
    if sizing.corpus_tokens is None:
        return f"the budget reads about {_count(reads)} tokens (the corpus's size unknown)"
    return (
        f"the corpus holds about {_count(sizing.corpus_tokens)} tokens; the budget reads about "
        f"{_count(reads)} ({sizing.passes(size):.2g} passes)"
    )


def recorded_size(output: str | os.PathLike) -> str | None:
    """The size preset that the run in ``output`` built (its run.json's), or None where there is none to read."""
    return recorded(output, "config", "model_size")


def recorded(output: str | os.PathLike, *keys: str):
    """What the run in ``output`` recorded at ``keys`` in its run.json, or None where there is none to read."""
    try:
        value = json.loads((Path(output) / "run.json").read_text())
        for key in keys:
            value = value[key]
        return value
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _count(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


def estimate(cfg, arch: str, seconds: float, vocab_size: int, shapes: dict | None = None) -> Sizing:
    """:class:`Sizing` for ``cfg``'s corpus and budget on this machine, at each size of the ladder, each at the shape
    the run would build (``shapes``: size -> config keys over its preset, ``tables.BUDGET_SHAPES``; the user's
    ``--config-override`` over them)."""
    precision = resolve_precision(cfg.precision, "cpu")
    start, end = parse_mask_prob(cfg.mask_prob, default=0.3)  # a schedule (0.4:0.15): its mean over the run
    mask_prob = (start + end) / 2
    reads = {}
    for size in LADDER:
        config = preset_config(arch, models.get(arch).preset(size), vocab_size)
        config.update((shapes or {}).get(size, {}), **cfg.config_overrides)  # the shape the run builds
        reads[size] = tokens_per_second(config, mask_prob, precision, cfg.threads) * seconds * TRAINING_SHARE
    return Sizing(corpus_tokens(cfg.corpus, cfg.follow_symlinks), reads)
