"""In-process task pipelines: a fine-tuned model directory in, task answers out (what ``bertkit serve`` serves).

    clf = load_pipeline("runs/sst2")                      # the head is read from config.json "architectures"
    clf.predict("a gripping film")                        # [{"label": "1", "score": 0.97}]
    clf.predict([("a man eats", "someone eats")], return_all_scores=True)
    rr = load_pipeline("runs/reranker")
    rr.rerank("what is BERT?", ["a muppet", "a language model"])   # [{"index": 1, "score": 0.91}, ...]
    ner = load_pipeline("runs/conll")
    ner.ner("George Washington went to Washington")       # [{"entity_group": "PER", "score", "word", "start", "end"}]
    qa = load_pipeline("runs/squad")
    qa.answer("Where?", "The cat sat on the mat.")        # {"answer": "on the mat", "score", "start", "end"}
    qa.answer("Where?", "The cat sat on the mat.", top_k=2)   # a list of the 2 best answers

The calls' keyword arguments carry transformers' pipeline names and semantics (``function_to_apply``, ``top_k``,
``aggregation_strategy``, ``ignore_labels``, ``handle_impossible_answer``, ``doc_stride``...; docs/inference.md); a
bad value raises InputError naming it. QA answers by transformers' convention unless ``qa_convention="google"``
(``run_squad.py``'s, as ``bertkit predict``).

Heads (``architectures[0]`` in ``config.json``) -> pipeline:

    BertForSequenceClassification   TextClassificationPipeline  (.kind: classification, regression or rerank)
    BertForTokenClassification      TokenClassificationPipeline (also the feature-based tagger of ``finetune``)
    BertForQuestionAnswering        QuestionAnsweringPipeline

The task settings saved by ``bertkit finetune`` (``finetune_config.json``: labels, max_seq_length, doc stride...)
are used when present, so a pipeline tokenises, windows and post-processes exactly as ``bertkit predict`` does
(the same ``bertkit.tasks`` code runs). A Hugging Face model directory without that file gets the defaults: label
names from ``id2label`` (``LABEL_i`` when there are none), 512 tokens, SQuAD v1.1 windows.

Scores (as transformers' default ``function_to_apply``): softmax over the labels; a one-label model gives its sigmoid
(a reranker) or its raw value (a regression model fine-tuned with ``--regression`` / STS-B); ``raw_scores`` gives
the logits.
``quantize="int8"`` swaps every Linear for a dynamic int8 one (CPU; see :mod:`bertkit.quantize`);
``backend="onnx"`` runs the exported graph with ONNX Runtime instead of PyTorch. The forward pass on each backend and
the batch loop are :mod:`bertkit.runtime`'s; a pipeline tokenizes and windows before them and decodes the head's
outputs after.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit import models, runtime
from bertkit.checkpoint import find_weights, read_safetensors_header, read_state_dict
from bertkit.config import ConfigError, check_config_json, check_vocabulary_fits, read_model_config
from bertkit.data.tasks.squad import SquadExample
from bertkit.errors import InputError
from bertkit.export import head_outputs, onnx_name
from bertkit.features import Encoder
from bertkit.precision import check_device, resolve_precision
from bertkit.quantize import resolve_quantize
from bertkit.tasks import get_task, run_inference
from bertkit.tasks.options import saved_task_config, task_options
from bertkit.tasks.squad import HF_MAX_ANSWER_LEN, HF_MAX_QUESTION_LEN, HF_MAX_SEQ_LEN, hf_answers, hf_features
from bertkit.tasks.tagging import _tag, group_entities, tokens_to_string  # noqa: F401 (public here too)
from bertkit.tokenization import load_tokenizer

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


# --------------------------------------------------------------------------------------------- loading


def read_head(directory: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """(architecture, saved task config) of a model directory. Raises :class:`NoHeadError` naming what is missing."""

    directory = Path(directory)
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


def _weight_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of the directory's weights (a safetensors file's header alone; else the file)."""

    weights = find_weights(directory)
    if weights.suffix == ".safetensors":
        return read_safetensors_header(weights)
    return {k: tuple(v.shape) for k, v in read_state_dict(weights).items()}


