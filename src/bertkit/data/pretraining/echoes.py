"""Echo instances, ``[CLS] A [SEP] A' [SEP]`` (``--echo-share``): A' is A with some of its tokens dropped, so the
model learns to find a token of one segment in the other, which sentence-pair tasks read first (BENCHMARKS.md, "Echo
instances"). Which instances are echoes and what A' keeps are counter-based draws (:mod:`draws`); the layout is
:meth:`bertkit.data.pretraining.instances.PretrainingData._rows`'s, the twins' masks :func:`draws.couple_twins`."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from bertkit.data.pretraining.draws import S_ECHO, S_FORCED, S_KEPT, hashes, uniforms

ECHO_KEEP = 0.8  # an echo's A': each token of A kept with this probability (so A' is not A at a fixed offset)
ECHO_HELP = (  # --echo-share's
    "share of instances (without NSP) built as an echo, [CLS] A [SEP] A' [SEP]: A' is A with some of its tokens "
    "dropped (--echo-keep), both masked. The model learns to find a token of one segment in the other, which "
    "sentence-pair tasks (QNLI, STS-B, MRPC) read first; held-out MLM scores no echo (default: the budget recipe's "
    "0.25 without NSP where it trains in bf16 (a GPU, a CPU with bf16 units), else 0)"
)
ECHO_KEEP_HELP = (  # --echo-keep's
    "an echo's A' keeps each token of A with this probability, in A's order; A takes 1/(1+K) of the sequence, so a "
    "short A' leaves more of it to fresh text (default 0.8)"
)
ECHO_STAGE_HELP = (  # --echo-stage's
    "where the ramps build echoes: all: every stage; last: only at the run's final --seq-len (the budget recipe's "
    "last 30%% of steps, at 128 tokens); first: only before it (the short stages) (default all; the budget "
    "recipe's first where a CPU run trains in fp32: no bf16 units)"
)
ECHO_STAGES = ("all", "first", "last")


def echo_stage(stage: str | None, final: bool) -> bool:
    """Whether ``--echo-stage`` builds echoes in a ramp stage, ``final`` the one at the run's --seq-len (None: all,
    where no recipe chose)."""
    return stage in (None, "all") or (stage == "last") == final


class EchoClash(NamedTuple):
    """What makes B the text after A, so that no instance can be an echo (an echo's B repeats A)."""

    flag: str  # the command's words
    option: str  # DataOptions' words
    b: str  # what B is there
    way_out: str


ECHO_CLASHES = {
    "nsp": EchoClash("--nsp", "nsp=True", "NSP's is the next sentence", "--no-nsp"),
    "pair": EchoClash("--segments pair", "segments='pair'", "a pair's is the text after it", "--segments one"),
}


def echo_clash(nsp: bool | None, segments: str | None) -> EchoClash | None:
    """The one rule of where echoes can be: only in one-segment instances without NSP. None where they can be, else
    what forbids them (read by the config's checks, DataOptions and the budget's default share)."""
    return ECHO_CLASHES["nsp"] if nsp else ECHO_CLASHES["pair"] if segments == "pair" else None


def echo_refusal(share: float, clash: EchoClash, option: bool = False) -> str:
    """The one-line refusal of an echo share beside ``clash``, in the command's words or (``option``) DataOptions'."""
    said = f"echo_share={share} with {clash.option}" if option else f"--echo-share {share} with {clash.flag}"
    return f"{said}: an echo's second segment repeats its first, {clash.b}; use {clash.way_out}"


ECHO_MASKS = ("independent", "coupled", "apart")
ECHO_MASK_HELP = (  # --echo-mask's
    "how an echo's two segments are masked: independent: each as any instance; coupled: a chosen token of A has its "
    "twin in A' chosen too, so no prediction of A is copied from A'; apart: of two twins never both, so every "
    "prediction with a twin can be copied (default independent)"
)


def draw_echoes(o, key: int, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """With data options ``o`` (``instances.DataOptions``), for instances ``ids`` whose A holds ``lengths`` tokens:
    which are echoes ([B] bool, ``echo_share`` of them), A's length in each (an echo's cut to 1 / (1 + ``echo_keep``)
    of the room), and which of A's tokens A' keeps ([B, max(lengths)] bool: each with probability ``echo_keep``, one
    drawn position always): counter-based draws of (seed, key, instance) (draws.py), the same in a batch and alone."""
    B = len(ids)
    width = max(1, int(lengths.max(initial=0)))
    echo = (uniforms(o.seed, S_ECHO, key, ids) < o.echo_share) & (lengths > 0)
    cut = max(1, int((o.max_seq_length - 3) / (1 + o.echo_keep)))
    a_len = np.where(echo, np.minimum(lengths, cut), lengths)
    kept = (uniforms(o.seed, S_KEPT, key, ids, width) < o.echo_keep) & (np.arange(width) < a_len[:, None])
    force = hashes(o.seed, S_FORCED, key, ids) % np.maximum(1, a_len).astype(np.uint64)
    kept[np.arange(B), force.astype(np.int64)] = True
    return echo, a_len, kept & echo[:, None]
