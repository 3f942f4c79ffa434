"""Attention maps: the attention probabilities of every layer and head for one input, and their pictures.

``attention_maps`` returns ``[L, N, T, T]`` (row = the attending token, column = the token attended to; rows sum
to 1) with the wordpieces on both axes. ``draw`` shows one head, or a grid of a layer's heads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import InputError
from bertkit.experiments.plots import pyplot, save_figure
from bertkit.files import atomic_write


@dataclass
class AttentionMaps:
    tokens: list[str]
    weights: np.ndarray  # [L, N, T, T] float32
    segments: list[int]

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_heads(self) -> int:
        return self.weights.shape[1]


def attention_maps(
    model_dir: str | os.PathLike,
    text: str,
    pair: str | None = None,
    max_length: int = 128,
    device: str = "cpu",
    precision: str = "fp32",
) -> AttentionMaps:
    """Run ``text`` (and ``pair``: ``[CLS] text [SEP] pair [SEP]``) through the model; every layer's attention
    (computed at ``precision``, returned as float32)."""
    import torch

    # torch: kept out of the import of this module (its plots and .npz need none)
    from bertkit.features import Encoder

    enc = Encoder.from_pretrained(model_dir, device=device, precision=precision)
    encoding = enc.tokenize([text], [pair] if pair is not None else None, max_length)[0]
    ids, types, mask = enc.collate([encoding])
    with torch.inference_mode(), enc.autocast():
        out = enc.bert(ids, mask, types, output_attentions=True)
    weights = torch.stack([a[0].float() for a in out.attentions]).cpu().numpy()  # [L, N, T, T]
    return AttentionMaps(list(encoding.tokens), weights.astype(np.float32), list(encoding.type_ids))


def save_npz(path: Path, maps: AttentionMaps, layer: int | None, head: int | None) -> Path:
    """``attention`` [L, N, T, T], ``tokens``, ``segments`` and the drawn ``layer`` / ``head`` (1-based; 0 = all)."""

    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.savez_compressed(
                f,
                attention=maps.weights,
                tokens=np.array(maps.tokens),
                segments=np.array(maps.segments),
                layer=np.array(layer or 0),
                head=np.array(head or 0),
            )

    atomic_write(path, write)
    return path


def check_layer_head(maps: AttentionMaps, layer: int | None, head: int | None) -> tuple[int, int | None]:
    """1-based layer (default the last) and head (None = every head); InputError naming the flag and range."""
    L, N = maps.num_layers, maps.num_heads
    if layer is None:
        layer = L
    if layer < 0:
        layer = L + 1 + layer
    if not 1 <= layer <= L:
        raise InputError(f"--layer {layer}: the model has layers 1..{L} (or -1..-{L})")
    if head is not None and not 1 <= head <= N:
        raise InputError(f"--head {head}: the model has heads 1..{N}")
    return layer, head


def draw(path: Path, maps: AttentionMaps, layer: int, head: int | None) -> Path:
    """One head (``head`` given) as a heatmap with the tokens on both axes, or a grid of every head of ``layer``.
    ``layer`` and ``head`` are 1-based."""

    plt = pyplot()
    T = len(maps.tokens)
    heads = [head] if head is not None else list(range(1, maps.num_heads + 1))
    cols = 1 if len(heads) == 1 else min(4, len(heads))
    rows = (len(heads) + cols - 1) // cols
    cell = max(2.6, min(7.0, 0.28 * T + 1.2)) if len(heads) == 1 else max(2.4, min(4.0, 0.16 * T + 1.0))
    fig, axes = plt.subplots(rows, cols, figsize=(cell * cols + 0.8, cell * rows + 0.4), squeeze=False)
    show_numbers = len(heads) == 1 and T <= 16
    for k, h in enumerate(heads):
        ax = axes[k // cols][k % cols]
        m = maps.weights[layer - 1, h - 1]
        im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        fs = 8 if len(heads) == 1 else 6
        ax.set_xticklabels(maps.tokens, rotation=90, fontsize=fs)
        ax.set_yticklabels(maps.tokens, fontsize=fs)
        ax.set_title(f"layer {layer}, head {h}", fontsize=9)
        if show_numbers:
            for i in range(T):
                for j in range(T):
                    ax.text(
                        j,
                        i,
                        f"{m[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if m[i, j] > 0.5 else "black",
                    )
        if len(heads) == 1:
            ax.set_xlabel("attended to")
            ax.set_ylabel("attending")
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    for k in range(len(heads), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    return save_figure(fig, path)
