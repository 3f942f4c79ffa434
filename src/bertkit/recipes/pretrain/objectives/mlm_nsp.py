"""Masked LM, with BERT's next-sentence prediction where the run has it (``--nsp``, the paper recipe's): the
objective of Devlin et al. The MLM figures every objective shares are the recipe's; this file adds NSP's."""

from __future__ import annotations

from bertkit.errors import InputError
from bertkit.recipes.pretrain.objectives import Objective
from bertkit.training.distributed import all_reduce_mean


class MlmNsp(Objective):
    def check(self, cfg) -> None:
        if cfg.generator_layers is not None:
            raise InputError("--generator-layers: only --objective electra has a generator; leave the flag out")

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


OBJECTIVE = MlmNsp()