def _head_outputs(directory: Path, key: str) -> int | None:
    """The number of outputs of the head layer ``key`` (e.g. ``classifier.bias``) in the directory's weights."""
    try:
        shape = _weight_shapes(directory).get(key)
    except FileNotFoundError:  # an exported ONNX directory: no PyTorch weights
        return None
    return None if shape is None else int(shape[0])


def _default_task(architecture: str, config: Any, directory: Path):
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
    directory: str | os.PathLike,
    device: str = "cpu",
    precision: str = "auto",
    quantize: str | None = None,
    batch_size: int = 32,
    backend: str = "torch",
    qa_convention: str = "hf",
) -> Pipeline:
    """The pipeline for the head of a fine-tuned model directory (see the module docstring).

    Args:
        directory: a ``bertkit finetune`` OUTPUT directory, or a Hugging Face ``BertFor*`` directory with vocab.txt.
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

    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: no such model directory")
    quantize = resolve_quantize(quantize)
    runtime.check_backend(backend)
    check_device(device, "device")  # before the model is read
    resolve_precision(precision, device)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
    if qa_convention not in QA_CONVENTIONS:
        raise InputError(f"qa_convention must be one of {', '.join(QA_CONVENTIONS)}, got {qa_convention!r}")
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
        tokenizer = load_tokenizer(directory)
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
        directory=directory,
        quantize=quantize,
        backend=backend,
    )
    if isinstance(pipe, QuestionAnsweringPipeline):
        pipe.convention = qa_convention
    return pipe


def _load_head(directory: Path, architecture: str, task, saved: dict[str, Any]):
    """The PyTorch head model of a fine-tuned directory; InputError for an exported ONNX directory (no weights) and
    :class:`NoHeadError` for weights without the head ``config.json`` names."""

    try:
        find_weights(directory)
    except FileNotFoundError as e:
        if (directory / onnx_name()).is_file() or (directory / onnx_name("int8")).is_file():
            raise InputError(
                f"{directory}: an exported ONNX directory (no PyTorch weights): load it with "
                "backend='onnx' (--backend onnx)"
            ) from None
        raise InputError(str(e)) from None
    if not (directory / "tagger_config.json").is_file():
        key = HEAD_KEYS[architecture]
        if key not in _weight_shapes(directory):
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


class TextClassificationPipeline(Pipeline):
    """Sequence classification / regression (and cross-encoder reranking) on texts or text pairs."""

    def __init__(self, model, tokenizer, task, **kwargs):
        super().__init__(model, tokenizer, task, **kwargs)
        labels = getattr(task, "labels", None)
        self.num_labels = int(self.config.num_labels or (len(labels) if labels else model.classifier.out_features))
        id2label = self.config.id2label or {}
        if labels and len(labels) == self.num_labels:
            self.labels = [str(x) for x in labels]
        else:
            self.labels = [str(id2label.get(i, f"LABEL_{i}")) for i in range(self.num_labels)]
        if getattr(task, "family", "") == "rerank":
            self.kind = "rerank"
        elif self.num_labels == 1:
            self.kind = "regression" if getattr(task, "regression", False) else "rerank"
        else:
            self.kind = "classification"

    # ------------------------------------------------------------------ shared
    def _split(self, inputs: Any) -> tuple[bool, list[str], list[str] | None]:
        """(single, texts, pairs) from a text, a (text, pair) tuple, or a list of either."""

        def one(x: Any, where: str) -> tuple[str, str | None]:
            if isinstance(x, str):
                return x, None
            if isinstance(x, (tuple, list)) and len(x) == 2:
                return _check_text(x[0], f"{where}[0]"), _check_text(x[1], f"{where}[1]")
            raise InputError(
                f"{where} must be a text or a (text, pair) of two texts, got {type(x).__name__}"
                + (f" of {len(x)} items" if isinstance(x, (tuple, list)) else "")
            )

        if isinstance(inputs, (str, tuple)):
            items, single = [one(inputs, "inputs")], True
        elif isinstance(inputs, list):
            if not inputs:
                raise InputError("inputs is empty: give at least one text")
            items, single = [one(x, f"inputs[{i}]") for i, x in enumerate(inputs)], False
        else:
            raise InputError(
                f"inputs must be a text, a (text, pair) tuple or a list of them, got {type(inputs).__name__}"
            )
        texts = [a for a, _ in items]
        has_pairs = [b is not None for _, b in items]
        if any(has_pairs) and not all(has_pairs):
            raise InputError("inputs mixes single texts and pairs: give all texts or all (text, pair) pairs")
        return single, texts, ([b for _, b in items] if all(has_pairs) else None)

    def logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, truncate: bool = True):
        """[N, num_labels] fp32 numpy logits of ``texts`` (with ``pairs``), tokenised as the fine-tuning was
        (``[CLS] text [SEP] pair [SEP]``, at most ``max_seq_length`` tokens, longer segment cut first)."""
        import numpy as np

        if not truncate:
            full = self.tokenizer.encode_batch(list(texts), None if pairs is None else list(pairs), truncation=False)
            for i, e in enumerate(full):
                if len(e.ids) > self.max_length:
                    raise InputTooLongError(i, len(e.ids), self.max_length)
        encodings = self.tokenizer.encode_batch(
            list(texts), None if pairs is None else list(pairs), max_length=self.max_length
        )
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encodings]
        out = np.zeros((len(features), self.num_labels), dtype=np.float32)
        for idx, result in self._run(features):
            out[idx] = result.logits.float().cpu().numpy()
        return out

    def default_function(self) -> str:
        """transformers' default ``function_to_apply``: none for a regression model (``problem_type`` regression,
        or fine-tuned with ``--regression``), sigmoid for one label or ``multi_label_classification``, else
        softmax."""
        problem = getattr(self.config, "problem_type", None) or getattr(self.config, "extra", {}).get("problem_type")
        if problem == "regression" or self.kind == "regression":
            return "none"
        if problem == "multi_label_classification" or self.num_labels == 1:
            return "sigmoid"
        return "softmax"

    def scores(self, logits, raw_scores: bool = False, function_to_apply: str | None = None):
        """Logits -> scores by ``function_to_apply`` ("softmax", "sigmoid" or "none"; None: :meth:`default_function`:
        softmax over several labels, the sigmoid of a one-label reranker, the value of a regression model);
        ``raw_scores`` is "none"."""
        import numpy as np

        function = "none" if raw_scores else (function_to_apply or self.default_function())
        if function not in FUNCTIONS:
            raise InputError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {function_to_apply!r}")
        if function == "none":
            return logits
        if function == "sigmoid":
            return 1.0 / (1.0 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        return shifted / shifted.sum(-1, keepdims=True)

    # ------------------------------------------------------------------ the public calls
    def predict(
        self,
        inputs: str | tuple[str, str] | list,
        raw_scores: bool = False,
        return_all_scores: bool = False,
        top_k: int | None = None,
        truncate: bool = True,
        function_to_apply: str | None = None,
    ) -> list[dict] | list[list[dict]]:
        """Classify a text, a ``(text, pair)`` tuple, or a list of either.

        Returns, for each input, ``[{"label", "score"}]`` sorted by score (best first): the best label only, all of
        them with ``return_all_scores``, or the ``top_k`` best. A single input gives one such list; a list of
        inputs a list of lists. ``function_to_apply``: "softmax", "sigmoid" or "none" (the logits), as transformers'
        text-classification pipeline (default: :meth:`default_function`). ``truncate=False`` raises
        :class:`InputTooLongError` for an over-long input."""
        if function_to_apply is not None and function_to_apply not in FUNCTIONS:
            raise InputError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {function_to_apply!r}")
        for name, value in (
            ("raw_scores", raw_scores),
            ("return_all_scores", return_all_scores),
            ("truncate", truncate),
        ):
            _check_bool(name, value)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be a positive integer, got {top_k!r}")
        single, texts, pairs = self._split(inputs)
        k = top_k if top_k is not None else (self.num_labels if return_all_scores else 1)
        scores = self.scores(self.logits(texts, pairs, truncate), raw_scores, function_to_apply)
        results = []
        for row in scores.tolist():
            order = sorted(range(self.num_labels), key=lambda j: -row[j])[:k]
            results.append([{"label": self.labels[j], "score": float(row[j])} for j in order])
        return results[0] if single else results

    __call__ = predict

    def rerank(
        self,
        query: str,
        texts: Sequence[str],
        return_text: bool = False,
        raw_scores: bool = False,
        truncate: bool = True,
    ) -> list[dict]:
        """Score each of ``texts`` against ``query`` as a ``[CLS] query [SEP] text [SEP]`` pair (a cross-encoder).

        Returns ``[{"index", "score"[, "text"]}]`` best first; ``score`` is the sigmoid of the model's one logit
        (the logit itself with ``raw_scores``). Needs a one-label model (a reranker or a regression model)."""
        _check_text(query, "query")
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InputError(f"texts must be a list of texts, got {type(texts).__name__}")
        if not texts:
            raise InputError("texts is empty: give at least one text to rank")
        texts = [_check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        if self.num_labels != 1:
            raise InputError(
                f"{self.directory}: rerank needs a one-label model (a cross-encoder), this one has "
                f"{self.num_labels} labels {self.labels}: use predict"
            )
        scores = self.scores(self.logits([query] * len(texts), texts, truncate), raw_scores)[:, 0].tolist()
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        out = []
        for i in order:
            item: dict[str, Any] = {"index": i, "score": float(scores[i])}
            if return_text:
                item["text"] = texts[i]
            out.append(item)
        return out


class TokenClassificationPipeline(Pipeline):
    """Named entities: each word piece is classified; adjacent pieces are grouped into entities as transformers'
    ``aggregation_strategy="simple"`` does, with character offsets into the input text."""

    kind = "ner"

    def __init__(self, model, tokenizer, task, **kwargs):
        super().__init__(model, tokenizer, task, **kwargs)
        labels = getattr(task, "labels", None) or getattr(model, "labels", None)
        id2label = self.config.id2label or {}
        n = len(labels) if labels else int(self.config.num_labels or 2)
        self.labels = [str(x) for x in labels] if labels else [id2label.get(i, f"LABEL_{i}") for i in range(n)]

    def token_scores(self, texts: Sequence[str]) -> list[tuple[Any, Any]]:
        """For each text: (its Encoding without specials, [T, num_labels] fp32 softmax scores). A text longer than
        ``max_seq_length`` is cut into consecutive windows, each ``[CLS] piece [SEP]``, so every token is tagged."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts), truncation=False, add_special_tokens=False)
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        width = self.max_length - 2
        features, where = [], []  # where: (text index, first token) of each window
        for t, enc in enumerate(encodings):
            for start in range(0, max(len(enc.ids), 1), width):
                piece = enc.ids[start : start + width]
                features.append({"input_ids": [cls] + piece + [sep], "token_type_ids": [0] * (len(piece) + 2)})
                where.append((t, start))
        scores = [np.zeros((len(e.ids), len(self.labels)), dtype=np.float32) for e in encodings]
        for idx, out in self._run(features):
            logits = out.logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                t, start = where[i]
                n = len(features[i]["input_ids"]) - 2
                x = logits[row, 1 : n + 1]
                e = np.exp(x - x.max(-1, keepdims=True))
                scores[t][start : start + n] = e / e.sum(-1, keepdims=True)
        return list(zip(encodings, scores))

    def ner(
        self,
        inputs: str | list[str],
        aggregation_strategy: str = "simple",
        ignore_labels: Sequence[str] | None = ("O",),
    ) -> list[dict] | list[list[dict]]:
        """Entities of a text (or of each text of a list), as transformers' token-classification pipeline.

        ``aggregation_strategy``:

        - ``simple`` (default): ``[{"entity_group", "score", "word", "start", "end"}]``: adjacent tokens with the
          same entity type are grouped (a ``B-`` tag starts a new group), the score is the mean of their label
          probabilities, ``word`` joins the word pieces, ``start``/``end`` are character offsets into the text;
        - ``none``: one ``{"entity", "score", "index", "word", "start", "end"}`` per token (``index`` counts [CLS]);
        - ``first`` / ``max`` / ``average``: each word (a token and the ``##`` pieces after it) gets one label first
          (its first token's; the one of its most confident token; the best of its tokens' averaged
          probabilities), then words are grouped as ``simple``.

        Entities whose label (``none``: the full label, e.g. ``B-LOC``; else the type, e.g. ``LOC``) is in
        ``ignore_labels`` are left out (None: ``["O"]``)."""
        if aggregation_strategy not in AGGREGATIONS:
            raise InputError(
                f"aggregation_strategy must be one of {', '.join(AGGREGATIONS)}, got {aggregation_strategy!r}"
            )
        if ignore_labels is None:
            ignore_labels = ("O",)
        if (
            isinstance(ignore_labels, str)
            or not isinstance(ignore_labels, (list, tuple, set, frozenset))
            or not all(isinstance(x, str) for x in ignore_labels)
        ):
            raise InputError(f"ignore_labels must be a list of label names, got {ignore_labels!r}")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs) if isinstance(inputs, list) else None
        if texts is None:
            raise InputError(f"inputs must be a text or a list of texts, got {type(inputs).__name__}")
        if not texts:
            raise InputError("inputs is empty: give at least one text")
        texts = [_check_text(t, f"inputs[{i}]") for i, t in enumerate(texts)]
        # a tokenizer.json tokenizer: its decoder joins tokens, and without a sub-word mark (byte-level BPE) a
        # token continues a word when no space is next to its start (transformers' heuristic)
        join = getattr(self.tokenizer, "convert_tokens_to_string", tokens_to_string)
        word_aware = getattr(self.tokenizer, "continuing_subword_prefix", "##") is not None
        results = []
        for text, (enc, scores) in zip(texts, self.token_scores(texts)):
            tokens = []
            for j, (token_id, token, (start, end)) in enumerate(zip(enc.ids, enc.tokens, enc.offsets)):
                best = int(scores[j].argmax())
                unknown = token_id == self.tokenizer.unk_token_id
                word = text[start:end] if unknown else token
                if unknown:
                    subword = False
                elif word_aware:  # transformers' test for a word-piece tokenizer: the piece's text is not the token
                    subword = len(token) != end - start
                else:
                    subword = start > 0 and " " not in text[start - 1 : start + 1]
                tokens.append(
                    {
                        "entity": self.labels[best],
                        "score": float(scores[j, best]),
                        "index": j + 1,
                        "word": word,
                        "start": start,
                        "end": end,
                        "scores": scores[j],
                        "is_subword": subword,
                    }
                )
            if aggregation_strategy == "none":
                groups = [{k: t[k] for k in ("entity", "score", "index", "word", "start", "end")} for t in tokens]
            elif aggregation_strategy == "simple":
                groups = group_entities(tokens, join)
            else:
                groups = group_entities(self._words(tokens, aggregation_strategy, join), join)
            key = "entity" if aggregation_strategy == "none" else "entity_group"
            results.append([g for g in groups if g[key] not in ignore_labels])
        return results[0] if single else results

    def _words(self, tokens: list[dict], strategy: str, join=tokens_to_string) -> list[dict]:
        """transformers' ``aggregate_words``: one entity per word (a token and the sub-word pieces after it)."""
        import numpy as np

        words: list[list[dict]] = []
        for t in tokens:
            if words and t["is_subword"]:
                words[-1].append(t)
            else:
                words.append([t])
        out = []
        for w in words:
            if strategy == "first":
                scores = w[0]["scores"]
            elif strategy == "max":
                scores = max(w, key=lambda t: t["scores"].max())["scores"]
            else:
                scores = np.nanmean(np.stack([t["scores"] for t in w]), axis=0)
            best = int(scores.argmax())
            out.append(
                {
                    "entity": self.labels[best],
                    "score": float(scores[best]),
                    "word": join([t["word"] for t in w]),
                    "start": w[0]["start"],
                    "end": w[-1]["end"],
                }
            )
        return out

    __call__ = ner


