"""Pre-training, one package: BERT's (or ModernBERT's) masked LM, NSP or ELECTRA's replaced-token detection, from
raw text to a model directory. What lives where:

- ``config.py``: :class:`PretrainConfig`, whose fields are ``bertkit pretrain``'s flags, and the run keys;
  ``checks.py``: what its flags must satisfy together;
- ``tables.py``: the ``paper`` and ``budget`` recipes' tables and the model each builds;
- ``recipe.py``: :func:`pretrain`, the loop, top to bottom: logging and held-out evaluation called where they run;
- ``setup.py``: the output directory, the vocabulary and shards, the model (the architecture registry's, whichever
  ``--arch`` names: ``bertkit.models``), what a batch holds;
- ``objectives/``: one file per objective (``mlm_nsp.py``, ``electra.py``) and the registry that names them;
- ``evaluate.py``: a finished run's held-out figures; ``flops.py``: model FLOPs and MFU; ``once.py``: the corpus
  prepared once per run or per node.

The batches (the feed over the ramps' stages, its prefetcher) are ``bertkit.data.pretraining``'s; the run's books
(optimizer step, checkpoints, run directory, ``--max-time``) are ``bertkit.training``'s.
"""

from __future__ import annotations

from bertkit.data.pretraining.instances import parse_mask_mix
from bertkit.errors import LossNotFinite, PretrainError
from bertkit.options import parse_duration
from bertkit.recipes.pretrain.checks import check_given, longest_sequence
from bertkit.recipes.pretrain.config import RUN_KEYS, SCHEDULES, PretrainConfig
from bertkit.recipes.pretrain.evaluate import held_out_accuracy
from bertkit.recipes.pretrain.recipe import pretrain
from bertkit.recipes.pretrain.tables import BUDGET, BUDGET_LR, FRESH_MODEL_KEYS, PAPER, RECIPES, resolve

__all__ = [
    "BUDGET",
    "BUDGET_LR",
    "FRESH_MODEL_KEYS",
    "PAPER",
    "RECIPES",
    "RUN_KEYS",
    "SCHEDULES",
    "LossNotFinite",
    "check_given",
    "longest_sequence",
    "PretrainConfig",
    "PretrainError",
    "held_out_accuracy",
    "parse_duration",
    "parse_mask_mix",
    "pretrain",
    "resolve",
]
