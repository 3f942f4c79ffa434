"""Sentence and sentence-pair classification / regression: GLUE tasks and generic CSV / TSV / JSONL files.

Head: ``BertForSequenceClassification`` ([CLS] pooled -> dropout -> linear; one output = regression, MSE).
Metric: the GLUE task's official one (MCC; accuracy; F1 + accuracy; Pearson + Spearman); generic files report
accuracy (and F1 of the second label when there are two), or Pearson + Spearman for regression.
Predictions: ``predictions.tsv`` with header ``index<TAB>prediction`` and label names as GLUE writes them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.data.tasks.glue import GLUE_TASKS, read_glue
from bertkit.data.tasks.readers import DataError, read_table
from bertkit.errors import InputError
from bertkit.files import atomic_write
from bertkit.tasks import TaskBase, collate_inputs, run_inference
from bertkit.tasks.metrics import accuracy, f1_binary, matthews_corrcoef, pearson, spearman


class ClassificationTask(TaskBase):
    family = "classification"
    head = "BertForSequenceClassification"

    def __init__(
        self,
        name: str,
        max_seq_length: int = 128,
        text_column: str | None = None,
        pair_column: str | None = None,
        label_column: str | None = None,
        regression: bool = False,
        data_format: str | None = None,
        labels: Sequence[str] | None = None,
        **_: Any,
    ):
        self.name = name
        self.max_seq_length = max_seq_length
        self.glue = GLUE_TASKS.get(name)
        if self.glue is not None:
            self.regression = self.glue.is_regression
            self.labels = None if self.regression else list(self.glue.labels)
            self.metric_names = list(self.glue.metrics)
        else:
            self.regression = bool(regression)
            self.labels = list(labels) if labels else None
            self.metric_names = ["pearson", "spearman"] if self.regression else ["accuracy", "f1"]
        self.text_column = text_column or "text"
        self.pair_column = pair_column
        self.label_column = label_column or "label"
        self.data_format = data_format
        self.main_metric = self.metric_names[0]

    # ------------------------------------------------------------------ labels and config
    def task_config(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "max_seq_length": self.max_seq_length,
            "text_column": self.text_column,
            "pair_column": self.pair_column,
            "label_column": self.label_column,
            "regression": self.regression,
            "data_format": self.data_format,
            "labels": self.labels,
        }

    def fit_labels(self, train_examples: Sequence) -> None:
        """Generic files: the label set is the training file's (numbers sorted numerically, else by name)."""
        if self.regression or self.labels is not None:
            return
        found = sorted({str(e.label) for e in train_examples})
        if len(found) == 1:  # one output: transformers reads num_labels=1 as regression; nothing to tell apart
            where = getattr(train_examples, "path", "") or "the training file"
            raise InputError(
                f"{where}: every row has the label {found[0]!r}; a classifier needs two labels at least (or "
                "--regression, for numbers)"
            )
        try:
            found.sort(key=float)
        except ValueError:
            pass
        self.labels = found

    def model_overrides(self) -> dict[str, Any]:
        if self.regression:
            return {"num_labels": 1, "id2label": {0: "score"}, "label2id": {"score": 0}}
        assert self.labels is not None
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
        }

    # ------------------------------------------------------------------ data
    def read(self, path: str | os.PathLike, labelled: bool = True, skip_bad_rows: bool = False):
        if self.glue is not None:
            return read_glue(path, self.name, skip_bad_rows=skip_bad_rows, require_label=labelled)
        return read_table(
            path,
            self.text_column,
            self.pair_column,
            self.label_column,
            regression=self.regression,
            fmt=self.data_format,
            skip_bad_rows=skip_bad_rows,
            require_label=labelled,
        )

    def featurize(self, examples: Sequence, tokenizer, training: bool = False) -> list[dict]:
        pairs = [e.text_b or "" for e in examples] if any(e.text_b is not None for e in examples) else None
        encodings = tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=self.max_seq_length)
        label2id = {label: i for i, label in enumerate(self.labels or [])}
        features = []
        for i, (e, enc) in enumerate(zip(examples, encodings)):
            f: dict[str, Any] = {"input_ids": enc.ids, "token_type_ids": enc.type_ids, "example": i}
            if e.label is not None:
                if self.regression:
                    f["label"] = float(e.label)
                elif e.label in label2id:
                    f["label"] = label2id[e.label]
                else:
                    raise DataError(
                        getattr(examples, "path", "input"),
                        e.line,
                        f"unknown label {e.label!r} (the model knows {self.labels})",
                    )
            features.append(f)
        return features

    def collate(self, features: Sequence[dict]) -> dict:
        import torch

        batch = collate_inputs(features)
        if all("label" in f for f in features):
            dtype = torch.float32 if self.regression else torch.long
            batch["labels"] = torch.tensor([f["label"] for f in features], dtype=dtype)
        return batch

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
    ) -> list:
        preds: list = [None] * len(examples)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            logits = out.logits.float().cpu()
            for row, i in enumerate(idx):
                ex = features[i]["example"]
                if self.regression:
                    preds[ex] = float(logits[row, 0])
                else:
                    preds[ex] = self.labels[int(logits[row].argmax())]
        return preds

    def metrics(self, examples: Sequence, preds: Sequence) -> dict[str, float]:
        gold = [e.label for e in examples]
        if any(g is None for g in gold):
            return {}
        if self.regression:
            return {"pearson": pearson(preds, gold), "spearman": spearman(preds, gold)}
        index = {label: i for i, label in enumerate(self.labels)}
        p = [index[x] for x in preds]
        y = [index[x] for x in gold]
        out = {"accuracy": accuracy(p, y)}
        if "mcc" in self.metric_names:
            out["mcc"] = matthews_corrcoef(p, y)
        if "f1" in self.metric_names and len(self.labels) == 2:
            out["f1"] = f1_binary(p, y, positive=1)
        return out

    def write_predictions(self, directory: str | os.PathLike, examples: Sequence, preds: Sequence) -> list[Path]:
        lines = ["index\tprediction"]
        for e, p in zip(examples, preds):
            lines.append(f"{e.guid}\t{p:.3f}" if self.regression else f"{e.guid}\t{p}")
        path = Path(directory) / "predictions.tsv"
        atomic_write(path, lambda t: t.write_text("\n".join(lines) + "\n", encoding="utf-8"))
        return [path]
