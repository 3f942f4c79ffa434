"""One optimizer step's loss and gradients for a contrastive batch: plain, or cached (GradCache), and across ranks.

A batch is a list of *columns* (anchors, positives, hard negatives...), each a :class:`Column` of token tensors
``[B, T]``; ``embed(ids, types, mask) -> [b, D]`` runs the encoder with a graph.

Plain: embed every column with a graph, take the loss, backward. Memory grows with B. With ``joint`` all the columns
go through one ``embed`` call (their rows one after the other: :func:`concat_columns`); with an ``embed`` that packs
the real tokens (``bertkit.modeling.Packing``: :func:`packed_embed`, the training recipe's) that is one pass over the
real tokens of the whole step, whatever the lengths, instead of one padded pass per column.

Cached (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"):

    1. embed every column in mini-batches of ``mini_batch_size`` WITHOUT a graph, saving the RNG state before each
       mini-batch;
    2. take the loss on the whole batch's embeddings (leaf tensors) and its gradient w.r.t. each embedding;
    3. re-run each mini-batch WITH a graph, replaying its saved RNG state so its dropout masks are the ones of
       step 1, and back-propagate the cached embedding gradients through it.

The parameters' gradients then equal the plain step's (same loss, same masks), while the activations held at once
are those of one mini-batch.

Across ranks (torchrun): every rank's embeddings are all-gathered *with* gradients (:func:`gather_with_grad`),
so each rank computes the loss of the global batch. The
all-gather's backward sums each rank's gradient into the embeddings it owns (world-size times the gradient of the
global loss); :func:`average_gradients` then divides the summed parameter gradients by the world size, which leaves
exactly the gradient of the global-batch loss.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from bertkit.errors import InputError
from bertkit.modeling import Packing
from bertkit.ops import pool
from bertkit.precision import autocast

EmbedFn = Callable[[Tensor, Tensor, Tensor], Tensor]

# the fixed cost of one more chunk (a model call, or an attention group), in padded tokens: cutting a chunk in two
# pays when it saves more padding than this (bert-mini, one CPU thread: ~50-150 tokens, fp32 / bf16)
CHUNK_OVERHEAD_TOKENS = 96


def length_chunks(
    lengths: Sequence[int], max_rows: int | None = None, overhead: float = CHUNK_OVERHEAD_TOKENS
) -> list[list[int]]:
    """Row indices cut into chunks of similar lengths (shortest first, ties in row order) minimising
    ``sum over chunks (rows x longest) + overhead x chunks``; a chunk holds at most ``max_rows`` rows (None: no
    limit). Exact dynamic programme over the sorted lengths (cuts only between distinct lengths when unlimited)."""
    n = len(lengths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: lengths[i])
    sl = [lengths[i] for i in order]
    if max_rows is not None and max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}")
    cap = n if not max_rows else max_rows
    if cap >= n:  # a chunk of one length never needs cutting: cuts only where the length changes
        points = [0] + [j for j in range(1, n) if sl[j] != sl[j - 1]] + [n]
    else:
        points = list(range(n + 1))
    best, back = [0.0] + [math.inf] * (len(points) - 1), [0] * len(points)
    for b in range(1, len(points)):
        j, longest = points[b], sl[points[b] - 1]
        for a in range(b - 1, -1, -1):
            i = points[a]
            if j - i > cap:
                break
            cost = best[a] + (j - i) * longest + overhead
            if cost < best[b]:
                best[b], back[b] = cost, a
    cuts, b = [], len(points) - 1
    while b:
        cuts.append((points[back[b]], points[b]))
        b = back[b]
    return [order[i:j] for i, j in reversed(cuts)]


@dataclass
class Column:
    """One column of a batch, padded: input_ids, token_type_ids, attention_mask, each [B, T]."""

    ids: Tensor
    types: Tensor
    mask: Tensor

    def __len__(self) -> int:
        return self.ids.size(0)

    def length_chunks(
        self, max_rows: int | None = None, overhead: float = CHUNK_OVERHEAD_TOKENS
    ) -> list[tuple[Tensor, Column]]:
        """(row indices, those rows cut to their own longest input) of :func:`length_chunks`."""
        lengths = self.mask.sum(1).tolist()
        out = []
        for rows in length_chunks(lengths, max_rows, overhead):
            index = torch.tensor(rows, device=self.ids.device)
            longest = max(lengths[i] for i in rows)
            out.append(
                (index, Column(self.ids[index, :longest], self.types[index, :longest], self.mask[index, :longest]))
            )
        return out


def _inverse(pieces: Sequence[tuple[Tensor, Column]]) -> Tensor:
    """The permutation that puts the chunks' concatenated rows back in the column's order."""
    order = torch.cat([index for index, _ in pieces])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return inverse


class RngState:
    """The CPU (and current CUDA device's) RNG state at construction; ``replay()`` runs a block from that state and
    puts the surrounding state back afterwards."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


# ------------------------------------------------------------------------------------------------ across ranks


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward sums every rank's gradient and hands each rank its own rows.
    (Written out rather than ``torch.distributed.nn.functional.all_gather``, deprecated in recent PyTorch; every
    rank must pass the same number of rows.)"""

    @staticmethod
    def forward(ctx, t: Tensor) -> Tensor:
        import torch.distributed as dist

        ctx.rank, ctx.rows = dist.get_rank(), t.size(0)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # the sum over ranks of d(each rank's loss) / d(every embedding)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather_with_grad(t: Tensor) -> Tensor:
    """All ranks' ``t`` ([b, ...] each, the same b) concatenated in rank order, differentiable; ``t`` itself when
    not distributed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    return _GatherWithGrad.apply(t)


def gather_labels(t: Tensor | None) -> Tensor | None:
    """All ranks' labels concatenated (no gradient)."""
    import torch.distributed as dist

    if t is None or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=0)


