"""Sentence embeddings: contrastive training (SimCSE, MultipleNegativesRankingLoss, CoSENT), GradCache, readers,
the sentence-transformers directory format, and STS / retrieval evaluation.

    losses.py     the losses on embedding columns
    gradcache.py  one step's gradients, plain or cached (GradCache), gathered across ranks
    data.py       readers: text per line, TSV/CSV/JSONL columns, STS-B (GLUE), SQuAD pairs, NLI triplets
    st_format.py  write / read sentence-transformers directories (modules.json, 1_Pooling, Normalize)
    evaluate.py   STS (Pearson / Spearman x 100) and BEIR retrieval (nDCG@10, MRR@10, Recall@k)
    recipe.py     the training loop
    command.py    ``bertkit finetune --task simcse|pairs|sts`` and ``bertkit evaluate --task sts|retrieval``
"""

EMBEDDING_TASKS = ("simcse", "pairs", "sts")
EVALUATION_TASKS = ("sts", "retrieval")
