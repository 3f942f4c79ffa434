"""``bertkit attention``: attention maps of one input, with the tokens on the axes (PNG + NPZ of every layer)."""

from __future__ import annotations

import argparse
import json

from bertkit.errors import InputError
from bertkit.options import ExactComputeArgs, add_options, number, output_path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Draw the attention probabilities of a model for one text (or a text pair): one head, or a grid of every "
        "head of a layer. Every layer's and head's weights go to an .npz beside the PNG."
    )
    parser.add_argument("text", help="the text (the first segment)")
    parser.add_argument("--model", required=True, help="bertkit or Hugging Face BERT directory")
    parser.add_argument("--pair", default=None, help="a second segment: [CLS] text [SEP] pair [SEP]")
    parser.add_argument(
        "--layer", type=number(int, "--layer"), default=None, help="1..L, or -1 for the last (default: the last)"
    )
    parser.add_argument(
        "--head", type=number(int, "--head"), default=None, help="1..N (default: a grid of every head of the layer)"
    )
    parser.add_argument(
        "--output",
        default="attn.png",
        type=output_path,  # a path that cannot be written: refused when the command line is parsed
        help="the PNG (default attn.png; attn.npz goes beside it)",
    )
    parser.add_argument(
        "--max-length", type=number(int, "--max-length"), default=128, help="truncate to this many tokens"
    )
    add_options(parser, ExactComputeArgs)  # --device, --precision (fp32 unless asked)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    # torch: kept out of `bertkit attention -h`
    from bertkit.experiments import attention as A
    from bertkit.precision import resolve_device

    try:
        maps = A.attention_maps(
            args.model, args.text, args.pair, args.max_length, resolve_device(args.device), precision=args.precision
        )
    except FileNotFoundError as e:
        raise InputError(f"--model: {e}") from None
    layer, head = A.check_layer_head(maps, args.layer, args.head)
    out = Path(args.output)
    A.draw(out, maps, layer, head)
    npz = A.save_npz(out.with_suffix(".npz"), maps, layer, head)
    print(
        json.dumps(
            {
                "png": str(out),
                "npz": str(npz),
                "tokens": maps.tokens,
                "layer": layer,
                "head": head if head is not None else "all",
                "layers": maps.num_layers,
                "heads": maps.num_heads,
            }
        )
    )
    return 0
