"""Hugging Face-layout checkpoints: ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``).

State-dict keys equal those of ``transformers``, so loading is an identity map plus checks:
- a bare ``BertModel`` checkpoint (keys without ``bert.``) loads into a head class: encoder kept, head initialised;
- a head checkpoint loads into ``BertModel`` (the ``bert.`` prefix is stripped, head keys are left out);
- old PyTorch ports' ``LayerNorm.gamma`` / ``LayerNorm.beta`` become ``weight`` / ``bias``;
- the tied MLM decoder (``cls.predictions.decoder.*``) is loaded from either form and saved once;
- any other unmapped or unused key, or any shape mismatch, fails naming the key (and both shapes).

Pickle is never trusted: ``pytorch_model.bin`` is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import InputError, MissingFileError
from bertkit.files import atomic_write, write_json
from bertkit.tf_checkpoint import find_tf_checkpoint, tf_state_dict

WEIGHTS_NAME = "model.safetensors"
PT_WEIGHTS_NAME = "pytorch_model.bin"
CONFIG_NAME = "config.json"

logger = logging.getLogger(__name__)

# keys that are aliases of other keys (tied weights) and are never stored
TIED_ALIASES = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}
# buffers some files carry that hold no learned state
IGNORED_SUFFIXES = ("embeddings.position_ids",)
# parameters of heads: allowed to be missing (freshly initialised) or unused (another head's)
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "bert.pooler.")


class CheckpointError(InputError):
    """A checkpoint does not fit the model: names the key and, for shapes, both shapes."""


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors from a ``.safetensors`` file, a ``.bin`` / ``.pt`` file (``weights_only=True``), or a Google TF
    checkpoint (its prefix, e.g. ``bert_model.ckpt``, or its ``.index`` file; names mapped to bertkit's)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return load_file(str(path))
    if path.suffix == ".index" or Path(str(path) + ".index").is_file():
        return tf_state_dict(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a state dict, got {type(state).__name__}")
    return state


def find_weights(directory: Path) -> Path:
    for name in (WEIGHTS_NAME, PT_WEIGHTS_NAME):
        if (directory / name).is_file():
            return directory / name
    tf_prefix = find_tf_checkpoint(directory)
    if tf_prefix is not None:
        return tf_prefix
    raise MissingFileError(f"{directory}: no {WEIGHTS_NAME}, {PT_WEIGHTS_NAME} or TensorFlow checkpoint "
                            f"(bert_model.ckpt.index)")


def _rename(key: str) -> str:
    if key.endswith("LayerNorm.gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith("LayerNorm.beta"):
        return key[: -len("beta")] + "bias"
    return key


def adapt_state_dict(
    source: dict[str, torch.Tensor], model: nn.Module, origin: str = "checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Map ``source`` onto ``model``'s keys. Returns (state, initialised head keys, dropped head keys).

    Raises CheckpointError naming the key for anything unmapped, unused or of the wrong shape.
    """
    target = model.state_dict()
    # a bare encoder (``BertModel``) has no ``bert.`` prefix on its keys; head classes have one
    is_base = getattr(model, "base_model_prefix", "bert") == ""
    state: dict[str, torch.Tensor] = {}
    for key, value in source.items():
        key = _rename(key)
        if key.endswith(IGNORED_SUFFIXES):
            continue
        if is_base:
            if key.startswith("bert."):
                key = key[len("bert."):]
            elif key.startswith(("cls.", "classifier.", "qa_outputs.")):
                key = "head:" + key  # another class's head: not used by a bare encoder
        elif key.startswith(("embeddings.", "encoder.", "pooler.")):
            key = "bert." + key  # a bare BertModel checkpoint loaded into a head class
        state[key] = value
    # tied aliases: fill the canonical key from the alias when only the alias is stored, then drop aliases
    for alias, canonical in TIED_ALIASES.items():
        if alias in state:
            value = state.pop(alias)
            if canonical not in state and canonical in target:
                state[canonical] = value

    dropped = sorted(k for k in state if k not in target and (k.startswith("head:") or k.startswith(HEAD_PREFIXES)))
    for k in dropped:
        del state[k]
    unexpected = sorted(k for k in state if k not in target)
    if unexpected:
        raise CheckpointError(
            f"{origin}: key {unexpected[0]!r} does not exist in {type(model).__name__}"
            + (f" (and {len(unexpected) - 1} more: {unexpected[1:6]})" if len(unexpected) > 1 else "")
        )
    for key, value in state.items():
        if tuple(value.shape) != tuple(target[key].shape):
            raise CheckpointError(
                f"{origin}: shape mismatch for {key!r}: checkpoint has {tuple(value.shape)}, "
                f"{type(model).__name__} expects {tuple(target[key].shape)}"
            )
    missing = sorted(k for k in target if k not in state and k not in TIED_ALIASES)
    # a head checkpoint without a pooler (BertForMaskedLM, token classification, QA) still loads into BertModel: its
    # pooler is initialised and reported, as transformers does
    may_initialise = ("pooler.",) if is_base else HEAD_PREFIXES
    initialised = [k for k in missing if k.startswith(may_initialise)]
    not_head = [k for k in missing if not k.startswith(may_initialise)]
    if not_head:
        raise CheckpointError(
            f"{origin}: missing key {not_head[0]!r} for {type(model).__name__}"
            + (f" (and {len(not_head) - 1} more)" if len(not_head) > 1 else "")
        )
    dropped = [k.removeprefix("head:") for k in dropped]
    return state, initialised, dropped


