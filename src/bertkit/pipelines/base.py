"""The pipelines' shared parts: the head tables, the errors, the :class:`Pipeline` base class and the input
checks every pipeline uses (the package docstring, :mod:`bertkit.pipelines`, says what a pipeline is)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit import models, runtime
from bertkit.config import ConfigError
from bertkit.errors import InputError
from bertkit.features import Encoder
from bertkit.tasks import run_inference

# head role -> pipeline; every architecture's head of a role answers the same task
PIPELINE_ROLES = {
    "sequence_classification": "classification",
    "token_classification": "ner",
    "question_answering": "qa",
}
HEADS = {  # head class name -> pipeline, for every registered architecture
    arch.classes[role]: kind
    for arch in models.REGISTRY.values()
    for role, kind in PIPELINE_ROLES.items()
    if role in arch.classes
}
DEFAULT_MAX_LENGTH = 512
BACKENDS = runtime.BACKENDS
FUNCTIONS = ("softmax", "sigmoid", "none")  # text classification's function_to_apply (transformers' names)
AGGREGATIONS = ("simple", "none", "first", "max", "average")  # token classification's aggregation_strategy
HEAD_KEYS = {  # head class name -> its output layer's weight, which a fine-tuned directory must hold
    arch.classes[role]: arch.head_keys[role]
    for arch in models.REGISTRY.values()
    for role in PIPELINE_ROLES
    if role in arch.classes
}


class NoHeadError(InputError):
    """The model directory has no task head a pipeline can run (it can still serve embeddings)."""


class InputTooLongError(InputError):
    """An input is longer than the model takes and ``truncate=False`` was asked for."""

    def __init__(self, index: int, length: int, limit: int):
        super().__init__(
            f"input {index} is {length} tokens long, over the limit of {limit}: shorten it or set truncate=true"
        )
        self.index, self.length, self.limit = index, length, limit


QA_CONVENTIONS = ("hf", "google")


class Pipeline:
    """Shared parts: the model (eval mode), its tokenizer, the task object and batched inference.

    ``kind`` names what the pipeline answers (``classification``, ``regression``, ``rerank``, ``ner``, ``qa``);
    the server routes ``POST /`` by it."""

    kind = ""

    def __init__(
        self,
        model,
        tokenizer,
        task,
        device: str = "cpu",
        precision: str = "fp32",
        batch_size: int = 32,
        directory: Path | None = None,
        quantize: str | None = None,
        backend: str = "torch",
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.device = str(device)
        self.precision = precision
        self.batch_size = batch_size
        self.directory = directory
        self.quantize = quantize
        self.backend = backend
        self.config = model.config
        self.max_length = min(task.max_seq_length, self.config.max_position_embeddings)

    def __repr__(self) -> str:
        q = f", quantize={self.quantize}" if self.quantize else ""
        return (
            f"{type(self).__name__}({self.directory}, kind={self.kind}, backend={self.backend}, "
            f"precision={self.precision}{q})"
        )

    def _run(self, features: Sequence[dict]):
        """Yield (feature indices, model output) over length-sorted batches (``bertkit.tasks.run_inference``: the
        runtime's batch loop)."""

        yield from run_inference(self.model, features, self.task.collate, self.batch_size, self.precision, self.device)

    def encoder(self):
        """A :class:`bertkit.Encoder` of this model's encoder, for embeddings of the fine-tuned model (the server's
        encoder routes): over the PyTorch model's weights (shared, not copied), or, on the onnx backend, one running
        ONNX Runtime on the directory's every-layer graph (``encoder.onnx``; exported from the PyTorch weights when
        absent), int8 if the pipeline is. An exported directory without PyTorch weights has no encoder: InputError."""

        try:  # a head model, or the feature-based tagger, around an encoder (its ``base_model_prefix``)
            bert = models.encoder_of(self.model)
        except ConfigError:  # an ONNX or int8 graph: no PyTorch encoder module
            bert = None
        if bert is not None:
            return Encoder(
                bert,
                self.tokenizer,
                device=self.device,
                precision=self.precision,
                has_pooler=getattr(bert, "pooler", None) is not None,
            )
        if self.backend == "onnx" and self.directory is not None:
            try:
                return Encoder.from_pretrained(
                    self.directory, device=self.device, precision="fp32", quantize=self.quantize, backend="onnx"
                )
            except FileNotFoundError:
                pass
        raise InputError(
            f"{self.directory}: the {self.backend} backend has no encoder to embed with here (no "
            "PyTorch weights): load the pipeline from the fine-tuned directory, or use bertkit.Encoder"
        )


def _check_text(x: Any, where: str) -> str:
    if not isinstance(x, str):
        raise InputError(f"{where} must be a string, got {type(x).__name__}")
    return x


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InputError(f"{name} must be an integer {bound}, got {value!r}")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {value!r}")
    return value
