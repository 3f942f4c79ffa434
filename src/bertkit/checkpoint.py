"""Hugging Face-layout checkpoints: ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``).

State-dict keys equal those of ``transformers``, so loading is an identity map plus checks:
- a bare ``BertModel`` checkpoint (keys without ``bert.``) loads into a head class: encoder kept, head initialised;
- a head checkpoint loads into ``BertModel`` (the ``bert.`` prefix is stripped, head keys are left out);
- old PyTorch ports' ``LayerNorm.gamma`` / ``LayerNorm.beta`` become ``weight`` / ``bias``;
- the tied MLM decoder (``cls.predictions.decoder.*``) is loaded from either form and saved once;
- any other unmapped or unused key, or any shape mismatch, fails naming the key (and both shapes).

Pickle is never trusted: ``pytorch_model.bin`` is read with ``torch.load(weights_only=True)``.

Nothing is allocated on trust: before the model is built, ``config.json``'s sizes are checked against the tensor
shapes in the weights file (a safetensors header costs a few KB to read), and a config without weights is checked
against the memory available. Weights holding NaN or Inf are refused, naming the tensor.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit import models
from bertkit.config import BertConfig, opened_dir
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


# the largest safetensors header we read (the format caps it at 100 MB; a bert-large header is about 40 KB)
MAX_HEADER_BYTES = 100_000_000


def read_safetensors_header(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a ``.safetensors`` file's JSON header, without reading any tensor data.

    A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape, data offsets),
    then the data. Checks that the header parses and that every tensor's data lies inside the file, so a truncated
    or garbage file is refused here, in one line naming it."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= min(size - 8, MAX_HEADER_BYTES):
            raise CheckpointError(f"{path}: not a safetensors file (bad header length; truncated or another format)")
        raw = f.read(n)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        shapes: dict[str, tuple[int, ...]] = {}
        data_size = size - 8 - n
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
            if not 0 <= begin <= end <= data_size:
                raise CheckpointError(
                    f"{path}: tensor {name!r} lies past the end of the file (truncated? "
                    f"{data_size} data bytes, the tensor ends at {end})"
                )
            shapes[name] = shape
    except CheckpointError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # UnicodeDecodeError and JSONDecodeError too
        raise CheckpointError(f"{path}: not a safetensors file (unreadable header: {e})") from None
    return shapes


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors from a ``.safetensors`` file, a ``.bin`` / ``.pt`` file (``weights_only=True``), or a Google TF
    checkpoint (its prefix, e.g. ``bert_model.ckpt``, or its ``.index`` file; names mapped to bertkit's).

    A file that cannot be read raises CheckpointError naming it; a pickle that would run code is refused as unsafe.
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        read_safetensors_header(path)  # a truncated or garbage file: one line naming it
        try:
            return load_file(str(path))
        except SafetensorError as e:
            raise CheckpointError(f"{path}: unreadable safetensors file ({e})") from None
    if path.suffix == ".index" or Path(str(path) + ".index").is_file():
        return tf_state_dict(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the weights ({e.strerror or e})") from None
    if not magic.startswith((b"PK", b"\x80")):  # torch.save writes a zip; older files a pickle (protocol 2+)
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (neither torch.save's zip nor a pickle)")
    try:
        with warnings.catch_warnings():  # torch warns about the protocol of a pickle it is about to refuse anyway
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only load failed" in str(e).lower():  # a pickle asking for code: never retry without the guard
            raise CheckpointError(
                f"{path}: refused as unsafe (a pickle with code, which bertkit never runs); "
                f"convert it to safetensors with a tool you trust"
            ) from None
        raise CheckpointError(f"{path}: not a PyTorch checkpoint ({_first_line(e)})") from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:  # a truncated zip, garbage bytes
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({_first_line(e)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a state dict, got {type(state).__name__}")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{path}: expected a state dict of named tensors, got {key!r}: {type(value).__name__}"
            )
    return state


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


LOADABLE_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_finite(state: dict[str, torch.Tensor], origin: str) -> None:
    """Refuse NaN or Inf in any floating-point tensor, naming it: such weights give NaN outputs, never an error."""
    for key, value in state.items():
        if value.is_floating_point() and value.dtype not in LOADABLE_FLOATS:  # fp8: no isfinite, nor a cast back
            raise CheckpointError(
                f"{origin}: tensor {key!r} is {str(value.dtype).removeprefix('torch.')}; bertkit loads fp32, fp16, "
                "bf16 or fp64 weights"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise CheckpointError(f"{origin}: tensor {key!r} holds {bad} NaN or infinite value(s) of {value.numel()}")


def find_weights(directory: Path) -> Path:
    for name in (WEIGHTS_NAME, PT_WEIGHTS_NAME):
        if (directory / name).is_file():
            return directory / name
    tf_prefix = find_tf_checkpoint(directory)
    if tf_prefix is not None:
        return tf_prefix
    raise MissingFileError(
        f"{directory}: no {WEIGHTS_NAME}, {PT_WEIGHTS_NAME} or TensorFlow checkpoint (bert_model.ckpt.index)"
    )


def _rename(key: str) -> str:
    if key.endswith("LayerNorm.gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith("LayerNorm.beta"):
        return key[: -len("beta")] + "bias"
    return key


def check_tensors(
    state: dict[str, torch.Tensor], target: dict[str, torch.Tensor], model_name: str, origin: str
) -> None:
    """Each tensor of ``state`` has its ``target`` tensor's shape, and is floating point where the target is (and
    only there): a half-precision weight loads (a cast), a float weight stored as integers would be cast silently
    into wrong values, so it is refused. The error names the key, both shapes or dtypes, and ``origin``."""
    for key, value in state.items():
        want = target[key]
        if tuple(value.shape) != tuple(want.shape):
            raise CheckpointError(
                f"{origin}: shape mismatch for {key!r}: checkpoint has {tuple(value.shape)}, "
                f"{model_name} expects {tuple(want.shape)}"
            )
        if value.is_floating_point() != want.is_floating_point():
            raise CheckpointError(
                f"{origin}: dtype mismatch for {key!r}: checkpoint has "
                f"{str(value.dtype).removeprefix('torch.')}, {model_name} expects "
                f"{str(want.dtype).removeprefix('torch.')} (a weight stored as integers would be "
                f"cast silently into wrong values)"
            )


def match_keys(
    state: dict[str, torch.Tensor],
    target: dict[str, torch.Tensor],
    tied: dict[str, str],
    head_prefixes: tuple[str, ...],
    class_name: str,
    origin: str,
) -> tuple[list[str], list[str]]:
    """Match a renamed checkpoint ``state`` (changed in place) against a model's ``target`` keys, the same for every
    architecture: a tied alias fills its canonical key when only the alias is stored, then aliases go; head keys the
    model has no use for are dropped; any other unknown key, or a tensor of the wrong shape or dtype, is a
    CheckpointError naming it. Returns (dropped keys, missing keys)."""
    for alias, canonical in tied.items():
        if alias in state:
            value = state.pop(alias)
            if canonical not in state and canonical in target:
                state[canonical] = value
    dropped = sorted(k for k in state if k not in target and k.startswith(("head:", *head_prefixes)))
    for k in dropped:
        del state[k]
    unexpected = sorted(k for k in state if k not in target)
    if unexpected:
        raise CheckpointError(
            f"{origin}: key {unexpected[0]!r} does not exist in {class_name}"
            + (f" (and {len(unexpected) - 1} more: {unexpected[1:6]})" if len(unexpected) > 1 else "")
        )
    check_tensors(state, target, class_name, origin)
    return dropped, sorted(k for k in target if k not in state and k not in tied)


def adapt_state_dict(
    source: dict[str, torch.Tensor], model: nn.Module, origin: str = "checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Map ``source`` onto ``model``'s keys. Returns (state, initialised head keys, dropped head keys).

    Raises CheckpointError naming the key for anything unmapped, unused or of the wrong shape.
    """
    target = model.state_dict()
    # a bare encoder (``BertModel``) has no ``bert.`` prefix on its keys; head classes have one
    is_base = getattr(model, "base_model_prefix", None) == ""
    state: dict[str, torch.Tensor] = {}
    for key, value in source.items():
        key = _rename(key)
        if key.endswith(IGNORED_SUFFIXES):
            continue
        if is_base:
            if key.startswith("bert."):
                key = key[len("bert.") :]
            elif key.startswith(("cls.", "classifier.", "qa_outputs.")):
                key = "head:" + key  # another class's head: not used by a bare encoder
        elif key.startswith(("embeddings.", "encoder.", "pooler.")):
            key = "bert." + key  # a bare BertModel checkpoint loaded into a head class
        state[key] = value
    dropped, missing = match_keys(state, target, TIED_ALIASES, HEAD_PREFIXES, type(model).__name__, origin)
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


