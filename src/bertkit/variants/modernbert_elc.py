"""ELC-BERT's layer mix on ModernBERT (Charpentier & Samuel, 2023, "Not all layers are equally as important: Every
Layer Counts BERT"): each layer reads a learned weighted sum of the embeddings' output and of every earlier layer's
output, instead of the last one's alone. ``bertkit pretrain --arch modernbert-elc``.

    input of layer i = sum over j = 0..i of w_i[j] * h_j      h_0: the embeddings' output; h_j: layer j-1's output

``w_i`` holds i + 1 weights, initialised to 0 but the last one, 1 (the previous layer's output): the model starts
as ModernBERT exactly (layer i reads layer i-1's output, the residual stream), and training learns how much of each
earlier layer to mix in. The weights are not normalised (no softmax, no division by their sum), so the one-hot start
is exact and a weight may grow past 1 or turn negative. Each term is a whole ModernBERT layer's output (its residual
included): the layers are ModernBERT's, unchanged (ELC-BERT itself mixes its LTG-BERT blocks' outputs). The final
LayerNorm takes the last layer's output, as ModernBERT's does.

Weights: ``layer_mix.{i}`` ([i + 1]) beside ModernBERT's keys (``model.layer_mix.{i}`` in a head). transformers
loads a saved directory with the file every save copies into it (``resources/remote_code/modeling_modernbert_elc.py``,
config.json's ``auto_map``; ``trust_remote_code=True``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor, nn

from bertkit import modeling_modernbert as base


class ModernBertElcConfig(base.ModernBertConfig):
    """ModernBERT's config, fields and all; its ``model_type`` names the variant."""

    model_type = "modernbert-elc"


class ModernBertElcModel(base.ModernBertModel):
    """ModernBERT's encoder whose layers read ELC-BERT's mix of the earlier outputs (:meth:`run_layers`)."""

    config_class = ModernBertElcConfig
    layout = dataclasses.replace(base.LAYOUT, base_roots=(*base.LAYOUT.base_roots, "layer_mix."))

    def __init__(self, config: ModernBertElcConfig):
        super().__init__(config)
        # w_i: [0, ..., 0, 1], the previous layer's output alone
        self.layer_mix = nn.ParameterList(
            nn.Parameter((torch.arange(i + 1) == i).float()) for i in range(config.num_hidden_layers)
        )

    def run_layers(self, x: Tensor, depth: int, run: Callable[[int, Tensor], Tensor]) -> Tensor:
        states = [x]  # h_0 .. h_i, each [B, T, H] (or [n, H] packed)
        for i in range(depth):
            states.append(run(i, sum(w * h for w, h in zip(self.layer_mix[i], states))))
        return states[-1]


class ModernBertElcPreTrainedModel(base.ModernBertPreTrainedModel):
    config_class = ModernBertElcConfig
    layout = ModernBertElcModel.layout
    encoder_class = ModernBertElcModel


class ModernBertElcForMaskedLM(ModernBertElcPreTrainedModel, base.ModernBertForMaskedLM):
    pass


class ModernBertElcForSequenceClassification(ModernBertElcPreTrainedModel, base.ModernBertForSequenceClassification):
    pass


class ModernBertElcForTokenClassification(ModernBertElcPreTrainedModel, base.ModernBertForTokenClassification):
    pass


class ModernBertElcForQuestionAnswering(ModernBertElcPreTrainedModel, base.ModernBertForQuestionAnswering):
    pass


class ModernBertElcForMultipleChoice(ModernBertElcPreTrainedModel, base.ModernBertForMultipleChoice):
    pass
