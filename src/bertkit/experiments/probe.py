"""Layer probes of a frozen model: which layer (and pooling) holds what a task needs?

For each hidden state (0 = the embeddings output, then layers 1..L) and each pooling:

- SST-2, MRPC (classification): a linear probe, multinomial logistic regression fitted with L-BFGS in torch on
  standardized features (L2-regularized), trained on the train file, scored on dev with the task's official
  metric (MRPC: the mean of F1 and accuracy, as the GLUE leaderboard). MRPC pairs are encoded together, as
  ``[CLS] a [SEP] b [SEP]``, the way fine-tuning sees them.
- STS-B: no training; the Spearman correlation (x100) between the cosine similarity of the two sentences' vectors
  (each encoded alone) and the gold scores, as bert-as-service users compared their ``pooling_layer`` choices.
- CoNLL-2003 NER: the feature-based tagger of the paper's section 5.3 on each word's first sub-token: per layer,
  and the paper's Table 7 choices (embeddings; second-to-last hidden; last hidden; weighted sum of the last four;
  concatenation of the last four; weighted sum of all layers; weights are softmax-normalized scalars learned with
  the tagger), scored by entity-level F1 (conlleval).

Features are extracted once per (split, pooling) for every layer at once and cached under
``OUTPUT/features`` (``.npy``, keyed by the model files and the texts), so a second probe run, or another pooling
list, reuses them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.batches import collate
from bertkit.data.tasks.conll import label_list, read_conll
from bertkit.data.tasks.glue import GLUE_TASKS, read_glue
from bertkit.errors import InputError
from bertkit.experiments.glue import task_score
from bertkit.experiments.plots import bar_chart, heatmap
from bertkit.experiments.tables import csv_text
from bertkit.features import Encoder, resolve_pooling
from bertkit.files import atomic_write, write_text
from bertkit.options import (
    batch_size_option,
    device_option,
    from_text,
    max_length_option,
    model_option,
    option,
    precision_option,
    seed_option,
)
from bertkit.precision import resolve_device
from bertkit.runtime import batch_loop
from bertkit.tasks.metrics import accuracy, conlleval, f1_binary, spearman
from bertkit.tasks.tagging import TaggingTask

log = logging.getLogger(__name__)

PROBE_TASKS = ("sst2", "mrpc", "stsb", "conll2003")
DEFAULT_POOLINGS = ("cls", "mean", "max")


@dataclass
class ProbeResult:
    """One probe: a hidden state (or a Table 7 combination) x pooling -> its dev score."""

    layer: str  # "embeddings", "1".."L", or a Table 7 name
    pooling: str
    score: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ProbeReport:
    task: str
    num_layers: int
    results: list[ProbeResult]
    table7: list[ProbeResult]
    cached: dict[str, bool]
    files: list[Path]


def layer_name(i: int) -> str:
    return "embeddings" if i == 0 else str(i)


# ----------------------------------------------------------------------------------------------- feature cache


def model_fingerprint(model_dir: Path) -> str:
    """What identifies a model's outputs: its config, its tokenizer's files (WordPiece ``vocab.txt`` or any
    ``tokenizer.json``, with their configs) and its weight files' sizes and mtimes."""
    h = hashlib.sha256()
    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        p = model_dir / name
        if p.is_file():
            h.update(p.read_bytes())
    for name in sorted(os.listdir(model_dir)):
        if name.endswith((".safetensors", ".bin")):
            st = (model_dir / name).stat()
            h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _key(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


class FeatureCache:
    """``[N, L+1, D]`` float32 arrays (every hidden state of N inputs) as ``.npy`` files under ``directory``."""

    def __init__(self, directory: Path, fingerprint: str):
        self.directory = directory
        self.fingerprint = fingerprint
        self.hits: dict[str, bool] = {}

    def get(self, name: str, key_parts: Sequence[Any], compute: Callable[[], np.ndarray]) -> np.ndarray:
        path = self.directory / f"{name}-{_key(self.fingerprint, *key_parts)}.npy"
        if path.is_file():
            self.hits[name] = True
            return np.load(path)
        self.hits[name] = False
        array = np.ascontiguousarray(compute(), dtype=np.float32)
        self.directory.mkdir(parents=True, exist_ok=True)

        def write(p: Path) -> None:
            with open(p, "wb") as f:
                np.save(f, array)

        atomic_write(path, write)
        return array


def sentence_features(
    encoder, texts: list[str], pairs: list[str] | None, pooling: str, max_length: int, batch_size: int = 64
) -> np.ndarray:
    """[N, L+1, D]: every hidden state pooled (D = H, 2H for mean_max), from one pass over the inputs."""
    L = encoder.num_layers
    flat = encoder.encode(
        texts, pairs, layers=list(range(L + 1)), pooling=pooling, max_length=max_length, batch_size=batch_size
    )
    return flat.reshape(len(texts), L + 1, -1)


def word_features(encoder, sentences: Sequence, max_length: int, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Each word's first sub-token at every hidden state: ([W, L+1, H] over all words in order, [S+1] offsets).
    Words cut by ``max_length`` get zero vectors (the tagger then predicts them from context only)."""

    task = TaggingTask("tagging", max_seq_length=max_length, labels=["O"])
    plain = [type(s)(s.words, None, s.line) for s in sentences]  # tags are not needed to featurize
    feats = task.featurize(plain, encoder.tokenizer)
    L, H = encoder.num_layers, encoder.hidden_size
    offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s.words) for s in sentences])
    out = np.zeros((int(offsets[-1]), L + 1, H), dtype=np.float32)
    sequences = [f["input_ids"] for f in feats]

    def run(idx: list[int]) -> np.ndarray:
        ids, types, mask = collate(
            [sequences[i] for i in idx], None, encoder.tokenizer.pad_token_id, device=encoder.device
        )
        hidden, _ = encoder.forward(ids, types, mask, depth=-1)
        return torch.stack([h.float() for h in hidden], dim=2).cpu().numpy()  # [B, T, L+1, H]

    lengths = [len(x) for x in sequences]
    loop = batch_loop(lengths, run, batch_size, device=encoder.device, precision=encoder.precision, longest_first=False)
    for idx, states in loop:
        for r, i in enumerate(idx):
            starts = feats[i]["word_starts"]
            base = offsets[feats[i]["example"]]
            out[base : base + len(starts)] = states[r, starts]
    return out, offsets


# ----------------------------------------------------------------------------------------------- probes


def fit_logistic(
    x: np.ndarray, y: np.ndarray, n_classes: int, l2: float = 1e-3, max_iter: int = 200, seed: int = 0
) -> Callable[[np.ndarray], np.ndarray]:
    """Multinomial logistic regression: inputs standardized with the training mean / std, mean cross-entropy plus
    ``l2`` x the squared weights, minimized by full-batch L-BFGS. Returns ``predict(x) -> class ids``."""
    torch.manual_seed(seed)
    xt = torch.from_numpy(np.asarray(x, dtype=np.float32))
    mean, std = xt.mean(0), xt.std(0).clamp(min=1e-6)
    xt = (xt - mean) / std
    yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
    w = torch.zeros(xt.shape[1], n_classes, requires_grad=True)
    b = torch.zeros(n_classes, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, b], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-6, tolerance_change=1e-9
    )

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    w_, b_ = w.detach(), b.detach()

    def predict(z: np.ndarray) -> np.ndarray:
        zt = (torch.from_numpy(np.asarray(z, dtype=np.float32)) - mean) / std
        return (zt @ w_ + b_).argmax(-1).numpy()

    return predict


def cosine_spearman(a: np.ndarray, b: np.ndarray, gold: Sequence[float]) -> float:
    """Spearman (x100) between the rows' cosine similarities and ``gold``."""

    na = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    nb = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    # rounded so that float noise does not rank identical pairs (cosine 1 +- 1e-7) apart: they tie
    return 100.0 * spearman(np.round((na * nb).sum(-1), 5).tolist(), list(gold))


TABLE7 = (
    "embeddings",
    "second-to-last hidden",
    "last hidden",
    "weighted sum last four hidden",
    "concat last four hidden",
    "weighted sum all layers",
)


def table7_layers(name: str, num_layers: int) -> tuple[list[int], str]:
    """(hidden-state indices, "concat" | "weighted") of a Table 7 choice."""
    L = num_layers
    return {
        "embeddings": ([0], "concat"),
        "second-to-last hidden": ([max(L - 1, 0)], "concat"),
        "last hidden": ([L], "concat"),
        "weighted sum last four hidden": (list(range(max(L - 3, 1), L + 1)), "weighted"),
        "concat last four hidden": (list(range(max(L - 3, 1), L + 1)), "concat"),
        "weighted sum all layers": (list(range(0, L + 1)), "weighted"),
    }[name]


class WordTagger(nn.Module):
    """The feature-based tagger on cached word features: a combination of hidden states (one, a concatenation,
    or a learned softmax-weighted sum) -> 2-layer BiLSTM (``bilstm``, the paper's) or nothing (``linear``) -> tags."""

    def __init__(
        self,
        layers: list[int],
        combine: str,
        hidden_size: int,
        n_tags: int,
        tagger: str = "bilstm",
        tagger_hidden: int = 256,
    ):
        super().__init__()
        if tagger not in ("bilstm", "linear"):
            raise InputError(f"--tagger {tagger!r}: choose bilstm or linear")
        self.combine, self.kind = combine, tagger
        in_dim = hidden_size * (len(layers) if combine == "concat" else 1)
        self.mix = nn.Parameter(torch.zeros(len(layers))) if combine == "weighted" else None
        self.rnn = (
            nn.LSTM(in_dim, tagger_hidden, num_layers=2, bidirectional=True, batch_first=True)
            if tagger == "bilstm"
            else None
        )
        self.out = nn.Linear(2 * tagger_hidden if tagger == "bilstm" else in_dim, n_tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, W, S, H] (the selected hidden states of each word) -> logits [B, W, n_tags]."""
        if self.mix is not None:
            x = (x * torch.softmax(self.mix, 0)[None, None, :, None]).sum(2)
        else:
            x = x.flatten(2)
        if self.rnn is not None:
            x, _ = self.rnn(x)
        return self.out(x)


def train_tagger(
    feats: np.ndarray,
    offsets: np.ndarray,
    tags: list[list[int]],
    dev_feats: np.ndarray,
    dev_offsets: np.ndarray,
    layers: list[int],
    combine: str,
    n_tags: int,
    tagger: str,
    tagger_hidden: int,
    epochs: int,
    seed: int = 0,
    batch_size: int = 32,
    lr: float = 1e-3,
) -> list[list[int]]:
    """Train a :class:`WordTagger` on train words; return its dev predictions (tag ids per sentence)."""
    import torch

    torch.manual_seed(seed)
    model = WordTagger(layers, combine, feats.shape[-1], n_tags, tagger, tagger_hidden)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)

    def batch(f: np.ndarray, off: np.ndarray, idx: Sequence[int]):
        W = max(int(off[i + 1] - off[i]) for i in idx)
        x = torch.zeros(len(idx), max(W, 1), len(layers), f.shape[-1])
        for r, i in enumerate(idx):
            n = int(off[i + 1] - off[i])
            x[r, :n] = torch.from_numpy(f[off[i] : off[i + 1]][:, layers])
        return x

    n_train = len(offsets) - 1
    for _ in range(epochs):
        order = rng.permutation(n_train)
        for start in range(0, n_train, batch_size):
            idx = order[start : start + batch_size].tolist()
            x = batch(feats, offsets, idx)
            y = torch.full(x.shape[:2], -100, dtype=torch.long)
            for r, i in enumerate(idx):
                y[r, : len(tags[i])] = torch.tensor(tags[i])
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
    preds = []
    with torch.no_grad():
        n_dev = len(dev_offsets) - 1
        for start in range(0, n_dev, 64):
            idx = list(range(start, min(n_dev, start + 64)))
            best = model(batch(dev_feats, dev_offsets, idx)).argmax(-1)
            for r, i in enumerate(idx):
                preds.append(best[r, : int(dev_offsets[i + 1] - dev_offsets[i])].tolist())
    return preds


# ----------------------------------------------------------------------------------------------- the study


NER = "NER (conll2003)"


@dataclass(frozen=True, kw_only=True)
class ProbeConfig:
    """What ``bertkit probe`` reads, writes and fits; its fields are the command's flags (a path or a list may be
    given as its flag's text: read when the config is made, as every rule here is checked)."""

    model: Path = model_option("bertkit or Hugging Face BERT directory")
    task: str = option(required=True, choices=PROBE_TASKS, help="the probing task")
    train: Path | None = option(None, help="training file (GLUE TSV / CoNLL); not needed for stsb")
    dev: Path = option(required=True, help="the file the probes are scored on")
    output: Path | None = option(None, help="directory (default probe-TASK)")
    poolings: list[str] = option(
        default_factory=lambda: list(DEFAULT_POOLINGS),
        flag="--pooling",
        metavar="POOLING",
        help=f"comma-separated poolings (default {','.join(DEFAULT_POOLINGS)}; also mean_max, first, sep); NER "
        "always uses each word's first sub-token",
    )
    max_length: int = max_length_option(128, "tokens per input", flag="--max-seq-length")
    max_train_examples: int = option(0, help="use only the first N (0 = all)")
    max_eval_examples: int = option(0, help="use only the first N (0 = all)")
    l2: float = option(1e-3, help="logistic regression's L2 penalty")
    batch_size: int = batch_size_option(64, help="feature extraction batch size")
    tagger: str = option(
        "bilstm",
        choices=("bilstm", "linear"),
        group=NER,
        help="the tagger on the features (bilstm: 2 layers, as the paper)",
    )
    tagger_hidden: int = option(256, group=NER, help="the tagger's hidden size")
    epochs: int = option(3, group=NER, help="tagger epochs")
    tagger_lr: float = option(1e-3, group=NER, help="tagger Adam learning rate")
    device: str | None = device_option()
    precision: str = precision_option()
    seed: int = seed_option(0, group=None, help="seed of the probes' training (logistic regression, the NER tagger)")

    def __post_init__(self) -> None:
        from_text(self, "poolings", lambda t: [p for p in t.split(",") if p.strip()])
        for name in ("model", "train", "dev", "output"):
            from_text(self, name, Path)
        if self.output is None:
            object.__setattr__(self, "output", Path(f"probe-{self.task}"))
        if self.task not in PROBE_TASKS:
            raise InputError(f"--task {self.task!r}: choose one of {', '.join(PROBE_TASKS)}")
        if self.task != "stsb" and self.train is None:
            raise InputError(f"--task {self.task} needs --train (the probe is fitted on it)")
        poolings = [resolve_pooling(p) for p in self.poolings]
        for p in poolings:
            if p in ("none", "cls_pooled"):
                raise InputError(
                    f"--pooling {p}: a probe needs a per-layer vector; choose from mean, max, mean_max, cls, first, sep"
                )
        object.__setattr__(self, "poolings", poolings)


def _read(task: str, path: Path, limit: int):
    if task == "conll2003":
        items = read_conll(path)
    else:
        items = read_glue(path, task, require_label=True)
    items = list(items)
    return items[:limit] if limit else items


def run_probe(cfg: ProbeConfig, say: Callable[[str], None] | None = None) -> ProbeReport:
    """Run every probe of ``cfg.task``; write probe.csv, probe.md, probe.png (and the feature cache)."""

    say = say or log.info
    poolings = cfg.poolings  # checked when the config was made
    try:
        encoder = Encoder.from_pretrained(cfg.model, device=resolve_device(cfg.device), precision=cfg.precision)
    except FileNotFoundError as e:
        raise InputError(f"--model: {e}") from None
    cache = FeatureCache(cfg.output / "features", model_fingerprint(Path(cfg.model)))
    L = encoder.num_layers
    dev = _read(cfg.task, cfg.dev, cfg.max_eval_examples)
    train = _read(cfg.task, cfg.train, cfg.max_train_examples) if cfg.train is not None else []
    say(f"probe {cfg.task}: {len(train)} train / {len(dev)} dev examples, {L} layers + embeddings")
    results: list[ProbeResult] = []
    table7: list[ProbeResult] = []

    if cfg.task == "conll2003":
        labels = label_list(train)
        tag_id = {t: i for i, t in enumerate(labels)}
        tr_f, tr_off = _word_cached(cache, "train", train, encoder, cfg)
        dv_f, dv_off = _word_cached(cache, "dev", dev, encoder, cfg)
        tr_tags = [[tag_id[t] for t in s.tags] for s in train]

        def score(layers: list[int], combine: str) -> tuple[float, dict]:
            pred = train_tagger(
                tr_f,
                tr_off,
                tr_tags,
                dv_f,
                dv_off,
                layers,
                combine,
                len(labels),
                cfg.tagger,
                cfg.tagger_hidden,
                cfg.epochs,
                cfg.seed,
                lr=cfg.tagger_lr,
            )
            gold = [s.tags for s in dev]
            m = conlleval(gold, [[labels[i] if i < len(labels) else "O" for i in p] for p in pred])
            return float(m["f1"]), {"precision": float(m["precision"]), "recall": float(m["recall"])}

        for i in range(L + 1):
            f1, m = score([i], "concat")
            results.append(ProbeResult(layer_name(i), "first", f1, m))
            say(f"  layer {layer_name(i)}: F1 {f1:.2f}")
        for name in TABLE7:
            layers, combine = table7_layers(name, L)
            f1, m = score(layers, combine)
            table7.append(ProbeResult(name, "first", f1, m))
            say(f"  {name}: F1 {f1:.2f}")
    elif cfg.task == "stsb":
        a_texts = [e.text_a for e in dev]
        b_texts = [e.text_b or "" for e in dev]
        gold = [float(e.label) for e in dev]
        for p in poolings:
            fa = cache.get(
                f"dev-a-{p}",
                [a_texts, p, cfg.max_length],
                lambda p=p: sentence_features(encoder, a_texts, None, p, cfg.max_length, cfg.batch_size),
            )
            fb = cache.get(
                f"dev-b-{p}",
                [b_texts, p, cfg.max_length],
                lambda p=p: sentence_features(encoder, b_texts, None, p, cfg.max_length, cfg.batch_size),
            )
            for i in range(L + 1):
                results.append(ProbeResult(layer_name(i), p, cosine_spearman(fa[:, i], fb[:, i], gold)))
    else:
        classes = list(GLUE_TASKS[cfg.task].labels)
        y_tr = np.array([classes.index(e.label) for e in train])
        y_dv = [classes.index(e.label) for e in dev]
        if len(set(y_tr.tolist())) < 2:
            raise InputError(f"--train {cfg.train}: the probe needs at least two labels in the training examples")

        def feats(split: str, items) -> Callable[[str], np.ndarray]:
            texts = [e.text_a for e in items]
            pairs = [e.text_b or "" for e in items] if any(e.text_b is not None for e in items) else None
            return lambda p: cache.get(
                f"{split}-{p}",
                [texts, pairs, p, cfg.max_length],
                lambda: sentence_features(encoder, texts, pairs, p, cfg.max_length, cfg.batch_size),
            )

        tr, dv = feats("train", train), feats("dev", dev)
        for p in poolings:
            ftr, fdv = tr(p), dv(p)
            for i in range(L + 1):
                predict = fit_logistic(ftr[:, i], y_tr, len(classes), cfg.l2, seed=cfg.seed)
                pred = predict(fdv[:, i]).tolist()
                m = {"accuracy": accuracy(pred, y_dv)}
                if cfg.task == "mrpc":
                    m["f1"] = f1_binary(pred, y_dv, positive=1)
                results.append(ProbeResult(layer_name(i), p, task_score(cfg.task, m), m))
            say(f"  {p}: " + ", ".join(f"{r.layer} {r.score:.1f}" for r in results if r.pooling == p))
    files = write_probe_outputs(cfg.output, cfg.task, L, results, table7)
    return ProbeReport(cfg.task, L, results, table7, dict(cache.hits), files)


def _word_cached(cache: FeatureCache, split: str, sentences, encoder, cfg: ProbeConfig):
    """([W, L+1, H] word features, [S+1] sentence offsets into them), from the cache when there."""
    words = [s.words for s in sentences]
    f = cache.get(
        f"{split}-words", [words, cfg.max_length], lambda: word_features(encoder, sentences, cfg.max_length)[0]
    )
    off = np.zeros(len(sentences) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(w) for w in words])
    return f, off


METRIC_NAMES = {
    "sst2": "accuracy",
    "mrpc": "(F1 + accuracy) / 2",
    "stsb": "cosine Spearman",
    "conll2003": "entity F1 (dev)",
}


def write_probe_outputs(
    out: Path, task: str, num_layers: int, results: list[ProbeResult], table7: list[ProbeResult]
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "task": task,
            "kind": "layer",
            "layer": r.layer,
            "pooling": r.pooling,
            "score": round(r.score, 4),
            **{k: round(v, 4) for k, v in r.metrics.items()},
        }
        for r in results
    ]
    rows += [
        {
            "task": task,
            "kind": "table7",
            "layer": r.layer,
            "pooling": r.pooling,
            "score": round(r.score, 4),
            **{k: round(v, 4) for k, v in r.metrics.items()},
        }
        for r in table7
    ]
    write_text(out / "probe.csv", csv_text(rows))
    layers = [layer_name(i) for i in range(num_layers + 1)]
    poolings = list(dict.fromkeys(r.pooling for r in results))
    grid = {(r.layer, r.pooling): r.score for r in results}
    matrix = [[grid.get((layer, p)) for p in poolings] for layer in layers]
    lines = [
        f"# Probe: {task} ({METRIC_NAMES[task]}, x100), frozen model",
        "",
        "| layer | " + " | ".join(poolings) + " |",
        "|---|" + "---:|" * len(poolings),
    ]
    best = max(results, key=lambda r: r.score) if results else None
    for layer, row in zip(layers, matrix):
        cells = [
            ("-" if v is None else f"**{v:.1f}**" if best and (layer, p) == (best.layer, best.pooling) else f"{v:.1f}")
            for v, p in zip(row, poolings)
        ]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    if best:
        lines += ["", f"Best: layer {best.layer}, pooling {best.pooling}: {best.score:.1f}."]
    files = [out / "probe.csv", out / "probe.md"]
    if table7:
        lines += ["", "## The paper's Table 7 choices (feature-based NER)", "", "| features | dev F1 |", "|---|---:|"]
        lines += [f"| {r.layer} | {r.score:.1f} |" for r in table7]
        bar_chart(
            out / "probe_table7.png",
            [r.layer.replace(" hidden", "").replace("weighted sum", "wsum") for r in table7],
            [r.score for r in table7],
            ylabel="dev F1",
            title=f"{task}: feature-based tagger (Table 7)",
        )
        files.append(out / "probe_table7.png")
    write_text(out / "probe.md", "\n".join(lines) + "\n")
    if results:
        heatmap(
            out / "probe.png",
            matrix,
            layers,
            poolings,
            title=f"{task}: {METRIC_NAMES[task]} per layer x pooling",
            xlabel="pooling",
            ylabel="hidden state",
        )
        files.append(out / "probe.png")
    return files
