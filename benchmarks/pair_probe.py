"""Does a pre-trained model's frozen output already tell a sentence pair's label? The pair probe: each pair of a
GLUE-style TSV (QNLI's columns by default: question, sentence, label) is read as ``[CLS] A [SEP] B [SEP]`` (at most
128 tokens), the model's states after the embeddings and after each layer are mean-pooled over the pair's tokens (as
the fine-tuning head pools), and a logistic regression (scikit-learn, L2 at C=0.1, on standardised features) is fit
on TRAIN's pooled states and scored on DEV's: one accuracy a layer, and one over all layers at once. Nothing of the
model is trained, so a figure above the label's majority rate is what pre-training put there.

It predicts the fine-tuned pair task: over ten 30-minute models (BENCHMARKS.md, "An AVX2 CPU at 30 minutes,
emulated") the best layer's probe ranged 59.1-69.4% where ``bertkit downstream --tasks qnli`` gave 58.65-74.71 (the
pre-trained route, lr 1e-3, median of 3 seeds): Pearson r 0.94, Spearman 0.85, in about a minute a model on one
thread instead of three fine-tunings. ``--checkpoint`` reads the weights of a training
checkpoint (``OUTPUT/checkpoints/step-*.pt``, ``weights_only``) into the directory's model, so a run saved with
``--save-every`` can be traced through its steps.

    .venv/bin/python benchmarks/pair_probe.py MODEL_DIR TRAIN.tsv DEV.tsv [--checkpoint STEP.pt ...]
"""

from __future__ import annotations

import argparse
import csv

import numpy as np
import torch

from bertkit import models
from bertkit.ops import pool
from bertkit.tokenization.fast import load_tokenizer


def read_pairs(path: str, a: str, b: str, label: str, positive: str) -> tuple[list[str], list[str], np.ndarray]:
    """The two texts and the labels (``positive`` -> 1) of a tab-separated file with a header row."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise SystemExit(f"{path}: no pairs under its header")
    for name in (a, b, label):
        if name not in rows[0]:
            raise SystemExit(f"{path}: no column {name!r} (has {', '.join(rows[0])})")
    return [r[a] for r in rows], [r[b] for r in rows], np.array([r[label] == positive for r in rows])


def encode_pairs(tok, first: list[str], second: list[str], max_len: int = 128, batch: int = 64) -> list[dict]:
    """Padded batches of ``[CLS] A [SEP] B [SEP]``, encoded and truncated as the fine-tuning encodes a pair (the
    tokenizer's own pair encoding: Google's truncation, the longer segment first)."""
    return [tok(first[i : i + batch], second[i : i + batch], max_length=max_len) for i in range(0, len(first), batch)]


def pooled_states(model, batches: list[dict]) -> np.ndarray:
    """[pairs, (layers + 1) * hidden]: every layer's output (the embeddings' first), mean-pooled over each pair's
    tokens (``ops.pool``, as ModernBERT's classifier pools)."""
    out = []
    with torch.no_grad():
        for enc in batches:
            mask = enc["attention_mask"]
            states = model(input_ids=enc["input_ids"], attention_mask=mask, output_hidden_states=True).hidden_states
            out.append(torch.cat([pool(h.float(), mask, "mean") for h in states], -1).numpy())
    return np.concatenate(out)


def probe(train: np.ndarray, y_train: np.ndarray, dev: np.ndarray, y_dev: np.ndarray, hidden: int) -> dict:
    """Dev accuracy (percent) of a logistic regression on each layer's pooled states, and on all of them ("all")."""
    from sklearn.linear_model import LogisticRegression  # a dev extra: the probe only
    from sklearn.preprocessing import StandardScaler

    scores = {}
    layers = train.shape[1] // hidden
    for layer in [*range(layers), "all"]:
        cols = slice(None) if layer == "all" else slice(layer * hidden, (layer + 1) * hidden)
        scale = StandardScaler().fit(train[:, cols])
        fit = LogisticRegression(max_iter=3000, C=0.1).fit(scale.transform(train[:, cols]), y_train)
        scores[layer] = 100.0 * fit.score(scale.transform(dev[:, cols]), y_dev)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a model's directory (bertkit or transformers layout)")
    parser.add_argument("train", help="TSV with a header: the probe's training pairs")
    parser.add_argument("dev", help="TSV with a header: the pairs it is scored on")
    parser.add_argument("--columns", default="question,sentence,label", help="A,B,LABEL (default QNLI's)")
    parser.add_argument("--positive", default="entailment", help="the label read as 1 (default QNLI's)")
    parser.add_argument("--checkpoint", nargs="*", default=[], help="training checkpoints to probe instead")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    a, b, label = args.columns.split(",")
    train, dev = (read_pairs(p, a, b, label, args.positive) for p in (args.train, args.dev))
    model = models.of_directory(args.model).model_class("masked_lm", args.model).from_pretrained(args.model).eval()
    tok = load_tokenizer(args.model)
    train_batches, dev_batches = encode_pairs(tok, *train[:2]), encode_pairs(tok, *dev[:2])  # once for every model
    for where in args.checkpoint or [None]:
        if where is not None:  # a training checkpoint's weights (the tied decoder comes with the embeddings)
            model.load_state_dict(torch.load(where, map_location="cpu", weights_only=True)["model"])
        x_train, x_dev = pooled_states(model, train_batches), pooled_states(model, dev_batches)
        scores = probe(x_train, train[2], x_dev, dev[2], model.config.hidden_size)
        best = max((v, k) for k, v in scores.items() if k != "all")
        layers = " ".join(f"{k}:{v:.1f}" for k, v in scores.items())
        majority = max(dev[2].mean(), 1 - dev[2].mean())
        print(f"{where or args.model}: best layer {best[1]} {best[0]:.1f}%  ({layers}; majority {majority:.1%})")


if __name__ == "__main__":
    main()
