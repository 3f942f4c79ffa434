"""Sentence embeddings: contrastive training (SimCSE, MultipleNegativesRankingLoss, CoSENT), GradCache, readers
and STS / retrieval evaluation.

    losses.py     the losses on embedding columns
    gradcache.py  one step's gradients, plain or cached (GradCache), gathered across ranks; packed_embed
    data.py       readers: text per line, TSV/CSV/JSONL columns, STS-B (GLUE), SQuAD pairs, NLI triplets; the
                  training rows by --task
    evaluate.py   STS (Pearson / Spearman x 100) and BEIR retrieval (nDCG@10, MRR@10, Recall@k)
    recipe.py     the training loop
The commands ``bertkit finetune --task simcse|pairs|sts`` and ``bertkit evaluate --task sts|retrieval`` are
``commands/finetune_embeddings.py`` and ``commands/evaluate_embeddings.py`` (``bertkit.cli.VARIANTS`` picks them by
``--task``).
"""

EMBEDDING_TASKS = ("simcse", "pairs", "sts")
EVALUATION_TASKS = ("sts", "retrieval")

ROUTE_HELP = {  # the epilog of `bertkit finetune` / `evaluate` -h
    "finetune": "sentence embeddings: --task simcse | pairs | sts (see `bertkit finetune --task simcse -h`)",
    "evaluate": "sentence embeddings: --task sts | retrieval (see `bertkit evaluate --task retrieval -h`)",
}
