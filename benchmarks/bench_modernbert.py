"""ModernBERT on CPU, side by side: (1) bertkit's unpadded inference against its padded path (and transformers'
padded forward) on mixed-length input; (2) bertkit's ModernBertForMaskedLM training step against transformers'.

Same config, same random weights (saved by bertkit, loaded by both), same batches; the paths alternate in one
process and the script prints medians and ratios (> 1 means the first-named path is slower, i.e. bertkit faster).

1. **Inference**: a batch of ``--batch-size`` rows whose lengths are drawn uniformly from ``--min-len`` ..
   ``--max-len`` (the mixed-length input of the ModernBERT paper's claim), encoded by ``ModernBertModel`` in fp32
   under ``torch.inference_mode``: padded (every row to the longest; local layers' band mask or blocked windows),
   unpadded (``packing=Packing(mask, groups)``: linear layers, norms and the MLP on the real tokens only, attention
   per group of ``--group`` rows of similar length), and transformers' ``ModernBertModel`` padded (sdpa).
2. **Training step**: forward + backward + clipping at 1.0 + AdamW step of ``ModernBertForMaskedLM`` at
   ``--train-len`` tokens, no padding, 30% of the tokens labelled (ModernBERT's masking rate). transformers' side:
   ``torch.optim.AdamW`` as its docs show, with its config's default ``sparse_prediction=False`` (vocabulary logits at
   every position) and, as a second row, with ``sparse_prediction=True`` (its own option to skip them); bertkit's
   side: ``build_optimizer`` (fused AdamW) and the sparse MLM head.
3. **Long context** (``--only long``): one document of ``--long-lengths`` tokens embedded by bertkit's
   ``ModernBertModel`` (fp32, inference mode), each length in a fresh process: seconds and the process's peak
   resident memory above the loaded model's. Local layers take the blocked O(T * W) path; global layers run SDPA
   without a mask (its flash kernel: no [T, T] matrix). No transformers column: this measures growth with length.

    .venv/bin/python benchmarks/bench_modernbert.py                                 # modernbert-mini, both parts
    .venv/bin/python benchmarks/bench_modernbert.py --only train --repeats 3 --warmup 1   # a quick check
    .venv/bin/python benchmarks/bench_modernbert.py --only long --threads 1               # 1024 .. 8192 tokens
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import transformers

from bertkit.modeling import Packing
from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel
from bertkit.training.optim import build_optimizer


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def alternate(paths: dict, repeats: int, warmup: int) -> dict[str, float]:
    """Run the paths in turn (warm-up rounds first); median seconds per path."""
    for _ in range(warmup):
        for fn in paths.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            times[name].append(timed(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def mixed_batch(config: ModernBertConfig, batch: int, lo: int, hi: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (batch,), generator=g)
    T = int(lengths.max())
    ids = torch.randint(1000, config.vocab_size, (batch, T), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids[mask == 0] = config.pad_token_id
    return ids, mask, lengths


def groups_by_length(lengths: torch.Tensor, size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: int(lengths[i]))
    return [order[i : i + size] for i in range(0, len(order), size)]


def inference(args, config: ModernBertConfig, directory: str) -> None:
    bk = ModernBertModel.from_pretrained(directory).eval()
    hf = transformers.ModernBertModel.from_pretrained(directory, attn_implementation="sdpa").eval()
    ids, mask, lengths = mixed_batch(config, args.batch_size, args.min_len, args.max_len)
    real = int(mask.sum())
    groups = groups_by_length(lengths, args.group)

    def padded():
        with torch.inference_mode():
            bk(ids, attention_mask=mask)

    def unpadded():
        with torch.inference_mode():
            bk(ids, attention_mask=mask, packing=Packing(mask, groups))

    def hf_padded():
        with torch.inference_mode():
            hf(input_ids=ids, attention_mask=mask)

    with torch.inference_mode():  # the paths compute the same thing
        a = bk(ids, attention_mask=mask).last_hidden_state[mask.bool()]
        b = bk(ids, attention_mask=mask, packing=Packing(mask, groups)).last_hidden_state[mask.bool()]
        c = hf(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
    print(
        f"inference: batch {args.batch_size}, lengths {args.min_len}..{args.max_len} (longest {ids.shape[1]}, "
        f"{real} real tokens of {ids.numel()} padded, {real / ids.numel():.0%}), groups of {args.group}; "
        f"max |diff| unpadded vs padded {(a - b).abs().max():.1e}, transformers vs padded {(a - c).abs().max():.1e}"
    )
    med = alternate(
        {"transformers padded": hf_padded, "bertkit padded": padded, "bertkit unpadded": unpadded},
        args.repeats,
        args.warmup,
    )
    for name, t in med.items():
        print(f"  {name}: {t * 1e3:.1f} ms ({real / t:,.0f} real tok/s)")
    print(
        f"  unpadded vs padded: {med['bertkit padded'] / med['bertkit unpadded']:.2f}x; "
        f"vs transformers padded: {med['transformers padded'] / med['bertkit unpadded']:.2f}x"
    )


def train(args, config: ModernBertConfig, directory: str) -> None:
    g = torch.Generator().manual_seed(1)
    B, T = args.train_batch, args.train_len
    ids = torch.randint(1000, config.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    chosen = torch.rand(B, T, generator=g) < 0.3
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = torch.where(chosen, torch.full_like(ids, 103), ids)

    bk = ModernBertForMaskedLM.from_pretrained(directory).train()
    bk_opt = build_optimizer(bk, lr=1e-4)
    paths = {}
    for sparse in (False, True):
        hf = transformers.ModernBertForMaskedLM.from_pretrained(
            directory, attn_implementation="sdpa", sparse_prediction=sparse
        ).train()
        hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4)

        def hf_step(hf=hf, hf_opt=hf_opt):
            out = hf(input_ids=inputs, attention_mask=mask, labels=labels)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
            hf_opt.step()
            hf_opt.zero_grad(set_to_none=True)

        paths[f"transformers (sparse_prediction={sparse})"] = hf_step

    def bk_step():
        out = bk(inputs, attention_mask=mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(bk.parameters(), 1.0)
        bk_opt.step()
        bk_opt.zero_grad(set_to_none=True)

    paths["bertkit"] = bk_step
    print(f"train step: batch {B}, seq {T}, 30% labelled, fp32, AdamW")
    med = alternate(paths, args.repeats, args.warmup)
    for name, t in med.items():
        print(
            f"  {name}: {t * 1e3:.1f} ms ({B * T / t:,.0f} tok/s)"
            + (f" | ratio {t / med['bertkit']:.2f}x" if name != "bertkit" else "")
        )


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def long_one(config: ModernBertConfig, length: int) -> None:
    """In its own process: build the model, note the peak RSS, embed one ``length``-token document, print a line."""
    torch.manual_seed(0)
    model = ModernBertModel(config).eval()
    ids = torch.randint(1000, config.vocab_size, (1, length))
    with torch.inference_mode():
        model(ids[:, :16])  # warm the kernels at a tiny size
        with open("/proc/self/clear_refs", "w") as f:  # Linux: reset the peak (VmHWM) to the current RSS
            f.write("5")
        before = _status_kib("VmRSS")
        start = time.perf_counter()
        model(ids)
        seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM") - before
    print(
        f"  {length} tokens: {seconds:.2f} s, peak memory above the model {peak / 1024:.0f} MiB "
        f"({peak / length:.1f} KiB per token)",
        flush=True,
    )


def long_context(args, config: ModernBertConfig) -> None:
    print("long context: one document, fp32, inference mode, each length in a fresh process")
    for length in args.long_lengths:
        cmd = [
            sys.executable,
            __file__,
            "--long-one",
            str(length),
            "--preset",
            args.preset,
            "--vocab-size",
            str(args.vocab_size),
            "--threads",
            str(args.threads),
        ]
        subprocess.run(cmd, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="modernbert-mini")
    parser.add_argument("--vocab-size", type=int, default=30522, help="30522: a BERT WordPiece vocabulary")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--group", type=int, default=8, help="rows per attention group of the unpadded path")
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--train-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = leave PyTorch's default)")
    parser.add_argument(
        "--long-lengths", type=lambda t: [int(x) for x in t.split(",")], default=[1024, 2048, 4096, 8192]
    )
    parser.add_argument("--long-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["inference", "train", "long"], default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ModernBertConfig.from_preset(
        args.preset,
        vocab_size=args.vocab_size,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
        bos_token_id=101,
        eos_token_id=102,
        max_position_embeddings=max(8192, args.max_len, args.train_len),
    )
    if args.long_one is not None:
        return long_one(config, args.long_one)
    print(
        f"{args.preset} (L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}/"
        f"I{config.intermediate_size}, window {config.local_attention}), vocab {config.vocab_size}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}"
    )
    if args.only == "long":
        return long_context(args, config)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        ModernBertForMaskedLM(config).save_pretrained(d)
        if args.only in (None, "inference"):
            inference(args, config, d)
        if args.only in (None, "train"):
            train(args, config, d)


if __name__ == "__main__":
    main()
