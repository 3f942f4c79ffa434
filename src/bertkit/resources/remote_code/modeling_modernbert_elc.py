"""ModernBERT-ELC for transformers: ModernBERT whose layers read ELC-BERT's learned mix of the earlier outputs.

Written by bertkit beside a saved model (config.json's ``auto_map`` names these classes), so that

    AutoModelForMaskedLM.from_pretrained(directory, trust_remote_code=True)

loads it. Self-contained: torch and transformers' own ModernBERT, whose blocks it reuses. Layer i reads
``sum_j layer_mix[i][j] * h_j`` over h_0 (the embeddings' output) .. h_i (layer i-1's output); one-hot weights on
the last term are plain ModernBERT. (bertkit's own implementation: ``bertkit/variants/modernbert_elc.py``.)
"""

import torch
from torch import nn
from transformers import ModernBertConfig
from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.modernbert import modeling_modernbert as mb


class ModernBertElcConfig(ModernBertConfig):
    model_type = "modernbert-elc"


class ModernBertElcModel(mb.ModernBertModel):
    config_class = ModernBertElcConfig

    def __init__(self, config):
        super().__init__(config)
        self.layer_mix = nn.ParameterList(
            nn.Parameter((torch.arange(i + 1) == i).float()) for i in range(config.num_hidden_layers)
        )

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, **kwargs):
        hidden = self.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)
        if position_ids is None:
            position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        masks = attention_mask
        if not isinstance(masks, dict):
            args = {"config": self.config, "inputs_embeds": hidden, "attention_mask": attention_mask}
            masks = {
                "full_attention": create_bidirectional_mask(**args),
                "sliding_attention": create_bidirectional_sliding_window_mask(**args),
            }
        rope = {kind: self.rotary_emb(hidden, position_ids, kind) for kind in set(self.config.layer_types)}
        states = [hidden]
        for layer, weights in zip(self.layers, self.layer_mix):
            mixed = sum(w * h for w, h in zip(weights, states))
            kind = layer.attention_type
            states.append(layer(mixed, attention_mask=masks[kind], position_embeddings=rope[kind], **kwargs))
        return BaseModelOutput(last_hidden_state=self.final_norm(states[-1]))


def _with_elc_encoder(head):
    """``head`` (a transformers ModernBERT head class) wrapping ModernBertElcModel instead of ModernBertModel."""

    class Head(head):
        config_class = ModernBertElcConfig

        def __init__(self, config):
            super().__init__(config)
            self.model = ModernBertElcModel(config)
            self.post_init()

    Head.__name__ = Head.__qualname__ = head.__name__.replace("ModernBert", "ModernBertElc", 1)
    return Head


ModernBertElcForMaskedLM = _with_elc_encoder(mb.ModernBertForMaskedLM)
ModernBertElcForSequenceClassification = _with_elc_encoder(mb.ModernBertForSequenceClassification)
ModernBertElcForTokenClassification = _with_elc_encoder(mb.ModernBertForTokenClassification)
ModernBertElcForQuestionAnswering = _with_elc_encoder(mb.ModernBertForQuestionAnswering)
ModernBertElcForMultipleChoice = _with_elc_encoder(mb.ModernBertForMultipleChoice)
