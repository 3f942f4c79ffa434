"""ModernBERT (Warner et al., 2024), top to bottom: the second architecture, beside ``modeling.py``'s BERT.

    embeddings (tokens, LayerNorm) -> layers (pre-norm; rotary attention, global every n-th layer and a sliding
    window elsewhere; GeGLU feed-forward) -> final LayerNorm -> heads

What differs from BERT: no position or segment embeddings (rotary position embeddings on q and k instead, with one
theta for global layers and another for local ones), pre-norm residual blocks (the first layer's attention norm is
the embeddings' norm), LayerNorm without biases and linear layers without biases (``norm_bias`` / ``attention_bias``
/ ``mlp_bias``), a gated GELU feed-forward (``Wi`` gives input and gate, ``Wo`` projects back), global attention in
every ``global_attn_every_n_layers``-th layer (the first included) and attention to the tokens within
``local_attention // 2`` positions on either side elsewhere, and a final LayerNorm.

Shape legend: B batch, T tokens, H hidden, N heads, D head size (H / N), I intermediate, V vocab, W half-window
(``local_attention // 2``), M masked (labelled) positions, C choices, n real (packed) tokens.

Module names are chosen so that ``state_dict()`` keys equal those of Hugging Face ``transformers``'
``ModernBert*`` classes (``model.layers.0.attn.Wqkv.weight``, ``head.dense.weight``, ``decoder.bias`` ...), and
``ModernBertConfig`` reads and writes its ``config.json`` (``model_type: modernbert``): a directory written by either
library loads in the other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import checkpoint, ops
from bertkit.config import OBJECTIVE_KEY, ConfigError, EncoderConfig, _available_memory, head_fields, opened_dir
from bertkit.errors import InputError, MissingFileError
from bertkit.modeling import (
    ACT2FN,
    ATTENTION_FUNCTIONS,
    LMHead,
    MaskedLMOutput,
    Packing,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    causal_mask,
    masked_lm,
)

# --------------------------------------------------------------------------------------------- config

GLOBAL, LOCAL = "full_attention", "sliding_attention"  # transformers' layer_types names
POOLINGS = ("cls", "mean")

# name -> (layers, hidden, heads, intermediate). ``modernbert-base`` / ``-large`` are ModernBERT's released shapes;
# tiny and mini are at the scale of bert-tiny / bert-mini for CPU budgets (deeper and narrower, as ModernBERT is).
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "modernbert-tiny": (3, 128, 2, 192),
    "modernbert-mini": (6, 256, 4, 384),
    "modernbert-small": (12, 384, 6, 576),
    "modernbert-base": (22, 768, 12, 1152),
    "modernbert-large": (28, 1024, 16, 2624),
}

# Keys transformers' files carry for bookkeeping (or that ModernBERT's older configs carry); accepted, not used.
_IGNORED_KEYS = frozenset(
    {
        "architectures",
        "auto_map",  # a variant's transformers code (models.Architecture.write_loader)
        "transformers_version",
        "torch_dtype",
        "dtype",
        "_name_or_path",
        "reference_compile",
        "repad_logits_with_grad",
        "deterministic_flash_attn",
        "gradient_checkpointing",
        "use_cache",
        "problem_type",
        "tokenizer_class",
        "position_embedding_type",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "torchscript",
        OBJECTIVE_KEY,
        "chunk_size_feed_forward",
        "is_decoder",
        "add_cross_attention",
        "is_encoder_decoder",
        "finetuning_task",
        "task_specific_params",
        "prefix",
        "decoder_start_token_id",
        "model_name",
        "_attn_implementation_autoset",
        "classifier_dropout_prob",
    }
)


@dataclass
class ModernBertConfig(EncoderConfig):
    """Hyper-parameters of a ModernBERT encoder, with the field names of ``transformers``' ``ModernBertConfig``.

    ``layer_types`` (transformers >= 5) lists each layer's attention, ``"full_attention"`` or ``"sliding_attention"``;
    when absent it follows ``global_attn_every_n_layers`` (transformers 4's key): layer i is global when i % n == 0.
    ``global_rope_theta`` / ``local_rope_theta`` are the rotary bases of the two kinds (transformers >= 5 writes them in
    ``rope_parameters``; both forms are read, both are written). The defaults are transformers' (ModernBERT-base's
    shape and tokenizer ids), so a ``config.json`` that leaves a key out means what it means there."""

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int | None = 50283
    eos_token_id: int | list[int] | None = 50282
    bos_token_id: int | None = 50281
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    attention_bias: bool = False
    attention_dropout: float = 0.0
    global_attn_every_n_layers: int = 3
    layer_types: list[str] | None = None
    local_attention: int = 128
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    num_labels: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    model_type = "modernbert"

    def __post_init__(self) -> None:
        self._check_sizes(
            (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "max_position_embeddings",
                "global_attn_every_n_layers",
                "local_attention",
            )
        )
        if self.head_dim % 2:
            raise ConfigError(
                f"ModernBertConfig: the head size hidden_size / num_attention_heads ({self.head_dim}) "
                f"must be even for rotary position embeddings"
            )
        if self.local_attention < 2 or self.local_attention % 2:
            raise self._bad("local_attention", "an even integer >= 2 (the window: local_attention // 2 on either side)")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACT2FN:
                raise self._bad(name, f"one of {sorted(ACT2FN)}")
        if self.classifier_pooling not in POOLINGS:
            raise self._bad("classifier_pooling", f"one of {POOLINGS}")
        self._check_probabilities(("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"))
        self._check_positive(
            ("initializer_range", "initializer_cutoff_factor", "norm_eps", "global_rope_theta", "local_rope_theta")
        )
        for name in ("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "sparse_prediction"):
            if not isinstance(getattr(self, name), bool):
                raise self._bad(name, "true or false")
        if self.layer_types is None:
            n = self.global_attn_every_n_layers
            self.layer_types = [GLOBAL if i % n == 0 else LOCAL for i in range(self.num_hidden_layers)]
        if (
            not isinstance(self.layer_types, list)
            or len(self.layer_types) != self.num_hidden_layers
            or any(t not in (GLOBAL, LOCAL) for t in self.layer_types)
        ):
            raise self._bad(
                "layer_types",
                f"a list of {self.num_hidden_layers} (num_hidden_layers) entries, each {GLOBAL!r} or {LOCAL!r}",
            )
        self._check_pad_and_labels()

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModernBertConfig:
        """``modernbert-tiny`` (L3/H128/A2/I192) ... ``modernbert-base`` (L22/H768/A12/I1152, ModernBERT-base) and
        ``-large``; ``overrides`` set any field (``vocab_size`` and the token ids of your tokenizer, say).
        A new model's classifier pools the mean of its tokens, as ModernBERT's released configs say: MLM without
        NSP gives the first token no objective of its own, and at 30 minutes of the budget recipe mean pooling
        fine-tuned better on SST-2 and MRPC (docs/results/pretraining.md, "What decided the default")."""
        if name not in PRESETS:
            raise ConfigError(f"unknown ModernBERT preset {name!r}; choose one of {sorted(PRESETS)}")
        layers, hidden, heads, intermediate = PRESETS[name]
        values: dict[str, Any] = dict(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=intermediate,
            classifier_pooling="mean",
        )
        values.update(overrides)
        return cls(**values)

    @property
    def sliding_window(self) -> int:
        """W: a local layer's token attends to the tokens at most W positions away (transformers' definition)."""
        return self.local_attention // 2

    # ------------------------------------------------------------------ size
    def num_parameters(self) -> int:
        """Parameters of the encoder with an MLM head, from the sizes alone."""
        v, h, i, n_layers = self.vocab_size, self.hidden_size, self.intermediate_size, self.num_hidden_layers
        norm = h * (2 if self.norm_bias else 1)  # one LayerNorm
        embeddings = v * h + norm
        layers = n_layers * (4 * h * h + 3 * h * i) + (2 * n_layers - 1) * norm  # layer 0 has no attn_norm
        return embeddings + layers + norm + (h * h + norm) + v  # final_norm, MLM head, decoder bias

    def check_fits_in_memory(self, available_bytes: int | None = None) -> None:
        """Refuse a config whose fp32 parameters alone exceed the memory available (instead of swapping)."""
        available = _available_memory() if available_bytes is None else available_bytes
        need = 4 * self.num_parameters()
        if available is not None and need > available:
            raise ConfigError(
                f"ModernBertConfig: the model would hold {self.num_parameters():,} parameters "
                f"({need / 2**30:,.1f} GiB in fp32), more than the {available / 2**30:,.1f} GiB of "
                f"memory available (check hidden_size, num_hidden_layers, vocab_size)"
            )

    def check_shapes(self, shapes: dict[str, tuple[int, ...]], config_source: str, weights: str) -> None:
        """Refuse a config whose sizes disagree with the weights file, naming the config field."""
        names = {k.removeprefix("model."): k for k in shapes}
        layers = {int(k.split(".")[1]) for k in names if k.startswith("layers.") and k.split(".")[1].isdigit()}
        found = max(layers) + 1 if layers else 0
        if found != self.num_hidden_layers:
            raise checkpoint.CheckpointError(
                f"{config_source}: num_hidden_layers is {self.num_hidden_layers} but {weights} holds {found} layers"
            )
        expected = {
            "embeddings.tok_embeddings.weight": ("vocab_size", "hidden_size"),
            "layers.0.attn.Wqkv.weight": (3 * self.hidden_size, "hidden_size"),
            "layers.0.mlp.Wo.weight": ("hidden_size", "intermediate_size"),
        }
        for key, fields in expected.items():
            if key not in names:
                continue  # a missing key is named by the load itself
            shape = tuple(shapes[names[key]])
            want = tuple(f if isinstance(f, int) else getattr(self, f) for f in fields)
            if shape != want:
                field_name = next(
                    (f for f, s, w in zip(fields, shape, want) if s != w and isinstance(f, str)), "hidden_size"
                )
                raise checkpoint.CheckpointError(
                    f"{config_source}: {field_name} is {getattr(self, field_name)} but {weights} has "
                    f"{names[key]!r} of shape {shape} (the config gives {want})"
                )

    # ------------------------------------------------------------------ dict / JSON
    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> ModernBertConfig:
        """Build from a transformers ``config.json`` dict (4.x or 5.x keys). Keys it does not know are kept (and said
        once), as transformers keeps them (``_from_keys``)."""
        model_type = data.get("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise ConfigError(
                f"{source}: model_type is {model_type!r}, not {cls.model_type!r} (a BERT config loads with BertConfig)"
            )
        if data.get("tie_word_embeddings", True) is not True:
            raise ConfigError(
                f"{source}: tie_word_embeddings false is not supported (the MLM decoder is the token embedding matrix)"
            )

        def translate(key: str, value: Any) -> dict[str, Any] | None:
            if key == "rope_scaling" and value is not None:
                raise ConfigError(f"{source}: rope_scaling {value!r} is not supported (default rotary only)")
            return _rope_thetas(value, source, data) if key == "rope_parameters" and value is not None else None

        return cls._from_keys(data, source, _IGNORED_KEYS | {"model_type", "tie_word_embeddings"}, translate)

    def to_dict(self, flavour: str = "hf") -> dict[str, Any]:
        """transformers' ``config.json`` (``flavour`` "hf", the only one: there is no Google format): 5.x's
        ``layer_types`` and ``rope_parameters``, and 4.x's ``global_attn_every_n_layers`` / ``global_rope_theta`` /
        ``local_rope_theta`` (the first when the layer pattern is an every-n one), so either version reads the same
        model."""
        if flavour != "hf":
            raise ConfigError(
                f"ModernBERT configs are written in transformers' format only (flavour 'hf'), not {flavour!r}"
            )
        out = self._plain_fields()
        out["model_type"] = self.model_type
        out["layer_types"] = list(self.layer_types)
        out["rope_parameters"] = {
            GLOBAL: {"rope_theta": float(self.global_rope_theta), "rope_type": "default"},
            LOCAL: {"rope_theta": float(self.local_rope_theta), "rope_type": "default"},
        }
        n = self.global_attn_every_n_layers
        if self.layer_types != [GLOBAL if i % n == 0 else LOCAL for i in range(self.num_hidden_layers)]:
            out.pop("global_attn_every_n_layers")  # not an every-n pattern: transformers 4 cannot express it
        out["tie_word_embeddings"] = True
        out.update(head_fields(self))
        return {**self._kept_keys(_IGNORED_KEYS | {"model_type", "tie_word_embeddings"}), **out}

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> ModernBertConfig:
        """A directory holding ``config.json``, or a JSON file; a :class:`bertkit.modeldir.ModelDir` gives the config
        it has read."""
        if opened_dir(path) is not None:
            return path.config_as(cls)
        path = Path(path)
        if path.is_dir():
            if not (path / checkpoint.CONFIG_NAME).is_file():
                raise MissingFileError(f"{path}: no config.json")
            path = path / checkpoint.CONFIG_NAME
        return cls.from_json_file(path)


def _rope_thetas(rope: Any, source: str, data: dict[str, Any]) -> dict[str, float]:
    """transformers 5's ``rope_parameters`` -> ``global_rope_theta`` / ``local_rope_theta`` (it wins over them)."""
    if not isinstance(rope, dict):
        raise ConfigError(f"{source}: rope_parameters must be an object, got {rope!r}")
    out: dict[str, float] = {}
    for kind, name in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
        params = rope.get(kind)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise ConfigError(f"{source}: rope_parameters.{kind} must be an object, got {params!r}")
        if params.get("rope_type", "default") != "default":
            raise ConfigError(
                f"{source}: rope_parameters.{kind}.rope_type {params['rope_type']!r} is not "
                f"supported (only 'default' rotary embeddings)"
            )
        unknown = sorted(set(params) - {"rope_type", "rope_theta"})
        if unknown:
            raise ConfigError(f"{source}: rope_parameters.{kind}: unsupported field {unknown[0]!r}")
        if "rope_theta" in params:
            out[name] = params["rope_theta"]
    return out


