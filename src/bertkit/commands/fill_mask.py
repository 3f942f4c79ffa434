"""``bertkit fill-mask --model DIR "text with [MASK]"``: the top-k predictions for each [MASK], with probabilities.

The computation is :meth:`bertkit.Encoder.fill_mask` (the one the server's ``/fill-mask`` runs); this module only
checks the flags and prints.
"""

from __future__ import annotations

import argparse

from bertkit.errors import InputError
from bertkit.options import ExactComputeArgs, add_options, number

MASK = "[MASK]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="a model directory (bertkit or Hugging Face layout) with an MLM head and vocab.txt",
    )
    parser.add_argument("text", nargs="+", help='texts holding [MASK], e.g. "the [MASK] sat on the mat ."')
    parser.add_argument("--top-k", type=number(int, "--top-k"), default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object per text")
    add_options(parser, ExactComputeArgs)  # --device, --precision (fp32 unless asked: the probabilities as computed)


def run(args: argparse.Namespace) -> int:
    from bertkit.features import Encoder, format_fill_mask  # torch: kept out of `bertkit fill-mask -h`
    from bertkit.precision import resolve_device

    if args.top_k < 1:
        raise InputError(f"--top-k must be >= 1, got {args.top_k}")
    missing = [t for t in args.text if MASK not in t]
    if missing:
        raise InputError(f"no {MASK} in {missing[0]!r}")
    encoder = Encoder.from_pretrained(args.model, device=resolve_device(args.device), precision=args.precision)
    if encoder.mlm_head is None:  # refused before any text is encoded, naming the directory
        raise InputError(f"--model {args.model}: has no masked-LM head (its weights hold none), which fill-mask needs")
    print(format_fill_mask(args.text, encoder.fill_mask(args.text, top_k=args.top_k), args.json))
    return 0
