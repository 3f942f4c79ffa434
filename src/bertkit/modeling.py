"""THE model: BERT (Devlin et al., 2018), top to bottom.

    embeddings -> self-attention -> feed-forward -> layer -> encoder -> pooler -> heads

Shape legend: B batch, T tokens, H hidden, N heads, D head size (H / N), I intermediate, V vocab,
M masked (labelled) positions, C choices.

Module names are chosen so that ``state_dict()`` keys equal those of Hugging Face ``transformers`` (``LayerNorm``,
``attention.self``, ``cls.predictions`` ...): loading an HF checkpoint is an identity map plus checks
(see ``checkpoint.py``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import checkpoint, ops
from bertkit.config import BertConfig, ConfigError
from bertkit.errors import InputError

# --------------------------------------------------------------------------------------------- activations


def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh approximation of GELU that Google's TF code used ("gelu_new" in HF)."""
    return F.gelu(x, approximate="tanh")


ACT2FN: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,  # exact erf form
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": F.relu,
}

# --------------------------------------------------------------------------------------------- attention kernels
# Same signature: (q, k, v [B, N, T, D], mask [B, 1, 1 or T, T] bool (True = attend) or None, dropout_p) ->
# (context [B, N, T, D], probs [B, N, T, T] or None).


def eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> tuple[Tensor, Tensor]:
    """The explicit reference path; also the one that can return attention probabilities."""
    # scaled and masked in place: the product's own buffer (autograd keeps q and k for its backward, not the product)
    scores = torch.matmul(q, k.transpose(-1, -2)).div_(math.sqrt(q.size(-1)))  # [B, N, T, T]
    if mask is not None:
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
    if scores.dtype == torch.bfloat16 and scores.device.type == "cpu":  # the CPU kernel sums in fp32 itself: the same
        probs = torch.softmax(scores, dim=-1)  # probabilities as the fp32 round trip's, five times faster
    else:
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)  # softmax in fp32, whatever the autocast dtype
    context = torch.matmul(ops.dropout(probs, dropout_p) if dropout_p > 0 else probs, v)
    return context, probs


# bf16 on a CPU: the longest sequence at which attention takes the eager path (two matmuls and a softmax), the faster
# one there. SDPA's CPU flash kernel in bf16 against it on a 2-core Zen 4 (AVX512-BF16), 2 threads: forward and
# backward 3.2x slower at 32 tokens, 2.2x at 128, 1.65x at 256, 1.2x at 512; forward alone 2.1x, 2.8x, 1.8x, and
# 0.65x (faster) at 512 (benchmarks/bench_attention.py, BENCHMARKS.md). In fp32 the two are level, SDPA ahead at length.
BF16_CPU_EAGER_UP_TO = 256


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> tuple[Tensor, None]:
    """PyTorch's fused ``scaled_dot_product_attention`` (flash / memory-efficient kernels where available); on a
    CPU in bf16 at short sequences, the eager path, which is faster there (:data:`BF16_CPU_EAGER_UP_TO`)."""
    if q.device.type == "cpu" and (dropout_p > 0 or (q.dtype == torch.bfloat16 and q.size(-2) <= BF16_CPU_EAGER_UP_TO)):
        # (dropout: SDPA's CPU kernels have none: it falls back to its unfused math path and serial ``bernoulli_``;
        # the eager path is the same computation with bertkit's cheaper dropout mask)
        return eager_attention(q, k, v, mask, dropout_p)[0], None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None


ATTENTION_FUNCTIONS = {"eager": eager_attention, "sdpa": sdpa_attention}