# --------------------------------------------------------------------------------------------- outputs


@dataclass
class ModernBertModelOutput:
    last_hidden_state: Tensor  # [B, T, H], after the final LayerNorm
    hidden_states: tuple[Tensor, ...] | None = None  # L + 1 tensors [B, T, H]: embeddings, then every layer
    attentions: tuple[Tensor, ...] | None = None  # L tensors [B, N, T, T]


@dataclass
class ModernBertMaskedLMOutput(MaskedLMOutput):
    """``MaskedLMOutput``; ``mlm_loss`` is ``loss`` (the pre-training loop's name: there is no NSP loss)."""

    @property
    def mlm_loss(self) -> Tensor | None:
        return self.loss


# --------------------------------------------------------------------------------------------- embeddings


class ModernBertEmbeddings(nn.Module):
    """token embeddings, then LayerNorm, then dropout: no position or segment embeddings (positions are rotary)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = ops.Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # [B, T, H]


class ModernBertRotaryEmbedding(nn.Module):
    """cos and sin of RoPE (Su et al., 2021) per attention kind: ``inv_freq = theta ** (-2i / D)``, i < D / 2, with
    ``global_rope_theta`` for global layers and ``local_rope_theta`` for local ones. Buffers, not saved."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        D = config.head_dim
        for kind, theta in ((GLOBAL, config.global_rope_theta), (LOCAL, config.local_rope_theta)):
            inv_freq = 1.0 / (float(theta) ** (torch.arange(0, D, 2, dtype=torch.float32) / D))  # [D / 2]
            self.register_buffer(f"{kind}_inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: Tensor, kind: str) -> tuple[Tensor, Tensor]:
        """position_ids [B or 1, T] -> (cos, sin), each [B or 1, T, D] in fp32."""
        inv_freq = getattr(self, f"{kind}_inv_freq")
        freqs = position_ids[..., None].float() * inv_freq  # [B, T, D / 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]: the two halves rotate together (rotate_half's pairing)
        return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate q or k (``[..., D]``, cos/sin broadcastable) in fp32, whatever the autocast dtype; a bf16 q or k on a
    CPU (a pure-bf16 model's, ``precision.MasterWeights``) in bf16, as a bf16 transformers model rotates: the fp32
    round trip and rotate_half's negation and concatenation were a fifth of modernbert-mini's bf16 step there.
    Training on a CPU (bf16, or fp32 with gradients) rotates through :class:`_CpuRotary`; inference in fp32 keeps
    the reference's products to the last bit."""
    bf16_cpu = x.dtype == torch.bfloat16 and x.device.type == "cpu"
    if bf16_cpu or (x.device.type == "cpu" and x.dtype == torch.float32 and x.requires_grad):
        half = x.size(-1) // 2  # cos and sin repeat over the two halves (the rotary embedding's cat)
        c, s = cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype)
        if not torch.compiler.is_compiling():
            return _CpuRotary.apply(x, c, s)
        if bf16_cpu:  # a compiled graph fuses the plain products
            return rotate_halves(x, c, s)
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


def rotate_halves(x: Tensor, c: Tensor, s: Tensor) -> Tensor:
    """The rotation on the halves, in x's dtype (c, s: the first half of cos and sin): what autograd differentiates
    where :class:`_CpuRotary` does not run (a compiled graph)."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _rotate_into(x: Tensor, c: Tensor, s: Tensor) -> Tensor:
    """x * cos + rotate_half(x) * sin written half by half into one new tensor (c, s: the first half of cos and
    sin): four in-place passes, no temporaries, no concatenation."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    o1, o2 = out[..., :half], out[..., half:]
    torch.mul(x1, c, out=o1)
    o1.addcmul_(x2, s, value=-1)  # x1 cos - x2 sin
    torch.mul(x2, c, out=o2)
    o2.addcmul_(x1, s)  # x2 cos + x1 sin
    return out


class _CpuRotary(torch.autograd.Function):
    """The CPU rotation with its own backward: a rotation's gradient is the rotation by minus the angle, one
    more :func:`_rotate_into` (autograd's own backward of the halves' products, sums and concatenation zero-filled
    and accumulated each half: the rotary was 8% of modernbert-mini's bf16 step at 32 tokens)."""

    @staticmethod
    def forward(ctx, x: Tensor, c: Tensor, s: Tensor) -> Tensor:
        ctx.save_for_backward(c, s)
        return _rotate_into(x, c, s)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        c, s = ctx.saved_tensors
        return _rotate_into(grad, c, -s), None, None


# --------------------------------------------------------------------------------------------- attention
# A local layer's query at position i sees the keys j with |i - j| <= W (and not padding). Up to a few windows long,
# that is the dense [T, T] band mask; beyond, the queries are cut into blocks of W and each block attends only to the
# 3W keys around it (``local_attention_blocked``): O(T * W) time and memory instead of O(T^2).

BLOCKED_FROM = 4  # sequences longer than BLOCKED_FROM * W take the blocked path (the dense band is cheaper below)


def attend(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, window: int | None, implementation: str, dropout_p: float
) -> tuple[Tensor, Tensor | None]:
    """q, k, v [B, N, T, D]; key_mask [B, T] bool (True = real token) or None, or the layer's whole mask [B or 1,
    1, T, T] (which holds its window already); window W, None for a global layer -> (context [B, N, T, D],
    probabilities [B, N, T, T] from the eager path, else None)."""
    T = q.size(-2)
    kernel = ATTENTION_FUNCTIONS[implementation]
    if key_mask is not None and key_mask.dim() == 4:  # the whole mask already (causal rows: ``causal_mask``)
        return kernel(q, k, v, key_mask, dropout_p)
    # a traced graph (ONNX export) keeps the one path it saw for every length: the dense band, exact at any T; so
    # does a compiled one, whose one graph then serves a ramp's short and long stages (the branch on T recompiled)
    tracing = torch.jit.is_tracing() or torch.compiler.is_compiling()
    if window is None or (not tracing and T <= window + 1):  # every pair lies within the window: global attention
        return kernel(q, k, v, None if key_mask is None else key_mask[:, None, None, :], dropout_p)
    if tracing or implementation == "eager" or T <= BLOCKED_FROM * window:
        pos = torch.arange(T, device=q.device)
        mask = ((pos[:, None] - pos[None, :]).abs() <= window)[None, None]  # [1, 1, T, T]
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]  # [B, 1, T, T]
            mask = mask | ~mask.any(-1, keepdim=True)  # a padding query far from any real token: no empty row
        return kernel(q, k, v, mask, dropout_p)
    return local_attention_blocked(q, k, v, key_mask, window, kernel, dropout_p), None


