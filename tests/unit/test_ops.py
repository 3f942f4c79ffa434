"""bertkit.ops: the CPU dropout, the blockwise cross-entropy and the fused bf16 projection + cross-entropy against
the PyTorch functions they replace."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit import ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 31, 32, 33, 100])
def test_cross_entropy_matches_torch(dtype, rows):
    g = torch.Generator().manual_seed(rows)
    base = (torch.randn(rows, 1000, generator=g) * 4).to(dtype)
    labels = torch.randint(0, 1000, (rows,), generator=g)
    labels[2::3] = -100  # ignored, as F.cross_entropy's ignore_index (padded labelled positions)
    ours = base.clone().requires_grad_()
    ref = base.clone().requires_grad_()
    loss = ops.cross_entropy(ours, labels)
    expected = F.cross_entropy(ref.float(), labels)
    (loss * 3).backward()
    (expected * 3).backward()
    assert loss.dtype == torch.float32
    # bf16: within one bf16 rounding (2**-9) of the fp32 loss (the blockwise route adds in fp32)
    assert torch.allclose(loss, expected, rtol=1e-6, atol=1e-6 if dtype == torch.float32 else 2**-9)
    assert ours.grad.dtype == dtype
    rtol, atol = (1e-5, 1e-8) if dtype == torch.float32 else (1e-2, 1e-4)  # bf16: one rounding of the gradient
    assert torch.allclose(ours.grad.float(), ref.grad.float(), rtol=rtol, atol=atol)


def test_cross_entropy_rejects_bad_labels_and_shapes():
    logits = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        ops.cross_entropy(logits, torch.tensor([0, 1, 10, 2]))
    with pytest.raises(ValueError, match="expected logits"):
        ops.cross_entropy(logits, torch.tensor([0, 1]))


def test_drop_mask_rate_on_both_halves_of_each_draw():
    torch.manual_seed(0)
    n = 1_000_000
    for p in (0.1, 0.5, 0.9):
        mask = ops.drop_mask((n,), p).float()
        sd = (p * (1 - p) / (n / 2)) ** 0.5
        # even and odd elements come from the low and high 32 bits of one 64-bit draw: both must be uniform
        assert abs(mask[0::2].mean().item() - p) < 5 * sd
        assert abs(mask[1::2].mean().item() - p) < 5 * sd


def test_drop_mask_follows_the_default_generator():
    torch.manual_seed(7)
    a = ops.drop_mask((3, 5, 7), 0.3)
    torch.manual_seed(7)
    b = ops.drop_mask((3, 5, 7), 0.3)
    c = ops.drop_mask((3, 5, 7), 0.3)
    assert a.shape == (3, 5, 7) and a.dtype == torch.bool
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_scales_kept_elements_and_masks_gradients(dtype):
    torch.manual_seed(0)
    x = torch.randn(257, 129).to(dtype).requires_grad_()
    y = ops.dropout(x, 0.2)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - 0.2) < 0.01
    rtol = 1e-6 if dtype == torch.float32 else 1e-2
    assert torch.allclose(y[~dropped].float(), (x[~dropped] * 1.25).float(), rtol=rtol)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad == 0, dropped)
    assert torch.allclose(x.grad[~dropped].float(), torch.full_like(x.grad[~dropped].float(), 1.25))


def test_dropout_identity_when_off():
    x = torch.randn(10, 10)
    assert ops.dropout(x, 0.1, training=False) is x
    assert ops.dropout(x, 0.0) is x
    assert torch.equal(ops.dropout(x, 1.0), torch.zeros_like(x))
    module = ops.Dropout(0.1).eval()
    assert repr(module) == repr(torch.nn.Dropout(0.1))
    assert module(x) is x


def test_cross_entropy_backward_leaves_fp32_logits_unchanged():
    """The backward once computed the softmax in place in fp32 logits: the training-window accuracy, read after
    backward, then compared labels with garbage and logged 0.0 for every fp32 run."""
    logits = torch.randn(300, 50, requires_grad=True)
    out = logits * 1.0  # a non-leaf, as the MLM head's output is
    kept = out.detach().clone()
    ops.cross_entropy(out, torch.randint(0, 50, (300,))).backward()
    assert torch.equal(out.detach(), kept)


def test_a_bf16_segment_embedding_sums_its_gradient_in_fp32():
    """Every token of a batch reads one of 2 segment rows: their bf16 gradient, summed in bf16, was 4% off; summed
    in fp32 and rounded once it is within one bf16 rounding. The output and an fp32 table are nn.Embedding's."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 2, (32, 128), generator=g)
    grad = torch.randn(32, 128, 16, generator=g).bfloat16()
    table = torch.nn.Embedding(2, 16).bfloat16()
    out = ops.embedding(table, ids)
    assert torch.equal(out, table(ids))
    out.backward(grad)
    exact = torch.zeros(2, 16).index_add_(0, ids.reshape(-1), grad.reshape(-1, 16).float())
    torch.testing.assert_close(table.weight.grad.float(), exact, rtol=2**-8, atol=0)
    fp32 = torch.nn.Embedding(2, 16)
    assert ops.embedding(fp32, ids).grad_fn.name() == fp32(ids).grad_fn.name()