def causal_mask(
    causal: bool | Tensor, attention_mask: Tensor | None, T: int, device, window: int | None = None
) -> Tensor:
    """The attention mask of causal rows, [B or 1, 1, T, T] bool (True = attend): query i sees the keys j <= i in
    the rows ``causal`` names (True: every row; a [B] bool tensor: those rows, the others every key), only keys
    within ``window`` (|i - j| <= W: ModernBERT's local layers; None: all) and no padding key (``attention_mask``
    [B, T] 1/0). A query left with no key (padding) attends to all, as the padded batches do."""
    pos = torch.arange(T, device=device)
    mask = (pos[None, :] <= pos[:, None])[None, None]  # [1, 1, T, T]
    if isinstance(causal, Tensor):
        mask = mask | ~causal.to(device=device, dtype=torch.bool)[:, None, None, None]  # [B, 1, T, T]
    if window is not None:
        mask = mask & ((pos[:, None] - pos[None, :]).abs() <= window)
    if attention_mask is not None:
        mask = mask & attention_mask.to(device).bool()[:, None, None, :]
        mask = mask | ~mask.any(-1, keepdim=True)
    return mask


class Packing:
    """The real tokens of a padded batch, packed. With ``BertModel.forward(..., packing=Packing(attention_mask))``
    every token-wise computation (the linear layers, LayerNorm, the activation, dropout) runs on the N real tokens
    ``[N, H]`` only, and attention re-pads them per *group* of rows, each group to its own longest row (groups of
    rows of similar length: little padding in the [T, T] scores either; default one group, the whole batch). The
    outputs come back padded, [B, T, H], zeros at padding. The maths is the padded batch's: padding never changes a
    real token's output (its keys are masked). ``groups``: lists of row indices, every row in exactly one."""

    def __init__(self, attention_mask: Tensor, groups: Sequence[Sequence[int]] | None = None):
        keep = attention_mask.bool()
        B, T = keep.shape
        device = keep.device
        self.shape = (B, T)
        self.index = keep.reshape(-1).nonzero().squeeze(1)  # [N]: the real tokens' places in the flattened [B*T]
        n = self.n = self.index.numel()
        place = torch.full((B * T,), n, dtype=torch.long, device=device)  # packed position, n (a zero row) at padding
        place[self.index] = torch.arange(n, device=device)
        self.place = place
        place = place.view(B, T)
        groups = [list(range(B))] if groups is None else [list(g) for g in groups]
        if sorted(i for g in groups for i in g) != list(range(B)):
            raise ValueError(f"Packing groups must hold every row of the batch once ({B} rows)")
        self.groups: list[tuple[int, int, Tensor | None]] = []  # (rows, longest, attention mask [b, 1, 1, t] or None)
        slots = []
        for rows in groups:
            r = torch.tensor(rows, dtype=torch.long, device=device)
            used = keep[r].any(0).nonzero()
            t = int(used.max()) + 1 if used.numel() else 1
            m = keep[r, :t]
            self.groups.append((len(rows), t, None if bool(m.all()) else m[:, None, None, :]))
            slots.append(place[r, :t].reshape(-1))
        self.slots = torch.cat(slots)  # every group's padded slot -> its packed position (n at padding)
        real = (self.slots < n).nonzero().squeeze(1)
        self.take = torch.empty(n, dtype=torch.long, device=device)  # packed position -> its slot in the groups
        self.take[self.slots[real]] = real

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, F] -> [N, F], the real tokens."""
        return x.reshape(-1, x.size(-1)).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """[N, F] -> [B, T, F], zeros at padding."""
        padded = torch.cat([x, x.new_zeros(1, x.size(-1))]).index_select(0, self.place)
        return padded.view(*self.shape, x.size(-1))

    def to_groups(self, x: Tensor) -> list[tuple[Tensor, Tensor | None]]:
        """[N, F] -> per group ([b, t, F] zeros at padding, its attention mask [b, 1, 1, t] or None)."""
        padded = torch.cat([x, x.new_zeros(1, x.size(-1))]).index_select(0, self.slots)
        parts = padded.split([b * t for b, t, _ in self.groups])
        return [(p.view(b, t, -1), m) for p, (b, t, m) in zip(parts, self.groups)]

    def from_groups(self, parts: Sequence[Tensor]) -> Tensor:
        """The inverse of :meth:`to_groups`: [b, t, F] per group -> [N, F]."""
        flat = torch.cat([p.reshape(-1, p.size(-1)) for p in parts])
        return flat.index_select(0, self.take)


# --------------------------------------------------------------------------------------------- outputs


@dataclass
class BertModelOutput:
    last_hidden_state: Tensor  # [B, T, H]
    pooler_output: Tensor | None = None  # [B, H]
    hidden_states: tuple[Tensor, ...] | None = None  # L + 1 tensors [B, T, H]: embeddings, then every layer
    attentions: tuple[Tensor, ...] | None = None  # L tensors [B, N, T, T]


@dataclass
class BertForPreTrainingOutput:
    loss: Tensor | None = None  # mlm_loss + nsp_loss (those whose labels were given)
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    prediction_logits: Tensor | None = None  # [B, T, V], only without MLM labels
    seq_relationship_logits: Tensor | None = None  # [B, 2]
    masked_logits: Tensor | None = None  # [M, V] at the labelled positions, with MLM labels (sparse prediction)
    masked_labels: Tensor | None = None  # [M]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput:
    loss: Tensor | None = None
    logits: Tensor | None = None  # [B, T, V], only without labels (or with sparse_prediction = False)
    masked_logits: Tensor | None = None  # [M, V] with labels
    masked_labels: Tensor | None = None  # [M]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class SequenceClassifierOutput:
    loss: Tensor | None = None
    logits: Tensor | None = None  # [B, num_labels] ([B, T, num_labels] for tokens, [B, C] for choices)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    loss: Tensor | None = None
    start_logits: Tensor | None = None  # [B, T]
    end_logits: Tensor | None = None  # [B, T]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


# --------------------------------------------------------------------------------------------- embeddings


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """The fixed encoding of Vaswani et al. (2017): sin on even, cos on odd dimensions. [P, H]"""
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(num_positions, dim)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div[: dim // 2])
    return table


class BertEmbeddings(nn.Module):
    """token + segment + position, then LayerNorm, then dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:  # fixed, not a parameter, not saved
            self.register_buffer(
                "sinusoidal", sinusoidal_table(config.max_position_embeddings, config.hidden_size), persistent=False
            )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None, position_ids: Tensor | None) -> Tensor:
        T = input_ids.size(1)
        if T > self.max_positions:
            raise InputError(f"sequence length {T} exceeds max_position_embeddings ({self.max_positions})")
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # [1, T]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if hasattr(self, "position_embeddings"):
            positions = self.position_embeddings(position_ids)
        else:
            positions = self.sinusoidal[position_ids]
        segments = ops.embedding(self.token_type_embeddings, token_type_ids)  # a bf16 table's gradient summed in fp32
        x = self.word_embeddings(input_ids) + segments + positions  # [B, T, H]
        return self.dropout(self.LayerNorm(x))