def local_attention_blocked(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, window: int, kernel, dropout_p: float
) -> Tensor:
    """Sliding-window attention at O(T * W): query block b (positions bW .. bW + W - 1) attends to keys
    bW - W .. bW + 2W - 1 under the band |i - j| <= W. Same result as the dense band mask."""
    B, N, T, D = q.shape
    W = window
    nb = -(-T // W)  # blocks
    pad = nb * W - T
    span = 3 * W  # keys seen by one block
    qb = F.pad(q, (0, 0, 0, pad)).view(B, N, nb, W, D)  # [B, N, nb, W, D]
    kb = F.pad(k, (0, 0, W, pad + W)).unfold(2, span, W)  # [B, N, nb, D, 3W]
    vb = F.pad(v, (0, 0, W, pad + W)).unfold(2, span, W)
    valid = torch.ones(B, T, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    valid = F.pad(valid, (W, pad + W), value=False).unfold(1, span, W)  # [B, nb, 3W]
    a = torch.arange(W, device=q.device)[:, None]
    b = torch.arange(span, device=q.device)[None, :]
    band = (b >= a) & (b <= a + 2 * W)  # [W, 3W]: |(bW - W + b) - (bW + a)| <= W
    mask = band & valid[:, :, None, :]  # [B, nb, W, 3W]
    mask = mask | ~mask.any(-1, keepdim=True)  # queries past the end (or padding far from real tokens)

    def blocks(x: Tensor) -> Tensor:  # [B, N, nb, L, D] -> [B * nb, N, L, D]
        return x.transpose(1, 2).reshape(B * nb, N, x.size(-2), D)

    context, _ = kernel(
        blocks(qb),
        blocks(kb.transpose(-1, -2)),
        blocks(vb.transpose(-1, -2)),
        mask.reshape(B * nb, 1, W, span),
        dropout_p,
    )  # [B * nb, N, W, D]
    context = context.view(B, nb, N, W, D).transpose(1, 2).reshape(B, N, nb * W, D)
    return context[:, :, :T]  # [B, N, T, D]


class ModernBertAttention(nn.Module):
    """Multi-head self-attention with q, k, v from one projection (``Wqkv``) and rotary positions on q and k."""

    def __init__(self, config: ModernBertConfig, layer_idx: int):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = ops.Dropout(config.attention_dropout)
        self.dropout_prob = config.attention_dropout
        self.window = config.sliding_window if config.layer_types[layer_idx] == LOCAL else None

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor], mask: Tensor | Packing | None, implementation: str
    ) -> tuple[Tensor, Tensor | None]:
        """x [B, T, H], rope (cos, sin) [B or 1, T, D], mask [B, T] bool or None -> ([B, T, H], probs or None);
        packed: x [n, H], rope [n, D], mask the batch's :class:`Packing` -> ([n, H], None)."""
        dropout_p = self.dropout_prob if self.training else 0.0
        if isinstance(mask, Packing):
            return self.out_drop(self.Wo(self._packed(x, rope, mask, implementation, dropout_p))), None
        B, T, H = x.shape
        q, k, v = self.Wqkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        cos, sin = rope[0][:, None], rope[1][:, None]  # [B, 1, T, D]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # each [B, N, T, D]
        context, probs = attend(q, k, v, mask, self.window, implementation, dropout_p)
        context = context.transpose(1, 2).reshape(B, T, H)  # [B, T, H]
        return self.out_drop(self.Wo(context)), probs

    def _packed(
        self, x: Tensor, rope: tuple[Tensor, Tensor], packing: Packing, implementation: str, dropout_p: float
    ) -> Tensor:
        """x [n, H] real tokens -> context [n, H]: the projections and the rotation run on the real tokens only;
        attention runs per group of rows of the packing, each re-padded to its own longest row."""
        n, H = x.shape
        qkv = self.Wqkv(x).view(n, 3, self.num_heads, self.head_dim)
        cos, sin = rope[0][:, None], rope[1][:, None]  # [n, 1, D]
        q, k = apply_rotary(qkv[:, 0], cos, sin), apply_rotary(qkv[:, 1], cos, sin)
        qkv = torch.stack((q, k, qkv[:, 2]), dim=1).view(n, 3 * H)
        outs = []
        for part, group_mask in packing.to_groups(qkv):  # [b, t, 3H]
            b, t = part.shape[:2]
            q, k, v = part.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            key_mask = None if group_mask is None else group_mask[:, 0, 0, :]  # [b, t]
            context, _ = attend(q, k, v, key_mask, self.window, implementation, dropout_p)  # [b, N, t, D]
            outs.append(context.transpose(1, 2).reshape(b, t, H))
        return packing.from_groups(outs)  # [n, H]


