"""LAMB (``bertkit.training.lamb``, ``--optimizer lamb``): its steps equal You et al.'s algorithm written naively here
(the trust ratio, its 1 at a zero norm, the groups kept out of decay and ratio), it trains, and its state survives
the checkpoint round trip so that a resumed run continues exactly."""

from __future__ import annotations

import math

import torch
from torch import nn

from bertkit.training.checkpointing import load_checkpoint, save_checkpoint
from bertkit.training.lamb import Lamb
from bertkit.training.optim import build_optimizer


class Toy(nn.Module):
    """A weight matrix, its bias, a LayerNorm, and a matrix that starts at zero (||w|| = 0: ratio 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(5, 4)
        self.LayerNorm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 3, bias=False)
        nn.init.zeros_(self.out.weight)

    def forward(self, x):
        return self.out(self.LayerNorm(self.dense(x)))


def _loss(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)
    return ((model(x) - y) ** 2).mean()


def naive_lamb(params, steps, lr, wd, decays, beta1=0.9, beta2=0.999, eps=1e-6):
    """The paper's algorithm 2, one parameter at a time, in float64: ``steps`` lists each step's gradients."""
    w = [p.detach().double().clone() for p in params]
    m = [torch.zeros_like(x) for x in w]
    v = [torch.zeros_like(x) for x in w]
    for t, grads in enumerate(steps, start=1):
        for i, g in enumerate(grads):
            g = g.double()
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            m_hat, v_hat = m[i] / (1 - beta1**t), v[i] / (1 - beta2**t)
            r = m_hat / (v_hat.sqrt() + eps)
            if not decays[i]:  # bias / LayerNorm: Adam's step, no decay, no ratio
                w[i] = w[i] - lr * r
                continue
            u = r + wd * w[i]
            w_norm = math.sqrt(float((w[i] ** 2).sum()))
            u_norm = math.sqrt(float((u**2).sum()))
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            w[i] = w[i] - lr * ratio * u
    return w


def test_lamb_steps_equal_the_papers_update_written_naively():
    torch.manual_seed(0)
    model = Toy()  # float32, as trained; the naive reference runs in float64
    opt = build_optimizer(model, lr=0.05, weight_decay=0.1, optimizer="lamb")
    assert isinstance(opt, Lamb)
    params = [p for g in opt.param_groups for p in g["params"]]
    decays = [not g["no_decay"] for g in opt.param_groups for _ in g["params"]]
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p, d in zip(params, decays) if d} == {"dense.weight", "out.weight"}
    start = [p.detach().clone() for p in params]
    grads = []
    for step in range(4):
        opt.zero_grad()
        _loss(model, step).backward()
        grads.append([p.grad.detach().clone() for p in params])  # each step's, at the weights the run had then
        opt.step()
    expected = naive_lamb(start, grads, lr=0.05, wd=0.1, decays=decays)
    for got, e in zip(params, expected):
        torch.testing.assert_close(got.detach().double(), e, atol=1e-6, rtol=0)
    assert float(params[-1].detach().abs().sum()) > 0  # the zero-started matrix moved (ratio 1, not 0/0)


def test_lamb_trains_a_loss_down():
    torch.manual_seed(1)
    model = Toy()
    opt = build_optimizer(model, lr=0.02, weight_decay=0.01, optimizer="lamb")
    before = float(_loss(model, 0).detach())
    for _ in range(60):
        opt.zero_grad()
        _loss(model, 0).backward()
        opt.step()
    assert float(_loss(model, 0).detach()) < 0.5 * before


def test_lamb_state_round_trips_through_a_checkpoint(tmp_path):
    """3 steps, a checkpoint, a fresh model and optimizer loaded from it, 2 more steps == 5 steps uninterrupted."""

    def run(model, opt, steps):
        for s in steps:
            opt.zero_grad()
            _loss(model, s).backward()
            opt.step()

    torch.manual_seed(2)
    whole = Toy()
    whole_opt = build_optimizer(whole, lr=0.02, optimizer="lamb")
    torch.manual_seed(2)
    first = Toy()
    first_opt = build_optimizer(first, lr=0.02, optimizer="lamb")
    run(whole, whole_opt, range(5))
    run(first, first_opt, range(3))
    path = save_checkpoint(tmp_path, 3, {"model": first.state_dict(), "optimizer": first_opt.state_dict()})
    saved = load_checkpoint(path)  # weights_only=True
    resumed = Toy()
    resumed.load_state_dict(saved["model"])
    resumed_opt = build_optimizer(resumed, lr=0.02, optimizer="lamb")
    resumed_opt.load_state_dict(saved["optimizer"])
    assert float(resumed_opt.state[next(resumed.parameters())]["step"]) == 3
    run(resumed, resumed_opt, range(3, 5))
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
