"""Masked LM mixed with causal LM in one head (``bertkit pretrain --objective mlm-clm``): GPT-BERT's mix
(``mntp.py``) with the masked rows read as BERT reads them. A [MASK] at j is predicted at j, from bidirectional
attention; a ``--causal-ratio`` share of the sequences are causal rows (the original tokens, causal attention),
where every position predicts the token after it:

    loss = (1 - c) * masked LM loss + c * causal LM loss      (c: the batch's share of causal rows)

The head learns two readings of one position: a [MASK] input asks for itself, any other input for its successor
(in the masked rows the recipe's 10% random and 10% kept tokens still ask for themselves, seen with the whole
sequence). What it saves is a plain masked LM (no ``bertkit_objective`` key): transformers' fill-mask pipeline,
bertkit's fill-mask and BLiMP's scorer all read a [MASK] at j, so unlike ``mntp`` it may be a default."""

from __future__ import annotations

from bertkit.recipes.pretrain.objectives.mntp import Mntp

OBJECTIVE = Mntp("mlm-clm", reads_next=False)