# --------------------------------------------------------------------------------------------- attention


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.qkv: nn.Module | None = None  # q, k, v fused for inference (bertkit.quantize.fuse_qkv); never saved
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, mask: Tensor | Packing | None, implementation: str) -> tuple[Tensor, Tensor | None]:
        if isinstance(mask, Packing):
            return self._packed(x, mask, implementation), None
        B, T, H = x.shape
        if self.training or self.qkv is not None:
            qkv = self._project_qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, N, T, D]
        else:
            # three GEMMs on the parameters themselves: autocast can then cache their bf16 copies across batches
            q, k, v = (
                proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # [B, N, T, D]
                for proj in (self.query, self.key, self.value)
            )
        dropout_p = self.dropout_prob if self.training else 0.0
        context, probs = ATTENTION_FUNCTIONS[implementation](q, k, v, mask, dropout_p)  # [B, N, T, D]
        context = context.transpose(1, 2).reshape(B, T, H)  # [B, T, H]
        return context, probs

    def _project_qkv(self, x: Tensor) -> Tensor:
        """[..., H] -> [..., 3H]: q, k and v in one GEMM. An inference-only model whose q, k, v were fused into one
        Linear (``bertkit.quantize``: one int8 GEMM and one activation quantisation instead of three) uses it;
        otherwise the weights are concatenated on the fly, so they stay separate parameters (HF's keys) and training
        gets one GEMM (and one backward GEMM) instead of three."""
        if self.qkv is not None:
            return self.qkv(x)
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # [3H, H]
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        return F.linear(x, weight, bias)

    def _packed(self, x: Tensor, packing: Packing, implementation: str) -> Tensor:
        """x [N, H] packed tokens -> context [N, H]: one q/k/v GEMM over the real tokens, attention per group."""
        H = x.size(-1)
        qkv = self._project_qkv(x)  # [N, 3H]
        dropout_p = self.dropout_prob if self.training else 0.0
        outs = []
        for part, mask in packing.to_groups(qkv):  # [b, t, 3H]
            b, t = part.shape[:2]
            q, k, v = part.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            context, _ = ATTENTION_FUNCTIONS[implementation](q, k, v, mask, dropout_p)  # [b, N, t, D]
            outs.append(context.transpose(1, 2).reshape(b, t, H))
        return packing.from_groups(outs)


class BertSelfOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)

    def forward(self, context: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(context)) + residual)  # post-LN


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None, implementation: str) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(x, mask, implementation)
        return self.output(context, x), probs


# --------------------------------------------------------------------------------------------- feed-forward, layer


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))  # [B, T, I]


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)  # [B, T, H]


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None, implementation: str) -> tuple[Tensor, Tensor | None]:
        x, probs = self.attention(x, mask, implementation)
        return self.output(self.intermediate(x), x), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """tanh(dense(hidden state of [CLS]))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # [B, H]


# --------------------------------------------------------------------------------------------- base class


class BertPreTrainedModel(nn.Module):
    """Shared infrastructure: Google's weight init and HF-layout save/load (see ``checkpoint.py``)."""

    base_model_prefix = "bert"

    def __init__(self, config: BertConfig):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"{type(self).__name__} needs a BertConfig, got {type(config).__name__}")
        self.config = config

    def init_weights(self) -> None:
        """Google's init: truncated normal (std = initializer_range, cut at 2 std); zero biases; LayerNorm = 1.

        A head class skips its wrapped ``BertModel``, which initialised itself when it was built."""
        std = self.config.initializer_range
        bert = getattr(self, "bert", None)
        done = {id(m) for m in bert.modules()} if isinstance(bert, BertModel) else set()
        for module in self.modules():
            if id(module) in done:
                continue
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for name, param in self.named_parameters():
            if name.endswith("predictions.bias"):
                nn.init.zeros_(param)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The MLM decoder weight *is* the word-embedding matrix; its bias *is* ``cls.predictions.bias``."""
        if hasattr(self, "cls") and hasattr(self.cls, "predictions"):
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
            self.cls.predictions.decoder.bias = self.cls.predictions.bias

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        config: BertConfig | None = None,
        output_loading_info: bool = False,
        **config_overrides,
    ):
        """Load a bertkit or Hugging Face model directory (``config.json`` + ``model.safetensors`` or
        ``pytorch_model.bin``). A bare BertModel checkpoint loads into a head class: encoder kept, head initialised;
        a head checkpoint loads into ``BertModel`` (a missing pooler is initialised).
        ``config_overrides`` (e.g. ``num_labels=3``) change the config read from the directory.
        With ``output_loading_info``, returns ``(model, info)``: ``info.initialised`` lists the parameters the
        checkpoint lacked and ``info.dropped`` those it had and this class does not use
        (:class:`bertkit.checkpoint.LoadingInfo`)."""
        return checkpoint.load_pretrained(
            cls, path, config=config, output_loading_info=output_loading_info, **config_overrides
        )

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``config.json`` + ``model.safetensors`` in the HF layout (tied weights saved once)."""
        checkpoint.save_pretrained(self, directory)

    @property
    def attn_implementation(self) -> str:
        return self._bert().attn_implementation

    @attn_implementation.setter
    def attn_implementation(self, value: str) -> None:
        if value not in ATTENTION_FUNCTIONS:
            raise ConfigError(f"attn_implementation must be one of {sorted(ATTENTION_FUNCTIONS)}, got {value!r}")
        self._bert()._attn_implementation = value

    def _bert(self) -> BertModel:
        return self if isinstance(self, BertModel) else self.bert

    def set_dropout(self, p: float) -> None:
        """Set every dropout probability (hidden, attention, heads) to ``p``, in the modules and in the config:
        e.g. fine-tune with 0.1 a model pre-trained with dropout off."""
        if not 0.0 <= p < 1.0:
            raise InputError(f"dropout must be in [0, 1), got {p}")
        self.config.hidden_dropout_prob = self.config.attention_probs_dropout_prob = p
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, BertSelfAttention):
                module.dropout_prob = p


