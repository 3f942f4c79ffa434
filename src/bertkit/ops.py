"""Training-time operations with CPU-specific implementations, same maths as their PyTorch counterparts.

- ``dropout``: on CPU, PyTorch's ``bernoulli_`` draws one Mersenne-Twister number and one float conversion per
  element, serially; it was ~15% of a bf16 bert-mini pre-training step. Here the drop mask is compared from 32-bit
  halves of full-range 64-bit draws (exact to 2**-32 in the drop probability), and only the boolean mask is kept
  for the backward pass. The numbers come from the default generator, so ``torch.manual_seed`` and saved RNG states
  still reproduce a run exactly.
- ``cross_entropy``: the mean cross-entropy of low-precision vocabulary logits [M, V], computed in fp32 a block of
  rows at a time (log-sum-exp forward; softmax minus one-hot backward) without materialising the fp32 [M, V] copies,
  log-probabilities and zero-filled gradients that ``F.cross_entropy(logits.float(), labels)`` builds.
- ``linear_cross_entropy``: the MLM head's vocabulary projection and that loss in one autograd step, bf16 on a CPU,
  through PyTorch's fused bf16 softmax (six times faster on a CPU than any fp32 route): each row's loss from its
  target's probability (one bf16 rounding, 2**-8 in the log; no pass for the row maxima) and the 1 / M of the mean
  applied to the gradient's three products instead of to the [M, V] softmax; the logits come back without a
  gradient. Elsewhere, ``F.linear`` then ``cross_entropy``. Its two [M, V] tensors (logits, softmax) are written
  into buffers kept between calls (:class:`Workspace`): at 1,100 rows of 30,522 words each is 67 MB, which glibc
  maps fresh every step, its 16,400 pages faulted in one by one (about 16 ms a tensor on a Xeon).

Off CPU both fall back to the PyTorch functions (whose GPU kernels are already fused).

And ``pool``, the one masked pooling of a layer's states (the Encoder's and ModernBERT's classifier's).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_ROWS_PER_BLOCK = 32  # 32 x 30522 fp32 = 3.9 MB: a block stays in cache across its passes


# --------------------------------------------------------------------------------------------- dropout


def drop_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu") -> Tensor:
    """Boolean tensor, True with probability ``p`` (to 2**-32), from the default generator."""
    n = 1
    for d in shape:
        n *= d
    words = torch.empty((n + 1) // 2, dtype=torch.int64, device=device).random_(-(2**63), None)  # full 64-bit range
    threshold = -(2**31) + round(p * 2**32)  # P(uniform int32 < threshold) = round(p * 2**32) / 2**32
    return (words.view(torch.int32)[:n] < threshold).view(shape)


class _MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, drop: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return x.mul(scale).masked_fill_(drop, 0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (drop,) = ctx.saved_tensors
        return grad.mul(ctx.scale).masked_fill_(drop, 0), None, None


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)``: zero each element with probability ``p``, scale the rest by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    return _MaskedScale.apply(x, drop_mask(x.shape, p, x.device), 1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same repr, no parameters) running ``bertkit.ops.dropout``."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


# --------------------------------------------------------------------------------------------- cross-entropy


class _BlockwiseCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor) -> Tensor:
        M = logits.size(0)
        lse = torch.empty(M, dtype=torch.float32, device=logits.device)
        for s in range(0, M, _ROWS_PER_BLOCK):
            lse[s : s + _ROWS_PER_BLOCK] = torch.logsumexp(logits[s : s + _ROWS_PER_BLOCK].float(), dim=-1)
        target = logits.gather(1, labels[:, None]).squeeze(1).float()
        ctx.save_for_backward(logits, labels, lse)
        return (lse - target).mean()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        logits, labels, lse = ctx.saved_tensors
        M = logits.size(0)
        scale = grad.float() / M
        out = torch.empty_like(logits)
        # fp32 logits: the softmax is computed in ``out`` itself (one pass, no temporary), and the logits stay intact,
        # since the caller may still read them (the training-window accuracy); lower precisions in an fp32 copy
        in_place = logits.dtype == torch.float32
        for s in range(0, M, _ROWS_PER_BLOCK):
            e = min(s + _ROWS_PER_BLOCK, M)
            block = out[s:e].copy_(logits[s:e]) if in_place else logits[s:e].float()
            block.sub_(lse[s:e, None]).exp_()  # softmax
            block[torch.arange(e - s, device=block.device), labels[s:e]] -= 1.0
            block.mul_(scale)
            if not in_place:
                out[s:e] = block
        return out, None


_TINY = 2.0**-100  # a target probability below this (a logit gap of about 70) has its loss taken from the logits


def _use_count(t: Tensor) -> int:
    """How many references hold ``t``'s storage (its tensors, views and saved copies for a backward pass)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class Workspace:
    """Buffers kept between calls, for tensors that a step makes and drops again at the same size: a fresh CPU tensor
    over glibc's mmap threshold (32 MB) is a fresh ``mmap``, every 4 KB page of it faulted in on its first write.
    :meth:`take` hands out a view of a kept buffer only while nothing else holds that buffer's storage (its use count
    is back to what it was when the workspace alone held it), so a tensor a caller keeps, or a backward pass has
    saved, is never written over: the workspace takes a new buffer instead. It keeps at most ``keep`` buffers; past
    that, a request gets a plain new tensor."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self.buffers: list[tuple[Tensor, int]] = []  # (flat buffer, its storage's use count when free)

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
        """An uninitialised tensor of ``shape``, from a free kept buffer where one is large enough."""
        n = math.prod(shape)
        for buf, free in self.buffers:
            if buf.dtype == dtype and buf.device == device and buf.numel() >= n and _use_count(buf) == free:
                return buf[:n].view(shape)
        # a free buffer too small for this request is replaced by the new one (the rows grow from step to step)
        self.buffers = [
            (buf, free)
            for buf, free in self.buffers
            if not (buf.dtype == dtype and buf.device == device and _use_count(buf) == free)
        ]
        buf = torch.empty(n + n // 16, dtype=dtype, device=device)  # room for a few more rows next time
        if len(self.buffers) < self.keep:
            self.buffers.append((buf, _use_count(buf)))
        return buf[:n].view(shape)


_HEAD = Workspace()  # linear_cross_entropy's logits and softmax


class _Bf16LinearCrossEntropy(torch.autograd.Function):
    """The vocabulary projection and the mean cross-entropy in one step, bf16 on a CPU: the logits [M, V] from
    ``F.linear``, PyTorch's fused bf16 softmax over them, and each row's loss ``-log p(target)`` from its target's
    probability (one bf16 rounding of it: 2**-8 relative, so 2**-8 absolute in the log; a probability under
    ``_TINY`` takes its row's loss from an fp32 log-sum-exp of the logits instead). No pass over [M, V] for the row
    maxima (a log-sum-exp's), and none to scale the softmax by 1 / M in the backward, where the gradient's three
    products are scaled after the fact, on tensors of [M, H], [V, H] and [V]; the softmax itself becomes the
    gradient, in place.
    The logits are an output without a gradient (what the training-window accuracy and ELECTRA's sampling read)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, labels: Tensor) -> tuple[Tensor, Tensor]:
        shape = (x.size(0), weight.size(0))
        logits = _HEAD.take(shape, x.dtype, x.device)  # F.linear's own products, written into a kept buffer
        if bias is None:
            torch.mm(x, weight.t(), out=logits)
        else:
            torch.addmm(bias, x, weight.t(), out=logits)
        probs = torch.ops.aten._softmax.out(logits, -1, False, out=_HEAD.take(shape, x.dtype, x.device))
        valid = labels != -100
        target = labels.clamp(min=0)  # an ignored row reads column 0, then counts nothing
        p = probs.gather(1, target[:, None]).squeeze(1).float()
        nll = p.log().neg_()
        tiny = valid & (p < _TINY)
        if bool(tiny.any()):  # rare: the bf16 probability has lost its digits (or is 0)
            rows = tiny.nonzero().squeeze(1)
            picked = logits[rows].float()
            nll[rows] = torch.logsumexp(picked, dim=-1) - picked.gather(1, target[rows, None]).squeeze(1)
        n = valid.sum()
        ctx.save_for_backward(x, weight, probs, target, p, valid, n)
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(logits)
        ctx.set_materialize_grads(False)  # else the logits' (absent) gradient arrives as an [M, V] of zeros
        return nll.masked_fill_(~valid, 0.0).sum() / n, logits

    @staticmethod
    def backward(ctx, grad: Tensor, _logits_grad: Tensor | None) -> tuple[Tensor | None, ...]:
        if getattr(ctx, "spent", False):  # the gradient is made in the saved softmax itself: once only
            raise RuntimeError("bertkit.ops.linear_cross_entropy (bf16): a second backward is not supported")
        ctx.spent = True
        x, weight, probs, target, p, valid, n = ctx.saved_tensors
        scale = grad.float() / n
        g = probs  # softmax minus one-hot, unscaled, in place
        g[torch.arange(g.size(0), device=g.device), target] = (p - 1.0).to(g.dtype)
        if not bool(valid.all()):
            g[~valid] = 0
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = (g @ weight).float().mul_(scale).to(x.dtype)
        if ctx.needs_input_grad[1]:
            dw = g.t() @ (x.float() * scale).to(x.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0).float().mul_(scale).to(weight.dtype)  # a bf16 sum adds in fp32 (an fp32 one: a copy)
        return dx, dw, db, None


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor | None, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(cross_entropy(logits, labels), logits)`` for ``logits = F.linear(x, weight, bias)``: x [M, H], weight
    [V, H], labels [M] valid or -100 (ignored). bf16 on a CPU, the projection and the loss are one autograd step
    (``_Bf16LinearCrossEntropy``) whose logits carry no gradient; elsewhere the two functions, and the logits keep
    theirs."""
    if labels.shape != x.shape[:1] or x.dim() != 2:
        raise ValueError(f"expected x [M, H] and labels [M], got {tuple(x.shape)} and {tuple(labels.shape)}")
    fused = x.dtype == weight.dtype == torch.bfloat16 and x.device.type == "cpu" and x.size(0) > 0
    if not fused or torch.compiler.is_compiling():
        logits = F.linear(x, weight, bias)
        return cross_entropy(logits, labels), logits
    _check_labels(labels, weight.size(0))
    return _Bf16LinearCrossEntropy.apply(x, weight, bias, labels)


def _check_labels(labels: Tensor, classes: int) -> None:
    """Every label in [0, classes) or -100 (ignored), else a ValueError naming the range."""
    if bool(((labels != -100) & ((labels < 0) | (labels >= classes))).any()):
        raise ValueError(f"labels must lie in [0, {classes}); got {labels.min().item()}..{labels.max().item()}")


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """``F.cross_entropy(logits.float(), labels)`` (mean over rows, fp32 result) for logits [M, V], labels [M]
    valid or -100 (ignored, as F.cross_entropy's default ``ignore_index``: ``masking.mlm_inputs``' padding)."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected logits [M, V] and labels [M], got {tuple(logits.shape)} and {tuple(labels.shape)}")
    # a compiled graph: the plain loss, which the compiler fuses (the blockwise kernels loop over rows, which would
    # fix the graph to one count of rows, and their check reads a value)
    if logits.device.type != "cpu" or torch.compiler.is_compiling() or logits.size(0) == 0:
        return F.cross_entropy(logits.float(), labels)
    if bool((ignored := labels == -100).any()):  # the mean over the others
        return cross_entropy(logits[~ignored], labels[~ignored])
    _check_labels(labels, logits.size(1))
    return _BlockwiseCrossEntropy.apply(logits, labels)


# --------------------------------------------------------------------------------------------- embedding


class _Fp32SumEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(ids)
        ctx.rows, ctx.dtype = weight.size(0), weight.dtype
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor]:
        (ids,) = ctx.saved_tensors
        flat = grad.reshape(-1, grad.size(-1)).float()
        summed = flat.new_zeros(ctx.rows, flat.size(1)).index_add_(0, ids.reshape(-1), flat)
        return None, summed.to(ctx.dtype)


def embedding(module: nn.Embedding, ids: Tensor) -> Tensor:
    """``module(ids)``; for a bf16 table on a CPU with fewer rows than ``ids`` (the segment embeddings: 2 rows, every
    token of the batch), the gradient summed in fp32 and rounded once: summed in bf16, the 4,096 tokens of a
    32 x 128 batch left it 4% off (the word embeddings' rows are shared by few tokens: the plain kernel)."""
    weight = module.weight
    if weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and weight.size(0) < ids.numel():
        return _Fp32SumEmbedding.apply(ids, weight)
    return module(ids)


# --------------------------------------------------------------------------------------------- pooling


def pool(hidden: Tensor, mask: Tensor | None, pooling: str) -> Tensor:
    """Pool one layer's states: hidden [B, T, H], mask [B, T] (1 = real token; None: every token is) -> [B, H] in
    ``hidden``'s dtype ([B, 2H] for mean_max); padding never takes part. What the Encoder pools (in fp32) and what
    ModernBERT's classifier pools (``cls`` or ``mean``). ``cls_pooled`` and ``none`` are handled by the caller."""
    keep = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device) if mask is None else mask.bool()
    lengths = keep.sum(1)  # [B]
    rows = torch.arange(hidden.size(0), device=hidden.device)
    if pooling in ("mean", "mean_max", "max"):
        outs = []
        if pooling in ("mean", "mean_max"):
            summed = hidden.masked_fill(~keep.unsqueeze(-1), 0.0).sum(1)  # padding zeroed (even if inf/nan)
            outs.append(summed / lengths.clamp(min=1).unsqueeze(-1).to(hidden.dtype))
        if pooling in ("max", "mean_max"):
            outs.append(hidden.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1))
        return torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "first":  # first token after [CLS]: the [SEP] itself for an empty text
        return hidden[rows, torch.clamp(torch.ones_like(lengths), max=lengths - 1)]
    if pooling == "sep":  # the last real token is the final [SEP]
        return hidden[rows, (lengths - 1).clamp(min=0)]
    raise ValueError(f"pool() does not handle pooling {pooling!r}")
