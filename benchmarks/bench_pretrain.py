"""Pre-training step throughput: bertkit's pretrain step vs a plain transformers loop, same model, batch, data.

bertkit route (what ``bertkit pretrain`` runs per step, training.step's ``apply_update``): ``bertkit.
BertForPreTraining`` with the sparse MLM head (vocabulary logits only at masked positions), ``--precision auto``
(bf16 where the CPU has avx512_bf16: there a bf16 model over fp32 master weights, ``precision.MasterWeights``; on
a GPU autocast), fused AdamW with BERT's parameter groups, gradient clipping at 1.0, linear schedule; on a GPU
compiled with dynamic shapes and replayed as CUDA graphs (`bertkit pretrain`'s default there:
``recipes/pretrain/compiled.py``), the labelled positions found on the host (padded as a graphed step's) and no
attention mask where nothing is padded, as the recipe hands batches over (``masking.mlm_inputs``).

transformers route (what a user writes from its docs): ``transformers.BertForPreTraining`` (default attention), fp32,
``torch.optim.AdamW(model.parameters(), lr)``, ``out.loss`` from full-vocabulary logits, backward, clipping at 1.0,
step, schedule step, zero_grad.

``--theirs-route trainer`` (the default on a GPU) runs the transformers model as ``Trainer(bf16=True,
torch_compile=True)`` runs a step: ``torch.compile``d, bf16 autocast, fused AdamW on CUDA, clipping at 1.0, the
linear schedule; ``loop`` (the default on a CPU) is the plain loop above.

Both train the same config from the same initial weights on the same batches (MLM + NSP instances built by bertkit's
data pipeline from the bundled books, with the bert-base-uncased vocabulary when ../shared/data is present, else a
vocabulary trained on the books; a batch larger than the books' sequences repeats their text). Rounds alternate
between the routes; medians of per-step times are printed, and tokens/s counts non-padding tokens.

    .venv/bin/python benchmarks/bench_pretrain.py --model-size bert-mini --steps 12
    .venv/bin/python benchmarks/bench_pretrain.py --model-size bert-base --steps 3 --rounds 2
    # GPU: bert-base at seq 128, bf16 autocast on both sides (what Trainer(bf16=True) does), fused AdamW on both
    python3 benchmarks/bench_pretrain.py --device cuda --model-size bert-base --batch-size 128 --steps 20

Each route's line shows model TFLOP/s and MFU (recipes/pretrain/flops.py's count: the same model FLOPs for both routes,
with the MLM head at masked positions only; over the device's peak at the route's precision: on a CPU issue 56's,
the best matmul rate measured on the model's own products at the same threads (a probe after each round, the best
kept), with MFU over the square-matmul probe beside it; on a GPU the data sheet's, with MFU over the measured peak
beside it). The last line prints the measured peak.

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
from types import SimpleNamespace

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

    def opened(shards: Path, rows: int) -> PretrainingData:
        return PretrainingData(
            shards,
            VocabInfo.from_tokenizer(tok),
            # ModernBERT's recipe: 30% masked, no next-sentence prediction (its model has no NSP head)
            DataOptions(
                max_seq_length=seq_len, batch_size=rows, short_seq_prob=0.0, nsp=nsp, mask_prob=0.15 if nsp else 0.3
            ),
        )

    prepare_corpus([str(p) for p in books], workdir / "shards", vocab, progress=False, log=lambda m: None)
    data = opened(workdir / "shards", batch_size)
    if data.num_batches(0) == 0:  # the books hold fewer sequences than one batch: their text repeated to fill it
        import gzip
        import math

        have = opened(workdir / "shards", 1).num_batches(0)  # sequences per pass over the books
        if have == 0:
            raise SystemExit(f"the bundled books make no sequence of --seq-len {seq_len}")
        text = "".join(gzip.decompress(p.read_bytes()).decode() for p in books)
        repeated = workdir / "repeated.txt"
        repeated.write_text(text * (math.ceil(batch_size / have) + 1), encoding="utf-8")
        prepare_corpus([str(repeated)], workdir / "repeated", vocab, progress=False, log=lambda m: None)
        data = opened(workdir / "repeated", batch_size)
        if data.num_batches(0) == 0:
            raise SystemExit(f"--batch-size {batch_size}: the bundled books, repeated, still fill no batch")
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
    ap.add_argument(
        "--compile",
        action="store_true",
        help="compile both routes, on a CPU too (bertkit as `bertkit pretrain --compile`, transformers as Trainer's "
        "torch_compile). On a GPU both compile by default",
    )
    ap.add_argument("--eager", action="store_true", help="bertkit's route eager on a GPU too (`--no-compile`)")
    ap.add_argument(
        "--theirs-route",
        choices=("loop", "trainer"),
        default=None,
        help="transformers route: loop (its docs' plain loop) or trainer (as Trainer(bf16=True, torch_compile=True) "
        "runs a step: torch.compile, bf16 autocast, fused AdamW on CUDA); default trainer on cuda, loop on cpu",
    )
    ap.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="every dropout of both models (default: the preset's; 0 is --recipe budget's)",
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="STEPS",
        help="after the rounds, STEPS more of bertkit's step under torch.profiler, summarised as `bertkit pretrain "
        "--profile` does (training/profile.py; on a CPU with the matrix products' share: the step's ceiling, and the "
        "products by shape, each at its rate in the step and alone)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from bertkit import models
    from bertkit.data.pretraining.masking import mlm_inputs
    from bertkit.precision import MasterWeights, autocast, grad_scaler, resolve_precision, uses_master_weights
    from bertkit.recipes.pretrain.compiled import compile_step
    from bertkit.training.optim import build_optimizer, linear_schedule
    from bertkit.training.state import TrainState
    from bertkit.training.step import apply_update

    with tempfile.TemporaryDirectory() as tmp:
        arch = models.of_preset(args.model_size)  # bert-* or modernbert-*
        nsp = arch.pretraining_role == "pretraining"  # BERT's MLM + NSP; ModernBERT's masked LM alone
        batches, tok = make_batches(
            args.seq_len, args.batch_size, args.steps, Path(tmp), Path(args.vocab) if args.vocab else None, nsp
        )
    dev = torch.device(args.device)
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
    route = args.theirs_route or ("trainer" if dev.type == "cuda" else "loop")
    trainer = route == "trainer"  # Trainer(bf16=True, torch_compile=True): bf16 autocast over a compiled model
    theirs_precision = args.theirs_precision or ("bf16" if trainer else "fp32" if dev.type == "cpu" else precision)
    total = 10_000
    # bertkit's route is `bertkit pretrain`'s step: bf16 on a CPU trains the bf16 model over fp32 master weights
    masters = MasterWeights(ours) if uses_master_weights(precision, dev) else None
    opt_ours = build_optimizer(ours, lr=1e-4)
    if masters is not None:
        masters.adopt(opt_ours)
    state = TrainState(ours, opt_ours, linear_schedule(opt_ours, 100, total), grad_scaler(precision, dev))
    state.masters = masters
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-4, **({"fused": True} if dev.type == "cuda" else {}))
    sched_theirs = transformers.get_linear_schedule_with_warmup(opt_theirs, 100, total)
    compiled = (args.compile or dev.type == "cuda") and not args.eager  # `bertkit pretrain`'s default
    # compiled as `bertkit pretrain` compiles it (compiled.compile_step: on one GPU, CUDA graphs too)
    graph = compile_step(SimpleNamespace(compile=compiled), SimpleNamespace(device=dev, distributed=False), ours, True)
    run_ours = graph.model
    # bertkit's route gets its batches as `bertkit pretrain` hands them over: the labelled positions found on the
    # host (padded as a graphed step's), no attention mask where nothing is padded (the recipe's
    # masking.mlm_inputs); both routes' on the device
    ours_batches = [mlm_inputs({k: v.numpy() for k, v in b.items()}, graph.pad_to) for b in batches]
    ours_batches = [{k: torch.from_numpy(v).to(dev) for k, v in b.items()} for b in ours_batches]
    batches = [{k: v.to(dev) for k, v in b.items()} for b in batches]
    run_theirs = torch.compile(theirs) if args.compile or trainer else theirs

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step_ours(b):  # training.step's apply_update: masters, clipping, optimizer, schedule, zero_grad
        graph.begin()
        with autocast(precision, dev):
            loss = run_ours(**b).loss
        state.scaler.scale(loss).backward()
        apply_update(state, 1.0)
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
    inputs = {"bertkit": ours_batches, "transformers": batches}
    times: dict[str, list[float]] = {k: [] for k in routes}
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    for name, fn in routes.items():
        for i in range(args.warmup):
            fn(inputs[name][i % len(batches)])
    from bertkit.recipes.pretrain.flops import cpu_peak, device_peak, model_shapes, shapes_peak, train_flops

    # the peak (issue 56): the best matmul rate on the model's own products at the same threads, measured after
    # every round (the best over the rounds: a busy machine measures low)
    shapes = model_shapes(config, int(batches[0]["input_ids"].numel()), int((batches[0]["labels"] != -100).sum()))
    measured = dict.fromkeys({precision, theirs_precision}, 0.0)
    for r in range(args.rounds):
        for p in measured:
            measured[p] = max(measured[p], shapes_peak(shapes, p, dev, seconds=0.5))
        for name, fn in routes.items() if r % 2 == 0 else reversed(list(routes.items())):
            for i, b in enumerate(inputs[name]):
                sync()
                t0 = time.perf_counter()
                fn(b)
                sync()
                times[name].append((time.perf_counter() - t0) / tokens[i])
    n_params = sum(p.numel() for p in ours.parameters())
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{torch.get_num_threads()} threads"
    theirs_said = f"transformers {theirs_precision}" + (", as Trainer(bf16, torch_compile) runs it" if trainer else "")
    print(
        f"{args.model_size} ({n_params / 1e6:.1f}M params, vocab {vocab_size}), batch {args.batch_size} x seq "
        f"{args.seq_len}, {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"precision bertkit {precision}{' (bf16 weights, fp32 masters)' if masters is not None else ''} / "
        f"{theirs_said}{', compiled' if args.compile else ''}, bertkit {'compiled' if compiled else 'eager'}; "
        f"{args.rounds} rounds x {args.steps} steps per route"
    )
    med = {k: statistics.median(v) for k, v in times.items()}
    # MFU: the same model FLOPs for both routes (recipes/pretrain/flops.py: MLM head at masked positions only, as
    # bertkit computes it; the transformers route's full-vocabulary head is work the model does not need, so it shows as
    # lower MFU), over the device's peak at the route's precision: on a CPU the measured one (issue 56's), with the
    # square-matmul probe's (cpu_peak, what the training log's MFU uses) beside it; on a GPU the data sheet's, with
    # the measured one beside it
    if dev.type == "cpu":  # the square probe measured again (its cache keeps the highest figure seen)
        other = {p: cpu_peak(p, refresh=True) for p in measured}
        peaks, said = measured, "square-matmul probe"
    else:
        other, peaks, said = measured, {p: device_peak(dev, p) for p in measured}, "measured on the model's products"

    flops = sum(
        train_flops(config, b["attention_mask"].sum(-1).tolist(), int((b["labels"] != -100).sum()), nsp)
        for b in batches
    ) / sum(tokens)  # per real token
    for k, p in (("bertkit", precision), ("transformers", theirs_precision)):
        achieved, peak = flops / med[k], peaks[p]
        mfu = f"MFU {achieved / peak:6.1%} of {peak / 1e12:.3g} TFLOP/s" if peak else "MFU - (no peak)"
        mfu += f" ({said} {other[p] / 1e12:.3g} TFLOP/s: MFU {achieved / other[p]:.1%})" if other[p] else ""
        print(
            f"  {k:<13} {1 / med[k]:>9.0f} tokens/s   {med[k] * sum(tokens) / len(tokens) * 1000:8.1f} ms/step   "
            f"{achieved / 1e12:7.3f} model TFLOP/s   {mfu}"
        )
    print(
        f"  {precision} matmul peak measured on the model's products, {where}: "
        f"{measured[precision] / 1e12:.3g} TFLOP/s (the best of {args.rounds} probes, one after each round)"
    )
    print(f"  ratio bertkit / transformers: {med['transformers'] / med['bertkit']:.2f}x")
    if args.profile:
        from bertkit.training.profile import SHAPES, alone_rate, product_shapes, summarize  # with --profile

        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else []
        )
        cpu = dev.type == "cpu"  # the operands' shapes and the products' FLOPs: the CPU summary's products by shape
        with torch.profiler.profile(activities=activities, record_shapes=cpu, with_flops=cpu) as prof:
            sync()
            t0 = time.perf_counter()
            for i in range(args.profile):
                step_ours(ours_batches[i % len(ours_batches)])
            sync()
            wall = time.perf_counter() - t0
        print(summarize(prof.events(), args.profile, wall, (1, args.profile), dev.type))
        if cpu:  # each listed product alone, from memory and from cache: what the step's memory costs it
            print("the same products alone (same shapes and strides): TFLOP/s in the step, alone cold, alone hot")
            for p in product_shapes(prof.events())[:SHAPES]:
                rates = [alone_rate(p, cold=True), alone_rate(p)]
                said = "  ".join(f"{r / 1e12:6.2f}" if r else "     -" for r in rates)
                print(f"  {p.rate / 1e12:6.2f}  {said}  {p.name}  {p.shapes}  {p.strides}")


if __name__ == "__main__":
    main()
