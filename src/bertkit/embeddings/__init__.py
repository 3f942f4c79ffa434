"""Sentence embeddings: contrastive training (SimCSE, MultipleNegativesRankingLoss, CoSENT), GradCache, readers
and STS / retrieval evaluation.

    losses.py     the losses on embedding columns
    gradcache.py  one step's gradients, plain or cached (GradCache), gathered across ranks; packed_embed
    data.py       readers: text per line, TSV/CSV/JSONL columns, STS-B (GLUE), SQuAD pairs, NLI triplets; the
                  training rows by --task
    evaluate.py   STS (Pearson / Spearman x 100) and BEIR retrieval (nDCG@10, MRR@10, Recall@k)
    recipe.py     the training loop
    command.py    ``bertkit finetune --task simcse|pairs|sts`` and ``bertkit evaluate --task sts|retrieval``
"""

EMBEDDING_TASKS = ("simcse", "pairs", "sts")
EVALUATION_TASKS = ("sts", "retrieval")

# `bertkit COMMAND --task T` is handled by the module named here when T is an embedding task (their own flags)
ROUTES = {
    "finetune": (EMBEDDING_TASKS, "bertkit.embeddings.train_cli"),
    "evaluate": (EVALUATION_TASKS, "bertkit.embeddings.eval_cli"),
}
ROUTE_HELP = {
    "finetune": "sentence embeddings: --task simcse | pairs | sts (see `bertkit finetune --task simcse -h`)",
    "evaluate": "sentence embeddings: --task sts | retrieval (see `bertkit evaluate --task retrieval -h`)",
}


def route(command: str, argv: list[str]) -> str | None:
    """The module for ``bertkit COMMAND ARGV`` when its ``--task`` is an embedding task, else None."""
    if command not in ROUTES:
        return None
    tasks, module = ROUTES[command]
    for i, arg in enumerate(argv):
        if arg == "--task" and i + 1 < len(argv):
            return module if argv[i + 1] in tasks else None
        if arg.startswith("--task="):
            return module if arg.split("=", 1)[1] in tasks else None
    return None
