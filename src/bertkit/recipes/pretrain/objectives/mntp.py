"""Masked next-token prediction mixed with causal LM (``bertkit pretrain --objective mntp``): GPT-BERT's hybrid
(Charpentier & Samuel, 2024, "GPT or BERT: why not both?"). One model, one MLM head, two readings of a batch:

- **masked rows** (masked next-token prediction): the recipe's masked inputs, bidirectional attention, and the
  output at position i predicts the token at i + 1: a masked token at j is predicted from position j - 1 (the
  labels shifted left by one, :func:`bertkit.modeling.shift_left`);
- **causal rows** (a ``--causal-ratio`` share of the sequences, drawn per sequence from the training RNG): the
  original tokens (no [MASK]), a causal attention mask, and every position predicting its next token.

    loss = (1 - c) * masked next-token loss + c * causal LM loss      (c: the batch's share of causal rows)

The held-out meter and the BLiMP probe see masked rows only (eval mode draws no causal rows): ``eval_mlm_acc`` is
the masked next-token accuracy at [MASK] inputs, read at j - 1; the causal figures are training-window ones
(``train_causal_acc``). OUTPUT is the architecture's pre-training model as ``--objective mlm`` saves it, its
config.json saying ``"bertkit_objective": "mntp"`` (``bertkit.config.OBJECTIVE_KEY``): bertkit's fill-mask, BLiMP
scorer and probe read a [MASK] at j from position j - 1; transformers loads the same model (and ignores the key),
and with ``trust_remote_code=True`` the masked LM the directory carries (``resources/remote_code/modeling_mntp.py``,
``models.NEXT_TOKEN_CODE``), which reads as bertkit does: its fill-mask pipeline then gives this model's answers.

``--causal-ratio`` defaults to 1/16: GPT-BERT's BabyLM submission trained 1 causal : 15 masked (the share is a
lever the recipe screen decides, docs/pretraining.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit import models
from bertkit.config import OBJECTIVE_KEY
from bertkit.errors import InputError
from bertkit.modeling import masked_lm, shift_left
from bertkit.recipes.pretrain.objectives import Objective
from bertkit.recipes.pretrain.wrapper import Wrapper
from bertkit.training.distributed import all_reduce_mean

DEFAULTS = {"nsp": False}


def next_token_labels(ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """A causal LM's labels [B, T]: at i, the token at i + 1 where that is a real token; -100 elsewhere."""
    labels = shift_left(ids, -100)
    if attention_mask is not None:
        labels = labels.masked_fill(shift_left(attention_mask, 0) == 0, -100)
    return labels


@dataclass
class MntpOutput:
    loss: Tensor  # (1 - c) * mlm_loss + c * causal_loss
    mlm_loss: Tensor  # masked next-token prediction's, on the masked rows
    causal_loss: Tensor  # the causal rows' next-token loss (a zero when there are none)
    masked_logits: Tensor  # [M, V] read at j - 1 for the masked tokens j of the masked rows (row-major)
    masked_labels: Tensor  # [M] the tokens at j
    causal_logits: Tensor  # [C, V] the causal rows' every position with a next token
    causal_labels: Tensor  # [C]


class MntpPretraining(Wrapper):
    """The architecture's pre-training model (``base``), read as GPT-BERT reads it: :class:`MntpOutput` from a
    pre-training batch (``labels``: original ids at the chosen positions, -100 elsewhere). In training, each row is
    causal with probability ``causal_ratio``; in eval mode none is."""

    def __init__(self, base: nn.Module, causal_ratio: float, reads_next: bool = True):
        super().__init__(base)
        self.causal_ratio = float(causal_ratio)
        self.reads_next = reads_next  # False: --objective mlm-clm, a masked token read where it stands

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> MntpOutput:
        if labels is None:
            raise ValueError("masked next-token prediction needs labels (the original ids at the masked positions)")
        B = input_ids.size(0)
        causal = torch.zeros(B, dtype=torch.bool)
        if self.training and self.causal_ratio > 0:
            causal = torch.rand(B) < self.causal_ratio  # the CPU RNG, which checkpoints restore
        any_causal = bool(causal.any())  # asked of the CPU tensor: no wait on a GPU's stream
        causal = causal.to(input_ids.device)
        original = torch.where(labels != -100, labels, input_ids)  # the text before masking
        ids = torch.where(causal[:, None], original, input_ids)
        extra = {"output_pooler": False} if models.of_config(self.config).pooler_keys else {}
        hidden = models.encoder_of(self.base)(
            ids, attention_mask, token_type_ids, position_ids, causal=causal if any_causal else False, **extra
        ).last_hidden_state
        head = self.base.mlm_head_module()
        masked = (shift_left(labels, -100) if self.reads_next else labels).masked_fill(causal[:, None], -100)
        after = next_token_labels(original, attention_mask).masked_fill(~causal[:, None], -100)
        mlm_loss, _, masked_logits, masked_labels = masked_lm(head, hidden, masked, sparse=True)
        causal_loss, _, causal_logits, causal_labels = masked_lm(head, hidden, after, sparse=True)
        share = causal.float().mean()
        return MntpOutput(
            loss=(1 - share) * mlm_loss + share * causal_loss,
            mlm_loss=mlm_loss,
            causal_loss=causal_loss,
            masked_logits=masked_logits,
            masked_labels=masked_labels,
            causal_logits=causal_logits,
            causal_labels=causal_labels,
        )


class Mntp(Objective):
    """GPT-BERT's part of the recipe: no NSP, its model, the causal rows' figures. ``reads_next=False`` is
    ``--objective mlm-clm``: the same mix, the masked rows' [MASK] read where it stands (a plain masked LM's head)."""

    defaults = DEFAULTS

    def __init__(self, name: str = "mntp", reads_next: bool = True):
        self.name, self.reads_next = name, reads_next

    def check(self, cfg) -> None:
        if cfg.nsp:
            raise InputError(f"--objective {self.name} has no next-sentence prediction; leave out --nsp")
        if cfg.generator_layers is not None:
            raise InputError("--generator-layers: only --objective electra has a generator; leave the flag out")

    def build(self, cfg, tokenizer, shard_dir: Path, max_len: int, device, build_base):
        """(MntpPretraining, the config): the architecture's pre-training model as ``build_base`` makes it (or the
        ``--init-from`` model); mntp's config marked ``bertkit_objective: mntp`` (mlm-clm's reads as a masked LM's)."""
        base, config = build_base(cfg, tokenizer, shard_dir, max_len, device)
        if self.reads_next:
            base.config.extra[OBJECTIVE_KEY] = "mntp"
        return MntpPretraining(base, cfg.causal_ratio, self.reads_next).to(device).train(), base.config

    def count(self, meter, output: MntpOutput, batch: dict, cfg) -> None:
        with torch.no_grad():
            labels = output.causal_labels
            meter.add(
                causal_nll=float(output.causal_loss.detach()) * labels.numel(),  # the mean over its tokens
                causal_n=labels.numel(),
                causal_ok=int((output.causal_logits.argmax(-1) == labels).sum()),
            )

    def window(self, ctx, meter, cfg) -> dict[str, float]:
        loss, acc = all_reduce_mean(ctx, [meter.ratio("causal_nll", "causal_n"), meter.ratio("causal_ok", "causal_n")])
        return {"causal_loss": loss, "train_causal_acc": acc}

    def said(self, fields: dict[str, float]) -> str:
        return f"  causal acc {fields['train_causal_acc']:.3f}"

    def masked_lm(self, model):
        return model.base  # its config says how its head reads: the probe scores it as the saved model


OBJECTIVE = Mntp()
