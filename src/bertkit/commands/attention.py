"""``bertkit attention``: attention maps of one input, with the tokens on the axes (PNG + NPZ of every layer)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.options import device_option, max_length_option, model_option, option, output_path, precision_option


@dataclass(frozen=True, kw_only=True)
class AttentionConfig:
    """What ``bertkit attention`` draws."""

    text: str = option(flag="text", help="the text (the first segment)")
    model: str = model_option("bertkit or Hugging Face BERT directory")
    pair: str | None = option(None, help="a second segment: [CLS] text [SEP] pair [SEP]")
    layer: int | None = option(None, help="1..L, or -1 for the last (default: the last)")
    head: int | None = option(None, help="1..N (default: a grid of every head of the layer)")
    output: str = option(
        "attn.png",
        parse=output_path,  # a path that cannot be written: refused when the command line is parsed
        help="the PNG (attn.npz goes beside it)",
    )
    max_length: int = max_length_option(128, "truncate to this many tokens")
    device: str | None = device_option()
    precision: str = precision_option("fp32")  # the maps as the model computes them


CONFIG = AttentionConfig
DESCRIPTION = (
    "Draw the attention probabilities of a model for one text (or a text pair): one head, or a grid of every "
    "head of a layer. Every layer's and head's weights go to an .npz beside the PNG."
)


def run(cfg: AttentionConfig) -> int:
    from pathlib import Path

    # torch: kept out of `bertkit attention -h`
    from bertkit.experiments import attention as A
    from bertkit.precision import resolve_device

    try:
        maps = A.attention_maps(
            cfg.model, cfg.text, cfg.pair, cfg.max_length, resolve_device(cfg.device), precision=cfg.precision
        )
    except FileNotFoundError as e:
        raise InputError(f"--model: {e}") from None
    layer, head = A.check_layer_head(maps, cfg.layer, cfg.head)
    out = Path(cfg.output)
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
