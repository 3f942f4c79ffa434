"""``bertkit ablate``: the paper's pre-training ablations on your corpus (NSP, mask rate, model size, steps)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.data.pretraining.corpus import check_corpus_files, expand_corpus
from bertkit.errors import InputError
from bertkit.experiments.ablate import STUDIES, AblateConfig, AblationStudy, variants_for
from bertkit.experiments.glue import resolve_tasks
from bertkit.experiments.runner import CELL_FLAGS, configure_finetune
from bertkit.options import flag_string, number, output_path, parse_lrs, parse_seeds, parse_time
from bertkit.outputs import check_output
from bertkit.tokenization import BertTokenizer
from bertkit.training.interrupt import GracefulStop


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Pre-train each variant of a study with the same corpus, vocabulary, budget and seed, report its held-out "
        "MLM accuracy, and fine-tune it on GLUE tasks (median and min-max over seeds). Writes results.csv, "
        "results.md (the paper's table shape) and STUDY.png. Run the same command again to resume."
    )
    parser.add_argument(
        "--corpus", nargs="+", required=True, metavar="PATH", help="text files or directories (as for pretrain)"
    )
    parser.add_argument("--output", required=True, type=output_path, help="the study's directory")
    parser.add_argument(
        "--study",
        required=True,
        choices=STUDIES,
        help="nsp: MLM+NSP vs MLM only; mask-rate: 15/30/40%%; model-size: presets; steps: one run's "
        "checkpoints (Figure 5)",
    )
    parser.add_argument(
        "--values",
        default=None,
        help="mask-rate: rates (default 0.15,0.3,0.4); model-size: presets (default bert-tiny,bert-mini,bert-small)",
    )
    parser.add_argument(
        "--budget", default=None, metavar="DURATION", help="pre-training wall clock per variant (e.g. 10m)"
    )
    parser.add_argument("--steps", type=number(int, "--steps"), default=None, help="pre-training steps per variant")
    parser.add_argument(
        "--checkpoints",
        type=number(int, "--checkpoints"),
        default=5,
        help="steps study: checkpoints along the run (default 5)",
    )
    parser.add_argument(
        "--save-every", type=number(int, "--save-every"), default=None, help="steps study: checkpoint every K steps"
    )
    parser.add_argument(
        "--glue",
        default=None,
        metavar="GLUE_DIR",
        help="GLUE directory to fine-tune on (without it: pre-training and MLM accuracy only)",
    )
    parser.add_argument("--tasks", default="sst2,mrpc", help="GLUE tasks to fine-tune (default sst2,mrpc)")
    parser.add_argument("--seeds", default="2", help="fine-tuning seeds: a count or a list (default 2)")
    parser.add_argument("--lr", default="5e-5", help="fine-tuning learning rate(s), comma-separated (default 5e-5)")
    parser.add_argument("--max-time-per-run", default=None, metavar="DURATION", help="bound each fine-tuning")
    parser.add_argument(
        "--vocab", default=None, help="a vocab.txt every variant uses (default: trained once on the corpus)"
    )
    parser.add_argument("--vocab-size", type=number(int, "--vocab-size"), default=30522)
    parser.add_argument("--pretrain-seed", type=number(int, "--pretrain-seed"), default=0)
    parser.add_argument(
        "--pretrain-args",
        default="",
        type=flag_string(("--output", "--corpus", "--vocab", "--seed", "--resume", "--overwrite")),
        help='more pretrain flags for every variant, e.g. "--seq-len 128 --batch-size 64"',
    )
    parser.add_argument(
        "--finetune-args",
        default="",
        type=flag_string(CELL_FLAGS, configure_finetune),
        help='more finetune flags, e.g. "--epochs 2 --max-train-examples 5000"',
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    files = expand_corpus(args.corpus)  # a missing corpus path, or a directory with no text file, is named here
    inputs = {"--corpus": args.corpus, "--glue": args.glue, "--vocab": args.vocab}
    check_output(args.output, inputs, overwrite=None)  # a study resumes: its directory may hold its runs
    check_corpus_files(files, some_text=True)  # as pretrain reads it: a binary or empty corpus is named here
    if args.vocab is not None:
        BertTokenizer.from_pretrained(args.vocab)  # as every variant's pretrain reads it
    if args.glue is not None and not Path(args.glue).is_dir():
        raise InputError(f"--glue {args.glue}: not a directory")
    cfg = AblateConfig(
        corpus=list(args.corpus),
        output=Path(args.output),
        study=args.study,
        budget=parse_time(args.budget, "--budget"),
        steps=args.steps,
        values=[v.strip() for v in args.values.split(",") if v.strip()] if args.values else None,
        glue=Path(args.glue) if args.glue else None,
        tasks=resolve_tasks(args.tasks),
        seeds=parse_seeds(args.seeds),
        lrs=parse_lrs(args.lr),
        vocab=Path(args.vocab) if args.vocab else None,
        vocab_size=args.vocab_size,
        checkpoints=args.checkpoints,
        save_every=args.save_every,
        pretrain_seed=args.pretrain_seed,
        pretrain_args=args.pretrain_args,
        finetune_args=args.finetune_args,
        max_time_per_run=parse_time(args.max_time_per_run, "--max-time-per-run"),
    )
    variants_for(cfg.study, cfg.values)  # a bad --values: refused before the study's directory is made
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
