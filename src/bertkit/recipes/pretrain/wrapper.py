"""The wrapper an objective (``objectives/``) puts around the architecture's pre-training model when it adds a
reading or a head that only pre-training uses (``--objective mntp``/``mlm-clm``, ModernBERT's ``--nsp``): the run
reads the wrapped model's config, sets its dropout and saves it alone, so OUTPUT is the plain model transformers
loads. ELECTRA keeps two models (the discriminator saved as OUTPUT, the generator beside it) and has its own."""

from __future__ import annotations

from pathlib import Path

from torch import nn


class Wrapper(nn.Module):
    """``base``'s ``config``, dropout and ``save_pretrained``; a subclass defines ``forward`` and what it adds (its
    parameters live in the checkpoints, which hold the whole wrapper, never in OUTPUT)."""

    def __init__(self, base: nn.Module):
        super().__init__()
        self.base = base
        self.config = base.config

    def set_dropout(self, p: float) -> None:
        self.base.set_dropout(p)

    def save_pretrained(self, directory: str | Path) -> None:
        self.base.save_pretrained(directory)
