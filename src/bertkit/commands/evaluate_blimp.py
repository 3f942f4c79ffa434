"""``bertkit evaluate --task blimp``: BLiMP's 67 paradigms on a pre-trained model's MLM head, scored by
pseudo-log-likelihood as BabyLM scores it (``bertkit.tasks.blimp``); ``evaluate`` hands ``--task blimp`` here.

bertkit evaluate --task blimp --model runs/my-bert --data data/blimp --output runs/my-bert-blimp
bertkit evaluate --task blimp --model runs/electra/generator --data data/blimp --pairs-per-paradigm 100
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import InputError
from bertkit.modeldir import ModelDir
from bertkit.options import (
    device_option,
    model_option,
    option,
    overwrite_option,
    precision_option,
    quiet_option,
    threads_option,
)
from bertkit.outputs import check_output

PLL_CHOICES = ("original", "word-l2r")  # bertkit.tasks.blimp.PLL_METHODS, named here so -h imports no torch
TIE_CHOICES = ("wrong", "correct")  # bertkit.tasks.blimp.TIES


@dataclass(frozen=True, kw_only=True)
class BlimpArgs:
    """What ``bertkit evaluate --task blimp`` reads, writes and how it scores. fp32 unless asked (minicons' numbers,
    tests/parity/test_blimp_parity.py). ``--precision`` is the encoder's; the MLM head and the log-softmax run in fp32
    always. bf16 agreed with fp32 on 99.92% of BLiMP's pairs, 1.8x as fast with one thread, but slower than fp32 with
    two threads on the 2-core EPYC (BENCHMARKS.md, "BLiMP")."""

    task: str = option(required=True, choices=("blimp",), help="blimp: BLiMP's minimal pairs by pseudo-log-likelihood")
    model: str = model_option(
        "a model directory with an MLM head (BERT pre-training or masked LM, ModernBERT masked LM, an ELECTRA "
        "run's generator/) and its tokenizer",
    )
    data: str = option(required=True, help="BLiMP's directory: one <UID>.jsonl per paradigm")
    output: str | None = option(None, help="where metrics.json and pairs.jsonl go (default: MODEL/eval-<data name>)")
    pll: str = option(
        "original",
        choices=PLL_CHOICES,
        help="original: each token masked alone (Salazar et al., 2020); word-l2r: the later pieces of its word "
        "masked too (Kauf & Ivanova, 2023; minicons' within_word_l2r)",
    )
    pairs_per_paradigm: int | None = option(
        None, bounds=(1, None, False, False), help="score the first N pairs of each paradigm (default: all)"
    )
    batch_size: int = option(256, help="masked copies per forward pass")
    threads: int | None = threads_option(group=None)
    workers: int = option(
        1,
        bounds=(1, None, False, False),
        help="processes scoring the sentences side by side, each with --threads threads (default 1); on the CPU, "
        "--workers 2 --threads 1 on 2 cores is the fastest (BENCHMARKS.md, BLiMP); the scores are the same",
    )
    ties: str = option(
        "wrong",
        choices=TIE_CHOICES,
        help="a pair whose two sentences score alike: wrong (bertkit's rule: a model that scores everything alike "
        "gets 0) or correct (BabyLM's evaluation pipeline, to compare with its tables); metrics.json's tie_rate says "
        "how many pairs tie",
    )
    overwrite: bool = overwrite_option("replace the metrics.json and pairs.jsonl an earlier run wrote in OUTPUT")
    quiet: bool = quiet_option()
    device: str | None = device_option()
    precision: str = precision_option("fp32")


CONFIG = BlimpArgs
DESCRIPTION = (
    "BLiMP: for each minimal pair, the good sentence must get a higher pseudo-log-likelihood than the bad one (a tie "
    "is wrong, unless --ties correct). Prints and writes (OUTPUT/metrics.json) each paradigm's accuracy, each field's "
    "(the mean of its paradigms) and the overall (the mean of the paradigms), in percent; OUTPUT/pairs.jsonl holds "
    "every pair's two scores."
)


def run(cfg: BlimpArgs) -> int:
    # function-local on purpose: each of these imports torch (2 s), which `bertkit evaluate --task blimp -h` and
    # the usage errors never need (as every command keeps torch out of its -h)
    import torch

    from bertkit.precision import resolve_device, resolve_precision
    from bertkit.tasks.blimp import (
        PllScorer,
        check_pairs,
        evaluate_blimp,
        model_limits,
        read_blimp,
        scores_in_processes,
        table,
        write_results,
    )
    from bertkit.training.rundir import run_record

    # the one output rule, before a pair is scored: never into --data or --model (a fine-tuned model's metrics.json)
    output = Path(cfg.output or Path(cfg.model) / f"eval-{Path(cfg.data).name}")
    inputs = {"--data": cfg.data} if cfg.output is None else {"--data": cfg.data, "--model": cfg.model}
    check_output(
        output, inputs, overwrite=cfg.overwrite, writes=("metrics.json", "pairs.jsonl"), whole=False, figures=True
    )
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    paradigms = read_blimp(cfg.data, cfg.pairs_per_paradigm)
    model = ModelDir.open(cfg.model)  # read once: the tokenizer and config for the pairs' check, then the scorer
    check_pairs(paradigms, *model_limits(model))  # a sentence of no tokens, or too long: FILE:LINE, now
    device = resolve_device(cfg.device)
    if cfg.workers > 1 and str(device) != "cpu":
        raise InputError(f"--workers {cfg.workers}: processes side by side are for the CPU; leave it out on {device}")
    options = dict(device=device, precision=cfg.precision, pll=cfg.pll, batch_size=cfg.batch_size)
    if cfg.workers > 1:  # the same figures, the sentences scored by processes side by side (each loads the model)
        precision = resolve_precision(cfg.precision, device)
        threads = cfg.threads or 1
        score = functools.partial(scores_in_processes, cfg.model, workers=cfg.workers, threads=threads, **options)
    else:
        scorer = PllScorer.from_pretrained(model, **options, progress=not cfg.quiet and sys.stderr.isatty())
        precision, score = scorer.precision, scorer.sentence_scores
    result = evaluate_blimp(score, paradigms, cfg.ties)
    record = {"task": cfg.task, "data": cfg.data, "pll": cfg.pll, "ties": cfg.ties, "workers": cfg.workers}
    record.update(run_record(precision, device))
    write_results(output, result, paradigms, record)
    print(table(result, paradigms))
    summary = {"output": str(output), "overall": result.overall, "pairs": result.pairs, **record}
    print(json.dumps({**summary, "fields": result.fields}, sort_keys=True))
    return 0