# --------------------------------------------------------------------------------------------- feed-forward, layer


class ModernBertMLP(nn.Module):
    """GeGLU: ``Wi`` gives input and gate [.., 2I]; act(input) * gate; ``Wo`` back to H."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_activation]
        self.drop = ops.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        inputs, gate = self.Wi(x).chunk(2, dim=-1)  # each [B, T, I]
        return self.Wo(self.drop(self.act(inputs) * gate))  # [B, T, H]


class ModernBertEncoderLayer(nn.Module):
    """Pre-norm: x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)). Layer 0's attn_norm is the identity (the
    embeddings end in a LayerNorm)."""

    def __init__(self, config: ModernBertConfig, layer_idx: int):
        super().__init__()
        self.attn_norm = (
            nn.Identity()
            if layer_idx == 0
            else nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        )
        self.attn = ModernBertAttention(config, layer_idx)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)
        self.attention_type = config.layer_types[layer_idx]

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor], mask: Tensor | Packing | None, implementation: str
    ) -> tuple[Tensor, Tensor | None]:
        attended, probs = self.attn(self.attn_norm(x), rope, mask, implementation)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), probs


# --------------------------------------------------------------------------------------------- base class

LAYOUT = checkpoint.Layout(
    prefix="model.",
    base_roots=("embeddings.", "layers.", "final_norm."),
    head_prefixes=("head.", "decoder.", "classifier."),
    tied={"decoder.weight": "model.embeddings.tok_embeddings.weight"},
)


class ModernBertPreTrainedModel(nn.Module):
    """Shared infrastructure: ModernBERT's init and HF-layout save/load (``checkpoint.Layout``).

    A variant (models.py, "Variants") subclasses the encoder and each head, and names its own ``config_class``,
    ``layout`` (its extra keys) and ``encoder_class`` (the encoder its heads wrap); the blocks stay these."""

    base_model_prefix = "model"
    config_class: type[ModernBertConfig] = ModernBertConfig
    layout: checkpoint.Layout = LAYOUT
    encoder_class: type[ModernBertModel]  # ModernBertModel, set below its definition

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config

    def init_weights(self) -> None:
        """ModernBERT's init (as transformers'): truncated normal cut at ``initializer_cutoff_factor`` std, with
        std = initializer_range for embeddings and input projections (Wqkv, Wi), initializer_range / sqrt(2L) for
        output projections (attention and MLP Wo, the heads' dense layer and the MLM decoder), hidden_size^-0.5 for
        a classifier; zero biases; LayerNorm weights 1. A head class skips its wrapped encoder."""
        c = self.config
        std_in = c.initializer_range
        std_out = c.initializer_range / math.sqrt(2.0 * c.num_hidden_layers)

        def init(linear: nn.Linear | nn.Embedding, std: float) -> None:
            cut = c.initializer_cutoff_factor * std
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=std, a=-cut, b=cut)
            if isinstance(linear, nn.Linear) and linear.bias is not None:
                nn.init.zeros_(linear.bias)

        encoder = getattr(self, "model", None)
        done = {id(m) for m in encoder.modules()} if isinstance(encoder, ModernBertModel) else set()
        for module in self.modules():
            if id(module) in done:
                continue
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, ModernBertEmbeddings):
                init(module.tok_embeddings, std_in)
            elif isinstance(module, (ModernBertAttention,)):
                init(module.Wqkv, std_in)
                init(module.Wo, std_out)
            elif isinstance(module, ModernBertMLP):
                init(module.Wi, std_in)
                init(module.Wo, std_out)
            elif isinstance(module, ModernBertPredictionHead):
                init(module.dense, std_out)
        if isinstance(getattr(self, "classifier", None), nn.Linear):
            init(self.classifier, c.hidden_size**-0.5)
        if isinstance(getattr(self, "decoder", None), nn.Linear) and self.decoder.bias is not None:
            nn.init.zeros_(self.decoder.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The MLM decoder's weight *is* the token-embedding matrix (its bias, ``decoder.bias``, is its own)."""
        if isinstance(getattr(self, "decoder", None), nn.Linear):
            self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        config: ModernBertConfig | None = None,
        output_loading_info: bool = False,
        **config_overrides,
    ):
        """Load a bertkit or transformers ModernBERT directory (``config.json`` + ``model.safetensors`` or
        ``pytorch_model.bin``). A bare encoder's checkpoint loads into a head class (head initialised); a head
        checkpoint loads into ``ModernBertModel`` (head keys left out). ``config_overrides`` (``num_labels=3``)
        change the config read. With ``output_loading_info``, ``(model, checkpoint.LoadingInfo)``."""
        return checkpoint.load_layout_pretrained(
            cls,
            cls.config_class,
            cls.layout,
            path,
            config=config,
            output_loading_info=output_loading_info,
            **config_overrides,
        )

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``config.json`` + ``model.safetensors`` in transformers' ModernBERT layout (decoder weight once)."""
        checkpoint.save_layout_pretrained(self, directory, self.layout)

    def _encoder(self) -> ModernBertModel:
        return self if isinstance(self, ModernBertModel) else self.model

    @property
    def attn_implementation(self) -> str:
        return self._encoder()._attn_implementation

    @attn_implementation.setter
    def attn_implementation(self, value: str) -> None:
        if value not in ATTENTION_FUNCTIONS:
            raise ConfigError(f"attn_implementation must be one of {sorted(ATTENTION_FUNCTIONS)}, got {value!r}")
        self._encoder()._attn_implementation = value

    def set_dropout(self, p: float) -> None:
        """Set every dropout probability (embeddings, attention, MLP, classifier) to ``p``, modules and config."""
        if not 0.0 <= p < 1.0:
            raise InputError(f"dropout must be in [0, 1), got {p}")
        c = self.config
        c.embedding_dropout = c.attention_dropout = c.mlp_dropout = c.classifier_dropout = p
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, ModernBertAttention):
                module.dropout_prob = p


