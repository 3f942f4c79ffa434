"""``bertkit pretrain``: MLM + NSP pre-training from raw text (also under ``torchrun --nproc_per_node N``)."""

from __future__ import annotations

import argparse
import json
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Pre-train BERT (masked LM + next-sentence prediction) on your text files. OUTPUT ends as a model directory "
        "(config.json, model.safetensors, vocab.txt) that bertkit and transformers load; checkpoints go to "
        "OUTPUT/checkpoints and metrics to OUTPUT/metrics.jsonl. Run it under torchrun for DistributedDataParallel.")
    g = parser.add_argument_group("data")
    g.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                   help="text files: Google format (a sentence per line, blank line between documents), plain prose "
                        "(each file a document), or JSONL with a 'text' field; .gz is read too")
    g.add_argument("--corpus-format", default="auto", choices=["auto", "google", "prose", "jsonl"])
    g.add_argument("--encoding", default="auto", choices=["auto", "utf-8"],
                   help="auto: a line that is not UTF-8 is read as Windows-1252, with a warning; utf-8: an error")
    g.add_argument("--output", required=True, metavar="DIR", help="the run directory")
    g.add_argument("--vocab", metavar="PATH", help="an existing vocab.txt (or a directory with one); without it a "
                                                     "vocabulary is trained on the corpus first")
    g.add_argument("--vocab-size", type=int, default=30522, help="size of the trained vocabulary (default 30522)")
    case = g.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=None, help="uncased (default for "
                                                                                               "a trained vocabulary)")
    case.add_argument("--cased", dest="lowercase", action="store_false")
    g.add_argument("--workers", type=int, default=None, help="preprocessing processes (default: every core)")
    m = parser.add_argument_group("model and objectives")
    m.add_argument("--model-size", default="bert-mini",
                   help="bert-tiny | bert-mini | bert-small | bert-medium | bert-base | bert-large (default bert-mini)")
    m.add_argument("--init-from", metavar="DIR", default=None,
                   help="continue pre-training this model (bertkit, Hugging Face or Google TF directory) on the "
                        "corpus: its config, weights and vocabulary (--model-size is then ignored)")
    m.add_argument("--config-override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a BertConfig field, e.g. hidden_dropout_prob=0.0 (repeatable; value read as JSON)")
    m.add_argument("--no-nsp", dest="nsp", action="store_false", help="MLM only (the paper's ablation)")
    m.add_argument("--mask-prob", type=float, default=0.15)
    m.add_argument("--max-predictions", type=int, default=None, help="masked positions per sequence at most "
                                                                    "(default ceil(seq_len * mask_prob))")
    m.add_argument("--whole-word-mask", action="store_true", help="mask every piece of a chosen word")
    m.add_argument("--masking", choices=["dynamic", "static"], default="dynamic",
                   help="dynamic: fresh masks each epoch (default); static: --dupe-factor fixed copies, cycled")
    m.add_argument("--dupe-factor", type=int, default=5)
    m.add_argument("--short-seq-prob", type=float, default=0.1)
    t = parser.add_argument_group("training")
    t.add_argument("--seq-len", type=int, default=128)
    t.add_argument("--batch-size", type=int, default=32, help="micro-batch per process")
    t.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    t.add_argument("--lr", type=float, default=1e-4)
    t.add_argument("--warmup-steps", type=int, default=None, help="default: 5%% of the steps")
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--max-time", default=None, metavar="DURATION",
                   help="wall-clock budget (90s, 10m, 1.5h); the schedule is fitted to it")
    t.add_argument("--two-phase", action="store_true", help="the paper's schedule: --seq-len for 90%% of the steps, "
                                                            "then --phase2-seq-len")
    t.add_argument("--phase2-seq-len", type=int, default=512)
    t.add_argument("--phase2-batch-size", type=int, default=None)
    t.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: bf16 autocast where the CPU/GPU supports it")
    t.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=None, help="torch threads per process (default: torch's choice; "
                                                            "1 can be faster on a machine shared with other jobs)")
    o = parser.add_argument_group("checkpoints and output")
    o.add_argument("--save-every", type=int, default=1000, help="checkpoint every N steps (and at the end)")
    o.add_argument("--keep-checkpoints", type=int, default=2)
    o.add_argument("--resume", action="store_true", help="continue the run in OUTPUT from its latest checkpoint")
    o.add_argument("--overwrite", action="store_true", help="replace the run in OUTPUT")
    o.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (default: ~10 "
                                                                "per run)")
    o.add_argument("--eval-batches", type=int, default=10)
    o.add_argument("--log-every", type=int, default=10)
    o.add_argument("--quiet", action="store_true", help="no progress bar or messages")


def config_from_args(args: argparse.Namespace):
    from bertkit.recipes.pretrain import PretrainConfig, parse_duration

    overrides = {}
    for item in args.config_override:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--config-override {item!r}: expected KEY=VALUE")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return PretrainConfig(
        corpus=args.corpus, output=args.output, vocab=args.vocab, vocab_size=args.vocab_size, lowercase=args.lowercase,
        corpus_format=args.corpus_format, encoding=args.encoding, model_size=args.model_size, init_from=args.init_from,
        config_overrides=overrides,
        seq_len=args.seq_len, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
        warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, clip=args.clip, max_steps=args.max_steps,
        max_time=None if args.max_time is None else parse_duration(args.max_time), save_every=args.save_every,
        keep_checkpoints=args.keep_checkpoints, eval_every=args.eval_every, eval_batches=args.eval_batches,
        log_every=args.log_every, resume=args.resume, overwrite=args.overwrite, seed=args.seed, nsp=args.nsp,
        mask_prob=args.mask_prob, max_predictions=args.max_predictions, whole_word_mask=args.whole_word_mask,
        masking=args.masking, dupe_factor=args.dupe_factor, short_seq_prob=args.short_seq_prob,
        two_phase=args.two_phase, phase2_seq_len=args.phase2_seq_len, phase2_batch_size=args.phase2_batch_size,
        precision=args.precision, device=args.device, workers=args.workers, threads=args.threads,
        quiet=args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    from bertkit.recipes.pretrain import pretrain

    try:
        cfg = config_from_args(args)
        pretrain(cfg)
    except FloatingPointError as e:
        print(f"bertkit pretrain: {e}", file=sys.stderr)
        return 3
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"bertkit pretrain: error: {e}", file=sys.stderr)
        return 2
    return 0
