"""``bertkit pretrain --profile``'s summary (training/profile.py), from events built by hand: the per-step
arithmetic of kernel time, launches and syncs on a GPU, and of operators' own time on a CPU; and the window it
profiles on a CPU run."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch.autograd import DeviceType

from bertkit.training.profile import StepProfile, alone_rate, product_shapes, summarize


def event(name, device_type, us=0.0, own_us=0.0):
    return SimpleNamespace(
        name=name,
        device_type=device_type,
        time_range=SimpleNamespace(elapsed_us=lambda: us),
        self_cpu_time_total=own_us,
    )


def test_gpu_summary_counts_kernel_time_launches_and_syncs_per_step():
    events = (
        [event("gemm", DeviceType.CUDA, us=300.0)] * 4  # 1,200 µs over 2 steps
        + [event("elementwise", DeviceType.CUDA, us=100.0)] * 2  # 200 µs
        + [event("cudaLaunchKernel", DeviceType.CPU)] * 6
        + [event("cudaStreamSynchronize", DeviceType.CPU)] * 2
        + [event("aten::mm", DeviceType.CPU, own_us=5.0)]
    )
    text = summarize(events, steps=2, wall_s=0.002, span=(11, 12), device_type="cuda").splitlines()
    # 1,400 µs of kernels over 2 steps of 1 ms each: 0.7 ms a step, 70% of the wall
    assert "wall 1.00 ms a step" in text[0] and "GPU kernels 0.700 ms a step (70% of the wall time)" in text[0]
    assert "3 launches a step" in text[0] and "1.0 host syncs a step (cudaStreamSynchronize 2)" in text[0]
    assert text[2].split() == ["0.600", "85.7%", "2.0", "gemm"]
    assert text[3].split() == ["0.100", "14.3%", "1.0", "elementwise"]


def test_cpu_summary_ranks_operators_by_their_own_time_and_counts_the_products_share():
    events = [
        event("aten::mm", DeviceType.CPU, own_us=2000.0),
        event("aten::addmm", DeviceType.CPU, own_us=1000.0),
        event("aten::add", DeviceType.CPU, own_us=1000.0),
        event("aten::linear", DeviceType.CPU, own_us=0.0),  # dispatches to addmm: not a product of its own
        event("aten::_scaled_dot_product_flash_attention_for_cpu", DeviceType.CPU, own_us=2000.0),  # not a product
    ]
    text = summarize(events, steps=4, wall_s=0.004, span=(1, 4), device_type="cpu").splitlines()
    assert "operators' own time 1.500 ms a step" in text[0]
    # 3,000 of 6,000 µs are products: the rest free, the step at most 2x faster
    said = "matrix products 0.750 ms a step (50%: with every other operator free the step would be at most 2.0x"
    assert said in text[0]
    assert text[2].split() == ["0.500", "33.3%", "0.2", "aten::mm"]


def test_the_profiled_window_is_the_middle_of_the_run_and_is_summarised_once():
    profile = StepProfile(steps=2, device="cpu", warm=1)
    x = torch.ones(8, 8)
    said = []
    for step in range(1, 11):
        x = x @ x / 8
        said.append(profile.after_step(step, total_steps=10))
    # starts after step 5 (half of 10), ends after step 7: steps 6-7
    assert [i + 1 for i, s in enumerate(said) if s] == [7]
    assert said[6].startswith("profile of steps 6-7 (2 steps, torch.profiler)") and "aten::" in said[6]
    # a last ramp stage from step 8 on: the window moves into it; one that leaves no room is not waited for
    for last_stage, expect in ((8, "profile of steps 9-10"), (9, "profile of steps 6-7")):
        profile = StepProfile(steps=2, device="cpu", warm=1)
        texts = [profile.after_step(step, 10, lambda total, s=last_stage: s) for step in range(1, 11)]
        assert [t.split(" (")[0] for t in texts if t] == [expect]


def test_products_are_grouped_by_shape_and_strides_with_their_rate_in_the_step():
    """A real profile (record_shapes, with_flops): the forward's product and the same shapes with a transposed
    operand are two rows, each with the profiler's FLOPs (2mkn a call); the summary lists them with their rate, and
    alone_rate rebuilds each on operands of the same strides, hot and cold; an addmm written into a given tensor
    (its out= recorded as a fourth operand) too."""
    a, w, bias, out = torch.randn(64, 32), torch.randn(48, 32), torch.randn(48), torch.empty(64, 48)
    with torch.profiler.profile(record_shapes=True, with_flops=True) as prof:
        for _ in range(3):
            torch.nn.functional.linear(a, w)  # mm on (64, 32) x w.t(): strides (32, 1), (1, 32)
            torch.mm(a.t().contiguous().t(), w.t())  # the first operand column-major: strides (1, 64)
            torch.addmm(bias, a, w.t(), out=out)
    rows = product_shapes(prof.events())
    mms = [r for r in rows if r.name == "aten::mm"]
    assert {r.strides for r in mms} == {((32, 1), (1, 32)), ((1, 64), (1, 32))}
    for r in rows:
        assert r.shapes[-2:] == ((32, 48), (64, 48)) if r.name == "aten::addmm" else r.shapes == ((64, 32), (32, 48))
        assert r.calls == 3 and r.flops == 3 * 2 * 64 * 32 * 48 and r.own_us > 0
        assert alone_rate(r, seconds=0.01) > 0 and alone_rate(r, seconds=0.01, cold=True) > 0
    assert len(mms) == 2 and len(rows) == 3
    text = summarize(prof.events(), steps=3, wall_s=0.01, span=(1, 3), device_type="cpu")
    assert "matrix products by shape" in text and "((1, 64), (1, 32))" in text
    # a hand-built profile without shapes or FLOPs has no such section
    plain = summarize([event("aten::mm", DeviceType.CPU, own_us=5.0)], 1, 0.001, (1, 1), "cpu")
    assert "by shape" not in plain
