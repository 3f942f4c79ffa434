"""Pure-bf16 training over fp32 master weights (bertkit.precision.MasterWeights): the step, the checkpoint's masters
and a resume from it bit for bit, the saved model's fp32 weights, and a bf16 step's loss beside the fp32 step's."""

from __future__ import annotations

import copy
import random

import torch
from tinymodels import tiny_config

from bertkit.modeling import BertForPreTraining
from bertkit.precision import MasterWeights, autocast
from bertkit.training.checkpointing import load_checkpoint
from bertkit.training.distributed import DistContext
from bertkit.training.optim import build_optimizer, linear_schedule
from bertkit.training.state import TrainState
from bertkit.training.step import apply_update, optimizer_step


def _state(seed: int = 0) -> TrainState:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    masters = MasterWeights(model)
    optimizer = masters.adopt(build_optimizer(model, lr=1e-2))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return TrainState(model, optimizer, linear_schedule(optimizer, 2, 10), scaler, masters=masters)


def _step(state: TrainState) -> float:
    with autocast("bf16", "cpu"):
        loss = state.model(torch.randn(16, 4).bfloat16()).float().pow(2).mean()
    loss.backward()
    return apply_update(state, 1.0)


def test_the_optimizer_steps_fp32_masters_and_the_model_holds_them_rounded():
    """The model computes in bf16; the update is AdamW's on fp32 copies (a bf16 weight could not take an update
    below its rounding step), rounded into the model after each step; the model's gradients are cleared."""
    state = _state()
    assert all(p.dtype == torch.bfloat16 for p in state.model.parameters())
    assert all(m.dtype == torch.float32 for m in state.masters.params)
    assert {id(p) for g in state.optimizer.param_groups for p in g["params"]} == {id(m) for m in state.masters.params}
    before = [m.clone() for m in state.masters.params]
    for _ in range(3):
        _step(state)
    moved = [m - b for m, b in zip(state.masters.params, before)]
    assert all(d.abs().max() > 0 for d in moved)
    # updates smaller than bf16's step at the weight: kept by the masters, lost by a bf16 weight
    assert any(bool((d != 0).logical_and(d.abs() < b.abs() * 2**-9).any()) for d, b in zip(moved, before))
    for p, m in state.masters.pairs:
        assert torch.equal(p, m.to(torch.bfloat16)) and p.grad is None


def test_a_checkpoint_holds_the_masters_and_resumes_bit_for_bit(tmp_path):
    """Save after 2 steps, take 3 more; a fresh bf16 state loaded from the checkpoint takes the same 3: the
    checkpoint's weights are the fp32 masters (not the rounded model), so the resumed masters are the same numbers."""
    a = _state()
    for _ in range(2):
        _step(a)
    path = a.save(tmp_path, DistContext())
    saved = load_checkpoint(path)
    assert all(t.dtype == torch.float32 for t in saved["model"].values())
    assert all(torch.equal(saved["model"][k], m) for k, m in zip(("0.weight", "0.bias"), a.masters.params))
    random.random()
    for _ in range(3):
        _step(a)
    b = _state(seed=99)
    b.load(saved, DistContext())
    for _ in range(3):
        _step(b)
    for x, y in zip(a.masters.params, b.masters.params):
        assert torch.equal(x, y)
    for x, y in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(x, y)
    moments = [(a.optimizer.state[p], b.optimizer.state[q]) for p, q in zip(a.masters.params, b.masters.params)]
    assert all(torch.equal(x[k], y[k]) for x, y in moments for k in x if torch.is_tensor(x[k]))


def _pretraining_batch(vocab: int, g: torch.Generator) -> dict:
    ids = torch.randint(5, vocab, (4, 16), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, ::4] = ids[:, ::4]
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    return dict(
        input_ids=ids,
        attention_mask=mask,
        token_type_ids=torch.zeros_like(ids),
        labels=labels,
        next_sentence_label=torch.tensor([0, 1, 0, 1]),
    )


def test_a_bf16_step_is_close_to_the_fp32_step_and_saves_fp32_masters(tmp_path):
    """The same tiny BERT and batches: two optimizer steps of the pure-bf16 model (the run's route on a CPU with
    bf16 units) against two fp32 steps; the losses agree to bf16's precision, and the model saved after the run
    (``restore``) is fp32, the masters exactly: what transformers loads like any fp32 bertkit model."""
    torch.manual_seed(0)
    fp32 = BertForPreTraining(tiny_config(vocab_size=300, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    bf16 = copy.deepcopy(fp32)
    masters = MasterWeights(bf16)
    states = {}
    for name, model, precision in (("fp32", fp32, "fp32"), ("bf16", bf16, "bf16")):
        optimizer = build_optimizer(model, lr=1e-3)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        state = TrainState(model, optimizer, linear_schedule(optimizer, 0, 10), scaler)
        if precision == "bf16":
            state.masters = masters
            masters.adopt(optimizer)
        g = torch.Generator().manual_seed(1)
        losses = [
            optimizer_step(
                state, [_pretraining_batch(300, g)], lambda m, b: m(**b), clip=1.0, precision=precision, device="cpu"
            ).loss
            for _ in range(3)
        ]
        states[name] = losses
    for a, b in zip(states["fp32"], states["bf16"]):
        assert abs(a - b) <= 2e-2 * abs(a), states
    assert states["fp32"][2] != states["fp32"][0]  # the steps trained: the third loss is after two updates
    model = masters.restore()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(p, m) for (p, m) in masters.pairs)
    model.save_pretrained(tmp_path)
    loaded = BertForPreTraining.from_pretrained(tmp_path)
    assert all(torch.equal(x, y) for x, y in zip(loaded.state_dict().values(), model.state_dict().values()))
