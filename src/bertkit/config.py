"""BertConfig: the model's hyper-parameters, with the field names of Google's ``bert_config.json`` and Hugging Face's
``config.json``, named presets, validation and JSON in/out."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import InputError, MissingFileError
from bertkit.files import write_json

log = logging.getLogger(__name__)
_WARNED: set[tuple[str, tuple[str, ...]]] = set()  # (source, keys) already said: a directory is read more than once

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
POSITION_EMBEDDING_TYPES = ("absolute", "sinusoidal")

# name -> (layers, hidden, heads); intermediate = 4H, vocab 30522, positions 512, type vocab 2.
PRESETS: dict[str, tuple[int, int, int]] = {
    "bert-tiny": (2, 128, 2),
    "bert-mini": (4, 256, 4),
    "bert-small": (4, 512, 8),
    "bert-medium": (8, 512, 8),
    "bert-base": (12, 768, 12),
    "bert-large": (24, 1024, 16),
}

# config.json's key for how the model's MLM head reads (bertkit's own; transformers keeps it and ignores it): "mntp",
# masked next-token prediction (``--objective mntp``): a [MASK] at position j is answered by the logits at j - 1.
# Absent (or "mlm"): at j, as every masked LM. Kept in the config's ``extra`` and written back by ``head_fields``
OBJECTIVE_KEY = "bertkit_objective"
HEAD_READS = ("mlm", "mntp")


def reads_next_token(config: Any) -> bool:
    """Whether ``config``'s MLM head answers a [MASK] at position j from position j - 1 (``OBJECTIVE_KEY``)."""
    return getattr(config, "extra", {}).get(OBJECTIVE_KEY) == "mntp"


# Keys that Hugging Face's (or Google's) files carry for bookkeeping; accepted and ignored on load.
_IGNORED_KEYS = frozenset(
    {
        "architectures",
        "auto_map",  # a variant's transformers code (models.Architecture.write_loader)
        "model_type",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "use_cache",
        "is_decoder",
        "add_cross_attention",
        "classifier_dropout",
        "gradient_checkpointing",
        "tie_word_embeddings",
        "_name_or_path",
        "bos_token_id",
        "eos_token_id",
        "directionality",
        "pooler_fc_size",
        "pooler_num_attention_heads",
        "pooler_num_fc_layers",
        "pooler_size_per_head",
        "pooler_type",
        "output_past",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "torchscript",
        "chunk_size_feed_forward",
        "problem_type",
        "tokenizer_class",
        "prefix",
        "sep_token_id",
        "decoder_start_token_id",
        "task_specific_params",
        "finetuning_task",
        "is_encoder_decoder",
        "_attn_implementation_autoset",
        "model_name",
        OBJECTIVE_KEY,
    }
)


class ConfigError(InputError):
    """A config value or file is invalid: the message names the file and the field."""


