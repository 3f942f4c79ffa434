"""A model directory, read once: :class:`ModelDir` holds what the loaders ask of it (``config.json``, the
architecture, the task head, the weights file and format, the tokenizer), each read on first use and kept.

    md = ModelDir.open("runs/sst2")
    md.architecture.model_type, md.head, md.weights_format   # "bert", ("BertForSequenceClassification", ...), ...
    Encoder.from_pretrained(md)                               # the loaders below take it where they take a path

A ``ModelDir`` is an ``os.PathLike`` whose ``str`` is the directory's, so every function that takes a directory path
takes one (and names the directory in its errors as before); the functions that read the directory
(:func:`bertkit.config.read_model_config`, the configs' ``from_pretrained``, :func:`bertkit.models.of_directory`,
:func:`bertkit.checkpoint.load_pretrained`) answer from it instead of reading the files again. Serving one directory
reads its ``config.json`` once (tests/unit/test_modeldir.py counts it). It imports no torch until weights are asked
for (bertkit.tasks.options, which ``-h`` imports, takes one).

Nothing is read by :meth:`ModelDir.open` itself: a bad file is refused by the first loader that asks, with the one-line
error that loader has always given (so the order of a front door's checks stays as it was)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from bertkit import models
from bertkit.config import ConfigError, read_config_file
from bertkit.errors import InputError
from bertkit.tokenization import load_tokenizer

CONFIG_NAME = "config.json"
GOOGLE_CONFIG_NAME = "bert_config.json"
# a weights file's suffix -> its format (a TensorFlow checkpoint is named by its prefix: "tf")
FORMATS = {".safetensors": "safetensors", ".bin": "bin"}
ONNX_NAMES = ("model.onnx", "model.int8.onnx", "encoder.onnx", "encoder.int8.onnx")


@dataclass(frozen=True, eq=False)
class ModelDir(os.PathLike):
    """One model directory; see the module docstring. Make it with :meth:`open` (or pass one through: ``open`` of a
    ``ModelDir`` is that same object, so a layer that accepts either opens at most once)."""

    path: Path
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def open(cls, path: str | os.PathLike) -> ModelDir:
        return path if isinstance(path, ModelDir) else cls(Path(path))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ------------------------------------------------------------------ config.json

    @cached_property
    def config_file(self) -> Path | None:
        """``config.json``, else Google's ``bert_config.json``; None when the directory has neither."""
        return next((self.path / n for n in (CONFIG_NAME, GOOGLE_CONFIG_NAME) if (self.path / n).is_file()), None)

    @cached_property
    def raw_config(self) -> dict[str, Any] | None:
        """The config file's JSON object (read once; :func:`bertkit.config.read_config_file`'s ConfigError naming the
        file when it is not one); None without a config file."""
        return None if self.config_file is None else read_config_file(self.config_file)

    @property
    def config_json(self) -> dict[str, Any] | None:
        """:attr:`raw_config` when the file is ``config.json`` (not Google's ``bert_config.json``), else None."""
        return self.raw_config if self.config_file is not None and self.config_file.name == CONFIG_NAME else None

    def model_config(self) -> dict[str, Any]:
        """:func:`bertkit.config.read_model_config` of this directory: a copy of ``config.json``'s object, its
        ``architectures`` checked."""
        data = self.config_json
        if data is None:
            raise InputError(f"{self.path}: no config.json (not a model directory)")
        names = data.get("architectures")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            raise ConfigError(f"{self.config_file}: architectures must be a list of class names, got {names!r}")
        return copy.deepcopy(data)

    def config_as(self, config_class: type) -> Any:
        """The config file as a ``config_class`` (``BertConfig``, ``ModernBertConfig``...), built once per class; the
        errors of ``config_class.from_dict`` name the file."""
        key = ("config", config_class)
        if key not in self._cache:
            if self.config_file is None or self.config_file.name != CONFIG_NAME:  # the class's own reading (or error)
                self._cache[key] = config_class.from_pretrained(self.path)
            else:
                data = copy.deepcopy(self.raw_config)
                self._cache[key] = config_class.from_dict(data, source=str(self.config_file))
        return copy.deepcopy(self._cache[key])  # the callers' overrides (dataclasses.replace, num_labels) stay theirs

    @property
    def config(self) -> Any:
        """The config, as the directory's architecture reads it."""
        return self.config_as(self.architecture.config_class())

    # ------------------------------------------------------------------ architecture and head

    @property
    def model_type(self) -> str | None:
        """:func:`bertkit.models.model_type`: ``config.json``'s ``model_type``, None when absent or unreadable (the
        config's own loader then names the problem)."""
        try:
            data = self.config_json
        except ConfigError:
            return None
        kind = data.get("model_type") if data else None
        return kind if isinstance(kind, str) else None

    @property
    def architecture(self) -> models.Architecture:
        """:func:`bertkit.models.of_directory`: the registry's entry for :attr:`model_type` (BERT's when it is None or
        one bertkit lacks)."""
        return models.REGISTRY.get(self.model_type or models.DEFAULT, models.REGISTRY[models.DEFAULT])

    @property
    def head(self) -> tuple[str, str] | None:
        """(head class name, role) of the first of ``config.json``'s ``architectures`` the registry knows, e.g.
        ``("BertForSequenceClassification", "sequence_classification")``; None for a bare encoder."""
        for name in self.model_config().get("architectures") or []:
            found = models.of_class_name(name)
            if found:
                return name, found[1]
        return None

    # ------------------------------------------------------------------ weights

    @cached_property
    def _weights(self) -> Path | FileNotFoundError:
        from bertkit.checkpoint import find_weights  # torch: kept out of what reads configs only (-h, tasks.options)

        try:
            return find_weights(self.path)
        except FileNotFoundError as e:
            return e

    def weights(self) -> Path:
        """:func:`bertkit.checkpoint.find_weights`, looked for once (its MissingFileError each time it is absent)."""
        if isinstance(self._weights, FileNotFoundError):
            raise self._weights
        return self._weights

    @property
    def weights_format(self) -> str | None:
        """ "safetensors", "bin", "tf" (a TensorFlow checkpoint), "onnx" (an exported directory, no PyTorch weights)
        or None (neither)."""
        if not isinstance(self._weights, FileNotFoundError):
            return FORMATS.get(self._weights.suffix, "tf")
        return "onnx" if any((self.path / n).is_file() for n in ONNX_NAMES) else None

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape of the weights (a safetensors file's header alone, else the file), read once."""
        if "shapes" not in self._cache:
            from bertkit.checkpoint import read_safetensors_header, read_state_dict  # torch: as in _weights

            weights = self.weights()
            if weights.suffix == ".safetensors":
                shapes = read_safetensors_header(weights)
            else:
                shapes = {k: tuple(v.shape) for k, v in read_state_dict(weights).items()}
            self._cache["shapes"] = shapes
        return self._cache["shapes"]

    # ------------------------------------------------------------------ tokenizer

    def tokenizer(self, lowercase: bool | None = None) -> Any:
        """:func:`bertkit.tokenization.load_tokenizer` of the directory, loaded once per ``lowercase``."""
        key = ("tokenizer", lowercase)
        if key not in self._cache:
            self._cache[key] = load_tokenizer(self, lowercase=lowercase)  # config.json (tokenizer.json) from here
        return self._cache[key]