def load_state_dict_into(model: nn.Module, source: dict[str, torch.Tensor], origin: str = "checkpoint") -> LoadingInfo:
    """Copy ``source`` into ``model`` (see :func:`adapt_state_dict` for the mapping and the checks)."""
    state, initialised, dropped = adapt_state_dict(source, model, origin)
    model.load_state_dict(state, strict=False)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    if initialised:
        logger.info(
            "initialised %d parameters of %s not in %s: %s", len(initialised), type(model).__name__, origin, initialised
        )
    if dropped:
        logger.info(
            "left out %d parameters of %s that %s does not use: %s", len(dropped), origin, type(model).__name__, dropped
        )
    return LoadingInfo(origin, initialised, dropped)


def load_pretrained(
    cls,
    path: str | os.PathLike,
    config: BertConfig | None = None,
    output_loading_info: bool = False,
    **config_overrides,
):
    """``cls`` built from the config in ``path`` (or ``config``) with the weights in ``path``; with
    ``output_loading_info``, ``(model, LoadingInfo)``.

    The config is checked against the weights' shapes before the model is built (a safetensors header is read
    before any tensor), so a wrong size is refused naming the config field instead of allocating it. ``path`` may be
    a :class:`bertkit.modeldir.ModelDir`: its config and weights file, not read again."""
    opened = opened_dir(path)
    path = Path(path)
    if not path.exists() and not Path(str(path) + ".index").is_file():
        raise MissingFileError(f"{path}: no such model directory")
    directory = path if path.is_dir() else path.parent
    config_source = "config"
    if config is None:
        config = BertConfig.from_pretrained(opened or directory)
        config_source = str(
            next((directory / n for n in (CONFIG_NAME, "bert_config.json") if (directory / n).is_file()), directory)
        )
    if config_overrides:
        config = dataclasses.replace(config, **config_overrides)
    if opened is not None and path.is_dir():
        weights = opened.weights()
    else:
        weights = path if path.is_file() or Path(str(path) + ".index").is_file() else find_weights(directory)
    if weights.suffix == ".safetensors":  # the header alone: nothing read or built yet
        check_config_against_shapes(config, read_safetensors_header(weights), config_source, str(weights))
    state = read_state_dict(weights)
    check_config_against_shapes(config, {k: tuple(v.shape) for k, v in state.items()}, config_source, str(weights))
    check_finite(state, str(weights))
    model = cls(config)
    info = load_state_dict_into(model, state, origin=str(weights))
    model.eval()
    return (model, info) if output_loading_info else model


