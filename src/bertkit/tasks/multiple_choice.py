"""Multiple choice (SWAG): each choice is ``[CLS] context [SEP] ending [SEP]``, scored from its pooled [CLS] by
``BertForMultipleChoice``; softmax over the choices. Metric: accuracy. Predictions: ``predictions.tsv``
(``index<TAB>prediction``, the chosen ending's index)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.data.tasks.swag import read_swag
from bertkit.files import atomic_write
from bertkit.tasks import TaskBase, pad, run_inference
from bertkit.tasks.metrics import accuracy


class MultipleChoiceTask(TaskBase):
    family = "multiple_choice"
    head = "BertForMultipleChoice"

    def __init__(self, name: str = "swag", max_seq_length: int = 128, **_: Any):
        self.name = name
        self.max_seq_length = max_seq_length or 128
        self.main_metric = "accuracy"

    def task_config(self) -> dict[str, Any]:
        return {"task": self.name, "max_seq_length": self.max_seq_length}

    def read(self, path: str | os.PathLike, labelled: bool = True, skip_bad_rows: bool = False):
        return read_swag(path, skip_bad_rows=skip_bad_rows, require_label=labelled)

    def featurize(self, examples: Sequence, tokenizer, training: bool = False) -> list[dict]:
        contexts = [e.context for e in examples for _ in e.endings]
        endings = [x for e in examples for x in e.endings]
        encodings = tokenizer.encode_batch(contexts, endings, max_length=self.max_seq_length)
        features, k = [], 0
        for i, e in enumerate(examples):
            encs = encodings[k : k + len(e.endings)]
            k += len(e.endings)
            f: dict[str, Any] = {
                "input_ids": [x.ids for x in encs],
                "token_type_ids": [x.type_ids for x in encs],
                "length": max(len(x.ids) for x in encs),
                "example": i,
            }
            if e.label is not None:
                f["label"] = e.label
            features.append(f)
        return features

    def collate(self, features: Sequence[dict]) -> dict:
        import torch

        C = len(features[0]["input_ids"])
        flat_ids = [ids for f in features for ids in f["input_ids"]]
        input_ids = pad(flat_ids, 0)
        batch = {
            "input_ids": input_ids.view(len(features), C, -1),
            "token_type_ids": pad([t for f in features for t in f["token_type_ids"]], 0).view(len(features), C, -1),
            "attention_mask": pad([[1] * len(s) for s in flat_ids], 0).view(len(features), C, -1),
        }
        if all("label" in f for f in features):
            batch["labels"] = torch.tensor([f["label"] for f in features])
        return batch

    def predict(
        self,
        model,
        examples: Sequence,
        features: Sequence[dict],
        batch_size: int = 64,
        precision: str = "fp32",
        device: str = "cpu",
        progress: bool = False,
    ) -> list[int]:
        preds: list = [None] * len(examples)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            best = out.logits.argmax(-1).cpu()
            for row, i in enumerate(idx):
                preds[features[i]["example"]] = int(best[row])
        return preds

    def metrics(self, examples: Sequence, preds: Sequence[int]) -> dict[str, float]:
        if any(e.label is None for e in examples):
            return {}
        return {"accuracy": accuracy(preds, [e.label for e in examples])}

    def write_predictions(self, directory: str | os.PathLike, examples: Sequence, preds: Sequence) -> list[Path]:
        lines = ["index\tprediction"] + [f"{e.guid}\t{p}" for e, p in zip(examples, preds)]
        path = Path(directory) / "predictions.tsv"
        atomic_write(path, lambda t: t.write_text("\n".join(lines) + "\n", encoding="utf-8"))
        return [path]
