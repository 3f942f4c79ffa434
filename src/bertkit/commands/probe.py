"""``bertkit probe``: linear probes of a frozen model, per layer x pooling (and the paper's Table 7 for NER)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from bertkit.options import ComputeArgs, add_options, seed_option


@dataclass
class ProbeCompute(ComputeArgs):
    """Where the frozen model and the probes run, and the probes' seed."""

    seed: int = seed_option(0, group=None, help="seed of the probes' training (logistic regression, the NER tagger)")


def configure(parser: argparse.ArgumentParser) -> None:
    from bertkit.experiments.probe import DEFAULT_POOLINGS, PROBE_TASKS

    parser.description = (
        "Freeze the model and, for each hidden state (the embeddings, then layers 1..L) and each pooling, fit a "
        "linear probe: logistic regression for SST-2 / MRPC, cosine-similarity Spearman for STS-B (no training), "
        "the feature-based BiLSTM tagger for CoNLL-2003 NER (plus the paper's Table 7 layer choices). Writes "
        "probe.csv, probe.md and probe.png (a layer x pooling heatmap); features are cached in OUTPUT/features.")
    parser.add_argument("--model", required=True, help="bertkit or Hugging Face BERT directory")
    parser.add_argument("--task", required=True, choices=PROBE_TASKS)
    parser.add_argument("--train", default=None, help="training file (GLUE TSV / CoNLL); not needed for stsb")
    parser.add_argument("--dev", required=True, help="the file the probes are scored on")
    parser.add_argument("--output", default=None, help="directory (default probe-TASK)")
    parser.add_argument("--pooling", default=",".join(DEFAULT_POOLINGS),
                        help=f"comma-separated poolings (default {','.join(DEFAULT_POOLINGS)}; also mean_max, first, "
                             "sep); NER always uses each word's first sub-token")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-train-examples", type=int, default=0, help="use only the first N (0 = all)")
    parser.add_argument("--max-eval-examples", type=int, default=0, help="use only the first N (0 = all)")
    parser.add_argument("--l2", type=float, default=1e-3, help="logistic regression's L2 penalty (default 1e-3)")
    parser.add_argument("--tagger", choices=("bilstm", "linear"), default="bilstm",
                        help="NER: the tagger on the features (default bilstm, 2 layers, as the paper)")
    parser.add_argument("--tagger-hidden", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3, help="NER tagger epochs (default 3)")
    parser.add_argument("--tagger-lr", type=float, default=1e-3, help="NER tagger Adam learning rate (default 1e-3)")
    parser.add_argument("--batch-size", type=int, default=64, help="feature extraction batch size")
    add_options(parser, ProbeCompute)  # --device, --precision, --seed


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from bertkit.experiments.probe import ProbeConfig, run_probe
    from bertkit.precision import resolve_device

    cfg = ProbeConfig(
        model=Path(args.model), task=args.task, train=Path(args.train) if args.train else None, dev=Path(args.dev),
        output=Path(args.output or f"probe-{args.task}"), poolings=[p for p in args.pooling.split(",") if p.strip()],
        max_length=args.max_seq_length, max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples, l2=args.l2, tagger=args.tagger, tagger_hidden=args.tagger_hidden,
        epochs=args.epochs, tagger_lr=args.tagger_lr, batch_size=args.batch_size, device=resolve_device(args.device),
        precision=args.precision,
        seed=args.seed,
    )
    report = run_probe(cfg, say=lambda m: print(m, file=sys.stderr, flush=True))
    print((cfg.output / "probe.md").read_text(encoding="utf-8"), file=sys.stderr)
    best = max(report.results, key=lambda r: r.score)
    print(json.dumps({"output": str(cfg.output), "task": report.task, "best": {"layer": best.layer,
                      "pooling": best.pooling, "score": round(best.score, 2)}, "cached": report.cached,
                      "files": [str(p) for p in report.files]}, sort_keys=True))
    return 0
