"""Masking strategies (``--mask-strategy``): which positions of an instance the MLM predicts, one registry.

A strategy is a function with ONE signature, registered in :data:`STRATEGIES` under its flag's name::

    pick(ids, candidates, vocab, num, rng, weights) -> positions   # sorted int64, at most num, all in candidates

``ids`` [T] the instance (no padding), ``candidates`` the positions that may be picked (never [CLS], [SEP] or
[PAD]), ``vocab`` the :class:`VocabInfo` (which ids continue a word), ``num`` the budget (:func:`budget`:
``round(len * mask_prob)``, at least 1, at most ``max_predictions``), ``rng`` the instance's generator, ``weights``
[T] how much each position asks to be predicted (only a strategy that reads the model's losses uses it; the others
ignore it). What a picked position's input becomes is decided once, after, for every strategy: :func:`apply_mix`
(the paper's 80/10/10, or ``--mask-mix``). :func:`mask_instance` is the one entry point for an instance; the loader
masks the budget recipe's batches (``token``, no NSP) all rows at once by the same rule with hashed draws
(``draws.mask_rows``). A new strategy is one function here and its line in :data:`STRATEGIES` (the flag's choices
are the registry's keys).

- ``token``: Devlin et al.'s: ``num`` candidates uniformly, without replacement.
- ``whole-word``: Google's whole-word masking: a word is a non-``##`` token and the ``##`` tokens after it; words
  are visited in random order and taken whole while they fit the budget (a word that would overflow is skipped).
- ``span``: LTG-BERT's span masking (Samuel et al., 2023; SpanBERT's by words): runs of whole words whose lengths
  are Geometric(1/3), clipped at 10 words, from uniform starts, until the budget is met.
- ``adaptive``: AMLM's hard-token masking (Edman & Fraser, 2025): positions drawn in proportion to ``weights``,
  the model's recent error on each token (:class:`HardTokens`, which also says how it stays resume-exact: the
  loader builds these batches unmasked and the Feed masks them just before their step). Without weights, uniform.

The rates: ``--mask-prob`` is one rate, or ``START:END``, linear over the run's steps (:func:`mask_prob_at`, a pure
function of the step: the Feed passes each batch its rate). :data:`PAPER_MASK_PROB` is Devlin et al.'s 15%, the rate
the held-out meter always masks at (:data:`EVAL_MASK_PROB`, token masking), whatever a run trains with, so that
runs compare.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bertkit.errors import InputError

NO_LABEL = -100
PAPER_MASK_PROB = 0.15  # Devlin et al.'s share of tokens chosen
EVAL_MASK_PROB = PAPER_MASK_PROB  # the held-out meter's, whatever the run trains with (docs/pretraining.md)
PAPER_MIX = (0.8, 0.1, 0.1)  # chosen positions' inputs: [MASK], a random token, unchanged

Strategy = Callable[..., np.ndarray]


@dataclass(frozen=True)
class VocabInfo:
    """What masking needs from a vocabulary: special ids, which ids continue a word (``##``), random-token pool."""

    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    is_continuation: np.ndarray  # [V] bool: token starts with "##"
    random_pool: np.ndarray  # ids a random replacement may take (not [PAD]/[CLS]/[SEP]/[MASK]/[UNK]/[unusedN])

    @classmethod
    def from_tokens(cls, tokens: list[str]) -> VocabInfo:
        index = {t: i for i, t in enumerate(tokens)}
        for special in ("[PAD]", "[CLS]", "[SEP]", "[MASK]"):
            if special not in index:
                raise InputError(f"the vocabulary has no {special} token, which pre-training needs")
        cont = np.array([t.startswith("##") for t in tokens], dtype=bool)
        pool = np.array(
            [i for i, t in enumerate(tokens) if not (t.startswith("[") and t.endswith("]"))], dtype=np.int64
        )
        if len(pool) == 0:
            raise InputError("the vocabulary has no ordinary tokens")
        return cls(len(tokens), index["[CLS]"], index["[SEP]"], index["[MASK]"], index["[PAD]"], cont, pool)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> VocabInfo:
        return cls.from_tokens(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))