# --------------------------------------------------------------------------------------------- the encoder model


class ModernBertModel(ModernBertPreTrainedModel):
    """The bidirectional encoder: embeddings, L pre-norm layers, final LayerNorm. No pooler."""

    base_model_prefix = ""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        config.check_fits_in_memory()
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.rotary_emb = ModernBertRotaryEmbedding(config)
        self._attn_implementation = "sdpa"
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        num_layers: int | None = None,
        packing: Packing | None = None,
        causal: bool | Tensor = False,
    ) -> ModernBertModelOutput:
        """
        Args:
            input_ids: [B, T] token ids.
            attention_mask: [B, T], 1 = real token, 0 = padding. None means nothing is padded.
            token_type_ids: not used: ModernBERT has no segment embeddings (a pair's parts are told apart by [SEP]
                alone, as in ModernBERT's own pipelines); accepted so that BERT's calling convention works.
            position_ids: [B, T] or [1, T]. Default 0..T-1.
            output_hidden_states: also return the embeddings' output and every layer's output (L + 1 tensors; the
                last one is ``last_hidden_state``, after the final LayerNorm, as transformers returns it).
            output_attentions: also return every layer's attention probabilities (runs the eager path, dense masks).
            num_layers: run only the embeddings and the first ``num_layers`` layers (0..L; None = all). Stopping
                early leaves the final LayerNorm out (it belongs to the last layer's output).
            packing: run every token-wise computation on the real tokens only (:class:`bertkit.modeling.Packing` of
                this batch's attention mask, which it replaces; attention per group of rows); outputs come back
                padded, [B, T, H], zeros at padding.
            causal: True: each position attends only to itself and the positions before it (within the window in
                the local layers); a [B] bool tensor: those rows only. Dense [T, T] masks. Default off.
        """
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise InputError(
                f"sequence length {T} exceeds max_position_embeddings ({self.config.max_position_embeddings})"
            )
        depth = len(self.layers)
        if num_layers is not None:
            if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 0 <= num_layers <= depth:
                raise InputError(f"num_layers must be an integer in 0..{depth}, got {num_layers!r}")
            depth = num_layers
        # one mask convention, converted once: [B, T] 1/0 -> [B, T] bool, None if nothing is padded
        mask: Tensor | Packing | None = None
        if attention_mask is not None and (
            torch.compiler.is_compiling() or torch.jit.is_tracing() or not bool(attention_mask.all())
        ):
            mask = attention_mask.bool()
        implementation = "eager" if output_attentions else self._attn_implementation
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)[None]  # [1, T]
        kinds = {layer.attention_type for layer in self.layers[:depth]}
        rope = {kind: self.rotary_emb(position_ids, kind) for kind in kinds}  # (cos, sin) [B or 1, T, D]

        x = self.embeddings(input_ids)  # [B, T, H]
        if packing is not None:
            if output_attentions:
                raise ValueError("output_attentions needs the padded batch: leave packing out")
            if tuple(input_ids.shape) != packing.shape:
                raise ValueError(f"packing is of a {list(packing.shape)} batch, the input is {list(input_ids.shape)}")
            mask = packing
            x = packing.pack(x)  # [n, H]
            rope = {kind: tuple(packing.pack(t.expand(B, T, -1)) for t in cs) for kind, cs in rope.items()}
        masks = {}  # causal: each kind of layer's whole mask, its window in it
        if causal is not False:
            if packing is not None:
                raise ValueError("causal attention needs the padded batch: leave packing out")
            window = {kind: self.config.sliding_window if kind == LOCAL else None for kind in kinds}
            masks = {kind: causal_mask(causal, attention_mask, T, input_ids.device, window[kind]) for kind in kinds}
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None

        def run(i: int, h: Tensor) -> Tensor:  # layer i on h, its outputs recorded
            layer = self.layers[i]
            h, probs = layer(h, rope[layer.attention_type], masks.get(layer.attention_type, mask), implementation)
            if hidden_states is not None:
                hidden_states.append(h)
            if attentions is not None:
                attentions.append(probs)
            return h

        x = self.run_layers(x, depth, run)
        if depth == len(self.layers):
            x = self.final_norm(x)
            if hidden_states is not None:
                hidden_states[-1] = x
        if packing is not None:
            x = packing.unpack(x)
            hidden_states = [packing.unpack(h) for h in hidden_states] if hidden_states is not None else None
        return ModernBertModelOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )

    def run_layers(self, x: Tensor, depth: int, run: Callable[[int, Tensor], Tensor]) -> Tensor:
        """The first ``depth`` layers on the embeddings' output ``x`` ([B, T, H], or [n, H] packed); ``run(i, h)`` is
        layer i on ``h``. Each layer reads the one before it (the residual stream). The seam of a variant: it
        overrides this to change what a layer reads (ELC-BERT's layer mix) or adds to it, and keeps the layers."""
        for i in range(depth):
            x = run(i, x)
        return x


