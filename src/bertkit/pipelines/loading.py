"""From a model directory to its pipeline: which head it holds, its task settings, the model on its backend."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit import models, runtime
from bertkit.config import check_config_json, check_vocabulary_fits, read_model_config
from bertkit.errors import InputError
from bertkit.export import head_outputs, onnx_name
from bertkit.modeldir import ModelDir
from bertkit.pipelines.base import DEFAULT_MAX_LENGTH, HEAD_KEYS, HEADS, QA_CONVENTIONS, NoHeadError, Pipeline
from bertkit.pipelines.classification import TextClassificationPipeline
from bertkit.pipelines.qa import QuestionAnsweringPipeline
from bertkit.pipelines.tagging import TokenClassificationPipeline
from bertkit.precision import check_device, resolve_precision
from bertkit.quantize import resolve_quantize
from bertkit.tasks import get_task
from bertkit.tasks.options import saved_task_config, task_options


def read_head(directory: str | os.PathLike | ModelDir) -> tuple[str, dict[str, Any]]:
    """(architecture, saved task config) of a model directory. Raises :class:`NoHeadError` naming what is missing."""

    directory = ModelDir.open(directory)
    config = read_model_config(directory)
    saved = saved_task_config(directory)
    if (directory / "tagger_config.json").is_file():  # feature-based tagger: BertModel + a small tagger
        return "BertForTokenClassification", saved
    architectures = config.get("architectures") or []
    heads = [a for a in architectures if a in HEADS]
    if not heads:
        found = f"architectures {architectures}" if architectures else "no 'architectures' field"
        raise NoHeadError(
            f"{directory / 'config.json'}: {found}; a task pipeline needs a fine-tuned head, one of {', '.join(HEADS)} "
            "(fine-tune one with `bertkit finetune`; this directory serves embeddings only)"
        )
    return heads[0], saved


def _head_outputs(directory: ModelDir, key: str) -> int | None:
    """The number of outputs of the head layer ``key`` (e.g. ``classifier.bias``) in the directory's weights."""
    try:
        shape = directory.weight_shapes().get(key)
    except FileNotFoundError:  # an exported ONNX directory: no PyTorch weights
        return None
    return None if shape is None else int(shape[0])


def _default_task(architecture: str, config: Any, directory: ModelDir):
    """The task object for a directory without finetune_config.json (e.g. a Hugging Face model); a config without
    ``num_labels`` / ``id2label`` takes the number of labels from the head's weights."""

    found = models.of_class_name(architecture)  # every architecture's heads answer the same tasks
    role = found[1] if found else None
    id2label = config.id2label or {}
    num_labels = config.num_labels or len(id2label)
    if not num_labels and role != "question_answering":
        num_labels = _head_outputs(directory, "classifier.bias") or 2
    labels = [id2label.get(i, f"LABEL_{i}") for i in range(num_labels)]
    max_len = min(DEFAULT_MAX_LENGTH, config.max_position_embeddings)
    if role == "sequence_classification":
        return get_task("classification", max_seq_length=max_len, labels=labels, regression=False)
    if role == "token_classification":
        return get_task("tagging", max_seq_length=max_len, labels=labels)
    return get_task("squad", max_seq_length=min(384, max_len))