@dataclass
class LoadingInfo:
    """What a load did besides copying weights (``from_pretrained(..., output_loading_info=True)``).

    ``initialised``: the model's keys the checkpoint lacked, freshly initialised (a head, or the pooler);
    ``dropped``: the checkpoint's keys this class has no use for (another class's head). Both use the model's key
    names for ``initialised`` and the checkpoint's for ``dropped``; only head and pooler keys can appear."""

    source: str
    initialised: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def load_state_dict_into(model: nn.Module, source: dict[str, torch.Tensor], origin: str = "checkpoint"
                         ) -> LoadingInfo:
    """Copy ``source`` into ``model`` (see :func:`adapt_state_dict` for the mapping and the checks)."""
    state, initialised, dropped = adapt_state_dict(source, model, origin)
    model.load_state_dict(state, strict=False)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    if initialised:
        logger.info("initialised %d parameters of %s not in %s: %s", len(initialised), type(model).__name__,
                    origin, initialised)
    if dropped:
        logger.info("left out %d parameters of %s that %s does not use: %s", len(dropped), origin,
                    type(model).__name__, dropped)
    return LoadingInfo(origin, initialised, dropped)


def load_pretrained(cls, path: str | os.PathLike, config: BertConfig | None = None,
                    output_loading_info: bool = False, **config_overrides):
    """``cls`` built from the config in ``path`` (or ``config``) with the weights in ``path``; with
    ``output_loading_info``, ``(model, LoadingInfo)``."""
    path = Path(path)
    if not path.exists() and not Path(str(path) + ".index").is_file():
        raise MissingFileError(f"{path}: no such model directory")
    directory = path if path.is_dir() else path.parent
    if config is None:
        config = BertConfig.from_pretrained(directory)
    if config_overrides:
        config = dataclasses.replace(config, **config_overrides)
    model = cls(config)
    weights = path if path.is_file() or Path(str(path) + ".index").is_file() else find_weights(directory)
    info = load_state_dict_into(model, read_state_dict(weights), origin=str(weights))
    model.eval()
    return (model, info) if output_loading_info else model


def save_pretrained(model: nn.Module, directory: str | os.PathLike) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to("cpu").contiguous()
        for k, v in model.state_dict().items()
        if k not in TIED_ALIASES and not k.endswith(".sinusoidal")
    }
    config = model.config.to_dict("hf")
    config["architectures"] = [type(model).__name__]
    atomic_write(directory / WEIGHTS_NAME, lambda p: save_file(state, str(p), metadata={"format": "pt"}))
    write_json(directory / CONFIG_NAME, config)