def average_gradients(model: torch.nn.Module) -> None:
    """Divide the all-reduced (summed) parameter gradients by the world size (see the module docstring)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    world = dist.get_world_size()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])  # one all-reduce instead of one per tensor
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


# ------------------------------------------------------------------------------------------------ the two steps


def packed_embed(model: torch.nn.Module, pooling: str, precision: str, device) -> EmbedFn:
    """The ``embed`` of a training step: ``model``'s layers under autocast on the real tokens only, attention in
    groups of rows of similar length (:func:`length_chunks`: the same maths as the padded batch, where a shuffled
    batch of SQuAD pairs is ~40% padding), pooled (``pooling``) to ``[b, H]`` fp32."""

    def embed(ids: Tensor, types: Tensor, mask: Tensor) -> Tensor:
        packing = None
        if not bool(mask.all()):
            packing = Packing(mask, length_chunks(mask.sum(1).tolist()))
        with autocast(precision, device):
            hidden = model(ids, attention_mask=mask, token_type_ids=types, packing=packing).last_hidden_state
        return pool(hidden.float(), mask, pooling)

    return embed


def concat_columns(columns: Sequence[Column]) -> Column:
    """The columns' rows one after the other, padded to the longest of them (padding: 0 ids, 0 mask)."""
    T = max(c.ids.size(1) for c in columns)
    parts = [[torch.nn.functional.pad(t, (0, T - t.size(1))) for t in (c.ids, c.types, c.mask)] for c in columns]
    return Column(*(torch.cat(ts) for ts in zip(*parts)))


def plain_step(
    embed: EmbedFn,
    columns: Sequence[Column],
    labels: Tensor | None,
    loss_fn,
    joint: bool = False,
    scale: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Embed every column with a graph (``joint``: all of them in one ``embed`` call), take the (global-batch) loss
    and back-propagate ``scale(loss)`` (fp16's loss scaler; default: the loss). Returns the loss."""
    if joint:
        whole = concat_columns(columns)
        reps = list(embed(whole.ids, whole.types, whole.mask).split([len(c) for c in columns]))
    else:
        reps = [embed(c.ids, c.types, c.mask) for c in columns]
    reps = [gather_with_grad(r) for r in reps]
    loss = loss_fn(reps, gather_labels(labels))
    (scale(loss) if scale is not None else loss).backward()
    return loss.detach()


def cached_step(
    embed: EmbedFn,
    columns: Sequence[Column],
    labels: Tensor | None,
    loss_fn,
    mini_batch_size: int,
    scale: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """GradCache: the same loss and parameter gradients as :func:`plain_step` (with the same dropout masks), holding
    the activations of one mini-batch at a time. The mini-batches are length-sorted chunks of at most
    ``mini_batch_size`` rows (:func:`length_chunks`). Returns the loss."""
    if mini_batch_size < 1:
        raise InputError(f"--mini-batch-size must be >= 1, got {mini_batch_size}")
    device = columns[0].ids.device
    # 1. embeddings without a graph; the RNG state before each mini-batch
    chunks: list[list[tuple[Tensor, Column, RngState]]] = []
    reps: list[Tensor] = []
    with torch.no_grad():
        for column in columns:
            parts, outs = [], []
            pieces = column.length_chunks(mini_batch_size)
            for index, chunk in pieces:
                parts.append((index, chunk, RngState(device)))
                outs.append(embed(chunk.ids, chunk.types, chunk.mask))
            chunks.append(parts)
            reps.append(torch.cat(outs)[_inverse(pieces)].requires_grad_(True))
    # 2. the loss on the whole (global) batch, and d loss / d embedding
    loss = loss_fn([gather_with_grad(r) for r in reps], gather_labels(labels))
    (scale(loss) if scale is not None else loss).backward()  # the scale rides on the cached gradients
    # 3. each mini-batch again, with a graph and its own dropout masks, fed its cached embedding gradient
    for parts, rep in zip(chunks, reps):
        for index, chunk, state in parts:
            grad = rep.grad[index]
            with state.replay():
                out = embed(chunk.ids, chunk.types, chunk.mask)
            out.backward(grad)
    return loss.detach()
