"""A masked next-token prediction model for transformers: the masked LM whose logits at position j are its head's
output at j - 1 (GPT-BERT's reading; ``bertkit pretrain --objective mntp``).

Written by bertkit beside a saved ``--objective mntp`` model (config.json's ``auto_map`` names the class for
``AutoModelForMaskedLM``; ``bertkit_objective`` says ``mntp``), so that

    AutoModelForMaskedLM.from_pretrained(directory, trust_remote_code=True)
    pipeline("fill-mask", model=directory, trust_remote_code=True)

answer a [MASK] as bertkit does. The weights are the plain masked LM's: without ``trust_remote_code`` transformers
loads its own class and reads each position's logits where they stand. Position 0 ([CLS], never masked) keeps its
own. Self-contained: torch and transformers' own BERT and ModernBERT. (bertkit's reading:
``bertkit/recipes/pretrain/objectives/mntp.py``.)
"""

import torch
from torch.nn import functional as F
from transformers.modeling_outputs import MaskedLMOutput
from transformers.models.bert import modeling_bert
from transformers.models.modernbert import modeling_modernbert


def next_token_read(logits):
    """[B, T, V] logits moved one position right: position j holds what the head wrote at j - 1."""
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def _reading_next(masked_lm):
    """``masked_lm`` (a transformers masked LM class) whose logits at j are its head's at j - 1."""

    class Head(masked_lm):
        def __init__(self, config):
            config.sparse_prediction = False  # ModernBERT's option of logits at labelled positions only: every one
            super().__init__(config)

        def forward(self, *args, labels=None, return_dict=None, **kwargs):
            out = super().forward(*args, return_dict=True, **kwargs)
            logits = next_token_read(out.logits)
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
            out = MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions)
            return out if return_dict is not False else out.to_tuple()

    Head.__name__ = Head.__qualname__ = masked_lm.__name__.replace("ForMaskedLM", "MntpForMaskedLM")
    return Head


BertMntpForMaskedLM = _reading_next(modeling_bert.BertForMaskedLM)
ModernBertMntpForMaskedLM = _reading_next(modeling_modernbert.ModernBertForMaskedLM)