def parse_mask_prob(value: float | str | None, default: float = PAPER_MASK_PROB) -> tuple[float, float]:
    """``--mask-prob``: ``0.3`` (constant) or ``START:END`` (``0.4:0.15``: linear from START at the first step to END
    at the last, Ankner et al.'s decay) -> (start, end), each in (0, 1); None -> ``default`` twice."""
    if value is None:
        return default, default
    if isinstance(value, int | float):
        parts = [float(value)]
    else:
        try:
            parts = [float(x) for x in str(value).split(":")]
        except ValueError:
            parts = []
    if len(parts) not in (1, 2) or not all(0.0 < p < 1.0 for p in parts):
        raise InputError(f"--mask-prob {value}: expected a rate in (0, 1) or START:END of two, e.g. 0.4:0.15")
    return parts[0], parts[-1]


HELP = (  # --mask-prob's
    "fraction of tokens masked (paper 0.15); START:END: linear from START to END over the run (0.4:0.15)"
)


def mask_prob_flag(text: str) -> float | str:
    """``--mask-prob``'s parser: a float for a constant rate (as the recipes' tables hold it), ``"START:END"`` for
    a schedule; a bad one raises ``ValueError`` (argparse's one-line error)."""
    try:
        start, end = parse_mask_prob(text if ":" in text else float(text))
    except InputError as e:
        raise ValueError(str(e).partition(": ")[2]) from None
    return start if ":" not in text else f"{start:g}:{end:g}"


def mask_prob_at(start: float, end: float, step: int, total_steps: int) -> float:
    """The rate at ``step`` of ``total_steps`` (0-based): START at the first step, END at the last, linear between:
    a pure function of the step, so a resumed run masks as the uninterrupted one did."""
    return start + (end - start) * min(1.0, step / max(1, total_steps - 1))


def budget(length, mask_prob: float, max_predictions: int):
    """Positions an instance of ``length`` tokens (specials included) predicts: ``round(length * mask_prob)`` (half
    to even), at least 1, at most ``max_predictions``; an int, or an int64 array for an array of lengths (a batch's
    rows: ``draws.mask_rows``)."""
    num = np.minimum(max_predictions, np.maximum(1, np.rint(np.asarray(length) * mask_prob).astype(np.int64)))
    return int(num) if num.ndim == 0 else num


def word_bounds(ids: np.ndarray, candidates: np.ndarray, vocab: VocabInfo) -> np.ndarray:
    """``[W + 1]``: where each word starts among ``candidates`` (and their count): a word is a non-continuation
    token and the ``##`` tokens after it (Google's grouping); a special token between two pieces separates them."""
    starts = ~vocab.is_continuation[ids[candidates]]
    starts[0] = True
    starts[1:] |= np.diff(candidates) != 1
    return np.concatenate([np.flatnonzero(starts), [len(candidates)]])


def pick_token(ids, candidates, vocab, num, rng, weights=None) -> np.ndarray:
    """``num`` candidates, uniformly without replacement (Devlin et al.)."""
    return np.sort(rng.choice(candidates, size=min(num, len(candidates)), replace=False))


def pick_whole_word(ids, candidates, vocab, num, rng, weights=None) -> np.ndarray:
    """Whole words in random order while they fit ``num`` (Google's whole-word masking)."""
    bounds = word_bounds(ids, candidates, vocab)
    chosen: list[int] = []
    for w in rng.permutation(len(bounds) - 1):
        size = int(bounds[w + 1] - bounds[w])
        if len(chosen) >= num:
            break
        if len(chosen) + size > num:
            continue
        chosen.extend(candidates[bounds[w] : bounds[w + 1]].tolist())
    return np.asarray(sorted(chosen), dtype=np.int64)


SPAN_P = 1 / 3  # span lengths in words ~ Geometric(1/3) (LTG-BERT's), at most SPAN_MAX (SpanBERT's clip)
SPAN_MAX = 10


def span_lengths(rng: np.random.Generator, n: int | None = None):
    """Span lengths in words: Geometric(:data:`SPAN_P`) clipped at :data:`SPAN_MAX` (mean 2.95 words)."""
    return np.minimum(rng.geometric(SPAN_P, n), SPAN_MAX)


def pick_span(ids, candidates, vocab, num, rng, weights=None) -> np.ndarray:
    """Spans of whole words (LTG-BERT's span masking, by words as SpanBERT): a span of :func:`span_lengths` words
    from a uniform start word, inside one segment, its words taken while they fit ``num`` (a picked word is
    skipped, one that would overflow ends the span); spans until the budget is met (or 4 x ``num`` tries)."""
    bounds = word_bounds(ids, candidates, vocab)
    sizes = np.diff(bounds)
    segment = (np.cumsum(np.r_[True, np.diff(candidates) != 1]) - 1)[bounds[:-1]]  # a special token splits
    taken = np.zeros(len(sizes), dtype=bool)
    count = 0
    for _ in range(max(100, 4 * num)):
        if count >= num:
            break
        length, first = int(span_lengths(rng)), int(rng.integers(len(sizes)))
        for w in range(first, min(len(sizes), first + length)):
            if segment[w] != segment[first] or count + sizes[w] > num:
                break
            if not taken[w]:
                taken[w], count = True, count + int(sizes[w])
    return candidates[np.repeat(taken, sizes)]