# --------------------------------------------------------------------------------------------- the encoder model


class BertModel(BertPreTrainedModel):
    """The bidirectional Transformer encoder with the tanh pooler on [CLS]."""

    base_model_prefix = ""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        config.check_fits_in_memory()  # a config.json's sizes are not trusted with the allocator
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
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
        output_pooler: bool = True,
        causal: bool | Tensor = False,
    ) -> BertModelOutput:
        """
        Args:
            input_ids: [B, T] token ids.
            attention_mask: [B, T], 1 = real token, 0 = padding. None means nothing is padded.
            token_type_ids: [B, T] segment ids (A = 0, B = 1). Default all 0.
            position_ids: [B, T] or [1, T]. Default 0..T-1.
            output_hidden_states: also return the embeddings output and every layer's output (L + 1 tensors).
            output_attentions: also return every layer's attention probabilities (runs the eager path).
            num_layers: run only the embeddings and the first ``num_layers`` layers (0..L; None = all L). Stopping
                early skips the pooler (it reads the last layer): ``pooler_output`` is then None.
            packing: run the layers on the real tokens only (:class:`Packing` of this batch's attention mask, which
                it replaces; attention in its groups of rows); the outputs are the padded batch's, padded back to
                [B, T, H] with zeros at padding.
            output_pooler: False skips the pooler (``pooler_output`` None) when the caller does not read it.
            causal: True: each position attends only to itself and the positions before it (a causal LM's
                attention: ``--objective mntp``'s causal rows); a [B] bool tensor: those rows only. Default off.
        """
        depth = len(self.encoder.layer)
        if num_layers is not None:
            if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 0 <= num_layers <= depth:
                raise InputError(f"num_layers must be an integer in 0..{depth}, got {num_layers!r}")
            depth = num_layers
        # one mask convention, converted once: [B, T] 1/0 -> [B, 1, 1, T] bool (True = attend), None if no padding
        mask = None
        # (compiled: always the mask, since reading a tensor's value would break the graph)
        if attention_mask is not None and (torch.compiler.is_compiling() or not bool(attention_mask.all())):
            mask = attention_mask.bool()[:, None, None, :]
        implementation = "eager" if output_attentions else self._attn_implementation
        if packing is not None:
            if output_attentions:
                raise ValueError("output_attentions needs the padded batch: leave packing out")
            if tuple(input_ids.shape) != packing.shape:
                raise ValueError(f"packing is of a {list(packing.shape)} batch, the input is {list(input_ids.shape)}")
            mask = packing
        if causal is not False:
            if packing is not None:
                raise ValueError("causal attention needs the padded batch: leave packing out")
            mask = causal_mask(causal, attention_mask, input_ids.size(1), input_ids.device)  # [B or 1, 1, T, T]

        x = self.embeddings(input_ids, token_type_ids, position_ids)  # [B, T, H]
        if packing is not None:
            x = packing.pack(x)  # [N, H]: the real tokens
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for layer in self.encoder.layer[:depth]:
            x, probs = layer(x, mask, implementation)
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(probs)
        if packing is not None:
            x = packing.unpack(x)  # [B, T, H]
            hidden_states = [packing.unpack(h) for h in hidden_states] if hidden_states is not None else None
        pooled = (
            self.pooler(x) if output_pooler and self.pooler is not None and depth == len(self.encoder.layer) else None
        )
        return BertModelOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )


