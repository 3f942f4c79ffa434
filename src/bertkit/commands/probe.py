"""``bertkit probe``: linear probes of a frozen model, per layer x pooling (and the paper's Table 7 for NER)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from bertkit.experiments.probe import DEFAULT_POOLINGS, PROBE_TASKS, ProbeConfig, run_probe
from bertkit.options import ComputeArgs, add_options, from_args, option, seed_option
from bertkit.precision import resolve_device

NER = "NER (conll2003)"


@dataclass(kw_only=True)
class ProbeArgs:
    """What ``bertkit probe`` reads, writes and fits; the defaults are ``ProbeConfig``'s."""

    model: str = option(required=True, help="bertkit or Hugging Face BERT directory")
    task: str = option(required=True, choices=PROBE_TASKS, help="the probing task")
    train: str | None = option(None, help="training file (GLUE TSV / CoNLL); not needed for stsb")
    dev: str = option(required=True, help="the file the probes are scored on")
    output: str | None = option(None, help="directory (default probe-TASK)")
    pooling: str = option(
        ",".join(DEFAULT_POOLINGS),
        help=("comma-separated poolings (also mean_max, first, sep); NER always uses each word's first sub-token"),
    )
    max_seq_length: int = option(ProbeConfig.max_length, help="tokens per input")
    max_train_examples: int = option(ProbeConfig.max_train_examples, help="use only the first N (0 = all)")
    max_eval_examples: int = option(ProbeConfig.max_eval_examples, help="use only the first N (0 = all)")
    l2: float = option(ProbeConfig.l2, help="logistic regression's L2 penalty")
    batch_size: int = option(ProbeConfig.batch_size, help="feature extraction batch size")
    tagger: str = option(
        ProbeConfig.tagger,
        choices=("bilstm", "linear"),
        group=NER,
        help="the tagger on the features (bilstm: 2 layers, as the paper)",
    )
    tagger_hidden: int = option(ProbeConfig.tagger_hidden, group=NER, help="the tagger's hidden size")
    epochs: int = option(ProbeConfig.epochs, group=NER, help="tagger epochs")
    tagger_lr: float = option(ProbeConfig.tagger_lr, group=NER, help="tagger Adam learning rate")


@dataclass
class ProbeCompute(ComputeArgs):
    """Where the frozen model and the probes run, and the probes' seed."""

    seed: int = seed_option(
        ProbeConfig.seed, group=None, help="seed of the probes' training (logistic regression, the NER tagger)"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Freeze the model and, for each hidden state (the embeddings, then layers 1..L) and each pooling, fit a "
        "linear probe: logistic regression for SST-2 / MRPC, cosine-similarity Spearman for STS-B (no training), "
        "the feature-based BiLSTM tagger for CoNLL-2003 NER (plus the paper's Table 7 layer choices). Writes "
        "probe.csv, probe.md and probe.png (a layer x pooling heatmap); features are cached in OUTPUT/features."
    )
    groups = add_options(parser, ProbeArgs)
    add_options(parser, ProbeCompute, groups=groups)  # --device, --precision, --seed


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    a: ProbeArgs = from_args(ProbeArgs, args)
    compute: ProbeCompute = from_args(ProbeCompute, args)
    cfg = ProbeConfig(
        model=Path(a.model),
        task=a.task,
        train=Path(a.train) if a.train else None,
        dev=Path(a.dev),
        output=Path(a.output or f"probe-{a.task}"),
        poolings=[p for p in a.pooling.split(",") if p.strip()],
        max_length=a.max_seq_length,
        max_train_examples=a.max_train_examples,
        max_eval_examples=a.max_eval_examples,
        l2=a.l2,
        tagger=a.tagger,
        tagger_hidden=a.tagger_hidden,
        epochs=a.epochs,
        tagger_lr=a.tagger_lr,
        batch_size=a.batch_size,
        device=resolve_device(compute.device),
        precision=compute.precision,
        seed=compute.seed,
    )
    report = run_probe(cfg, say=lambda m: print(m, file=sys.stderr, flush=True))
    print((cfg.output / "probe.md").read_text(encoding="utf-8"), file=sys.stderr)
    best = max(report.results, key=lambda r: r.score)
    print(
        json.dumps(
            {
                "output": str(cfg.output),
                "task": report.task,
                "best": {"layer": best.layer, "pooling": best.pooling, "score": round(best.score, 2)},
                "cached": report.cached,
                "files": [str(p) for p in report.files],
            },
            sort_keys=True,
        )
    )
    return 0
