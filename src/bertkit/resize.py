"""Growing a model directory's vocabulary: the rows of new tokens in the word embeddings, the tied MLM decoder and its
bias, and ``config.json``'s ``vocab_size``.

It works on the weights file's tensors (safetensors, ``pytorch_model.bin`` read with ``weights_only``, or a Google TF
checkpoint), whatever the head: a pre-training head, an MLM head or a fine-tuned classifier are written back as they
were. Only the vocabulary-sized tensors change, found by name (BERT's and ModernBERT's, with or without their
encoder prefix); nothing else is touched.

A new token's row is set (or, for an id below the old vocabulary size, such as an ``[unusedN]`` slot or one of
ModernBERT's padding rows, overwritten) either as the mean of the rows of the pieces it replaces, in the embeddings
and in the decoder, with the decoder bias the mean of those pieces' biases ("mean"), or as the model initialises a
row: a truncated normal of std ``initializer_range`` (cut at ``initializer_cutoff_factor``, 2, std) and a zero bias
("random").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from bertkit import models
from bertkit.checkpoint import CONFIG_NAME, WEIGHTS_NAME, CheckpointError, find_weights, read_state_dict
from bertkit.config import BertConfig, read_config_file
from bertkit.files import atomic_write, write_json

logger = logging.getLogger(__name__)

INITS = ("mean", "random")
# key endings of the vocabulary-sized tensors: embedding rows ([V, H]) and output biases ([V])
# (every registered architecture's token table, then the tied MLM decoder, BERT's and ModernBERT's alike)
TABLE_KEYS = tuple(dict.fromkeys(arch.word_embeddings_key for arch in models.REGISTRY.values()))
ROW_KEYS = (*TABLE_KEYS, "decoder.weight")
BIAS_KEYS = tuple(dict.fromkeys(arch.mlm_bias_key for arch in models.REGISTRY.values()))


def read_directory_config(directory: Path) -> dict:
    """The directory's ``config.json`` as written, or (a Google TF directory) its ``bert_config.json`` in HF form."""
    if (directory / CONFIG_NAME).is_file():
        return read_config_file(directory / CONFIG_NAME)
    return BertConfig.from_pretrained(directory).to_dict("hf")  # its model_type BERT's


def resize_tensors(
    state: dict[str, torch.Tensor],
    old_size: int,
    rows: Sequence[tuple[int, Sequence[int]]],
    new_size: int,
    init: str = "mean",
    std: float = 0.02,
    cutoff: float = 2.0,
    seed: int = 0,
    origin: str = "checkpoint",
) -> list[str]:
    """Resize ``state``'s vocabulary tensors (changed in place) from ``old_size`` to ``new_size`` rows and set the
    ``rows``: (new id, ids of the pieces it replaces). Returns the keys changed; CheckpointError naming ``origin``
    when no embedding is found or a vocabulary tensor has another size."""
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    keys = [k for k in state if k.endswith(ROW_KEYS + BIAS_KEYS)]
    if not any(k.endswith(TABLE_KEYS) for k in keys):
        raise CheckpointError(f"{origin}: no word embeddings (word_embeddings / tok_embeddings) to extend")
    ids = torch.tensor([i for i, _ in rows], dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    random_rows: torch.Tensor | None = None
    for key in sorted(keys):  # sorted: the random rows do not depend on the file's order
        value = state[key]
        if value.shape[0] != old_size:
            raise CheckpointError(f"{origin}: {key!r} has {value.shape[0]} rows, the config's vocab_size is {old_size}")
        grown = (
            torch.cat([value, value.new_zeros((new_size - old_size, *value.shape[1:]))])
            if new_size > old_size
            else value.clone()
        )
        if init == "mean":
            new = torch.stack([value[list(pieces)].float().mean(0) for _, pieces in rows]) if rows else None
        elif value.dim() == 1:
            new = torch.zeros(len(rows))
        else:
            if random_rows is None:  # one draw, shared by tied copies (embeddings and decoder stay equal)
                random_rows = torch.empty(len(rows), value.shape[1])
                torch.nn.init.trunc_normal_(random_rows, 0.0, std, -cutoff * std, cutoff * std, generator=generator)
            new = random_rows
        if new is not None:
            grown[ids] = new.to(grown.dtype)
        state[key] = grown.contiguous()
    return keys


def extend_model_directory(
    source: str | os.PathLike,
    output: str | os.PathLike,
    rows: Sequence[tuple[int, Sequence[int]]],
    new_size: int,
    init: str = "mean",
    seed: int = 0,
) -> Path:
    """Write ``output``'s ``config.json`` (``vocab_size`` = ``new_size``) and ``model.safetensors``: ``source``'s
    weights with the vocabulary tensors resized and ``rows`` set (see :func:`resize_tensors`). The tokenizer files
    are the caller's to write."""
    source, output = Path(source), Path(output)
    config = read_directory_config(source)
    old_size = config.get("vocab_size")
    if type(old_size) is not int or old_size < 1:
        raise CheckpointError(f"{source}: the config has no vocab_size")
    if new_size < old_size:
        raise ValueError(f"new_size {new_size} is below the model's vocabulary ({old_size})")
    weights = find_weights(source)
    state = read_state_dict(weights)
    std = float(config.get("initializer_range", 0.02))
    cutoff = float(config.get("initializer_cutoff_factor", 2.0))
    resize_tensors(state, old_size, rows, new_size, init, std, cutoff, seed, str(weights))
    config["vocab_size"] = new_size
    output.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in state.items()}
    atomic_write(output / WEIGHTS_NAME, lambda p: save_file(state, str(p), metadata={"format": "pt"}))
    write_json(output / CONFIG_NAME, config)
    logger.info("%s: %d embedding rows set (%s), vocab_size %d -> %d", output, len(rows), init, old_size, new_size)
    return output