# --------------------------------------------------------------------------------------------- pre-training heads


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """dense + activation + LayerNorm, then a decoder tied to the word embeddings, plus a bias."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)  # weight and bias tied by tie_weights()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.transform(x))  # [..., V]


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertOnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def masked_lm(
    head: nn.Module, hidden: Tensor, labels: Tensor | None, sparse: bool, positions: Tensor | None = None
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
    """MLM logits and loss. With labels and ``sparse``, vocabulary logits are computed only at the labelled
    positions (labels != -100): the vocabulary projection over every position is the largest single cost of a small
    model's training step. ``positions`` [M]: those positions' flat indices into [B * T], ascending (the
    pre-training loop finds them on the host; ``masking.mlm_inputs`` may pad them with unlabelled ones, whose -100 the
    loss ignores), where the caller knows them: selecting by index needs no host sync, where selecting by
    ``labels != -100`` waits for the device to learn M. Returns (loss, full_logits [B, T, V] or None,
    masked_logits [M, V] or None, labels [M])."""
    if labels is None:
        return None, head(hidden), None, None
    if not sparse:
        logits = head(hidden)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1)), logits, None, None
    flat = hidden.reshape(-1, hidden.size(-1))
    if positions is not None:
        masked_labels = labels.reshape(-1).index_select(0, positions)  # [M]
        picked = flat.index_select(0, positions)  # [M, H]
    else:
        selected = labels.view(-1) != -100
        masked_labels = labels.view(-1)[selected]  # [M]
        picked = flat[selected]  # [M, H]
    if masked_labels.numel() == 0:  # nothing to predict: a zero loss that still has a graph
        masked_logits = head(picked)  # [M, V]
        return masked_logits.sum() * 0.0, None, masked_logits, masked_labels
    if isinstance(head, (BertLMPredictionHead, LMHead)):  # transform then decoder: the projection and loss in one
        transformed, decoder = head.transform(picked), head.decoder
        loss, masked_logits = ops.linear_cross_entropy(transformed, decoder.weight, decoder.bias, masked_labels)
    else:
        masked_logits = head(picked)  # [M, V]
        loss = ops.cross_entropy(masked_logits, masked_labels)
    return loss, None, masked_logits, masked_labels


class LMHead(nn.Module):
    """``decoder(transform(x))``: an MLM head as ``masked_lm`` reads it (``BertLMPredictionHead``'s two parts), for
    a model whose head keeps them elsewhere (ModernBERT's ``head`` and ``decoder``). Holds no weights of its own."""

    def __init__(self, transform: nn.Module, decoder: nn.Linear):
        super().__init__()
        self.transform, self.decoder = transform, decoder

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.transform(x))


def shift_left(x: Tensor, fill: int | bool) -> Tensor:
    """[B, T] -> [B, T]: ``out[:, i] = x[:, i + 1]``, ``fill`` at the last position. Masked next-token prediction's
    one shift (config.json's ``bertkit_objective: mntp``): a label at position j moves to j - 1, where its logits
    are read; a [MASK] at j is answered at j - 1."""
    return torch.cat([x[:, 1:], x.new_full((x.size(0), 1), fill)], dim=1)


class BertForPreTraining(BertPreTrainedModel):
    """The encoder with the MLM head and the next-sentence-prediction head."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.sparse_prediction = True
        self.init_weights()

    def mlm_head_module(self) -> nn.Module:
        """hidden states [B, T, H] -> vocabulary logits [B, T, V] (what fill-mask and the Encoder's MLM use)."""
        return self.cls.predictions

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        masked_positions: Tensor | None = None,
    ) -> BertForPreTrainingOutput:
        """``labels`` [B, T]: original token ids at masked positions, -100 elsewhere. ``next_sentence_label`` [B]:
        0 = B follows A (IsNext), 1 = random (NotNext). ``masked_positions`` [M]: the labelled positions' flat
        indices, where the caller knows them (:func:`masked_lm`: no host sync)."""
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        mlm_loss, logits, masked_logits, masked_labels = masked_lm(
            self.cls.predictions, out.last_hidden_state, labels, self.sparse_prediction, masked_positions
        )
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # [B, 2]
        return pretraining_output(
            (mlm_loss, logits, masked_logits, masked_labels), nsp_logits, next_sentence_label, out
        )


def pretraining_output(mlm: tuple, nsp_logits: Tensor, next_sentence_label: Tensor | None, out=None):
    """BERT's pre-training output: ``mlm`` as :func:`masked_lm` returns it, the NSP cross-entropy of ``nsp_logits``
    [B, 2] where labels are given, loss = their sum; ``out``: the encoder output whose hidden states it carries."""
    mlm_loss, logits, masked_logits, masked_labels = mlm
    nsp_loss = None
    if next_sentence_label is not None:
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
    losses = [x for x in (mlm_loss, nsp_loss) if x is not None]
    return BertForPreTrainingOutput(
        loss=sum(losses[1:], losses[0]) if losses else None,
        mlm_loss=mlm_loss,
        nsp_loss=nsp_loss,
        prediction_logits=logits,
        seq_relationship_logits=nsp_logits,
        masked_logits=masked_logits,
        masked_labels=masked_labels,
        hidden_states=getattr(out, "hidden_states", None),
        attentions=getattr(out, "attentions", None),
    )


class BertForMaskedLM(BertPreTrainedModel):
    """The encoder (no pooler) with the MLM head alone."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.sparse_prediction = True
        self.init_weights()

    def mlm_head_module(self) -> nn.Module:
        """hidden states [B, T, H] -> vocabulary logits [B, T, V] (as ``BertForPreTraining``'s)."""
        return self.cls.predictions

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        masked_positions: Tensor | None = None,
    ) -> MaskedLMOutput:
        """``masked_positions``: as :class:`BertForPreTraining`'s."""
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        loss, logits, masked_logits, masked_labels = masked_lm(
            self.cls.predictions, out.last_hidden_state, labels, self.sparse_prediction, masked_positions
        )
        return MaskedLMOutput(loss, logits, masked_logits, masked_labels, out.hidden_states, out.attentions)


class BertForNextSentencePrediction(BertPreTrainedModel):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyNSPHead(config)
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
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.cls.seq_relationship(out.pooler_output)  # [B, 2]
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


# --------------------------------------------------------------------------------------------- fine-tuning heads


def _num_labels(config: BertConfig, default: int = 2) -> int:
    return config.num_labels if config.num_labels is not None else default


class BertForSequenceClassification(BertPreTrainedModel):
    """[CLS] pooled output -> dropout -> linear. ``num_labels == 1`` is regression (MSE), else cross-entropy."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = _num_labels(config)
        self.bert = BertModel(config)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)
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
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.classifier(self.dropout(out.pooler_output))  # [B, num_labels]
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1))
            else:
                loss = F.cross_entropy(logits.float(), labels.view(-1))
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class BertForTokenClassification(BertPreTrainedModel):
    """Every token's hidden state -> dropout -> linear. Labels -100 are ignored (sub-tokens after the first)."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = _num_labels(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)
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
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.classifier(self.dropout(out.last_hidden_state))  # [B, T, num_labels]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels).float(), labels.view(-1))
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class BertForQuestionAnswering(BertPreTrainedModel):
    """Every token's hidden state -> linear -> (start, end) logits of the answer span."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
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
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        start_logits, end_logits = self.qa_outputs(out.last_hidden_state).unbind(-1)  # each [B, T]
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)  # positions outside the window are ignored, as in HF
            start = start_positions.view(-1).clamp(0, T)
            end = end_positions.view(-1).clamp(0, T)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=T)
                + F.cross_entropy(end_logits.float(), end, ignore_index=T)
            ) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


class BertForMultipleChoice(BertPreTrainedModel):
    """Each choice is [CLS] context [SEP] ending [SEP]; a score from its pooled [CLS]; softmax over choices."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.dropout = ops.Dropout(config.hidden_dropout_prob)
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

        out = self.bert(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            output_hidden_states,
            output_attentions,
        )
        logits = self.classifier(self.dropout(out.pooler_output)).view(B, C)  # [B, C]
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)
