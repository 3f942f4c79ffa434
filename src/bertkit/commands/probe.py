"""``bertkit probe``: linear probes of a frozen model, per layer x pooling (and the paper's Table 7 for NER)."""

from __future__ import annotations

import json
import sys

from bertkit.experiments.probe import ProbeConfig, run_probe

CONFIG = ProbeConfig
DESCRIPTION = (
    "Freeze the model and, for each hidden state (the embeddings, then layers 1..L) and each pooling, fit a linear "
    "probe: logistic regression for SST-2 / MRPC, cosine-similarity Spearman for STS-B (no training), the "
    "feature-based BiLSTM tagger for CoNLL-2003 NER (plus the paper's Table 7 layer choices). Writes probe.csv, "
    "probe.md and probe.png (a layer x pooling heatmap); features are cached in OUTPUT/features."
)


def run(cfg: ProbeConfig) -> int:
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
