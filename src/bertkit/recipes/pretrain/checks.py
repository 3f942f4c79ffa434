"""What a pre-training run's flags must satisfy together, each valid alone (issue 54, items 7 and 10): checked when
the config is made (``PretrainConfig.__post_init__``) or resolved (the command's ``--config-override`` check), so
that a combination is refused in one line naming its flags before a file is read or written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.data.pretraining.echoes import echo_clash, echo_refusal
from bertkit.data.pretraining.ramps import parse_ramp
from bertkit.errors import InputError, PretrainError
from bertkit.precision import check_device
from bertkit.recipes.pretrain.tables import FRESH_MODEL_KEYS, given

ECHO_FLAGS = ("echo_keep", "echo_stage", "echo_mask")  # what acts only on echoes (refused where there are none)
GIVEN = object()  # ONLY_WITH's value for a setting that acts whatever its value, when given (not None)
# flags that act only with another setting: field -> (the field it needs, its value, the flag that sets it). Given
# without it (a value other than its default), one is refused rather than silently ignored
ONLY_WITH = {
    "phase2_seq_len": ("two_phase", True, "--two-phase"),
    "phase2_batch_size": ("two_phase", True, "--two-phase"),
    "rtd_weight": ("objective", "electra", "--objective electra"),
    "causal_ratio": ("objective", ("mntp", "mlm-clm"), "--objective mntp or mlm-clm"),
    "dupe_factor": ("masking", "static", "--masking static"),
    "blimp_pairs": ("blimp", GIVEN, "--blimp"),
}


def check_combinations(cfg: Any) -> None:
    """Refuse a ``PretrainConfig`` whose flags do not go together: one of :data:`ONLY_WITH` without its setting,
    ``--whole-word-mask`` (``--mask-strategy whole-word``'s other spelling) with another strategy, ``--echo-share``
    with ``--nsp``, ``--echo-keep``, ``--echo-stage`` or ``--echo-mask`` where no instance is an echo, ``--echo-mask``
    coupled or apart with adaptive masks, a scheduled ``--mask-prob`` or
    adaptive masks with static masking, ``--warmup-steps`` past ``--max-steps``, a ``--device`` this machine lacks."""
    for name, (needs, value, flag) in ONLY_WITH.items():
        if value is GIVEN:
            has = getattr(cfg, needs) is not None
        else:  # one value, or a tuple of the values that use it
            has = getattr(cfg, needs) in (value if isinstance(value, tuple) else (value,))
        if given(cfg, name) and not has:
            raise InputError(f"--{name.replace('_', '-')}: only {flag} uses it; leave the flag out")
    if cfg.whole_word_mask and cfg.mask_strategy not in ("token", "whole-word"):  # token: the default, unsaid
        raise InputError(
            f"--whole-word-mask with --mask-strategy {cfg.mask_strategy}: --whole-word-mask means --mask-strategy "
            "whole-word; give one of them"
        )
    if cfg.masking == "static" and cfg.mask_strategy == "adaptive":
        raise InputError(
            "--mask-strategy adaptive with --masking static: adaptive masks follow the model's errors step by step; "
            "use --masking dynamic"
        )
    if cfg.masking == "static" and ":" in str(cfg.mask_prob):
        raise InputError(
            f"--mask-prob {cfg.mask_prob} with --masking static: a scheduled rate changes the masks every step; "
            "use --masking dynamic or one rate"
        )
    clash = echo_clash(cfg.nsp, cfg.segments)
    if clash and (cfg.echo_share or 0) > 0:
        raise InputError(echo_refusal(cfg.echo_share, clash))
    for name in ECHO_FLAGS:  # set (not the default) where no instance is an echo
        if given(cfg, name) and (cfg.echo_share == 0 or clash):
            flag = f"--{name.replace('_', '-')} {getattr(cfg, name)}"
            why = f"beside {clash.flag}" if clash else "with --echo-share 0"
            raise InputError(f"{flag}: no instance is an echo here ({why})")
    if cfg.echo_mask != "independent" and cfg.mask_strategy == "adaptive":  # the loader's rows come to it unmasked
        raise InputError(f"--echo-mask {cfg.echo_mask} with --mask-strategy adaptive: adaptive masks after the loader")
    if cfg.warmup_steps is not None and cfg.max_steps is not None and cfg.warmup_steps > cfg.max_steps:
        raise InputError(
            f"--warmup-steps {cfg.warmup_steps}: more than the run's --max-steps {cfg.max_steps} (the learning rate "
            "would never reach its peak)"
        )
    if cfg.device is not None:
        check_device(cfg.device)


def check_given(cfg: Any) -> None:
    """The flags as given (the parsed command line, or an unresolved ``PretrainConfig``), before ``resolve`` fills
    in the vocabulary and the recipe's choices: ``--vocab-size``
    with a vocabulary given (``--vocab``, ``--init-from``'s), a fresh model's initialisation with ``--init-from``
    (its model keeps its own), each refused where it was silently ignored."""
    given_vocab = "--vocab" if cfg.vocab is not None else "--init-from" if cfg.init_from is not None else None
    if given_vocab and cfg.vocab_size is not None:
        raise InputError(
            f"--vocab-size: sizes a vocabulary trained on the corpus; {given_vocab} gives one already, leave it out"
        )
    fresh = [k for k in FRESH_MODEL_KEYS if getattr(cfg, k) is not None]
    if cfg.init_from is not None and fresh:
        flag = "--" + fresh[0].replace("_", "-")
        raise InputError(f"{flag}: initialises a fresh model; --init-from's keeps its own, leave the flag out")


def longest_sequence(cfg: Any) -> int | None:
    """The longest sequence any stage of the run feeds the model (``--seq-len``, ``--seq-ramp``'s, ``--two-phase``'s
    second phase); None before ``resolve`` sets ``--seq-len``."""
    if cfg.seq_len is None:
        return None
    ramp = [n for n, _ in parse_ramp(cfg.seq_ramp, "--seq-ramp")]
    return max([cfg.seq_len, *ramp, *([cfg.phase2_seq_len] if cfg.two_phase else [])])


def check_inputs(cfg: Any) -> None:
    """Refuse a ``--blimp`` that is not a directory and an ``--init-from`` that is not a model directory (or holds
    no vocabulary when ``--vocab`` is left out), before anything is read or written."""
    if cfg.blimp is not None and not Path(cfg.blimp).is_dir():
        raise PretrainError(f"--blimp {cfg.blimp}: not a directory (BLiMP's JSONL files, one per paradigm)")
    if cfg.init_from is not None:
        init = Path(cfg.init_from)
        if not (init / "config.json").is_file() and not (init / "bert_config.json").is_file():
            raise PretrainError(f"--init-from {init}: not a model directory (no config.json)")
        if cfg.vocab is None and not (init / "vocab.txt").is_file():
            raise PretrainError(
                f"--init-from {init}: no vocab.txt there; pass --vocab (pre-training reads a WordPiece "
                "vocabulary: whole-word masking follows its ## pieces)"
            )