_LAYER_RE = re.compile(r"^encoder\.layer\.(\d+)\.")


def check_config_against_shapes(
    config: BertConfig, shapes: dict[str, tuple[int, ...]], config_source: str, weights: str
) -> None:
    """Refuse a config whose sizes disagree with the weights file, naming the config field (``num_hidden_layers``,
    ``vocab_size``, ``hidden_size``, ``intermediate_size``, ``max_position_embeddings``, ``type_vocab_size``).

    ``shapes``: the file's tensor names (HF, Google-port or bare-encoder names) -> shapes."""
    encoder_shapes: dict[str, tuple[int, ...]] = {}
    file_key: dict[str, str] = {}  # normalised name -> the file's own name, for messages
    for key, shape in shapes.items():
        name = _rename(key).removeprefix("bert.")
        encoder_shapes[name], file_key[name] = tuple(shape), key
    layers = {int(m.group(1)) for k in encoder_shapes if (m := _LAYER_RE.match(k))}
    if (max(layers) + 1 if layers else 0) != config.num_hidden_layers:
        raise CheckpointError(
            f"{config_source}: num_hidden_layers is {config.num_hidden_layers} but {weights} "
            f"holds {max(layers) + 1 if layers else 0} layers"
        )
    # key -> the config fields that give each of its dimensions, in order
    expected = {
        "embeddings.word_embeddings.weight": ("vocab_size", "hidden_size"),
        "embeddings.position_embeddings.weight": ("max_position_embeddings", "hidden_size"),
        "embeddings.token_type_embeddings.weight": ("type_vocab_size", "hidden_size"),
        "encoder.layer.0.attention.self.query.weight": ("hidden_size", "hidden_size"),
        "encoder.layer.0.intermediate.dense.weight": ("intermediate_size", "hidden_size"),
        "cls.predictions.bias": ("vocab_size",),
    }
    for key, fields in expected.items():
        shape = encoder_shapes.get(key)
        if shape is None:
            continue  # a missing key is named by the load itself
        want = tuple(getattr(config, name) for name in fields)
        if len(shape) != len(fields):
            raise CheckpointError(f"{weights}: {file_key[key]!r} has shape {shape}, the config gives {want}")
        for name, size in reversed(list(zip(fields, shape))):  # hidden_size (the last dimension) first
            if size != getattr(config, name):
                raise CheckpointError(
                    f"{config_source}: {name} is {getattr(config, name)} but {weights} has "
                    f"{file_key[key]!r} of shape {shape} (the config gives {want})"
                )


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
    models.of_config(model.config).write_loader(directory, config)  # a variant's transformers code
    atomic_write(directory / WEIGHTS_NAME, lambda p: save_file(state, str(p), metadata={"format": "pt"}))
    write_json(directory / CONFIG_NAME, config)


# --------------------------------------------------------------------------------------------- other architectures