def _projection_case(rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 64, generator=g).bfloat16()
    weight = (torch.randn(1000, 64, generator=g) * 0.3).bfloat16()
    bias = (torch.randn(1000, generator=g) * 0.1).bfloat16()
    labels = torch.randint(0, 1000, (rows,), generator=g)
    labels[3::4] = -100  # ignored (mlm_inputs' padding)
    return x, weight, bias, labels


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_cross_entropy_bf16_matches_the_fp32_loss_and_gradients(with_bias):
    """The fused bf16 step against fp32 arithmetic on the same bf16 logits: the loss to one bf16 rounding of each
    target's probability (2**-8 in the log), and the three gradients, (softmax - one-hot) / n pushed through the
    projection in fp32, to bf16's roundings of the probabilities and of the results."""
    x, weight, bias, labels = _projection_case(50)
    bias = bias if with_bias else None
    params = [t.clone().requires_grad_() for t in (x, weight) + ((bias,) if with_bias else ())]
    loss, logits = ops.linear_cross_entropy(params[0], params[1], params[2] if with_bias else None, labels)
    assert torch.equal(logits, torch.nn.functional.linear(x, weight, bias))  # the very logits of F.linear
    assert not logits.requires_grad and loss.dtype == torch.float32
    reference = logits.float().requires_grad_()
    expected = F.cross_entropy(reference, labels)
    expected.backward()
    assert abs(loss.item() - expected.item()) < 2**-8
    (loss * 3).backward()
    dlogits = reference.grad * 3  # fp32: (softmax - one-hot) / n, 0 on ignored rows
    wanted = [dlogits @ weight.float(), dlogits.t() @ x.float()] + ([dlogits.sum(0)] if with_bias else [])
    for param, want in zip(params, wanted, strict=True):
        assert param.grad.dtype == torch.bfloat16
        err = (param.grad.float() - want).abs().max().item()
        assert err <= 2**-7 * want.abs().max().item(), (tuple(param.shape), err)


def test_linear_cross_entropy_takes_a_lost_probability_from_the_logits():
    """A target 120 below its row's top logit has probability e**-120: 0 in bf16, so -log p would be inf. That row's
    loss comes from an fp32 log-sum-exp of its logits; its gradient is the softmax's, -1 at the target."""
    x = torch.zeros(2, 4).bfloat16()
    x[:, 0] = 1
    weight = torch.zeros(5, 4).bfloat16()
    weight[0, 0], weight[1, 0] = 120.0, 0.0
    labels = torch.tensor([1, 0])
    leaf = x.clone().requires_grad_()
    loss, logits = ops.linear_cross_entropy(leaf, weight, None, labels)
    expected = F.cross_entropy(logits.float(), labels)
    assert torch.isfinite(loss) and abs(loss.item() - expected.item()) < 1e-3  # about (120 + 0) / 2 = 60
    loss.backward()
    assert torch.isfinite(leaf.grad.float()).all()


def test_linear_cross_entropy_elsewhere_is_the_two_functions():
    """fp32 (or off the CPU): F.linear then ops.cross_entropy, the logits keeping their gradient."""
    x, weight, bias, labels = _projection_case(20)
    x, weight, bias = x.float().requires_grad_(), weight.float(), bias.float()
    loss, logits = ops.linear_cross_entropy(x, weight, bias, labels)
    assert logits.requires_grad
    torch.testing.assert_close(loss, F.cross_entropy(F.linear(x, weight, bias), labels))
    with pytest.raises(ValueError, match=r"\[0, 1000\)"):
        ops.linear_cross_entropy(x.bfloat16(), weight.bfloat16(), None, torch.full((20,), 1000))


def test_workspace_hands_a_buffer_out_again_only_once_nothing_holds_it():
    ws = ops.Workspace(keep=3)
    cpu = torch.device("cpu")
    a = ws.take((4, 8), torch.float32, cpu)
    first = a.data_ptr()
    b = ws.take((4, 8), torch.float32, cpu)
    assert b.data_ptr() != first  # a is still held
    del a
    assert ws.take((4, 8), torch.float32, cpu).data_ptr() == first  # free again: the same memory
    # a buffer a backward pass has saved is not free until that pass has run
    c = ws.take((4, 8), torch.float32, cpu).fill_(1.0)
    x = torch.ones(4, 8, requires_grad=True)
    y = (x * c).sum()
    del c
    assert ws.take((4, 8), torch.float32, cpu).data_ptr() != first
    y.backward()
    assert ws.take((4, 8), torch.float32, cpu).data_ptr() == first
    # past keep buffers, a request gets a plain tensor; a request larger than every free buffer replaces them
    del b
    held = [ws.take((4, 8), torch.float32, cpu) for _ in range(4)]
    assert len(ws.buffers) == 3 and len({t.data_ptr() for t in held}) == 4
    del held
    big = ws.take((40, 8), torch.float32, cpu)
    assert [buf.numel() >= 320 for buf, _ in ws.buffers] == [True]
    assert big.data_ptr() == ws.buffers[0][0].data_ptr()


def test_linear_cross_entropy_never_writes_over_logits_a_caller_keeps():
    """The bf16 route's logits live in the workspace's buffers: logits a caller still holds (the training-window
    accuracy reads the last step's) are not the next call's, and keep their values through its forward and
    backward."""
    x, weight, bias, labels = _projection_case(50)
    _, kept = ops.linear_cross_entropy(x, weight, bias, labels)
    before = kept.clone()
    leaf = (x * 2).requires_grad_()
    loss, logits = ops.linear_cross_entropy(leaf, weight, bias, labels)
    loss.backward()
    assert logits.data_ptr() != kept.data_ptr() and torch.equal(kept, before)
    assert torch.equal(logits, F.linear(leaf.detach(), weight, bias))
