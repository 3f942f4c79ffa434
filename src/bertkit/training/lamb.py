"""LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", algorithm 2):
Adam's moments with a layer-wise trust ratio. Per parameter tensor ``w`` (a "layer"), at step ``t``:

    m = beta1 m + (1 - beta1) g                  v = beta2 v + (1 - beta2) g^2
    r = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)        (bias-corrected Adam direction)
    u = r + weight_decay w                                           (decoupled decay, inside the ratio)
    w = w - lr * (||w|| / ||u||) * u                                 (trust ratio 1 where either norm is 0)

A group whose ``no_decay`` is true (``training.optim.parameter_groups``' biases and LayerNorm weights, as BERT's
LAMB and the LTG recipes exclude them) takes neither the decay nor the ratio: its step is Adam's, ``lr * r``. The
moments and the step count are the optimizer's state (``state_dict()``), so a resumed run continues exactly.
"""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB in plain PyTorch (one loop over the parameters; no fused kernel). ``betas``, ``eps`` and
    ``weight_decay`` as AdamW's; a group's ``no_decay`` (default False) excludes it from decay and the trust ratio."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ):
        if not lr >= 0 or not eps >= 0 or not weight_decay >= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"LAMB: lr {lr}, betas {betas}, eps {eps}, weight_decay {weight_decay} out of range")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, no_decay=False))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LAMB does not take sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = float(state["step"])
                m, v, g = state["exp_avg"], state["exp_avg_sq"], p.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                update = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt_().add_(group["eps"]))
                if group["no_decay"]:
                    p.add_(update, alpha=-group["lr"])
                    continue
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.float().norm(), update.float().norm()
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_(update * ratio.to(update.dtype), alpha=-group["lr"])
        return loss
