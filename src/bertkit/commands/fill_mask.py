"""``bertkit fill-mask --model DIR "text with [MASK]"``: the top-k predictions for each [MASK], with probabilities.

The computation is :meth:`bertkit.Encoder.fill_mask` (the one the server's ``/fill-mask`` runs); this module only
checks the flags and prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.options import device_option, model_option, option, precision_option

MASK = "[MASK]"


@dataclass(frozen=True, kw_only=True)
class FillMaskConfig:
    """What ``bertkit fill-mask`` predicts."""

    model: str = model_option(
        "a model directory (bertkit or Hugging Face layout) with an MLM head and vocab.txt", metavar="DIR"
    )
    text: list[str] = option(
        flag="text", nargs="+", default_factory=list, help='texts holding [MASK], e.g. "the [MASK] sat on the mat ."'
    )
    top_k: int = option(5, help="predictions per [MASK]")
    json: bool = option(False, help="print one JSON object per text")
    device: str | None = device_option()
    precision: str = precision_option("fp32")  # the probabilities as computed


CONFIG = FillMaskConfig


def run(cfg: FillMaskConfig) -> int:
    from bertkit.features import Encoder, format_fill_mask  # torch: kept out of `bertkit fill-mask -h`
    from bertkit.precision import resolve_device

    if cfg.top_k < 1:
        raise InputError(f"--top-k must be >= 1, got {cfg.top_k}")
    missing = [t for t in cfg.text if MASK not in t]
    if missing:
        raise InputError(f"no {MASK} in {missing[0]!r}")
    encoder = Encoder.from_pretrained(cfg.model, device=resolve_device(cfg.device), precision=cfg.precision)
    if encoder.mlm_head is None:  # refused before any text is encoded, naming the directory
        raise InputError(f"--model {cfg.model}: has no masked-LM head (its weights hold none), which fill-mask needs")
    print(format_fill_mask(cfg.text, encoder.fill_mask(cfg.text, top_k=cfg.top_k), cfg.json))
    return 0