ModernBertPreTrainedModel.encoder_class = ModernBertModel


# --------------------------------------------------------------------------------------------- heads


class ModernBertPredictionHead(nn.Module):
    """dense (bias = classifier_bias) -> classifier_activation -> LayerNorm: before the MLM decoder and before every
    task classifier."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACT2FN[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


def _num_labels(config: ModernBertConfig, default: int = 2) -> int:
    return config.num_labels if config.num_labels is not None else default


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """The encoder with the MLM head: head (dense + act + norm), then a decoder tied to the token embeddings, plus
    its own bias (``decoder_bias``)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.model = self.encoder_class(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.sparse_prediction = True  # with labels, vocabulary logits only at the labelled positions
        self.init_weights()

    def mlm_head_module(self) -> nn.Module:
        """hidden states [B, T, H] -> vocabulary logits [B, T, V] (what fill-mask and the Encoder's MLM use)."""
        return LMHead(self.head, self.decoder)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        packing: Packing | None = None,
        masked_positions: Tensor | None = None,
    ) -> ModernBertMaskedLMOutput:
        """``labels`` [B, T]: original token ids at masked positions, -100 elsewhere. Without labels, ``logits``
        [B, T, V]; with labels (and ``sparse_prediction``), ``masked_logits`` [M, V] and ``masked_labels`` [M].
        ``masked_positions`` [M]: the labelled positions' flat indices, where the caller knows them
        (``modeling.masked_lm``: no host sync)."""
        out = self.model(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            output_hidden_states,
            output_attentions,
            packing=packing,
        )
        hidden = out.last_hidden_state  # [B, T, H]
        if labels is None:
            return ModernBertMaskedLMOutput(
                None, self.decoder(self.head(hidden)), None, None, out.hidden_states, out.attentions
            )
        if not self.sparse_prediction:
            logits = self.decoder(self.head(hidden))  # [B, T, V]
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1))
            return ModernBertMaskedLMOutput(loss, logits, None, None, out.hidden_states, out.attentions)
        loss, _, masked_logits, masked_labels = masked_lm(
            self.mlm_head_module(), hidden, labels, True, masked_positions
        )
        return ModernBertMaskedLMOutput(loss, None, masked_logits, masked_labels, out.hidden_states, out.attentions)