def pick_adaptive(ids, candidates, vocab, num, rng, weights=None) -> np.ndarray:
    """``num`` candidates without replacement, each draw in proportion to ``weights`` (Gumbel top-k: the same as
    drawing one at a time; uniform without weights). ``weights`` are :class:`HardTokens`' for ``adaptive``."""
    w = np.ones(len(candidates)) if weights is None else np.asarray(weights, dtype=np.float64)[candidates]
    keys = np.log(w) + rng.gumbel(size=len(candidates))
    return np.sort(candidates[np.argsort(-keys, kind="stable")[: min(num, len(candidates))]])


# --mask-strategy NAME -> its pick function (the flag's choices, in this order)
STRATEGIES: dict[str, Strategy] = {
    "token": pick_token,
    "whole-word": pick_whole_word,
    "span": pick_span,
    "adaptive": pick_adaptive,
}
STRATEGIES_HELP = (  # --mask-strategy's
    "which positions are predicted (data/pretraining/masking.py): token: uniformly (the paper's); whole-word: a word "
    "and its ## pieces together; span: runs of whole words of Geometric(1/3) lengths (LTG-BERT's); adaptive: tokens "
    "the model still gets wrong more often (AMLM)"
)


def apply_mix(
    ids: np.ndarray, picked: np.ndarray, vocab: VocabInfo, mix: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of an instance whose ``picked`` positions are predicted: the labels hold the original id
    there (-100 elsewhere); ``mix`` = (mask, random, keep) shares of the picked inputs becoming [MASK], a random
    ordinary token, or staying (one uniform draw per position, in the paper's order [mask | keep | random])."""
    out = ids.copy()
    labels = np.full(len(ids), NO_LABEL, dtype=np.int64)
    labels[picked] = ids[picked]
    r = rng.random(len(picked))
    out[picked[r < mix[0]]] = vocab.mask_id
    rand_pos = picked[r >= mix[0] + mix[2]]
    out[rand_pos] = vocab.random_pool[rng.integers(0, len(vocab.random_pool), len(rand_pos))]
    return out, labels


def mask_instance(
    ids: np.ndarray,
    special: np.ndarray,
    vocab: VocabInfo,
    mask_prob: float,
    max_predictions: int,
    strategy: str,
    rng: np.random.Generator,
    mix: tuple[float, float, float] = PAPER_MIX,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mask one instance. ``ids`` [T] (no padding), ``special`` [T] bool ([CLS]/[SEP]). Returns (masked ids, labels
    with the original id at masked positions and -100 elsewhere): :data:`STRATEGIES` ``[strategy]`` picks
    :func:`budget` positions among the non-special ones, then :func:`apply_mix`.

    ``mix`` = (mask, random, keep): the shares of chosen positions whose input becomes [MASK], a random token, or stays
    unchanged (the paper's 80/10/10). Held-out evaluation uses (1, 0, 0): a kept token would give its label away."""
    candidates = np.flatnonzero(~special)
    if len(candidates) == 0:
        return ids.copy(), np.full(len(ids), NO_LABEL, dtype=np.int64)
    num = budget(len(ids), mask_prob, max_predictions)
    picked = STRATEGIES[strategy](ids, candidates, vocab, num, rng, weights)
    return apply_mix(ids, picked, vocab, mix, rng)


# --------------------------------------------------------------------------------------------- adaptive masking

ADAPTIVE_DECAY = 0.9  # a token's error EMA keeps this much of its past at each step that predicts it
ADAPTIVE_FLOOR = 0.05  # a token the model always gets right keeps this weight (a hard one has 1 + this)


class HardTokens:
    """``--mask-strategy adaptive``'s state (AMLM, Edman & Fraser, 2025: "hard" tokens masked more often): an EMA,
    per vocabulary id, of how often the model's argmax missed it where it was masked, updated once per optimizer
    step from that step's masked predictions (summed over the ranks); a position's weight is
    ``ADAPTIVE_FLOOR + error[id]``, and :func:`pick_adaptive` draws the usual count (``round(len * mask_prob)``)
    in proportion to it. Every id starts at error 1 (uniform masking).

    Where and when, for exact resume: the loader builds batches ahead (threads or processes), so it cannot know the
    error of the step that will train on them. Their instances come unmasked (``raw``), and :meth:`mask_batch`
    masks each in the main process just before its step, from this state and a generator seeded by the batch's
    (seed, stage, epoch, index, rank); the state is saved in the checkpoint with the data position (the Feed's).
    So a batch is a pure function of its position and the steps before it, and a resumed run masks as the
    uninterrupted one did."""

    def __init__(self, vocab_size: int):
        self.error = np.ones(vocab_size, dtype=np.float64)
        self._wrong = np.zeros(vocab_size, dtype=np.float64)  # this step's, not yet in the EMA
        self._seen = np.zeros(vocab_size, dtype=np.float64)

    def observe(self, labels: np.ndarray, wrong: np.ndarray) -> None:
        """A micro-batch's masked predictions: their original ids and whether the argmax missed each."""
        n = len(self.error)
        self._seen += np.bincount(labels, minlength=n)[:n]
        self._wrong += np.bincount(labels, weights=np.asarray(wrong, dtype=np.float64), minlength=n)[:n]

    def update(self, reduce: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """After an optimizer step: its observations into the EMA (``reduce`` sums them over the ranks)."""
        wrong, seen = (self._wrong, self._seen) if reduce is None else (reduce(self._wrong), reduce(self._seen))
        hit = seen > 0
        self.error[hit] = ADAPTIVE_DECAY * self.error[hit] + (1 - ADAPTIVE_DECAY) * wrong[hit] / seen[hit]
        self._wrong[:], self._seen[:] = 0.0, 0.0

    def state(self) -> list[float]:
        """For the checkpoint (plain floats: a ``weights_only`` load reads them; float64, so exact)."""
        return self.error.tolist()

    def load(self, state: list[float]) -> None:
        if len(state) != len(self.error):
            raise InputError(
                f"the checkpoint's adaptive masking has {len(state)} ids, the vocabulary {len(self.error)}"
            )
        self.error = np.asarray(state, dtype=np.float64)

    def mask_batch(self, batch: dict, vocab: VocabInfo, mask_prob: float, max_predictions: int, mix, rng) -> dict:
        """An unmasked (``raw``) batch masked row by row by :func:`mask_instance` with this state's weights; its
        ``special_tokens_mask`` is dropped."""
        special = batch.pop("special_tokens_mask")
        ids, labels = batch["input_ids"], batch["labels"]
        for r, n in enumerate(batch["attention_mask"].sum(1)):
            row = ids[r, :n].copy()
            weights = ADAPTIVE_FLOOR + self.error[row]
            ids[r, :n], labels[r, :n] = mask_instance(
                row, special[r, :n], vocab, mask_prob, max_predictions, "adaptive", rng, mix, weights
            )
        return batch


def mlm_inputs(batch: dict[str, np.ndarray], pad_to: int = 0) -> dict[str, np.ndarray]:
    """A host batch as a plain masked LM's inputs (a model whose forward takes ``masked_positions``): what the model
    would otherwise ask the device, answered from the numpy batch, so that a GPU's step queues its work without
    waiting: the labelled positions' flat indices (selecting by ``labels != -100`` on the device waits to learn how
    many), and no attention mask where nothing is padded (the model would check that it is all ones; without one,
    attention runs its unmasked kernel). The same numbers: an all-ones mask is read as none.

    ``pad_to``: the positions' count padded up to a multiple of it with an unlabelled position (its label reads -100,
    which the loss ignores), so that batches share a few shapes: a CUDA graph replays one shape, and a count that
    moved with every batch would record a graph each time. The same loss and gradients."""
    flat = batch["labels"].reshape(-1)
    positions = np.flatnonzero(flat != NO_LABEL)
    if pad_to and len(positions) % pad_to and len(positions) < len(flat):
        free = int(np.argmax(flat == NO_LABEL))  # the first unlabelled position
        positions = np.concatenate([positions, np.full(pad_to - len(positions) % pad_to, free, positions.dtype)])
    out = dict(batch, masked_positions=positions)
    if out["attention_mask"].all():
        del out["attention_mask"]
    return out


def mlm_padding(inputs: dict[str, np.ndarray], batch: dict[str, np.ndarray]) -> int:
    """How many of :func:`mlm_inputs`' positions for ``batch`` are its padding (they come last): what a loss or a
    count over the labelled positions leaves out."""
    return len(inputs["masked_positions"]) - int(np.count_nonzero(batch["labels"] != NO_LABEL))
