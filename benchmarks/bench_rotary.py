"""Rotary positions on a CPU in training: bertkit's rotation (``modeling_modernbert.apply_rotary``: four in-place
passes into one tensor, its backward the rotation by minus the angle) against the reference formula as transformers
writes it (``q * cos + rotate_half(q) * sin``; in bf16 on the halves, as bertkit did before), forward and backward of
q and k cut from one qkv projection, at the budget's two shapes of 4,096 tokens (modernbert-mini: 4 heads of 64).

The two routes alternate on the same inputs; medians of the per-call times and the ratio (the reference's time over
bertkit's: above 1, bertkit is faster).

    .venv/bin/python benchmarks/bench_rotary.py --threads 1
    .venv/bin/python benchmarks/bench_rotary.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bertkit.modeling_modernbert import apply_rotary, rotate_half, rotate_halves

SHAPES = [(128, 32), (32, 128)]  # (batch, tokens): the budget's first 70% of steps, then the rest
HEADS, HEAD_SIZE = 4, 64


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotation autograd differentiates: transformers' formula; a bf16 q or k on the halves, without the fp32
    round trip (bertkit's route before, a bf16 transformers model's arithmetic)."""
    if x.dtype == torch.bfloat16:
        half = x.size(-1) // 2
        return rotate_halves(x, cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype))
    return x * cos + rotate_half(x) * sin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"rotary forward and backward of q and k, {args.threads} thread(s), torch {torch.__version__}")
    for dtype in (torch.bfloat16, torch.float32):
        for batch, tokens in SHAPES:
            qkv = torch.randn(batch, tokens, 3 * HEADS * HEAD_SIZE, dtype=dtype)
            inv = 1.0 / (10000 ** (torch.arange(0, HEAD_SIZE, 2).float() / HEAD_SIZE))
            angles = torch.arange(tokens).float()[:, None] * inv
            angles = torch.cat((angles, angles), -1)
            cos, sin = angles.cos()[None, None], angles.sin()[None, None]  # [1, 1, T, D]
            grad = torch.randn(batch, HEADS, tokens, HEAD_SIZE, dtype=dtype)
            times: dict[str, list[float]] = {"reference": [], "bertkit": []}
            for r in range(args.rounds):
                for name, fn in (("reference", reference), ("bertkit", apply_rotary))[:: 1 if r % 2 else -1]:
                    w = qkv.clone().requires_grad_()
                    t = time.perf_counter()
                    q, k, _ = w.view(batch, tokens, 3, HEADS, HEAD_SIZE).permute(2, 0, 3, 1, 4).unbind(0)
                    torch.autograd.backward([fn(q, cos, sin), fn(k, cos, sin)], [grad, grad])
                    times[name].append(time.perf_counter() - t)
            ref, ours = (statistics.median(times[k][3:]) for k in ("reference", "bertkit"))
            print(
                f"  {str(dtype).removeprefix('torch.'):<9} {batch:>4} x {tokens:<4} reference {ref * 1e3:7.2f} ms   "
                f"bertkit {ours * 1e3:7.2f} ms   {ref / ours:.2f}x"
            )


if __name__ == "__main__":
    main()