# A second architecture (ModernBERT) keeps its own HF key names; what differs from BERT's layout is declared here
# once, and the same checks apply: unmapped, unused or mis-shaped keys fail naming the key.


@dataclass(frozen=True)
class Layout:
    """Where an architecture's HF state-dict keys live.

    ``prefix``: the encoder's attribute in head classes, with its dot (``"model."``); ``base_roots``: the first
    components of a bare encoder's keys (``"embeddings."``, ``"layers."`` ...); ``head_prefixes``: head keys, which may
    be missing (initialised) or unused (dropped); ``tied``: alias key -> canonical key, never saved."""

    prefix: str
    base_roots: tuple[str, ...]
    head_prefixes: tuple[str, ...]
    tied: dict[str, str] = field(default_factory=dict)


def adapt_layout_state_dict(
    source: dict[str, torch.Tensor], model: nn.Module, layout: Layout, origin: str = "checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """:func:`adapt_state_dict` for another :class:`Layout`: a bare encoder's checkpoint loads into a head class
    (head initialised) and a head checkpoint into the bare encoder (head keys dropped). Returns (state, initialised,
    dropped); raises CheckpointError naming the key for anything unmapped, unused or of the wrong shape."""
    target = model.state_dict()
    is_base = getattr(model, "base_model_prefix", None) == ""
    state: dict[str, torch.Tensor] = {}
    for key, value in source.items():
        if is_base:
            if key.startswith(layout.prefix):
                key = key[len(layout.prefix) :]
            elif key.startswith(layout.head_prefixes):
                key = "head:" + key
        elif key.startswith(layout.base_roots):
            key = layout.prefix + key
        state[key] = value
    dropped, missing = match_keys(state, target, layout.tied, layout.head_prefixes, type(model).__name__, origin)
    initialised = [k for k in missing if not is_base and k.startswith(layout.head_prefixes)]
    not_head = [k for k in missing if k not in initialised]
    if not_head:
        raise CheckpointError(
            f"{origin}: missing key {not_head[0]!r} for {type(model).__name__}"
            + (f" (and {len(not_head) - 1} more)" if len(not_head) > 1 else "")
        )
    return state, initialised, [k.removeprefix("head:") for k in dropped]


def load_layout_pretrained(
    cls,
    config_cls,
    layout: Layout,
    path: str | os.PathLike,
    config=None,
    output_loading_info: bool = False,
    **config_overrides,
):
    """:func:`load_pretrained` for a model class of another :class:`Layout`: ``config_cls.from_pretrained`` reads the
    directory's config, ``config.check_shapes(shapes, config_source, weights)`` checks it against the weights' shapes
    (the safetensors header first: nothing is allocated on a wrong size), NaN/Inf weights are refused. ``path`` may be
    a :class:`bertkit.modeldir.ModelDir`: its config and weights file, not read again."""
    opened = opened_dir(path)
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"{path}: no such model directory")
    directory = path if path.is_dir() else path.parent
    config_source = "config"
    if config is None:
        config = config_cls.from_pretrained(opened or directory)
        config_source = str(directory / CONFIG_NAME)
    if config_overrides:
        config = dataclasses.replace(config, **config_overrides)
    weights = opened.weights() if opened is not None and path.is_dir() else None
    weights = weights or (path if path.is_file() else find_weights(directory))
    if weights.suffix == ".safetensors":
        config.check_shapes(read_safetensors_header(weights), config_source, str(weights))
    state = read_state_dict(weights)
    config.check_shapes({k: tuple(v.shape) for k, v in state.items()}, config_source, str(weights))
    check_finite(state, str(weights))
    model = cls(config)
    state, initialised, dropped = adapt_layout_state_dict(state, model, layout, origin=str(weights))
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    if initialised:
        logger.info(
            "initialised %d parameters of %s not in %s: %s", len(initialised), cls.__name__, weights, initialised
        )
    if dropped:
        logger.info(
            "left out %d parameters of %s that %s does not use: %s", len(dropped), weights, cls.__name__, dropped
        )
    model.eval()
    info = LoadingInfo(str(weights), initialised, dropped)
    return (model, info) if output_loading_info else model


def save_layout_pretrained(model: nn.Module, directory: str | os.PathLike, layout: Layout) -> None:
    """``config.json`` (``model.config.to_dict()`` with ``architectures``) + ``model.safetensors``, tied aliases
    saved once (under their canonical key); a variant's transformers code (``models.Architecture.write_loader``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k not in layout.tied}
    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]
    models.of_config(model.config).write_loader(directory, config)
    atomic_write(directory / WEIGHTS_NAME, lambda p: save_file(state, str(p), metadata={"format": "pt"}))
    write_json(directory / CONFIG_NAME, config)
