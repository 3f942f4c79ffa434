"""``bertkit pretrain --profile N``: where a training step's time goes, measured by ``torch.profiler`` over N steps
from the middle of the run (past compilation, and inside the last ramp stage).

    profile = StepProfile(steps=8, device=device)
    ...after each step:  text = profile.after_step(step, total_steps)   # the summary once the N steps are done

On a GPU the summary answers what issue 63 asks of a step: the wall time against the time the GPU's kernels ran
(their sum: one stream runs one kernel at a time), the kernel launches and host synchronisations per step, and the
kernels that take the most time. On a CPU, the operators with the most time of their own, and the matrix products'
share of that time (``PRODUCTS``): the step's ceiling where everything else cost nothing, so the most that fusing
or removing the other passes can buy (issue 63's question on a CPU whose bf16 products are fast, AMX); then the
products by their operands' shapes, each with the rate it ran at inside the step (the profiler's FLOP count over
its own time), which :func:`alone_rate` measures for the same shapes and strides outside it. The profiler adds a
few microseconds to each launch, so the wall time it reports is a little above an unprofiled step's.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time

import torch

# CUDA runtime and driver calls, as the profiler names them
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
TOP = 15
# the CPU operators that are matrix products (their own time is the product's: oneDNN's or MKL's kernel); aten::linear
# and aten::matmul only dispatch to them. Attention's fused kernel (SDPA's, products and softmax together) is not one
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation")
SHAPES = 8  # the products by shape a CPU summary lists


class StepProfile:
    """Profiles ``steps`` steps from the middle of the run (the first step at or past half of ``total_steps``, past
    ``warm`` steps, and past the step :meth:`after_step`'s ``not_before`` names) and returns their summary once."""

    def __init__(self, steps: int, device: torch.device | str, warm: int = 20):
        self.steps, self.device, self.warm = steps, torch.device(device), warm
        self.profiler = None
        self.first = self.t0 = None
        self.done = steps <= 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def after_step(self, step: int, total_steps: int, not_before=None) -> str | None:
        """Called after each optimizer step (``step`` steps done): starts, or ends and summarises. ``not_before(
        total_steps)``: a step to start at or after (the recipe's: inside the last ramp stage, the sequences the
        run ends on), where the run has room for it."""
        if self.done:
            return None
        if self.profiler is None:
            start = max(self.warm, total_steps // 2)
            if not_before is not None and not_before(total_steps) + self.steps <= total_steps:
                start = max(start, not_before(total_steps))
            if step >= start and step + self.steps <= total_steps:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if self.device.type == "cuda":
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                self._sync()
                # on a CPU the operands' shapes and the products' FLOPs: the summary's products by shape
                cpu = self.device.type == "cpu"
                self.profiler = torch.profiler.profile(activities=activities, record_shapes=cpu, with_flops=cpu)
                self.profiler.__enter__()
                self.first, self.t0 = step, time.perf_counter()
            return None
        if step - self.first < self.steps:
            return None
        self._sync()
        wall = time.perf_counter() - self.t0
        self.profiler.__exit__(None, None, None)
        self.done = True
        return summarize(self.profiler.events(), self.steps, wall, (self.first + 1, step), self.device.type)


def summarize(events, steps: int, wall_s: float, span: tuple[int, int], device_type: str) -> str:
    """The summary's text: one line of totals per step, then the top kernels (GPU) or operators (CPU) by time."""
    from torch.autograd import DeviceType  # the profiler's event kinds

    def ms(us: float) -> str:  # µs over the steps -> ms a step
        return f"{us / 1e3 / steps:.3f}"

    head = f"profile of steps {span[0]}-{span[1]} ({steps} steps, torch.profiler): wall {wall_s * 1e3 / steps:.2f}"
    head += " ms a step"
    kernels: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    calls = collections.Counter()
    for e in events:
        if e.device_type == DeviceType.CUDA:
            k = kernels[e.name]
            k[0] += e.time_range.elapsed_us()
            k[1] += 1
        elif e.name in LAUNCHES or e.name in SYNCS:
            calls[e.name] += 1
    lines = []
    if device_type == "cuda":
        busy = sum(t for t, _ in kernels.values())
        syncs = sum(calls[n] for n in SYNCS)
        lines.append(
            f"{head}; GPU kernels {ms(busy)} ms a step ({busy / 1e6 / wall_s:.0%} of the wall time); "
            f"{sum(calls[n] for n in LAUNCHES) / steps:.0f} launches a step; {syncs / steps:.1f} host syncs a step"
            + (f" ({', '.join(f'{n} {calls[n]}' for n in SYNCS if calls[n])})" if syncs else "")
        )
        lines.append("top kernels: ms a step, share of kernel time, calls a step, name")
        for name, (t, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:TOP]:
            lines.append(f"  {ms(t):>8}  {t / max(busy, 1e-9):5.1%}  {n / steps:6.1f}  {name[:110]}")
    else:
        own: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
        for e in events:
            if e.device_type == DeviceType.CPU:
                o = own[e.name]
                o[0] += e.self_cpu_time_total
                o[1] += 1
        total = sum(t for t, _ in own.values())
        products = sum(own[n][0] for n in PRODUCTS if n in own)
        share = products / max(total, 1e-9)
        lines.append(
            f"{head}; operators' own time {ms(total)} ms a step; matrix products {ms(products)} ms a step ({share:.0%}:"
            f" with every other operator free the step would be at most {1 / max(share, 1e-9):.1f}x faster)"
        )
        lines.append("top operators: ms a step, share, calls a step, name")
        for name, (t, n) in sorted(own.items(), key=lambda kv: -kv[1][0])[:TOP]:
            lines.append(f"  {ms(t):>8}  {t / max(total, 1e-9):5.1%}  {n / steps:6.1f}  {name[:110]}")
        rows = product_shapes(events)
        if rows:
            lines.append("matrix products by shape: ms a step, calls a step, TFLOP/s in the step, op, shapes, strides")
            for r in rows[:SHAPES]:
                lines.append(
                    f"  {ms(r.own_us):>8}  {r.calls / steps:6.1f}  {r.rate / 1e12:6.2f}  "
                    f"{r.name}  {r.shapes}  {r.strides}"
                )
    return "\n".join(lines)


@dataclasses.dataclass
class Product:
    """The calls of one matrix-product operator on one set of operand shapes and strides, over the profile."""

    name: str
    shapes: tuple
    strides: tuple
    dtype: str
    calls: int = 0
    own_us: float = 0.0
    flops: float = 0.0

    @property
    def rate(self) -> float:
        """FLOP/s inside the step: the profiler's FLOPs over the calls' own time."""
        return self.flops / max(self.own_us * 1e-6, 1e-15)


def product_shapes(events) -> list[Product]:
    """The profile's matrix products (``PRODUCTS``) grouped by operator, operand shapes and strides, most time
    first; empty where the profile recorded no shapes or FLOPs (``record_shapes`` and ``with_flops``)."""
    from torch.autograd import DeviceType  # the profiler's event kinds

    groups: dict[tuple, Product] = {}
    for e in events:
        if e.device_type != DeviceType.CPU or e.name not in PRODUCTS or not getattr(e, "flops", 0):
            continue
        shapes = tuple(tuple(x) for x in e.input_shapes if x)
        strides = tuple(tuple(x) for x in (getattr(e, "structured_input_strides", None) or []) if x)
        dtypes = [d for d in (e.input_dtypes or []) if d]
        key = (e.name, shapes, strides)
        if key not in groups:
            groups[key] = Product(e.name, shapes, strides, dtypes[0] if dtypes else "")
        g = groups[key]
        g.calls, g.own_us, g.flops = g.calls + 1, g.own_us + e.self_cpu_time_total, g.flops + e.flops
    return sorted(groups.values(), key=lambda g: -g.own_us)


# the products alone_rate rebuilds: the function and its operands' count (those after them, recorded where the call
# wrote into a given tensor, are its out=)
REBUILT = {
    "aten::mm": (torch.mm, 2),
    "aten::bmm": (torch.bmm, 2),
    "aten::addmm": (torch.addmm, 3),
    "aten::baddbmm": (torch.baddbmm, 3),
}
COLD_BYTES, COLD_COPIES = 512 * 2**20, 256  # cold operands: copies to fill this, over any last-level cache (at most)


def alone_rate(product: Product, seconds: float = 0.2, cold: bool = False) -> float | None:
    """FLOP/s of ``product``'s operator on operands of its shapes and strides, alone and repeated over ``seconds``.
    Hot (the default): the same operands every call, in cache; the best time (a peak, as ``flops.shapes_peak``).
    ``cold``: each call on the next of copies that fill ``COLD_BYTES`` (at most ``COLD_COPIES``: a small product
    stays in cache), its output written into the next of as many buffers (touched beforehand: no page faults), as
    a step's operands come from memory; the median time (a cache as large as the copies lets the best call find
    its operands there). None for an operator or dtype it cannot rebuild."""
    dtype = {"c10::BFloat16": torch.bfloat16, "float": torch.float32, "c10::Half": torch.float16}.get(product.dtype)
    op, n = REBUILT.get(product.name, (None, 0))
    if dtype is None or op is None or len(product.strides) != len(product.shapes) or len(product.shapes) < n:
        return None
    g = torch.Generator().manual_seed(0)

    def operands() -> list[torch.Tensor]:
        out = []
        for shape, stride in zip(product.shapes[:n], product.strides[:n], strict=True):
            size = max(1, sum((k - 1) * st for k, st in zip(shape, stride, strict=True)) + 1)
            out.append(torch.as_strided(torch.randn(size, generator=g).to(dtype), shape, stride))
        return out

    first = operands()
    result = op(*first)  # the warm-up (the library picks its kernel); the output's shape
    bytes_ = sum(t.untyped_storage().nbytes() for t in first) + result.untyped_storage().nbytes()
    copies = min(COLD_COPIES, max(2, COLD_BYTES // max(bytes_, 1))) if cold else 1
    sets = [first] + [operands() for _ in range(copies - 1)]
    outs = [torch.zeros_like(result) for _ in range(copies)] if cold else [None]
    flops = product.flops / product.calls
    times, deadline, i = [], time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline or i < 2 * copies:
        j = i % copies
        t = time.perf_counter()
        op(*sets[j], out=outs[j])
        times.append(time.perf_counter() - t)
        i += 1
    return flops / (statistics.median(times[copies:]) if cold else min(times))
