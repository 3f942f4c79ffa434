"""Contrastive and ranking losses on sentence embeddings.

Every loss takes the batch's embedding *columns* and (for CoSENT) the labels::

    loss(columns: list[Tensor], labels: Tensor | None) -> Tensor   # scalar, the mean over the batch

``columns[0]`` holds the anchors ``[B, D]``, ``columns[1]`` their positives ``[B, D]`` and any further column hard
negatives ``[B, D]`` (one per anchor per column). Row ``i`` of every column belongs to example ``i``. Embeddings
need not be normalised: every score is a cosine.

    MultipleNegativesRankingLoss  anchors vs every positive and every hard negative of the batch; the anchor's own
                                  positive is the right answer (cross-entropy over the scaled cosines). Unsupervised
                                  SimCSE is this loss on (text, same text) with dropout as the only difference, and
                                  scale = 1 / temperature (0.05 -> 20).
    CoSENTLoss                    pairs (a_i, b_i) with a gold score y_i: every pair the gold scores rank higher must
                                  get the higher cosine; log(1 + sum_{y_i > y_j} exp(s * (cos_j - cos_i))).
    MatryoshkaLoss                the sum of a loss over truncated prefixes (dims) of the embeddings.

Shapes: B batch, D embedding size, K hard-negative columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import InputError


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """[N, D] x [M, D] -> [N, M] cosine similarities (in fp32)."""
    a = F.normalize(a.float(), dim=-1)
    b = F.normalize(b.float(), dim=-1)
    return a @ b.T


class MultipleNegativesRankingLoss:
    """In-batch negatives plus hard negatives (sentence-transformers' MultipleNegativesRankingLoss and, with
    ``symmetric``, MultipleNegativesSymmetricRankingLoss).

    For anchor i the candidates are every positive of the batch followed by every hard negative
    (``[B + K*B]``); the target is positive i. With ``symmetric`` the loss is the mean of that and the backward
    direction: for positive i the candidates are the B anchors, the target anchor i.
    """

    def __init__(self, scale: float = 20.0, symmetric: bool = False):
        if scale <= 0:
            raise InputError(f"--scale must be > 0, got {scale}")
        self.scale, self.symmetric = float(scale), bool(symmetric)

    @property
    def needs_labels(self) -> bool:
        return False

    def __call__(self, columns: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(columns) < 2:
            raise InputError("MultipleNegativesRankingLoss needs at least two columns (anchor, positive)")
        anchors = columns[0]
        candidates = torch.cat(list(columns[1:]), dim=0)  # [(1 + K) * B, D]: positives first
        scores = cosine_matrix(anchors, candidates) * self.scale  # [B, (1 + K) * B]
        target = torch.arange(anchors.size(0), device=anchors.device)
        loss = F.cross_entropy(scores, target)
        if self.symmetric:
            backward = scores[:, : anchors.size(0)].T  # [B, B]: positive i against every anchor
            loss = (loss + F.cross_entropy(backward, target)) / 2
        return loss


class CoSENTLoss:
    """CoSENT (Su, 2022): ranks pairs by cosine in the order of their gold scores, whatever the scores' range.

    ``columns`` = [a, b] ([B, D] each), ``labels`` [B] the gold scores, read as they are (only their order counts).
    """

    def __init__(self, scale: float = 20.0):
        if scale <= 0:
            raise InputError(f"--scale must be > 0, got {scale}")
        self.scale = float(scale)

    @property
    def needs_labels(self) -> bool:
        return True

    def __call__(self, columns: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        if len(columns) != 2 or labels is None:
            raise InputError("CoSENTLoss needs two columns and a score per pair")
        a, b = columns
        cos = F.cosine_similarity(a.float(), b.float(), dim=-1) * self.scale  # [B]
        diff = cos[None, :] - cos[:, None]  # [B, B]: diff[i, j] = s*cos_j - s*cos_i
        labels = labels.to(cos.device).float()
        should = labels[:, None] > labels[None, :]  # pair i should score above pair j
        diff = diff.masked_fill(~should, float("-inf"))
        zero = torch.zeros(1, device=cos.device, dtype=cos.dtype)
        return torch.logsumexp(torch.cat([zero, diff.flatten()]), dim=0)  # log(1 + sum exp(...))


class MatryoshkaLoss:
    """``sum over d in dims of inner(columns truncated to their first d features)`` (Kusupati et al., 2022).

    The full size may be one of the dims; a dim over the embedding size is an error at the first call."""

    def __init__(self, inner, dims: Sequence[int]):
        dims = [int(d) for d in dims]
        if not dims or any(d < 1 for d in dims):
            raise InputError(f"--matryoshka-dims must be positive integers, got {dims}")
        self.inner, self.dims = inner, sorted(set(dims), reverse=True)

    @property
    def needs_labels(self) -> bool:
        return self.inner.needs_labels

    def __call__(self, columns: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        size = columns[0].size(-1)
        if self.dims[0] > size:
            raise InputError(f"--matryoshka-dims {self.dims[0]} is larger than the embedding size {size}")
        return sum(self.inner([c[..., :d] for c in columns], labels) for d in self.dims)


def build_loss(
    task: str,
    *,
    temperature: float = 0.05,
    scale: float = 20.0,
    symmetric: bool = False,
    matryoshka_dims: Sequence[int] | None = None,
):
    """The loss of an embedding task: ``simcse`` (InfoNCE, scale 1/temperature), ``pairs`` (MNRL), ``sts``
    (CoSENT), optionally wrapped in :class:`MatryoshkaLoss`."""
    if task == "simcse":
        if temperature <= 0:
            raise InputError(f"--temperature must be > 0, got {temperature}")
        loss = MultipleNegativesRankingLoss(scale=1.0 / temperature)
    elif task == "pairs":
        loss = MultipleNegativesRankingLoss(scale=scale, symmetric=symmetric)
    elif task == "sts":
        loss = CoSENTLoss(scale=scale)
    else:
        raise InputError(f"--task {task!r}: not an embedding task; choose simcse, pairs or sts")
    return MatryoshkaLoss(loss, matryoshka_dims) if matryoshka_dims else loss
