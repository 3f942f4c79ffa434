"""Feature extraction: any layer (or several, concatenated) x any pooling, with length-sorted batching.

    enc = Encoder.from_pretrained("runs/my-bert")
    vecs = enc.encode(["a sentence", "another one"], layers=(-1, -2, -3, -4), pooling="mean")  # [2, 4H]

Layer indices (L = number of layers): ``-1`` is the last layer, ``-L`` the first, ``0`` or ``"embeddings"`` is the
embedding output, and ``1..L`` count layers from the bottom. Several layers are concatenated in the order given.

Poolings (over the tokens of one input; padding never takes part):

    mean        masked mean of every real token, [CLS] and [SEP] included (as sentence-transformers does)
    max         masked max over the same tokens
    mean_max    mean and max concatenated, [.., 2H]
    cls         the [CLS] vector
    cls_pooled  BERT's tanh pooler on the last layer's [CLS] (ignores ``layers``: the pooler only exists there)
    first       the first token after [CLS] (the first wordpiece of the text)
    last / sep  the final [SEP] token
    none        no pooling: one [T_i, D] array per input (padding removed), with the tokens on ``show_tokens``

bert-as-service's names are accepted too (``REDUCE_MEAN``, ``REDUCE_MAX``, ``REDUCE_MEAN_MAX``, ``CLS_TOKEN`` /
``FIRST_TOKEN`` (= cls), ``SEP_TOKEN`` / ``LAST_TOKEN`` (= sep), ``NONE``).

Speed: inputs are sorted by length into batches capped by a sentence count and a token budget (padded tokens), so
little padding is computed; the forward pass stops after the deepest requested layer and skips the pooler unless
``cls_pooled`` is asked for; it runs under ``torch.inference_mode`` and, where the CPU has native bf16 (AVX512-BF16 /
AMX) or on a GPU, under bf16 autocast. Pooling is computed in fp32. Results come back in input order. The batches,
the loop and the forward pass on each backend (PyTorch, int8, ONNX Runtime) are ``bertkit.runtime``'s; the Encoder
tokenizes before them and pools after.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import models, runtime
from bertkit.batches import collate, cut_batches, plan_batches  # noqa: F401 (cut_batches re-exported)
from bertkit.config import ConfigError, check_config_json, check_vocabulary_fits, reads_next_token
from bertkit.errors import InputError, MissingFileError
from bertkit.modeldir import ModelDir
from bertkit.modeling import shift_left
from bertkit.ops import pool  # the Encoder's poolings (bertkit.features.pool too)
from bertkit.precision import autocast, check_device, resolve_precision
from bertkit.st_format import read_sentence_transformers
from bertkit.tokenization import BertTokenizer, Encoding, FastTokenizer

logger = logging.getLogger(__name__)

FILL_MASK_BATCH = 32  # texts per fill-mask forward pass (the CPU token budget may cut smaller)
POOLINGS = ("mean", "max", "mean_max", "cls", "cls_pooled", "first", "last", "sep", "none")
POOLING_ALIASES = {
    "reduce_mean": "mean",
    "reduce_max": "max",
    "reduce_mean_max": "mean_max",
    "cls_token": "cls",
    "first_token": "cls",  # bert-as-service's FIRST_TOKEN is [CLS]
    "sep_token": "sep",
    "last_token": "sep",  # bert-as-service's LAST_TOKEN is the final [SEP]
    "last": "sep",
    "mean-max": "mean_max",
    "cls-pooled": "cls_pooled",
}
LayerSpec = int | str
LAYER_NAMES = ("embeddings", "embedding", "emb")  # layer 0, the embedding output


def resolve_pooling(name: str) -> str:
    """Canonical pooling name (accepts bert-as-service's upper-case names); ValueError listing the choices."""
    if not isinstance(name, str):
        raise TypeError(f"pooling must be a string, one of {POOLINGS}, got {type(name).__name__}")
    key = name.strip().lower()
    key = POOLING_ALIASES.get(key, key)
    if key not in POOLINGS:
        raise InputError(f"unknown pooling {name!r}: choose one of {', '.join(POOLINGS)}")
    return key


def parse_layers(text: str | Sequence[Any]) -> tuple[int | str, ...]:
    """A ``--layers`` value as layer specs: ``"-1,-2,-3"`` -> ``(-1, -2, -3)``; ``"embeddings"`` stays a name, and
    a sequence passes through. :func:`resolve_layers` then checks them against a model. An empty item between
    commas (``1,,2``), ``-0`` (0 is the embeddings, -1 the last layer) and a word other than ``embeddings`` are
    refused here (InputError naming the item); a trailing comma is allowed."""
    if not isinstance(text, str):
        return tuple(text)
    parts = [part.strip() for part in text.split(",")]
    if parts and not parts[-1]:
        parts.pop()
    out: list[int | str] = []
    for n, part in enumerate(parts, 1):
        if not part:
            raise InputError(f"layers {text!r}: item {n} is empty")
        if part.lstrip("+-").strip() == "0" and part.startswith("-"):
            raise InputError(f"layers {text!r}: -0 is not a layer (0 is the embedding output, -1 the last layer)")
        try:
            out.append(int(part))
        except ValueError:
            if part.lower() not in LAYER_NAMES:
                raise InputError(f"layers {text!r}: {part!r} is neither an integer nor 'embeddings'") from None
            out.append(part)
    return tuple(out)


def layers_arg(text: str) -> tuple[int | str, ...]:
    """:func:`parse_layers` as an argparse ``type``: a refusal names the flag (``--layers 1,,2: item 2 is empty``)."""
    import argparse

    try:
        return parse_layers(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[-1]) from None


def flag_spec(
    encoder: Encoder, layers: str | Sequence[Any] | None, pooling: str | None, normalize: bool | None = None
) -> PoolSpec:
    """``encoder.spec`` for command-line values (``--layers``, ``--pooling``; None: the model's defaults), each
    refusal naming its flag and the value given: the pooling first, so that a bad one is refused before the
    default layers are fitted (and said) for the model."""
    if pooling is not None:
        try:
            pooling = resolve_pooling(pooling)
        except InputError as e:
            raise InputError(f"--pooling {pooling}: {e}") from None
        if pooling == "cls_pooled" and not encoder.has_pooler:
            raise InputError("--pooling cls_pooled: needs the pooler weights, which this checkpoint does not have")
    if layers is not None:
        given = layers if isinstance(layers, str) else ",".join(map(str, layers))
        try:
            resolve_layers(parse_layers(layers), encoder.num_layers)
        except InputError as e:
            reason = str(e).split(": ", 1)[1] if str(e).startswith("layers '") else str(e)  # not the value twice
            raise InputError(f"--layers {given}: {reason}") from None
    return encoder.spec(None if layers is None else parse_layers(layers), pooling, normalize)


def _layer_exists(spec: LayerSpec, num_layers: int) -> bool:
    try:
        resolve_layers(spec, num_layers)
    except (InputError, TypeError):
        return False
    return True


def resolve_layers(layers: LayerSpec | Sequence[LayerSpec], num_layers: int) -> tuple[int, ...]:
    """Map user layer specs to indices into ``hidden_states`` (0 = embeddings output, L = last layer).

    ``-1`` -> L, ``-L`` -> 1, ``0`` / ``"embeddings"`` -> 0, ``k`` in 1..L -> k. Strings of integers ("-2") work.
    Raises ValueError naming the bad value and the valid range.
    """
    if isinstance(layers, (int, str)):
        layers = (layers,)
    try:
        items = list(layers)
    except TypeError:
        raise TypeError(f"layers must be an int, a string or a list of them, got {type(layers).__name__}") from None
    if not items:
        raise InputError("layers must name at least one layer")
    out = []
    for spec in items:
        if isinstance(spec, bool):
            raise TypeError(f"layer {spec!r} is a bool, not a layer index")
        if isinstance(spec, str):
            s = spec.strip().lower()
            if s in LAYER_NAMES:
                out.append(0)
                continue
            if s.startswith("-") and s[1:].strip() == "0":  # which was meant: the embeddings (0) or the last (-1)?
                raise InputError(f"layer {spec!r} is not a layer (0 is the embedding output, -1 the last layer)")
            try:
                spec = int(s)
            except ValueError:
                raise InputError(f"layer {spec!r} is neither an integer nor 'embeddings'") from None
        if not isinstance(spec, (int, np.integer)):
            raise TypeError(f"layer {spec!r} must be an integer or 'embeddings', got {type(spec).__name__}")
        spec = int(spec)
        if not -num_layers <= spec <= num_layers:
            raise InputError(
                f"layer {spec} is out of range for a {num_layers}-layer model: use -{num_layers}..-1 (from the top), "
                f"0 or 'embeddings' (embedding output), or 1..{num_layers} (from the bottom)"
            )
        out.append(spec if spec >= 0 else num_layers + 1 + spec)
    return tuple(out)


# --------------------------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class PoolSpec:
    """What to compute for one input: resolved layer indices, canonical pooling, and normalisation."""

    layers: tuple[int, ...]
    pooling: str
    normalize: bool = False

    @property
    def depth(self) -> int:
        """The deepest hidden state needed (the last layer for cls_pooled)."""
        return -1 if self.pooling == "cls_pooled" else max(self.layers)


@dataclass(frozen=True)
class EncodeDefaults:
    """What ``encode`` does when the caller names no layers / pooling / normalisation / max_length: bert-as-service's
    layer -2 mean for a raw BERT; for a sentence-embedding model (sentence-transformers files, as ``bertkit finetune
    --task simcse|pairs|sts`` writes) its own pooling of the last layer, normalisation and token limit."""

    layers: tuple[LayerSpec, ...] = (-2,)
    pooling: str = "mean"
    normalize: bool = False
    max_length: int | None = None  # None: the model's own limit, its max_position_embeddings (512 for BERT's)


# keyword arguments of MTEB's model protocols (v1: task_name, prompt_type; v2: task_metadata, hf_split, hf_subset)
# and of sentence-transformers' encode that ``Encoder.encode`` accepts and ignores (or maps: show_progress_bar)
_COMPAT_KWARGS = {
    "task_name",
    "prompt_type",
    "task_metadata",
    "hf_split",
    "hf_subset",
    "prompt_name",
    "prompt",
    "show_progress_bar",
    "convert_to_numpy",
    "request_qid",
}


def _normalize(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


# --------------------------------------------------------------------------------------------- the encoder


class Encoder:
    """A BERT encoder used as a feature extractor. Holds a ``BertModel`` (with its pooler when the checkpoint has
    one), the tokenizer, and the MLM head when the checkpoint has one (for fill-mask).

    Args:
        model: a ``BertModel`` or any ``BertFor*`` (its ``.bert`` is used).
        tokenizer: a ``bertkit.BertTokenizer``, or a ``FastTokenizer`` (any other ``tokenizer.json``).
        device: where the model runs ("cpu", "cuda", ...).
        precision: "auto" (bf16 where the CPU/GPU supports it, else fp32), "bf16", "fp16" (GPU) or "fp32".
        has_pooler: whether the pooler weights are trained (False: ``cls_pooled`` is refused).
        mlm_head: the ``cls.predictions`` module for fill-mask, or None.
        runner: what computes the forward pass instead of the module's weights: an ONNX Runtime model of the
            every-layer graph (``bertkit.runtime.OnnxRuntimeModel``; CPU, fp32 around it), or None.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: BertTokenizer | FastTokenizer,
        device: str = "cpu",
        precision: str = "auto",
        has_pooler: bool | None = None,
        mlm_head: Any = None,
        runner: Any = None,
    ):
        try:
            bert = models.encoder_of(model)
        except ConfigError:
            names = ", ".join(b.__name__ for b in models.base_classes())
            raise TypeError(
                f"Encoder needs a {names} or a *For* model around one, got {type(model).__name__}"
            ) from None
        self.device = torch.device(device)
        self.bert = bert.to(self.device).eval()
        self.config = bert.config
        self.tokenizer = tokenizer
        self.precision = resolve_precision(precision, self.device)
        pooler = getattr(bert, "pooler", None)
        self.has_pooler = pooler is not None if has_pooler is None else (has_pooler and pooler is not None)
        self.mlm_head = mlm_head.to(self.device).eval() if mlm_head is not None else None
        self.num_layers = bert.config.num_hidden_layers
        self.defaults = EncodeDefaults()
        # the forward pass, on ``self.bert`` or on the ONNX graph given (``bertkit.runtime.EncoderForward``)
        self.runner = runtime.EncoderForward(self.bert if runner is None else runner)
        self.backend = self.runner.backend
        self.onnx_path = self.runner.path  # the ONNX graph run (None on PyTorch)
        # CPU: run whole batches side by side, one thread each (up to torch.get_num_threads() of them), instead of
        # one batch at a time with every thread inside each op. Off by default: on a quiet 2-core machine it measured
        # slower for int8 (76 vs 90 sentences/s, BENCHMARKS.md); it can help where other jobs share the cores
        self.parallel_batches = False
        # CPU: at most this many padded tokens per forward pass, whatever batch the caller allows (None: no cap).
        # Larger batches run slower there: their [tokens, intermediate] activations leave the cache, and past 32 MB
        # every one is a fresh mmap that page-faults in (bert-base int8 on 2 cores: 80 sentences/s at batch 64 x ~50
        # tokens, 111 under 512 tokens; BENCHMARKS.md)
        self.forward_tokens = runtime.forward_tokens(self.config, self.device)
        if len(tokenizer) > self.config.vocab_size:
            raise InputError(
                f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {self.config.vocab_size}"
            )

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | ModelDir,
        device: str = "cpu",
        precision: str = "auto",
        lowercase: bool | None = None,
        quantize: str | None = None,
        backend: str = "torch",
    ) -> Encoder:
        """Load a model directory: ``config.json`` + weights (bertkit or Hugging Face layout) and ``vocab.txt`` or any
        ``tokenizer.json`` (:func:`bertkit.tokenization.load_tokenizer`).

        The checkpoint's pooler and MLM head are kept when present (for ``cls_pooled`` and fill-mask). A
        sentence-transformers directory (``modules.json``: BERT + Pooling [+ Normalize]) sets ``encode``'s defaults
        to its own pooling of the last layer, normalisation and ``max_seq_length``.
        ``quantize="int8"``: dynamic int8 Linear layers (CPU, fp32 around them; see ``bertkit.quantize``).
        ``backend="onnx"``: the forward pass runs in ONNX Runtime (CPU; int8 graph with ``quantize``; see
        ``bertkit.runtime``)."""
        runtime.check_backend(backend)
        check_device(device, "device")  # before the model is read
        resolve_precision(precision, device)
        if not Path(path).is_dir():
            raise MissingFileError(f"{path}: not a model directory (expected config.json, weights and vocab.txt)")
        sentence = read_sentence_transformers(Path(path))
        if sentence is not None and Path(sentence.model_dir) != Path(path):
            path = sentence.model_dir
        path = ModelDir.open(path)  # read once, below: config.json, weights, tokenizer
        tokenizer = path.tokenizer(lowercase)  # names a missing vocabulary itself
        check_config_json(path)
        arch = models.of_directory(path)
        model_class = arch.model_class(arch.features_role)
        # an exported directory (bertkit export --all-layers): ONNX Runtime computes; no weights are read
        exported = (
            backend == "onnx"
            and path.weights_format == "onnx"
            and any((path / n).is_file() for n in ("encoder.onnx", "encoder.int8.onnx"))
        )
        if exported:
            config = arch.config_class().from_pretrained(path)
            has_pooler, has_mlm = arch.has_pooler, False
        else:
            model, info = model_class.from_pretrained(path, output_loading_info=True)
            config = model.config
            has_pooler = arch.has_pooler and not any(k.startswith(arch.pooler_keys) for k in info.initialised)
            has_mlm = not any(k.startswith(arch.mlm_keys) for k in info.initialised)
        check_vocabulary_fits(path, len(tokenizer), config.vocab_size)  # before anything runs
        runner = None
        if backend == "onnx":  # the module carries the config (and the MLM head for fill-mask); ONNX computes
            loaded = runtime.load(
                directory=path, config=config, backend="onnx", quantize=quantize, device=device, hidden_states=True
            )
            runner, precision = loaded.model, loaded.precision
            if exported:  # built once the graph is known to be this config's (its layers, its width)
                model = model_class(config)
        else:  # int8 before the MLM head is taken
            loaded = runtime.load(model, quantize=quantize, precision=precision, device=device)
            model, precision = loaded.model, loaded.precision
        encoder = cls(
            model,
            tokenizer,
            device=device,
            precision=precision,
            has_pooler=has_pooler,
            mlm_head=model.mlm_head_module() if has_mlm else None,
            runner=runner,
        )
        if sentence is not None:  # its pooling, normalisation and length are this encoder's defaults
            encoder.defaults = EncodeDefaults(
                (-1,), sentence.pooling, sentence.normalize, sentence.max_seq_length or EncodeDefaults.max_length
            )
        return encoder

    # ------------------------------------------------------------------ pieces shared with the server

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def default_layers(self) -> tuple[LayerSpec, ...]:
        """The default layers (``self.defaults.layers``, e.g. -2) fitted to this model: those it has, else its last
        layer (-2 of a 1-layer model, a distilled student or ELECTRA's small generator), said once in a warning.
        The one place a default layer choice is resolved (``encode``, ``bertkit embed``, ``bertkit serve``)."""
        wanted = tuple(self.defaults.layers)
        fits = tuple(s for s in wanted if _layer_exists(s, self.num_layers)) or (-1,)
        if fits != wanted and not getattr(self, "_told_default_layers", False):
            logger.warning(
                "bertkit: the default layers %s do not all exist in this %d-layer model: using %s",
                ",".join(map(str, wanted)),
                self.num_layers,
                ",".join(map(str, fits)),
            )
            self._told_default_layers = True
        return fits

    def spec(
        self,
        layers: LayerSpec | Sequence[LayerSpec] | None = None,
        pooling: str | None = None,
        normalize: bool | None = None,
    ) -> PoolSpec:
        """Validate and resolve encode options into a :class:`PoolSpec` (ValueError/TypeError naming the field).
        None takes the encoder's default (:class:`EncodeDefaults`)."""
        normalize = self.defaults.normalize if normalize is None else normalize
        pooling = resolve_pooling(self.defaults.pooling if pooling is None else pooling)  # before the layers' note
        if pooling == "cls_pooled" and not self.has_pooler:
            raise InputError("pooling 'cls_pooled' needs the pooler weights, which this checkpoint does not have")
        if pooling == "cls_pooled":  # the pooler sits on the last layer: the layers asked for play no part
            return PoolSpec((self.num_layers,), pooling, bool(normalize))
        layers = self.default_layers() if layers is None else layers
        return PoolSpec(resolve_layers(layers, self.num_layers), pooling, bool(normalize))

    def output_dim(self, spec: PoolSpec) -> int:
        if spec.pooling == "cls_pooled":
            return self.hidden_size
        return self.hidden_size * len(spec.layers) * (2 if spec.pooling == "mean_max" else 1)

    def max_tokens(self, max_length: int | None) -> int:
        limit = self.config.max_position_embeddings
        return limit if max_length is None else max(2, min(int(max_length), limit))

    def tokenize(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, max_length: int | None = 512
    ) -> list[Encoding]:
        """Tokenize with [CLS]/[SEP] and truncation to ``max_length`` (capped by max_position_embeddings)."""
        return self.tokenizer.encode_batch(
            list(texts),
            list(pairs) if pairs is not None else None,
            max_length=self.max_tokens(max_length),
            truncation=True,
        )

    def collate(self, encodings: Sequence[Encoding]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pad to the longest: (input_ids, token_type_ids, attention_mask), each [B, T] on the device
        (:func:`bertkit.batches.collate`)."""
        return collate(
            [e.ids for e in encodings], [e.type_ids for e in encodings], self.tokenizer.pad_token_id, device=self.device
        )

    def autocast(self):
        """The autocast context for this encoder's precision (entered once around many batches: the bf16 copies of
        the weights are then cached instead of re-made per batch)."""
        return autocast(self.precision, self.device)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        depth: int,
        pooler: bool = False,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """Run embeddings and layers 1..depth only (depth -1 = all). Returns (hidden states 0..depth, each [B, T, H];
        pooler output [B, H] or None). Call under ``torch.inference_mode()`` and (optionally) :meth:`autocast`.
        The backend's forward pass (``self.runner``: :class:`bertkit.runtime.EncoderForward`)."""
        return self.runner(input_ids, token_type_ids, attention_mask, depth, pooler)

    def pool_batch(
        self, states: list[torch.Tensor], pooled: torch.Tensor | None, attention_mask: torch.Tensor, spec: PoolSpec
    ) -> torch.Tensor | list[torch.Tensor]:
        """Apply ``spec`` to a forward's output: [B, D] fp32, or for ``none`` a list of [T_i, D] tensors."""
        if spec.pooling == "cls_pooled":
            out = pooled.float()
        elif spec.pooling == "none":
            full = torch.cat([states[i].float() for i in spec.layers], dim=-1)  # [B, T, D]
            lengths = attention_mask.sum(1).tolist()
            rows = [full[b, :n] for b, n in enumerate(lengths)]
            return [_normalize(r) if spec.normalize else r for r in rows]
        else:
            out = torch.cat([pool(states[i].float(), attention_mask, spec.pooling) for i in spec.layers], dim=-1)
        return _normalize(out) if spec.normalize else out

    def batch_tokens(self, max_batch_tokens: int | None) -> int | None:
        """The padded-token budget of a forward pass: ``max_batch_tokens`` and, on a CPU, ``forward_tokens``,
        whichever is smaller (None: no budget)."""
        budgets = [b for b in (max_batch_tokens, self.forward_tokens) if b]
        return min(budgets) if budgets else None

    def plan_batches(self, lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None) -> list[list[int]]:
        """Indices sorted by length (longest first) cut into batches of at most ``batch_size`` inputs and at most
        :meth:`batch_tokens` padded tokens (B x longest T); a single input over the budget gets a batch of its own
        (what the server's queue runs; ``encode`` plans the same in ``bertkit.runtime.batch_loop``)."""
        return plan_batches(lengths, batch_size, self.batch_tokens(max_batch_tokens))

    # ------------------------------------------------------------------ the public call

    def encode(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        layers: LayerSpec | Sequence[LayerSpec] | None = None,
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 64,
        max_length: int | None = None,
        show_tokens: bool = False,
        max_batch_tokens: int | None = 16384,
        show_progress: bool | None = None,
        **kwargs: Any,
    ) -> np.ndarray | list[np.ndarray] | tuple[Any, list[list[str]]]:
        """Embed ``texts`` (optionally paired with ``pairs``, as ``[CLS] text [SEP] pair [SEP]``).

        Layers, pooling, normalisation and max_length left at None take the encoder's defaults
        (:class:`EncodeDefaults`: layer -2, mean, unnormalised, the model's max_position_embeddings tokens (512 for
        BERT's shapes, 8192 for ModernBERT's) for a raw model; a sentence-embedding
        model's own settings). The signature is the one MTEB's model protocol calls (``encode(sentences,
        batch_size=..., task_name=..., prompt_type=...)``; MTEB 2's DataLoader of ``{"text": [...]}`` batches is
        accepted too); those protocol keywords are accepted and ignored, any other keyword is a TypeError.

        Args:
            texts: a list of strings (a bare string is refused: wrap it in a list).
            pairs: optional second segments, one per text.
            layers: a layer index or a list of them, concatenated in order (see the module docstring).
            pooling: one of ``POOLINGS`` (or a bert-as-service name).
            normalize: L2-normalise each output vector (each token vector for ``none``).
            batch_size: at most this many inputs per forward pass.
            max_length: truncate inputs to this many tokens, specials included (capped by the model's positions);
                None: the encoder's default.
            show_tokens: also return each input's wordpieces.
            max_batch_tokens: at most this many padded tokens per forward pass (None: no budget).
            show_progress: a tqdm bar; None = when stderr is a terminal and there are at least 1024 inputs.

        Returns:
            float32 ``[N, D]`` array (D = H x len(layers), doubled for mean_max; H for cls_pooled), in input order;
            for ``pooling="none"`` a list of N ``[T_i, D]`` arrays. With ``show_tokens``: ``(vectors, tokens)``.
        """
        unknown = sorted(set(kwargs) - _COMPAT_KWARGS)
        if unknown:
            raise TypeError(f"encode() got unexpected keyword argument(s) {', '.join(unknown)}")
        if show_progress is None and kwargs.get("show_progress_bar") is not None:
            show_progress = bool(kwargs["show_progress_bar"])
        max_length = self.defaults.max_length if max_length is None else max_length
        texts = _check_texts(_flatten_batches(texts), "texts")
        if pairs is not None:
            pairs = _check_texts(pairs, "pairs")
            if len(pairs) != len(texts):
                raise InputError(f"pairs has {len(pairs)} items but texts has {len(texts)}: they must match")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        spec = self.spec(layers, pooling, normalize)
        encodings = self.tokenize(texts, pairs, max_length)
        if show_progress is None:
            show_progress = len(texts) >= 1024 and sys.stderr.isatty()

        def run(batch: list[int]) -> Any:
            ids, types, mask = self.collate([encodings[i] for i in batch])
            states, pooled = self.forward(ids, types, mask, spec.depth, spec.pooling == "cls_pooled")
            out = self.pool_batch(states, pooled, mask, spec)
            return [r.cpu().numpy() for r in out] if isinstance(out, list) else out.cpu().numpy()  # one copy

        batches = runtime.batch_loop(
            [len(e.ids) for e in encodings],
            run,
            batch_size,
            self.batch_tokens(max_batch_tokens),
            device=self.device,
            precision=self.precision,
            parallel=self.parallel_batches,
            progress=show_progress,
            desc="encode",
            unit="text",
        )
        results = runtime.in_input_order(len(texts), batches)
        if spec.pooling == "none":
            vectors: Any = results
        elif results:
            vectors = np.stack(results).astype(np.float32, copy=False)
        else:
            vectors = np.zeros((0, self.output_dim(spec)), dtype=np.float32)
        if show_tokens:
            return vectors, [list(e.tokens) for e in encodings]
        return vectors

    # ------------------------------------------------------------------ fill-mask

    @property
    def mlm_head_names(self) -> str:
        """The weights of this architecture's MLM head, as a message names them (``cls.predictions`` for BERT,
        ``head, decoder`` for ModernBERT)."""
        return ", ".join(k.rstrip(".") for k in models.of_config(self.config).mlm_keys)

    def fill_mask(self, texts: Sequence[str], top_k: int = 5, max_length: int | None = 512) -> list[list[list[dict]]]:
        """For each text, for each ``[MASK]`` in it: the ``top_k`` predictions as dicts (token, token_id, score).
        Needs a checkpoint with an MLM head (``BertForPreTraining`` / ``BertForMaskedLM``). A model whose config.json
        says ``bertkit_objective: mntp`` (masked next-token prediction) answers a [MASK] at j from position j - 1."""
        if self.mlm_head is None:
            raise InputError(f"fill-mask needs an MLM head ({self.mlm_head_names}), which this checkpoint lacks")
        texts = _check_texts(texts, "texts")
        tok = self.tokenizer
        if tok.mask_token_id is None:
            raise InputError("fill-mask needs a mask token, and this model's tokenizer has none")
        mask_id, mask_token = tok.mask_token_id, tok.convert_ids_to_tokens(tok.mask_token_id)
        limit = self.max_tokens(max_length)
        sequences = []
        for n, text in enumerate(texts):
            if mask_token not in text:
                raise InputError(f"texts[{n}] has no {mask_token} token to fill: {text[:80]!r}")
            ids = encode_with_masks(tok, text, mask_token)
            if len(ids) > limit:
                raise InputError(f"texts[{n}] is {len(ids)} tokens long, over the limit of {limit}")
            sequences.append(ids)
        top_k = max(1, min(int(top_k), self.config.vocab_size))
        shifted = reads_next_token(self.config)

        def run(batch: list[int]) -> list[list[list[dict]]]:
            ids, types, mask = collate([sequences[i] for i in batch], None, tok.pad_token_id, device=self.device)
            states, _ = self.forward(ids, types, mask, -1)
            where = ids == mask_id  # [B, T]
            # a masked next-token model (config.json's bertkit_objective: mntp) answers a [MASK] at j from j - 1
            read = shift_left(where, False) if shifted else where
            logits = self.mlm_head(states[-1][read]).float()  # [M, V]
            probs = logits.softmax(-1)
            scores, top = probs.topk(top_k, dim=-1)
            rows: list[list[list[dict]]] = [[] for _ in batch]
            for m, b in enumerate(where.nonzero()[:, 0].tolist()):
                tokens = tok.convert_ids_to_tokens(top[m].tolist())
                rows[b].append(
                    [
                        {"token": t, "token_id": int(i), "score": float(s)}
                        for t, i, s in zip(tokens, top[m].tolist(), scores[m].tolist())
                    ]
                )
            return rows

        batches = runtime.batch_loop(
            [len(s) for s in sequences],
            run,
            FILL_MASK_BATCH,
            self.batch_tokens(None),
            device=self.device,
            precision=self.precision,
        )
        return runtime.in_input_order(len(sequences), batches)


def encode_with_masks(tokenizer: BertTokenizer | FastTokenizer, text: str, mask_token: str = "[MASK]") -> list[int]:
    """``[CLS] pieces [SEP]`` ids, where every literal ``mask_token`` in ``text`` becomes the mask id.

    Google's normaliser splits ``"[MASK]"`` into ``"["``, ``"mask"``, ``"]"``, so the text is tokenized around the
    literal marker instead (whatever the casing of the rest). A ``tokenizer.json`` tokenizer matches its mask token
    itself (an added token, with its own handling of the spaces around it)."""
    if isinstance(tokenizer, FastTokenizer):
        return tokenizer.encode_with_masks(text, mask_token)
    ids = [tokenizer.cls_token_id]
    for k, piece in enumerate(text.split(mask_token)):
        if k:
            ids.append(tokenizer.mask_token_id)
        ids.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(piece)) if piece.strip() else [])
    ids.append(tokenizer.sep_token_id)
    return ids


def _flatten_batches(texts: Any) -> Any:
    """MTEB 2 passes a DataLoader of ``{"text": [...]}`` batches: their texts in order; anything else unchanged."""
    if isinstance(texts, (str, bytes, list, tuple)) or not hasattr(texts, "__iter__"):
        return texts
    items = list(texts)
    if items and all(isinstance(b, dict) and "text" in b for b in items):
        return [t for b in items for t in b["text"]]
    return items


def _check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, got a single {type(texts).__name__}: wrap it in a list")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name} must be a list of strings, got {type(texts).__name__}") from None
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(t).__name__}")
    return texts


def format_fill_mask(texts: Sequence[str], results: list[list[list[dict]]], as_json: bool = False) -> str:
    """:meth:`Encoder.fill_mask`'s results as text: per text, the text then one line per [MASK] (or one JSON object
    per text, ``as_json``)."""
    lines = []
    for text, per_mask in zip(texts, results):
        if as_json:
            predictions = [[{"token": p["token"], "probability": round(p["score"], 5)} for p in m] for m in per_mask]
            lines.append(json.dumps({"text": text, "predictions": predictions}))
            continue
        lines.append(text)
        for n, preds in enumerate(per_mask, 1):
            label = f"  [MASK] #{n}: " if len(per_mask) > 1 else "  "
            lines.append(label + "   ".join(f"{p['token']} {p['score']:.1%}" for p in preds))
    return "\n".join(lines)
