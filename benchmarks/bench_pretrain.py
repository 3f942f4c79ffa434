"""Pre-training step throughput: bertkit's pretrain step vs a plain transformers loop, same model, batch, data.

bertkit route (what ``bertkit pretrain`` runs per step): ``bertkit.BertForPreTraining`` with the sparse MLM head
(vocabulary logits only at masked positions), ``--precision auto`` autocast (bf16 where the CPU has avx512_bf16),
fused AdamW with BERT's parameter groups, gradient clipping at 1.0, linear schedule.

transformers route (what a user writes from its docs): ``transformers.BertForPreTraining`` (default attention), fp32,
``torch.optim.AdamW(model.parameters(), lr)``, ``out.loss`` from full-vocabulary logits, backward, clipping at 1.0,
step, schedule step, zero_grad.

Both train the same config from the same initial weights on the same batches (MLM + NSP instances built by bertkit's
data pipeline from the bundled books, with the bert-base-uncased vocabulary when ../shared/data is present, else a
vocabulary trained on the books). Rounds alternate between the routes; medians of per-step times are printed, and
tokens/s counts non-padding tokens.

    .venv/bin/python benchmarks/bench_pretrain.py --model-size bert-mini --steps 12
    .venv/bin/python benchmarks/bench_pretrain.py --model-size bert-base --steps 3 --rounds 2
    # GPU: bert-base at seq 128, bf16 autocast on both sides (what Trainer(bf16=True) does), fused AdamW on both
    python3 benchmarks/bench_pretrain.py --device cuda --model-size bert-base --batch-size 128 --steps 20

Each route's line shows model TFLOP/s and MFU (recipes/pretrain/flops.py's count: the same model FLOPs for both routes,
with the MLM head at masked positions only; over the dense peak of the device at the route's precision: the GPU
table, or this CPU's measured matmul peak).

On a GPU the transformers route gets bf16 autocast too (``--theirs-precision``, default: fp32 on CPU as its docs'
loop, the same precision as bertkit's on a GPU, as ``Trainer(bf16=True)``) and ``torch.optim.AdamW(fused=True)``
(Trainer's default optimizer on CUDA), so the ratio measures the model and head, not a missed switch. Timings on a
GPU synchronise the device after every step. ``--compile`` wraps both models in ``torch.compile``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-uncased" / "vocab.txt"


def make_batches(
    seq_len: int, batch_size: int, n: int, workdir: Path, vocab: Path | None = None, nsp: bool = True
) -> tuple[list[dict], object]:
    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.tokenization import BertTokenizer, train_vocab

    books = bundled_corpus()[:2]
    if vocab is None and SHARED_VOCAB.is_file():
        vocab = SHARED_VOCAB
    elif vocab is None:
        import gzip

        text = workdir / "books.txt"
        text.write_text("".join(gzip.decompress(p.read_bytes()).decode() for p in books), encoding="utf-8")
        train_vocab([text], vocab_size=30522, output=workdir / "vocab", show_progress=False)
        vocab = workdir / "vocab" / "vocab.txt"
    tok = BertTokenizer.from_pretrained(vocab)
    prepare_corpus([str(p) for p in books], workdir / "shards", vocab, progress=False, log=lambda m: None)
    data = PretrainingData(
        workdir / "shards",
        VocabInfo.from_tokenizer(tok),
        # ModernBERT's recipe: 30% masked, no next-sentence prediction (its model has no NSP head)
        DataOptions(
            max_seq_length=seq_len, batch_size=batch_size, short_seq_prob=0.0, nsp=nsp, mask_prob=0.15 if nsp else 0.3
        ),
    )
    nb = data.num_batches(0)
    batches = [{k: torch.from_numpy(v) for k, v in data.batch(i // nb, i % nb).items()} for i in range(n)]
    if not nsp:  # what a model without segments and NSP takes
        batches = [{k: v for k, v in b.items() if k in ("input_ids", "attention_mask", "labels")} for b in batches]
    return batches, tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-size", default="bert-mini")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per route per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per route before the first round")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument(
        "--theirs-precision",
        default=None,
        help="transformers route: fp32 | bf16 | fp16 (default: fp32 on CPU, bertkit's precision on GPU)",
    )
    ap.add_argument("--vocab", default=None, help="vocab.txt (default: bert-base-uncased from ../shared, else trained)")
    ap.add_argument("--compile", action="store_true", help="torch.compile both models")
    ap.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="every dropout of both models (default: the preset's; 0 is --recipe budget's)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from bertkit import models
    from bertkit.precision import autocast, resolve_precision
    from bertkit.training.optim import build_optimizer, linear_schedule

    with tempfile.TemporaryDirectory() as tmp:
        arch = models.of_preset(args.model_size)  # bert-* or modernbert-*
        nsp = arch.pretraining_role == "pretraining"  # BERT's MLM + NSP; ModernBERT's masked LM alone
        batches, tok = make_batches(
            args.seq_len, args.batch_size, args.steps, Path(tmp), Path(args.vocab) if args.vocab else None, nsp
        )
    dev = torch.device(args.device)
    batches = [{k: v.to(dev) for k, v in b.items()} for b in batches]
    torch.manual_seed(0)
    ours = arch.build_for_pretraining(args.model_size, tok, max_len=args.seq_len).train()  # the tokenizer's ids
    if args.dropout is not None:  # both routes (the saved config carries it): 0 is the budget recipe's
        ours.set_dropout(args.dropout)
    config, vocab_size = ours.config, len(tok)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        theirs = getattr(transformers, type(ours).__name__).from_pretrained(tmp).train()  # the same class name
    ours.to(dev)
    theirs.to(dev)
    precision = resolve_precision(args.precision, dev)
    theirs_precision = args.theirs_precision or ("fp32" if dev.type == "cpu" else precision)
    total = 10_000
    opt_ours = build_optimizer(ours, lr=1e-4)
    sched_ours = linear_schedule(opt_ours, 100, total)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-4, **({"fused": True} if dev.type == "cuda" else {}))
    sched_theirs = transformers.get_linear_schedule_with_warmup(opt_theirs, 100, total)
    run_ours, run_theirs = (torch.compile(ours), torch.compile(theirs)) if args.compile else (ours, theirs)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step_ours(b):
        with autocast(precision, dev):
            loss = run_ours(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
        opt_ours.step()
        sched_ours.step()
        opt_ours.zero_grad(set_to_none=True)
        return float(loss.detach())

    def step_theirs(b):
        with autocast(theirs_precision, dev):
            loss = run_theirs(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        opt_theirs.step()
        sched_theirs.step()
        opt_theirs.zero_grad()
        return float(loss.detach())

    routes = {"bertkit": step_ours, "transformers": step_theirs}
    times: dict[str, list[float]] = {k: [] for k in routes}
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    for fn in routes.values():
        for i in range(args.warmup):
            fn(batches[i % len(batches)])
    for r in range(args.rounds):
        for name, fn in routes.items() if r % 2 == 0 else reversed(list(routes.items())):
            for i, b in enumerate(batches):
                sync()
                t0 = time.perf_counter()
                fn(b)
                sync()
                times[name].append((time.perf_counter() - t0) / tokens[i])
    n_params = sum(p.numel() for p in ours.parameters())
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(
        f"{args.model_size} ({n_params / 1e6:.1f}M params, vocab {vocab_size}), batch {args.batch_size} x seq "
        f"{args.seq_len}, {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"precision bertkit {precision} / transformers {theirs_precision}{', compiled' if args.compile else ''}; "
        f"{args.rounds} rounds x {args.steps} steps per route"
    )
    med = {k: statistics.median(v) for k, v in times.items()}
    # MFU: the same model FLOPs for both routes (recipes/pretrain/flops.py: MLM head at masked positions only, as
    # bertkit computes it; the transformers route's full-vocabulary head is work the model does not need, so it shows as
    # lower MFU), over the device's dense peak at the route's precision
    from bertkit.recipes.pretrain.flops import cpu_peak, device_peak, train_flops

    if dev.type == "cpu":  # measure the CPU's matmul peak again (the cache keeps the highest figure seen)
        for p in {precision, theirs_precision}:
            cpu_peak(p, refresh=True)

    flops = sum(
        train_flops(config, b["attention_mask"].sum(-1).tolist(), int((b["labels"] != -100).sum()), nsp)
        for b in batches
    ) / sum(tokens)  # per real token
    peaks = {"bertkit": device_peak(dev, precision), "transformers": device_peak(dev, theirs_precision)}
    for k in routes:
        achieved = flops / med[k]
        mfu = f"MFU {achieved / peaks[k]:6.1%} of {peaks[k] / 1e12:.3g} TFLOP/s" if peaks[k] else "MFU - (no peak)"
        print(
            f"  {k:<13} {1 / med[k]:>9.0f} tokens/s   {med[k] * sum(tokens) / len(tokens) * 1000:8.1f} ms/step   "
            f"{achieved / 1e12:7.3f} model TFLOP/s   {mfu}"
        )
    print(f"  ratio bertkit / transformers: {med['transformers'] / med['bertkit']:.2f}x")


if __name__ == "__main__":
    main()