def load_pipeline(
    directory: str | os.PathLike | ModelDir,
    device: str = "cpu",
    precision: str = "auto",
    quantize: str | None = None,
    batch_size: int = 32,
    backend: str = "torch",
    qa_convention: str = "hf",
) -> Pipeline:
    """The pipeline for the head of a fine-tuned model directory (see the package docstring, :mod:`bertkit.pipelines`).

    Args:
        directory: a ``bertkit finetune`` OUTPUT directory, or a Hugging Face ``BertFor*`` directory with vocab.txt
            (or its :class:`bertkit.modeldir.ModelDir`: every layer below reads from it, config.json once).
        device: "cpu", "cuda", ...
        precision: "auto" (bf16 where the CPU/GPU has it, else fp32), "bf16", "fp16" (GPU) or "fp32".
        quantize: None or "int8" (dynamic int8 Linear layers; CPU only; runs in fp32 around the int8 matmuls).
        batch_size: inputs per forward pass (length-sorted, so padding stays small).
        backend: "torch" (PyTorch) or "onnx": ONNX Runtime on ``DIR/model.onnx`` (``model.int8.onnx`` with int8)
            when present, else on a graph exported on the fly (``bertkit.export``; needs ``bertkit[onnx]``; CPU).
        qa_convention: a QA head's default answer convention: "hf" (transformers' question-answering pipeline:
            whole words, ``doc_stride`` = overlap, top_k) or "google" (``run_squad.py``'s, as ``bertkit predict``);
            see :class:`QuestionAnsweringPipeline`.

    Raises:
        NoHeadError: the directory has no task head (``architectures`` names none); InputError for a bad directory.
    """
    import argparse

    if not Path(directory).is_dir():
        raise InputError(f"{directory}: no such model directory")
    quantize = resolve_quantize(quantize)
    runtime.check_backend(backend)
    check_device(device, "device")  # before the model is read
    resolve_precision(precision, device)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
    if qa_convention not in QA_CONVENTIONS:
        raise InputError(f"qa_convention must be one of {', '.join(QA_CONVENTIONS)}, got {qa_convention!r}")
    directory = ModelDir.open(directory)  # read once, below: config.json, weights, tokenizer
    architecture, saved = read_head(directory)
    check_config_json(directory)
    config = models.of_head(architecture, directory).config_class().from_pretrained(directory)
    if saved.get("task"):
        task = get_task(saved["task"], **task_options(argparse.Namespace(), saved))
    else:
        task = _default_task(architecture, config, directory)
    cls = {
        "classification": TextClassificationPipeline,
        "ner": TokenClassificationPipeline,
        "qa": QuestionAnsweringPipeline,
    }[HEADS[architecture]]
    try:
        tokenizer = directory.tokenizer()
    except FileNotFoundError as e:
        raise InputError(str(e)) from None
    check_vocabulary_fits(directory, len(tokenizer), config.vocab_size)
    if backend == "onnx":
        loaded = runtime.load(
            directory=directory,
            config=config,
            backend="onnx",
            quantize=quantize,
            device=device,
            outputs=head_outputs(architecture),
        )
    else:
        loaded = runtime.load(
            _load_head(directory, architecture, task, saved), quantize=quantize, precision=precision, device=device
        )
    pipe = cls(
        loaded.model,
        tokenizer,
        task,
        device=device,
        precision=loaded.precision,
        batch_size=batch_size,
        directory=directory.path,
        quantize=quantize,
        backend=backend,
    )
    if isinstance(pipe, QuestionAnsweringPipeline):
        pipe.convention = qa_convention
    return pipe


def _load_head(directory: ModelDir, architecture: str, task, saved: dict[str, Any]):
    """The PyTorch head model of a fine-tuned directory; InputError for an exported ONNX directory (no weights) and
    :class:`NoHeadError` for weights without the head ``config.json`` names."""

    try:
        directory.weights()
    except FileNotFoundError as e:
        if (directory / onnx_name()).is_file() or (directory / onnx_name("int8")).is_file():
            raise InputError(
                f"{directory}: an exported ONNX directory (no PyTorch weights): load it with "
                "backend='onnx' (--backend onnx)"
            ) from None
        raise InputError(str(e)) from None
    if not (directory / "tagger_config.json").is_file():
        key = HEAD_KEYS[architecture]
        if key not in directory.weight_shapes():
            raise NoHeadError(
                f"{directory}: config.json names {architecture} but the weights have no head ({key} missing)"
            )
    try:
        if saved.get("task"):
            return task.load_model(directory, finetuned=True)
        # the default task's label set (id2label, or LABEL_i for as many as the head has outputs)
        return models.for_directory(task.model_class, directory).from_pretrained(directory, **task.model_overrides())
    except FileNotFoundError as e:
        raise InputError(str(e)) from None


# --------------------------------------------------------------------------------------------- pipelines
