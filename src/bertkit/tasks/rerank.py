"""Rerankers (cross-encoders): a one-label ``BertForSequenceClassification`` scoring ``[CLS] query [SEP] passage
[SEP]``, trained with a listwise loss on (query, positive[, negative]) rows.

Data: CSV / TSV (header row) or JSONL with the columns ``query``, ``positive`` and, optionally, ``negative`` (a
hard negative; when the file has that column every row needs one). ``--text-column`` / ``--pair-column`` /
``--label-column`` rename them. Repeat a query on several rows for several positives or negatives.

Training: each row becomes a group of ``group_size`` candidates: its positive first, its hard negative, then
passages of other rows (the positives and negatives of the whole file, minus this query's own positives), drawn
once with a fixed seed. The model scores every candidate; the loss is the cross-entropy of a softmax over the
group with the positive as the target (the listwise softmax loss of RankNet/ListNet-style rerankers; sentence-
transformers' cross-encoder MultipleNegativesRankingLoss). A micro-batch of ``batch_size`` rows runs
``batch_size x group_size`` pairs.

Metric: each dev row ranks its positive among itself, its negative and ``eval_candidates - 2`` passages of other rows
(fixed seed): MRR (main) and accuracy@1. Predictions: ``predictions.tsv`` with ``index``, ``score`` (the model's
logit for the query and the positive / passage column) and ``negative_score`` when the file has negatives.

The saved model is a plain one-label ``BertForSequenceClassification`` (config ``architectures``), as
transformers, sentence-transformers' CrossEncoder and TEI expect of a reranker.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from bertkit.data.tasks.readers import read_table
from bertkit.errors import InputError
from bertkit.files import atomic_write
from bertkit.modeling import SequenceClassifierOutput
from bertkit.models import for_directory
from bertkit.tasks import TaskBase, collate_inputs, load_trained, pad, run_inference


class RerankTask(TaskBase):
    family = "rerank"
    head = "BertForSequenceClassification"

    def __init__(
        self,
        name: str = "rerank",
        max_seq_length: int = 128,
        text_column: str | None = None,
        pair_column: str | None = None,
        label_column: str | None = None,
        data_format: str | None = None,
        group_size: int = 8,
        eval_candidates: int = 8,
        **_: Any,
    ):
        self.name = name
        self.max_seq_length = max_seq_length or 128
        self.text_column = text_column or "query"
        self.pair_column = pair_column or "positive"
        self.label_column = label_column or "negative"
        self.data_format = data_format
        self.group_size = max(2, int(group_size or 8))
        self.eval_candidates = max(2, int(eval_candidates or 8))
        self.labels = ["score"]
        self.main_metric = "mrr"

    def task_config(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "max_seq_length": self.max_seq_length,
            "text_column": self.text_column,
            "pair_column": self.pair_column,
            "label_column": self.label_column,
            "data_format": self.data_format,
            "group_size": self.group_size,
            "eval_candidates": self.eval_candidates,
        }

    def model_overrides(self) -> dict[str, Any]:
        return {"num_labels": 1, "id2label": {0: "score"}, "label2id": {"score": 0}}

    def load_model(self, model_dir, finetuned: bool):
        """Fine-tuning: the one-label classifier wrapped in :class:`ListwiseReranker` (the listwise loss);
        a fine-tuned directory: the plain classifier (inference scores one pair at a time)."""

        if finetuned:
            return load_trained(self.model_class, model_dir, self.name)
        model_class = for_directory(self.model_class, model_dir)
        return ListwiseReranker(model_class.from_pretrained(model_dir, **self.model_overrides()))

    # ------------------------------------------------------------------ data
    def read(self, path: str | os.PathLike, labelled: bool = True, skip_bad_rows: bool = False):
        """Rows as ``ClassificationExample`` (text_a = query, text_b = positive, label = negative or None)."""

        return read_table(
            path,
            self.text_column,
            self.pair_column,
            self.label_column,
            fmt=self.data_format,
            skip_bad_rows=skip_bad_rows,
            require_label=False,
        )

    def _candidates(
        self, examples: Sequence, i: int, size: int, rng: random.Random, pool: list[str], own: dict[str, set[str]]
    ) -> list[str]:
        """Row ``i``'s positive, its negative, then passages of other rows drawn from ``pool`` up to ``size``."""
        e = examples[i]
        out = [e.text_b] + ([e.label] if e.label is not None and e.label != e.text_b else [])
        taken = set(out) | own[e.text_a]
        others = [p for p in rng.sample(pool, min(len(pool), size + len(taken))) if p not in taken]
        return (out + others)[:size]

    @staticmethod
    def _passages(examples: Sequence) -> tuple[list[str], dict[str, set[str]]]:
        """(every distinct passage of ``examples``, each query's own positives)."""
        pool = list(dict.fromkeys([e.text_b for e in examples] + [e.label for e in examples if e.label is not None]))
        own: dict[str, set[str]] = {}
        for e in examples:
            own.setdefault(e.text_a, set()).add(e.text_b)
        return pool, own

    def fit_labels(self, train_examples: Sequence) -> None:
        """No label set (one score per pair); the training rows are checked as they are read, before a model is
        loaded: each query needs a passage other than its own positives to rank its positive above."""
        pool, own = self._passages(train_examples)
        query = next((q for q, positives in own.items() if len(positives) >= len(pool)), None)
        if query is not None:
            raise InputError(
                f"--train: query {query[:80]!r} has no passage but its own positives to rank against (rerank "
                "training needs two different passages per query): add a negative column or more rows"
            )

    def featurize(self, examples: Sequence, tokenizer, training: bool = False) -> list[dict]:
        pool, own = self._passages(examples)
        if training:
            self.fit_labels(examples)
            # the same group size for every row: as many candidates as the smallest row can be given (>= 2)
            size = min([self.group_size] + [len(pool) - len(own[e.text_a]) + 1 for e in examples])
            rng = random.Random(0)
            groups = [self._candidates(examples, i, size, rng, pool, own) for i in range(len(examples))]
            size = min(len(g) for g in groups)
            groups = [g[:size] for g in groups]
        else:
            groups = [
                self._candidates(examples, i, self.eval_candidates, random.Random(i), pool, own)
                for i in range(len(examples))
            ]
        queries = [e.text_a for e, g in zip(examples, groups) for _ in g]
        passages = [p for g in groups for p in g]
        encodings = tokenizer.encode_batch(queries, passages, max_length=self.max_seq_length)
        features, k = [], 0
        for i, g in enumerate(groups):
            encs = encodings[k : k + len(g)]
            k += len(g)
            if training:
                features.append(
                    {
                        "input_ids": [x.ids for x in encs],
                        "token_type_ids": [x.type_ids for x in encs],
                        "length": max(len(x.ids) for x in encs),
                        "example": i,
                        "label": 0,
                    }
                )
            else:
                features += [
                    {"input_ids": x.ids, "token_type_ids": x.type_ids, "example": i, "candidate": j}
                    for j, x in enumerate(encs)
                ]
        return features

    def collate(self, features: Sequence[dict]) -> dict:
        """Training groups -> [B, C, T] tensors and ``labels`` [B] (the positive's index, 0); pairs -> [B, T]."""
        import torch

        if not isinstance(features[0]["input_ids"][0], list):
            return collate_inputs(features)
        B, C = len(features), len(features[0]["input_ids"])
        ids = [x for f in features for x in f["input_ids"]]
        return {
            "input_ids": pad(ids, 0).view(B, C, -1),
            "token_type_ids": pad([t for f in features for t in f["token_type_ids"]], 0).view(B, C, -1),
            "attention_mask": pad([[1] * len(s) for s in ids], 0).view(B, C, -1),
            "labels": torch.tensor([f["label"] for f in features]),
        }

    # ------------------------------------------------------------------ inference, metric, output
    def predict(
        self,
        model,
        examples: Sequence,
        features: Sequence[dict],
        batch_size: int = 64,
        precision: str = "fp32",
        device: str = "cpu",
        progress: bool = False,
    ) -> list[list[float]]:
        """Per row: the logits of its candidates (0 = the positive / passage column, 1 = its negative if any)."""
        preds: list[list[float]] = [[] for _ in examples]
        for f in features:
            preds[f["example"]].append(0.0)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            logits = out.logits.float().cpu()[:, 0].tolist()
            for row, i in enumerate(idx):
                preds[features[i]["example"]][features[i]["candidate"]] = logits[row]
        return preds

    def metrics(self, examples: Sequence, preds: Sequence[list[float]]) -> dict[str, float]:
        if not preds:
            return {}
        ranks = [1 + sum(s > p[0] for s in p[1:]) for p in preds]
        return {"mrr": sum(1 / r for r in ranks) / len(ranks), "accuracy": sum(r == 1 for r in ranks) / len(ranks)}

    def write_predictions(self, directory: str | os.PathLike, examples: Sequence, preds: Sequence) -> list[Path]:
        negatives = any(e.label is not None for e in examples)
        lines = ["index\tscore" + ("\tnegative_score" if negatives else "")]
        for e, p in zip(examples, preds):
            cells = [e.guid, repr(p[0])]
            if negatives:  # candidate 1 is the row's own negative when it has one
                cells.append(repr(p[1]) if e.label is not None and e.label != e.text_b else "")
            lines.append("\t".join(cells))
        path = Path(directory) / "predictions.tsv"
        atomic_write(path, lambda t: t.write_text("\n".join(lines) + "\n", encoding="utf-8"))
        return [path]


class ListwiseReranker(nn.Module):
    """The fine-tuning view of a one-label classifier: ``input_ids`` [B, C, T] (C candidates per query, the
    positive at ``labels``) -> logits [B, C] and loss = cross-entropy of the softmax over each group. [B, T] inputs
    pass straight to the classifier. Saving writes the classifier alone (a standard cross-encoder directory)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None):
        import torch.nn.functional as F

        if input_ids.dim() == 2:
            return self.model(input_ids, attention_mask, token_type_ids, position_ids, labels=labels)
        B, C, T = input_ids.shape

        def flat(t):
            return None if t is None else t.reshape(B * C, T)

        out = self.model(flat(input_ids), flat(attention_mask), flat(token_type_ids), flat(position_ids))
        logits = out.logits.view(B, C)  # [B, C]
        loss = F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, None, None)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        self.model.save_pretrained(directory)

    def set_dropout(self, p: float) -> None:
        self.model.set_dropout(p)