QA_CONVENTIONS = ("hf", "google")


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InputError(f"{name} must be an integer {bound}, got {value!r}")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {value!r}")
    return value


class QuestionAnsweringPipeline(Pipeline):
    """Extractive QA: the best answer spans of a context.

    Two conventions (``convention``; the pipeline's default is set by ``load_pipeline(qa_convention=...)``):

    - ``hf`` (default): transformers' question-answering pipeline, as HF users and the HF inference API expect:
      ``doc_stride`` is the overlap between windows, spans score start x end probability within their window,
      answers are whole words of the context, equal answers of several windows add up (see
      :func:`bertkit.tasks.squad.hf_answers`); defaults 384 tokens, doc_stride min(max_seq_len / 2, 128), 64 question
      tokens, answers of at most 15 tokens;
    - ``google``: ``run_squad.py``'s, as ``bertkit predict`` writes it: ``doc_stride`` is the step between windows,
      a span is scored in the window where its start has the most context, n-best probabilities, the answer text by
      the fine-tuning's ``--answer-text`` (``get_final_text`` by default, which may keep a piece of a word); the
      defaults are the fine-tuning's (``finetune_config.json``).
    """

    kind = "qa"
    convention = "hf"

    def answer(
        self,
        question: str | Sequence[dict],
        context: str | None = None,
        top_k: int = 1,
        handle_impossible_answer: bool = False,
        doc_stride: int | None = None,
        max_answer_len: int | None = None,
        max_seq_len: int | None = None,
        max_question_len: int | None = None,
        align_to_words: bool = True,
        convention: str | None = None,
    ) -> dict | list:
        """``answer(question, context)`` -> ``{"answer", "score", "start", "end"}``; ``answer([{"question",
        "context"}, ...])`` -> a list of them. With ``top_k > 1`` each question gets a list of up to ``top_k``
        answers, best first. ``start``/``end`` are character offsets into the context (``context[start:end] ==
        answer`` wherever the answer is a slice of the context). ``handle_impossible_answer``: the empty answer
        ``""`` (start = end = 0) competes with the spans (a SQuAD 2.0 model). The other parameters are
        transformers' (see the class docstring for both conventions); a bad value raises InputError naming it."""

        convention = self.convention if convention is None else convention
        if convention not in QA_CONVENTIONS:
            raise InputError(f"convention must be one of {', '.join(QA_CONVENTIONS)}, got {convention!r}")
        top_k = _check_int("top_k", top_k, 1)
        handle_impossible_answer = _check_bool("handle_impossible_answer", handle_impossible_answer)
        align_to_words = _check_bool("align_to_words", align_to_words)
        limit = self.config.max_position_embeddings
        if max_seq_len is not None:
            max_seq_len = _check_int("max_seq_len", max_seq_len, 4, limit)
        if max_question_len is not None:
            max_question_len = _check_int("max_question_len", max_question_len, 1)
        if max_answer_len is not None:
            max_answer_len = _check_int("max_answer_len", max_answer_len, 1)
        if doc_stride is not None:
            doc_stride = _check_int("doc_stride", doc_stride, 0 if convention == "hf" else 1)
        if context is not None or isinstance(question, str):
            items, single = [{"question": question, "context": context}], True
        elif isinstance(question, dict):
            items, single = [question], True
        elif isinstance(question, list):
            items, single = question, False
        else:
            raise InputError(
                f"give a question and a context, or a list of {{question, context}} objects, got "
                f"{type(question).__name__}"
            )
        if not items:
            raise InputError("inputs is empty: give at least one {question, context}")
        examples = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not {"question", "context"} <= set(item):
                raise InputError(f"inputs[{i}] must be an object with 'question' and 'context'")
            q = _check_text(item["question"], f"inputs[{i}].question")
            c = _check_text(item["context"], f"inputs[{i}].context")
            if not q.strip() or not c.strip():
                raise InputError(f"inputs[{i}]: question and context must not be empty")
            examples.append(SquadExample(qas_id=str(i), question=q, context=c))
        if convention == "hf":
            results = self._answer_hf(
                examples,
                top_k,
                handle_impossible_answer,
                doc_stride,
                max_answer_len,
                max_seq_len,
                max_question_len,
                align_to_words,
            )
        else:
            results = self._answer_google(
                examples,
                top_k,
                handle_impossible_answer,
                doc_stride,
                max_answer_len,
                max_seq_len,
                max_question_len,
                align_to_words,
            )
        results = [r[0] if top_k == 1 else r for r in results]
        return results[0] if single else results

    __call__ = answer

    def _answer_hf(
        self,
        examples,
        top_k,
        handle_impossible_answer,
        doc_stride,
        max_answer_len,
        max_seq_len,
        max_question_len,
        align_to_words,
    ) -> list[list[dict]]:
        max_seq_len = max_seq_len or min(HF_MAX_SEQ_LEN, self.config.max_position_embeddings)
        features = hf_features(
            examples, self.tokenizer, max_seq_len, doc_stride, max_question_len or HF_MAX_QUESTION_LEN
        )
        logits: list = [None] * len(features)
        for idx, out in self._run(features):
            start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                logits[i] = (start[row, :n], end[row, :n])
        answers = hf_answers(
            examples,
            features,
            logits,
            top_k,
            handle_impossible_answer,
            max_answer_len or HF_MAX_ANSWER_LEN,
            align_to_words,
        )
        if top_k == 1:  # a context without a span still answers (the empty answer, as Google's convention)
            answers = [a or [{"score": 0.0, "start": 0, "end": 0, "answer": ""}] for a in answers]
        return [
            [{"answer": a["answer"], "score": a["score"], "start": a["start"], "end": a["end"]} for a in x]
            for x in answers
        ]

    def _answer_google(
        self,
        examples,
        top_k,
        handle_impossible_answer,
        doc_stride,
        max_answer_len,
        max_seq_len,
        max_question_len,
        align_to_words,
    ) -> list[list[dict]]:
        import copy

        task = self.task
        overrides = {
            "doc_stride": doc_stride,
            "max_answer_length": max_answer_len,
            "max_seq_length": max_seq_len,
            "max_query_length": max_question_len,
        }
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if handle_impossible_answer and task.version != "2.0":
            overrides["version"] = "2.0"
        if not align_to_words and task.answer_text == "words":
            overrides["answer_text"] = "chars"
        if overrides:
            task = copy.copy(task)
            for k, v in overrides.items():
                setattr(task, k, v)
            if task.max_seq_length - task.max_query_length - 3 < 1:
                raise InputError(
                    f"max_seq_len ({task.max_seq_length}) leaves no room for context after a "
                    f"{task.max_query_length}-token question"
                )
            task._words = None
        features = task.featurize(examples, self.tokenizer)
        preds = task.predict(self.model, examples, features, self.batch_size, self.precision, self.device)
        results = []
        for e, p in zip(examples, preds):
            ranked = [p["text"]] + [n["text"] for n in p["nbest"] if n["text"] != p["text"]]
            answers = []
            for text in ranked[:top_k]:
                best = next((n for n in p["nbest"] if n["text"] == text), None) or {}
                score = best.get("probability", 0.0)
                start, end = int(best.get("start", 0)), int(best.get("end", 0))
                if text and e.context[start:end] != text:
                    # Google's answer text (the default) may differ from the pieces' span (e.g. "Smith's" ->
                    # "Smith"): point at that text where it is, near the span
                    found = e.context.find(text, max(0, start - len(text)))
                    if found >= 0 and found <= end:
                        start, end = found, found + len(text)
                answers.append(
                    {"answer": text, "score": float(0.0 if math.isnan(score) else score), "start": start, "end": end}
                )
            results.append(answers)
        return results