class ModernBertForSequenceClassification(ModernBertPreTrainedModel):
    """Pooled state (``classifier_pooling``: first token or masked mean) -> head -> dropout -> linear.
    ``num_labels == 1`` is regression (MSE), else cross-entropy."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.num_labels = _num_labels(config)
        self.model = self.encoder_class(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = ops.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> SequenceClassifierOutput:
        out = self.model(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        pooled = ops.pool(out.last_hidden_state, attention_mask, self.config.classifier_pooling)  # [B, H]
        logits = self.classifier(self.drop(self.head(pooled)))  # [B, num_labels]
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1))
            else:
                loss = F.cross_entropy(logits.float(), labels.view(-1))
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class ModernBertForTokenClassification(ModernBertPreTrainedModel):
    """Every token's state -> head -> dropout -> linear. Labels -100 are ignored."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.num_labels = _num_labels(config)
        self.model = self.encoder_class(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = ops.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> SequenceClassifierOutput:
        out = self.model(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.classifier(self.drop(self.head(out.last_hidden_state)))  # [B, T, num_labels]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels).float(), labels.view(-1))
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class ModernBertForQuestionAnswering(ModernBertPreTrainedModel):
    """Every token's state -> head -> dropout -> linear -> (start, end) logits of the answer span."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.num_labels = _num_labels(config)
        if self.num_labels != 2:
            raise ConfigError(f"ModernBertForQuestionAnswering needs num_labels 2 (start, end), got {self.num_labels}")
        self.model = self.encoder_class(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = ops.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> QuestionAnsweringOutput:
        out = self.model(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.classifier(self.drop(self.head(out.last_hidden_state)))  # [B, T, 2]
        start_logits, end_logits = logits.unbind(-1)  # each [B, T]
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)  # positions outside the window are ignored, as in transformers
            start = start_positions.view(-1).clamp(0, T)
            end = end_positions.view(-1).clamp(0, T)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=T)
                + F.cross_entropy(end_logits.float(), end, ignore_index=T)
            ) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


class ModernBertForMultipleChoice(ModernBertPreTrainedModel):
    """Each choice encoded alone; its pooled state (first real token, or masked mean) -> head -> dropout -> a score;
    softmax over choices."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.model = self.encoder_class(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = ops.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> SequenceClassifierOutput:
        """``input_ids`` [B, C, T]; ``labels`` [B] the index of the right choice."""
        B, C, _ = input_ids.shape

        def flat(t: Tensor | None) -> Tensor | None:
            return t.reshape(B * C, -1) if t is not None else None

        mask = flat(attention_mask)
        out = self.model(
            flat(input_ids), mask, flat(token_type_ids), flat(position_ids), output_hidden_states, output_attentions
        )
        hidden = out.last_hidden_state  # [B * C, T, H]
        if self.config.classifier_pooling == "cls" and mask is not None:
            # the first real token (left padding too), as transformers picks it
            pooled = hidden[torch.arange(B * C, device=hidden.device), mask.argmax(-1)]
        else:
            pooled = ops.pool(hidden, mask, self.config.classifier_pooling)
        logits = self.classifier(self.drop(self.head(pooled))).view(B, C)  # [B, C]
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


MODEL_CLASSES = {
    "ModernBertModel": ModernBertModel,
    "ModernBertForMaskedLM": ModernBertForMaskedLM,
    "ModernBertForSequenceClassification": ModernBertForSequenceClassification,
    "ModernBertForTokenClassification": ModernBertForTokenClassification,
    "ModernBertForQuestionAnswering": ModernBertForQuestionAnswering,
    "ModernBertForMultipleChoice": ModernBertForMultipleChoice,
}
