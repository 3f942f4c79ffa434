"""The held-out masked-LM meter: what a pre-trained model had to infer, and nothing its input gave away.

Definition (docs/pretraining.md, "How quality is measured"):

- **positions**: 15% of the real tokens of held-out text (never trained on) are chosen, and *every* chosen position's
  input is [MASK]: none random, none kept. (The 80/10/10 training inputs keep 10% of the chosen tokens visible; a
  model that copies its input gets those right, so a figure that counts them measures copying, not language.)
- **accuracy** (``mlm_acc``): the argmax of the MLM head equals the original token, over those positions.
- **baseline** (``mlm_baseline``): the best constant guess at the same positions: the share of the most frequent
  original token among them. A model that knows nothing of context (it copies what it sees and otherwise predicts
  the unigram distribution) scores at most this.
- **loss** (``mlm_loss``): the mean cross-entropy of the MLM head at the same positions (nats).

:func:`score_mlm` computes the three (and NSP accuracy where the batches carry NSP labels) from any model whose
output has ``masked_logits``/``masked_labels`` (bertkit's ``BertForPreTraining`` given ``labels``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch

from bertkit.modeling import shift_left


@dataclass
class MlmScore:
    """Held-out MLM figures at [MASK] positions. ``masked_tokens`` counts the scored positions."""

    mlm_acc: float
    mlm_baseline: float
    mlm_loss: float
    masked_tokens: int
    nsp_acc: float | None = None

    def as_record(self, prefix: str = "eval_") -> dict[str, float | int]:
        """``{"eval_mlm_acc", "eval_mlm_baseline", "eval_mlm_loss", "eval_masked_tokens"[, "eval_nsp_acc"]}``."""
        return {prefix + k: v for k, v in asdict(self).items() if v is not None}


def check_honest(batch: dict, mask_id: int) -> None:
    """Refuse a batch whose labelled positions are not all [MASK] inputs (the meter would count given-away tokens)."""
    labels, ids = batch["labels"], batch["input_ids"]
    sel = labels != -100
    if bool((ids[sel] != mask_id).any()):
        raise ValueError(
            "held-out MLM batches must have [MASK] at every labelled position (none random, none kept); "
            "build them with PretrainingData.eval_batches"
        )


@torch.no_grad()
def score_mlm(
    model, batches: Iterable[dict], mask_id: int | None = None, context=None, next_token: bool = False
) -> MlmScore:
    """Score ``model`` on held-out batches (tensors on the model's device; ``labels`` -100 where unlabelled).

    ``model(**batch)`` must return ``masked_logits [M, V]`` and ``masked_labels [M]`` (the labelled positions in
    row-major order). With ``mask_id``, each batch is first checked to be honest (:func:`check_honest`).
    ``context`` is an optional callable returning a context manager (autocast) around each forward.
    ``next_token``: a masked next-token model (``bertkit_objective: mntp``): a [MASK] at j is read at j - 1 (the
    labels shifted left before the forward; the figures stay those of the tokens at the [MASK] inputs)."""
    import contextlib

    ok = n = nsp_ok = nsp_n = 0
    loss_sum = 0.0
    counts: torch.Tensor | None = None
    for batch in batches:
        if mask_id is not None:
            check_honest(batch, mask_id)
        if next_token:
            batch = {**batch, "labels": shift_left(batch["labels"], -100)}
        with context() if context else contextlib.nullcontext():
            out = model(**batch)
        logits, labels = out.masked_logits.float(), out.masked_labels
        ok += int((logits.argmax(-1) == labels).sum())
        n += int(labels.numel())
        loss_sum += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        c = torch.bincount(labels.cpu(), minlength=logits.shape[-1])
        counts = c if counts is None else counts + c
        if "next_sentence_label" in batch and getattr(out, "seq_relationship_logits", None) is not None:
            nsp_ok += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            nsp_n += int(batch["next_sentence_label"].numel())
    if n == 0:
        raise ValueError("no masked positions to score")
    return MlmScore(
        mlm_acc=ok / n,
        mlm_baseline=int(counts.max()) / n,
        mlm_loss=loss_sum / n,
        masked_tokens=n,
        nsp_acc=nsp_ok / nsp_n if nsp_n else None,
    )