# the fields that set the model's size, in the order num_parameters() reads them
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def _available_memory() -> int | None:
    """Bytes this process can still allocate, or None if unknown: Linux's MemAvailable (else free physical pages),
    capped by a cgroup v2 memory limit (a container's) when there is one."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            left = int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few KB; a head's id2label of 100k labels, a few MB


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A config file's JSON object. A file that cannot be read, is not JSON or is not an object is a
    :class:`ConfigError` naming it. (BertConfig and ModernBertConfig both read through it.)"""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config ({e.strerror or e})") from None
    if size > MAX_CONFIG_BYTES:  # read whole, a 3 GB file took 6.5 GB of memory before the parser refused it
        raise ConfigError(f"{path}: {size:,} bytes, not a model config (at most {MAX_CONFIG_BYTES:,})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:  # e.g. '[' x 100,000: the parser recurses once per level
        raise ConfigError(f"{path}: nested too deeply to be a model config") from None
    except ValueError as e:  # an integer of more digits than Python converts (4300): no config size is that long
        raise ConfigError(f"{path}: not a model config ({str(e).split(';')[0]})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def opened_dir(path: Any) -> Any:
    """``path`` when it is a :class:`bertkit.modeldir.ModelDir` (a model directory read once), else None. Known by
    its ``config_as`` method: modeldir imports this module, so this one cannot import it (no import circles)."""
    return path if callable(getattr(path, "config_as", None)) else None


def check_config_json(directory: str | os.PathLike) -> None:
    """Read a model directory's ``config.json`` when it has one, so that a file that is not a JSON object (or nests
    too deeply to parse) is a :class:`ConfigError` naming it before any loader looks inside (a Google TF directory
    without one passes). A :class:`bertkit.modeldir.ModelDir` reads it once, for every loader."""
    if opened_dir(directory) is not None:
        directory.config_json  # noqa: B018 -- read (once) for its error
    elif (Path(directory) / "config.json").is_file():
        read_config_file(Path(directory) / "config.json")


def check_vocabulary_fits(directory: str | os.PathLike, tokens: int, vocab_size: int) -> None:
    """Refuse (InputError naming the directory) a tokenizer of more ``tokens`` than the model's ``vocab_size``: its
    last ids would index past the embedding table, an IndexError on the first text that holds one of them."""
    if tokens > vocab_size:
        raise InputError(
            f"{directory}: the tokenizer (vocab.txt / tokenizer.json) has {tokens} tokens but config.json's "
            f"vocab_size is {vocab_size}: not this model's vocabulary"
        )


def read_model_config(directory: str | os.PathLike) -> dict[str, Any]:
    """A model directory's ``config.json`` as a dict, for code that must look at it before choosing a class
    (export, pipelines). :class:`InputError` when the directory has none; :func:`read_config_file`'s
    :class:`ConfigError` when it is not a JSON object. A :class:`bertkit.modeldir.ModelDir` answers from its one
    read."""
    if opened_dir(directory) is not None:
        return directory.model_config()
    config_path = Path(directory) / "config.json"
    if not config_path.is_file():
        raise InputError(f"{directory}: no config.json (not a model directory)")
    data = read_config_file(config_path)
    names = data.get("architectures")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise ConfigError(f"{config_path}: architectures must be a list of class names, got {names!r}")
    return data


def head_fields(config: Any) -> dict[str, Any]:
    """A config's head fields as transformers writes them in config.json: ``id2label`` / ``label2id`` (``LABEL_i``
    for a head without names) and ``problem_type``. ``config`` has ``id2label``, ``label2id``, ``num_labels`` and
    ``extra``, as BertConfig and ModernBertConfig do."""
    out: dict[str, Any] = {}
    if config.id2label is not None:
        out["id2label"] = {str(k): v for k, v in config.id2label.items()}
        out["label2id"] = dict(config.label2id or {})
    elif config.num_labels is not None:  # as transformers writes a head without names: LABEL_i
        out["id2label"] = {str(i): f"LABEL_{i}" for i in range(config.num_labels)}
        out["label2id"] = {f"LABEL_{i}": i for i in range(config.num_labels)}
    if "problem_type" in config.extra:
        out["problem_type"] = config.extra["problem_type"]
    if OBJECTIVE_KEY in config.extra:
        out[OBJECTIVE_KEY] = config.extra[OBJECTIVE_KEY]
    return out


class EncoderConfig:
    """What :class:`BertConfig` and ``ModernBertConfig`` share: the checks every encoder's sizes, ids and labels
    pass, ``head_dim``, and reading / saving ``config.json``. Errors name the class and the field."""

    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    pad_token_id: int | None
    id2label: dict[int, str] | None
    label2id: dict[str, int] | None
    num_labels: int | None

    def _bad(self, name: str, what: str) -> ConfigError:
        return ConfigError(f"{type(self).__name__}.{name} must be {what}, got {getattr(self, name)!r}")

    def _check_sizes(self, positive_ints: tuple[str, ...]) -> None:
        """No field NaN or infinite (JSON allows both), the sizes positive integers, heads dividing the width."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise self._bad(f.name, "a finite number")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise self._bad(name, "a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"{type(self).__name__}.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )

    def _check_positive(self, names: tuple[str, ...]) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise self._bad(name, "a positive number")

    def _check_probabilities(self, names: tuple[str, ...]) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise self._bad(name, "a probability in [0, 1]")

    def _check_pad_and_labels(self) -> None:
        """The pad id inside the vocabulary; a head's labels completed from ``id2label`` (as transformers does)."""
        pad = self.pad_token_id
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < self.vocab_size):
            raise self._bad("pad_token_id", f"an integer in [0, vocab_size={self.vocab_size})")
        if self.id2label is not None:
            self.id2label = self._label_ids()
            if self.label2id is None:
                self.label2id = {v: k for k, v in self.id2label.items()}
            if self.num_labels is None:
                self.num_labels = len(self.id2label)
        n = self.num_labels
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
            raise self._bad("num_labels", "a positive integer")

    def _label_ids(self) -> dict[int, str]:
        """``id2label`` with integer keys (JSON writes them as strings): refused, naming the field, when it is not an
        object of integer ids."""
        labels = self.id2label
        try:
            if not isinstance(labels, dict):
                raise ValueError
            out = {int(k): str(v) for k, v in labels.items()}
        except (ValueError, TypeError):
            raise self._bad("id2label", 'an object of label ids to names ({"0": "NEGATIVE", ...})') from None
        if any(k < 0 for k in out):
            raise self._bad("id2label", "an object whose label ids are integers >= 0")
        return out

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def _plain_fields(self) -> dict[str, Any]:
        """The fields written to config.json as they are (the head's labels go through ``head_fields``)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name not in ("extra", "id2label", "label2id", "num_labels")
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> Any:
        raise NotImplementedError

    @classmethod
    def _from_keys(
        cls,
        data: dict[str, Any],
        source: str,
        ignored: frozenset[str],
        translate: Callable[[str, Any], dict[str, Any] | None] | None = None,
    ) -> Any:
        """Build from a config dict: its fields by name; ``translate(key, value)`` gives the fields another key stands
        for (None: not one); bookkeeping keys (``ignored``, or starting with "_") are kept in ``extra``; so is any
        other key, as transformers keeps it (``mask_token_id`` in a ModernBERT config): said once in a warning, and
        written back by ``to_dict`` (:meth:`_kept_keys`). A known field with a wrong type or value is refused,
        naming it."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        unused: list[str] = []
        for key, value in data.items():
            if key in names:
                kwargs[key] = value
            elif translate is not None and (fields := translate(key, value)) is not None:
                kwargs.update(fields)
            else:
                extra[key] = value
                if key not in ignored and not key.startswith("_"):
                    unused.append(key)
        if unused and (source, tuple(unused)) not in _WARNED:
            _WARNED.add((source, tuple(unused)))
            log.warning(
                f"bertkit: {source}: {', '.join(map(repr, unused))}: not a field bertkit uses; kept as given (a "
                "misspelt field name would be one too)"
            )
        if extra.get(OBJECTIVE_KEY, "mlm") not in HEAD_READS:
            raise ConfigError(f"{source}: {OBJECTIVE_KEY} must be one of {HEAD_READS}, got {extra[OBJECTIVE_KEY]!r}")
        try:
            return cls(**kwargs, extra=extra)
        except (ValueError, TypeError) as e:  # ConfigError, or a value of the wrong type (int("x"))
            raise ConfigError(f"{source}: {e}") from None

    def to_dict(self, flavour: str = "hf") -> dict[str, Any]:
        raise NotImplementedError

    def _kept_keys(self, ignored: frozenset[str]) -> dict[str, Any]:
        """The keys of the file read that bertkit does not use (not one of ``ignored``'s bookkeeping keys): a saved
        config writes them back, as transformers does."""
        return {k: v for k, v in self.extra.items() if k not in ignored and not k.startswith("_")}

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> Any:
        return cls.from_dict(read_config_file(path), source=str(path))

    def to_json_file(self, path: str | os.PathLike, flavour: str = "hf") -> None:
        write_json(path, self.to_dict(flavour))

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.to_json_file(Path(directory) / "config.json")


@dataclass
class BertConfig(EncoderConfig):
    """Hyper-parameters of a BERT encoder.

    Field names are those of Google's ``bert_config.json`` and Hugging Face's ``config.json``, so either file
    loads as is. ``id2label`` / ``label2id`` / ``num_labels`` carry a fine-tuned head's labels, as in HF.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    num_labels: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._check_sizes(
            (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "max_position_embeddings",
                "type_vocab_size",
            )
        )
        if self.hidden_act not in ACTIVATIONS:
            raise self._bad("hidden_act", f"one of {ACTIVATIONS}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise self._bad("position_embedding_type", f"one of {POSITION_EMBEDDING_TYPES}")
        self._check_probabilities(("hidden_dropout_prob", "attention_probs_dropout_prob"))
        self._check_positive(("initializer_range", "layer_norm_eps"))
        self._check_pad_and_labels()

    # ------------------------------------------------------------------ presets
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> BertConfig:
        """``bert-tiny`` (L2/H128/A2) ... ``bert-large`` (L24/H1024/A16); intermediate 4H, vocab 30522."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        values: dict[str, Any] = dict(
            num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden
        )
        values.update(overrides)
        return cls(**values)

    # ------------------------------------------------------------------ size
    def num_parameters(self, **sizes: int) -> int:
        """The encoder's parameter count (embeddings, layers, pooler and an MLM head), from the sizes alone.

        ``sizes`` override fields for the estimate (used to tell which field makes a config too large)."""
        v, h, n_layers, i, p, t = (sizes.get(name, getattr(self, name)) for name in SIZE_FIELDS)
        embeddings = (v + p + t) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
        heads = 2 * (h * h + h) + 2 * h + v  # pooler, MLM transform + LayerNorm, MLM bias
        return embeddings + n_layers * layer + heads

    def check_fits_in_memory(self, available_bytes: int | None = None) -> None:
        """Refuse (ConfigError naming the field to check) a config whose fp32 parameters alone would exceed the
        memory available, instead of letting the allocator fail (or the machine swap) part-way through building."""
        available = _available_memory() if available_bytes is None else available_bytes
        if available is None:
            return
        need = 4 * self.num_parameters()
        if need <= available:
            return
        # name the field to check: of those above bert-base's size, the one whose reset shrinks the model most
        defaults = BertConfig()
        larger = [f for f in SIZE_FIELDS if getattr(self, f) > getattr(defaults, f)]
        blame = min(larger, key=lambda f: self.num_parameters(**{f: getattr(defaults, f)})) if larger else None
        raise ConfigError(
            (f"BertConfig.{blame} is {getattr(self, blame)}" if blame else "BertConfig")
            + f": the model would hold {self.num_parameters():,} parameters ({need / 2**30:,.1f} GiB in fp32), "
            f"more than the {available / 2**30:,.1f} GiB of memory available"
        )

    # ------------------------------------------------------------------ dict / JSON
    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> BertConfig:
        """Build from a Google or HF config dict. Keys it does not know are kept (and said once), as
        :meth:`_from_keys` keeps them."""
        if data.get("model_type") == "modernbert":  # bertkit.modeling_modernbert reads it; say so in one line
            raise ConfigError(
                f"{source}: a ModernBERT model (model_type 'modernbert'); this reads BERT models only "
                f"so far (ModernBERT works in pretrain --arch modernbert, embed/features, fill-mask and "
                f"bertkit.ModernBertFor*)"
            )
        kind = data.get("model_type")
        if kind not in (None, "bert"):  # ELECTRA, RoBERTa, GPT-2...: another architecture's weights, refused by name
            raise ConfigError(f"{source}: model_type {kind!r} is not a model bertkit reads (bert or modernbert)")
        if data.get("position_embedding_type") in (None, "absolute"):
            data = {k: v for k, v in data.items() if k != "position_embedding_type"}
        return cls._from_keys(data, source, _IGNORED_KEYS)

    def to_dict(self, flavour: str = "hf") -> dict[str, Any]:
        """``flavour="hf"`` writes a ``transformers``-loadable config.json; ``"google"`` a bert_config.json."""
        out = self._plain_fields()
        if flavour == "google":
            out.pop("pad_token_id")
            out.pop("layer_norm_eps")
            if self.position_embedding_type == "absolute":
                out.pop("position_embedding_type")
            return out
        if flavour != "hf":
            raise ConfigError(f"flavour must be 'hf' or 'google', got {flavour!r}")
        out["model_type"] = "bert"
        out["architectures"] = self.extra.get("architectures")
        if out["architectures"] is None:
            out.pop("architectures")
        out["tie_word_embeddings"] = True
        out.update(head_fields(self))
        return {**self._kept_keys(_IGNORED_KEYS), **out}

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> BertConfig:
        """A directory holding ``config.json`` (or ``bert_config.json``), or a JSON file; a
        :class:`bertkit.modeldir.ModelDir` gives the config it has read."""
        if opened_dir(path) is not None:
            return path.config_as(cls)
        path = Path(path)
        if path.is_dir():
            for name in ("config.json", "bert_config.json"):
                if (path / name).is_file():
                    return cls.from_json_file(path / name)
            raise MissingFileError(f"{path}: no config.json or bert_config.json")
        return cls.from_json_file(path)
