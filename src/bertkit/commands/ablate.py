"""``bertkit ablate``: the paper's pre-training ablations on your corpus (NSP, mask rate, model size, steps)."""

from __future__ import annotations

import json
import sys

from bertkit.data.pretraining.corpus import check_corpus_files, expand_corpus
from bertkit.errors import InputError
from bertkit.experiments.ablate import AblateConfig, AblationStudy
from bertkit.outputs import check_output
from bertkit.tokenization import BertTokenizer
from bertkit.training.interrupt import GracefulStop

CONFIG = AblateConfig
DESCRIPTION = (
    "Pre-train each variant of a study with the same corpus, vocabulary, budget and seed, report its held-out MLM "
    "accuracy, and fine-tune it on GLUE tasks (median and min-max over seeds). Writes results.csv, results.md (the "
    "paper's table shape) and STUDY.png. Run the same command again to resume."
)


def run(cfg: AblateConfig) -> int:
    files = expand_corpus(cfg.corpus)  # a missing corpus path, or a directory with no text file, is named here
    inputs = {"--corpus": cfg.corpus, "--glue": cfg.glue, "--vocab": cfg.vocab}
    check_output(cfg.output, inputs, overwrite=None)  # a study resumes: its directory may hold its runs
    check_corpus_files(files, some_text=True)  # as pretrain reads it: a binary or empty corpus is named here
    if cfg.vocab is not None:
        BertTokenizer.from_pretrained(cfg.vocab)  # as every variant's pretrain reads it
    if cfg.glue is not None and not cfg.glue.is_dir():
        raise InputError(f"--glue {cfg.glue}: not a directory")
    with GracefulStop() as stop:
        report = AblationStudy(cfg, say=lambda m: print(m, file=sys.stderr, flush=True), stop=stop).run()
    print((report.output / "results.md").read_text(encoding="utf-8"), file=sys.stderr)
    print(
        json.dumps(
            {
                "output": str(report.output),
                "study": cfg.study,
                "files": [str(p) for p in report.files],
                "variants": [
                    {
                        "variant": r.variant.label,
                        "heldout_mlm_acc": r.heldout.get("eval_mlm_acc"),
                        "tasks": {k: round(s.median, 2) for k, s in r.summaries.items()},
                    }
                    for r in report.results
                ],
            },
            sort_keys=True,
        )
    )
    return 0
