"""Attention on a CPU: PyTorch's ``scaled_dot_product_attention`` against bertkit's eager path (two matmuls and a
softmax, ``modeling.eager_attention``), forward and backward or forward alone, at the shapes of the budget models.

The figures behind ``modeling.BF16_CPU_EAGER_UP_TO``: where bf16 attention on a CPU takes the eager path. Each
shape's two routes alternate over the rounds on the same inputs; medians of the per-call times and the ratio
(SDPA's time over the eager path's: above 1, eager is faster).

    .venv/bin/python benchmarks/bench_attention.py --threads 1
    .venv/bin/python benchmarks/bench_attention.py --threads 2 --dtype fp32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bertkit.modeling import eager_attention

# (batch, heads, tokens, head size): the budget's batches of 4,096 tokens at 32, 64, 128 and 256 tokens,
# modernbert-tiny's 2 heads and modernbert-mini's 4, and one batch at 512
SHAPES = [(128, 2, 32, 64), (64, 2, 64, 64), (32, 4, 128, 64), (16, 4, 256, 64), (8, 4, 512, 64)]


def timed(fn, q, k, v, grad, backward: bool) -> float:
    t = time.perf_counter()
    if backward:
        fn(q, k, v).backward(grad)
    else:
        with torch.no_grad():
            fn(q, k, v)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--band", action="store_true", help="a band mask of +-64 tokens (ModernBERT's local layers)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.dtype}, mask {'band' if args.band else 'none'}")
    for backward in (True, False):
        for B, N, T, D in SHAPES:
            g = torch.Generator().manual_seed(T)
            q, k, v = (torch.randn(B, N, T, D, generator=g, dtype=dtype, requires_grad=backward) for _ in range(3))
            grad = torch.randn(B, N, T, D, generator=g, dtype=dtype)
            pos = torch.arange(T)
            mask = ((pos[:, None] - pos[None, :]).abs() <= 64)[None, None] if args.band else None
            routes = {
                "sdpa": lambda q, k, v, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                "eager": lambda q, k, v, m=mask: eager_attention(q, k, v, m, 0.0)[0],
            }
            times: dict[str, list[float]] = {name: [] for name in routes}
            for r in range(args.rounds + 1):  # the first round warms up
                for name in routes if r % 2 == 0 else reversed(list(routes)):
                    t = timed(routes[name], q, k, v, grad, backward)
                    if r:
                        times[name].append(t)
            med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
            print(
                f"{'forward+backward' if backward else 'forward':>16}  {B:>3} x {N} heads x {T:>3} tokens x {D}:  "
                f"sdpa {med['sdpa']:7.2f} ms  eager {med['eager']:7.2f} ms  "
                f"sdpa/eager {med['sdpa'] / med['eager']:.2f}x"
            )


if __name__ == "__main__":
    main()
