"""A finished pre-training run's honest held-out figures (:func:`held_out_accuracy`), read from its directory: the
run's settings (run.json), vocabulary, held-out shards and model. The meter during the run is
:mod:`bertkit.recipes.pretrain.recipe`'s ``_evaluate``; both count only what the model had to infer
(``bertkit.tasks.mlm``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertkit import models
from bertkit.config import reads_next_token
from bertkit.data.pretraining.instances import VocabInfo
from bertkit.data.pretraining.masking import EVAL_MASK_PROB
from bertkit.recipes.pretrain import objectives
from bertkit.recipes.pretrain.config import PretrainConfig, PretrainError
from bertkit.recipes.pretrain.setup import make_feed
from bertkit.tasks.mlm import score_mlm
from bertkit.tokenization import BertTokenizer
from bertkit.training.distributed import DistContext
from bertkit.training.rundir import read_record


def held_out_accuracy(
    output: str | Path, max_batches: int = 20, draws: int = 8, shards: str | Path | None = None
) -> dict[str, float]:
    """A finished run's honest held-out MLM figures (``bertkit.tasks.mlm``: text never trained on, the run's
    sequences, 15% of tokens chosen and every one of them [MASK]): ``{"mlm_acc", "mlm_baseline", "mlm_loss",
    "masked_tokens"}``, where the baseline is the best constant guess at the same positions (the plateau a model
    sits on until it learns context). The held-out text is small (2% of the corpus), so it is masked ``draws``
    times with different seeds (up to ``max_batches`` batches in all): a figure from ~1,000 masked tokens moves by
    about a point between mask draws. ``shards``: another prepared directory whose held-out split is scored instead
    (the quickstart's: books the run never read), tokenized with the run's vocabulary."""
    import torch

    out = Path(output)
    # the run's sequences, masked at the paper's 15% (EVAL_MASK_PROB) whatever the run trained with, so runs compare;
    # a resolved config (chosen), also from a run.json written before 'chosen' was recorded
    recorded = read_record(out / "run.json")["config"]
    cfg = PretrainConfig(
        **{
            **recorded,
            "chosen": recorded.get("chosen") or "as run.json records it",
            "output": str(out),
            "max_steps": 1,
            "mask_prob": EVAL_MASK_PROB,
            "max_predictions": None,
        }
    )
    tokenizer = BertTokenizer.from_pretrained(out)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    batches: list = []
    for draw in range(max(1, draws)):
        where = Path(shards) if shards is not None else out / "data" / "shards"
        data = make_feed(dataclasses.replace(cfg, seed=cfg.seed + draw), where, vocab, DistContext()).make(
            cfg.seq_len, cfg.batch_size, "eval"
        )
        if not data.shards:
            break
        batches += data.eval_batches(max_batches - len(batches))
        if len(batches) >= max_batches:
            break
    if not batches:
        raise PretrainError(f"{out}: no held-out text to evaluate on (the corpus is too small)")
    # where the objective keeps its masked LM (ELECTRA's: the generator; the model kept is the discriminator)
    where = out / objectives.get(cfg.objective).masked_lm_dir
    arch = models.of_directory(where)  # the masked LM of the run's architecture
    model = arch.model_class(arch.features_role).from_pretrained(where).eval()
    batches = ({k: torch.from_numpy(v) for k, v in b.items()} for b in batches)
    score = score_mlm(model, batches, vocab.mask_id, next_token=reads_next_token(model.config))  # mntp: at j - 1
    return {
        "mlm_acc": score.mlm_acc,
        "mlm_baseline": score.mlm_baseline,
        "mlm_loss": score.mlm_loss,
        "masked_tokens": score.masked_tokens,
    }
