"""Masked LM, with BERT's next-sentence prediction where the run has it (``--nsp``, the paper recipe's): the
objective of Devlin et al. The MLM figures every objective shares are the recipe's; this file adds NSP's.

An architecture whose pre-training model has no next-sentence head (ModernBERT: transformers' layout is the masked
LM alone) trains ``--nsp`` with :class:`NextSentenceHead`, a head for pre-training only: BERT's pooler and
classifier (dense, tanh, a linear to 2) over the state the model's own sequence classifier pools
(``classifier_pooling``: ModernBERT's mean of the final states by default). OUTPUT is the masked LM alone, as
``--no-nsp`` saves it; the head lives in the checkpoints (so a resume is exact), never in the model."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from bertkit import models, ops
from bertkit.errors import InputError
from bertkit.modeling import BertForPreTrainingOutput, masked_lm, pretraining_output
from bertkit.recipes.pretrain.objectives import Objective
from bertkit.recipes.pretrain.tables import has_nsp_head
from bertkit.recipes.pretrain.wrapper import Wrapper
from bertkit.training.distributed import all_reduce_mean


class NextSentenceHead(Wrapper):
    """``base`` (a masked LM with no next-sentence head) and a pre-training-only one: ``BertForPreTrainingOutput``
    from a pre-training batch, loss = MLM loss + NSP loss (BERT's sum)."""

    def __init__(self, base: nn.Module):
        super().__init__(base)
        hidden = base.config.hidden_size
        self.dense, self.classifier = nn.Linear(hidden, hidden), nn.Linear(hidden, 2)
        for layer in (self.dense, self.classifier):  # BERT's init: normal(initializer_range), zero bias
            nn.init.normal_(layer.weight, std=base.config.initializer_range)
            nn.init.zeros_(layer.bias)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        next_sentence_label: Tensor | None = None,
        position_ids: Tensor | None = None,
        masked_positions: Tensor | None = None,
    ) -> BertForPreTrainingOutput:
        hidden = models.encoder_of(self.base)(input_ids, attention_mask, token_type_ids, position_ids)
        hidden = hidden.last_hidden_state  # [B, T, H]
        mlm = masked_lm(self.base.mlm_head_module(), hidden, labels, True, masked_positions)
        pooled = ops.pool(hidden, attention_mask, self.config.classifier_pooling)  # [B, H]
        return pretraining_output(mlm, self.classifier(torch.tanh(self.dense(pooled))), next_sentence_label)


class MlmNsp(Objective):
    adds_nsp_head = True  # --nsp on an architecture without one: NextSentenceHead

    def check(self, cfg) -> None:
        if cfg.generator_layers is not None:
            raise InputError("--generator-layers: only --objective electra has a generator; leave the flag out")

    def build(self, cfg, tokenizer, shard_dir: Path, max_len: int, device, build_base):
        base, config = build_base(cfg, tokenizer, shard_dir, max_len, device)
        if not cfg.nsp or has_nsp_head(models.get(cfg.arch)):
            return base, config
        return NextSentenceHead(base).to(device).train(), config

    def count(self, meter, output, batch: dict, cfg) -> None:
        if cfg.nsp:
            labels = batch["next_sentence_label"]
            meter.add(
                nsp_loss=output.nsp_loss.detach().double() / cfg.grad_accum,  # tensors: no host sync (Meter)
                nsp_n=labels.numel(),
                nsp_ok=(output.seq_relationship_logits.argmax(-1) == labels).sum(),
            )

    def window(self, ctx, meter, cfg) -> dict[str, float]:
        if not cfg.nsp:
            return {}

        loss, acc = all_reduce_mean(ctx, [meter.ratio("nsp_loss", "steps"), meter.ratio("nsp_ok", "nsp_n")])
        return {"nsp_loss": loss, "nsp_acc": acc}

    def said(self, fields: dict[str, float]) -> str:
        return f"  nsp acc {fields['nsp_acc']:.3f}" if "nsp_acc" in fields else ""

    def masked_lm(self, model):
        return model.base if isinstance(model, NextSentenceHead) else model


OBJECTIVE = MlmNsp()
