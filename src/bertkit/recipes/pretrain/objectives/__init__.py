"""Pre-training objectives: one file each, named in :data:`OBJECTIVES` (``--objective``'s choices).

An objective is what changes between masked LM (+ NSP), ELECTRA's replaced-token detection and GPT-BERT's
masked next-token prediction while the loop, the
data, the schedule and the checkpoints stay the recipe's (``recipes/pretrain/recipe.py``). Its file defines
``OBJECTIVE``, an :class:`Objective` that overrides what it changes:

- ``defaults``: recipe choices over ``--recipe``'s table (ELECTRA: its masking, no NSP);
- ``check(cfg)``: flags it cannot take, refused in one line before anything is written;
- ``build(...)``: the model trained, around the architecture's pre-training model;
- ``count`` / ``window`` / ``said``: its figures of a micro-batch, of a log window, and their console text;
- ``scorer()`` / ``held_out_said``: its held-out figures;
- ``masked_lm_dir`` and ``save``: where OUTPUT keeps its masked LM, and what it writes besides the model.

A new objective is one file here plus its line in :data:`OBJECTIVES`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from bertkit.errors import InputError

# --objective NAME -> the module that defines its OBJECTIVE (imported when a run asks for it: no torch for --help)
OBJECTIVES: dict[str, str] = {
    "mlm": "bertkit.recipes.pretrain.objectives.mlm_nsp",
    "electra": "bertkit.recipes.pretrain.objectives.electra",
    "mntp": "bertkit.recipes.pretrain.objectives.mntp",
    "mlm-clm": "bertkit.recipes.pretrain.objectives.mlm_clm",
}


def get(name: str) -> Objective:
    """The objective ``--objective name`` names; an ``InputError`` naming the choices otherwise."""
    if name not in OBJECTIVES:
        raise InputError(f"--objective {name}: not an objective bertkit knows; choose one of {', '.join(OBJECTIVES)}")
    return importlib.import_module(OBJECTIVES[name]).OBJECTIVE


class NoScore:
    """A held-out scorer that adds nothing (an objective with no figures of its own)."""

    def add(self, output: Any) -> None:
        pass

    def as_record(self) -> dict[str, float]:
        return {}


class Objective:
    """The masked LM's choices: no defaults of its own, no figures beyond the recipe's MLM ones."""

    defaults: dict[str, Any] = {}
    masked_lm_dir = ""  # OUTPUT itself is the masked LM
    adds_nsp_head = False  # True: it trains --nsp on an architecture whose pre-training model has no NSP head

    def check(self, cfg) -> None:
        """Refuse flags this objective cannot take (an ``InputError`` naming the flag)."""

    def build(self, cfg, tokenizer, shard_dir: Path, max_len: int, device, build_base):
        """(model, config): the model trained; ``build_base`` makes the architecture's pre-training model."""
        return build_base(cfg, tokenizer, shard_dir, max_len, device)

    def count(self, meter, output, batch: dict, cfg) -> None:
        """A training micro-batch's own figures into the log window ``meter``."""

    def window(self, ctx, meter, cfg) -> dict[str, float]:
        """The log window's own fields (means over the ranks: every rank calls this)."""
        return {}

    def said(self, fields: dict[str, float]) -> str:
        """The console's text of :meth:`window`'s fields."""
        return ""

    def scorer(self):
        """A held-out scorer: ``add(output)`` per batch, ``as_record()`` the ``eval_*`` fields."""
        return NoScore()

    def held_out_said(self, result: dict[str, float]) -> str:
        """The console's text of the scorer's fields."""
        return ""

    def save(self, out: Path, tokenizer) -> None:
        """What OUTPUT holds besides the model and its tokenizer."""

    def masked_lm(self, model):
        """The masked LM inside the trained ``model`` (what the BLiMP probe scores): the model itself."""
        return model
