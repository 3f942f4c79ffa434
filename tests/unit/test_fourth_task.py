"""A fourth training task, written as docs/design.md ("Adding a training task") tells a newcomer to: distillation
of a tiny BERT's masked-LM distribution into a smaller student. The recipe below says only how its batches are
made and what its loss is; the training core (bertkit.training) does the rest: the optimizer step (autocast, loss
scaling, clipping, schedule), the resumable state and the run directory. Tested: it learns, it resumes after a
kill exactly as if never stopped, and it calls none of what the core owns."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tinymodels import tiny_config

from bertkit import BertForPreTraining
from bertkit.errors import InputError
from bertkit.precision import grad_scaler
from bertkit.training.distributed import DistContext
from bertkit.training.optim import build_optimizer, linear_schedule
from bertkit.training.rundir import RunDir
from bertkit.training.state import TrainState, seed_everything
from bertkit.training.step import optimizer_step


class Killed(Exception):
    """Stands for SIGKILL: the process ends between two checkpoints."""


def distill(
    teacher: torch.nn.Module,
    texts: torch.Tensor,
    output: Path,
    *,
    steps: int,
    batch_size: int = 4,
    lr: float = 3e-3,
    clip: float = 1.0,
    precision: str = "fp32",
    save_every: int = 3,
    resume: bool = False,
    kill_after: int | None = None,
) -> torch.nn.Module:
    """Train a 1-layer student on ``teacher``'s masked-LM distributions over ``texts`` [N, T] (token ids)."""
    ctx, device = DistContext(), "cpu"
    run = RunDir(output, ctx)
    run.check_writable()
    seed_everything(0)
    student = BertForPreTraining(tiny_config(teacher.config.vocab_size, layers=1)).train()
    optimizer = build_optimizer(student, lr=lr)
    state = TrainState(
        student,
        optimizer,
        linear_schedule(optimizer, steps // 10, steps),
        grad_scaler(precision, device),
        position={"batch": 0},
    )
    keys = {"task": "distill", "steps": steps, "batch_size": batch_size, "lr": lr, "clip": clip}
    saved = run.open(keys, resume, overwrite=False).checkpoint
    if saved is not None:
        state.load(saved, ctx)
        run.truncate_metrics(state.step)
    run.write_keys(keys)

    def batches(position: int) -> list[torch.Tensor]:  # 1. its batches: one micro-batch, in order, cycling
        start = position * batch_size % len(texts)
        return [texts[start : start + batch_size]]

    def loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:  # 2. its loss: KL to the teacher
        with torch.no_grad():
            target = teacher(ids).prediction_logits.log_softmax(-1)
        logits = model(ids).prediction_logits.log_softmax(-1)
        return F.kl_div(logits, target, log_target=True, reduction="batchmean")

    while state.step < steps:
        result = optimizer_step(
            state, batches(state.position["batch"]), loss, clip=clip, precision=precision, device=device, ctx=ctx
        )
        state.position = {"batch": state.position["batch"] + 1}
        run.append_metrics({"step": state.step, "loss": result.loss, "grad_norm": result.grad_norm})
        if state.step % save_every == 0:
            state.save(run.checkpoints, ctx, keep=1)
        if state.step == kill_after:
            raise Killed
    return student


@pytest.fixture(scope="module")
def teacher():
    torch.manual_seed(1)
    model = BertForPreTraining(tiny_config(99, layers=2)).eval()
    with torch.no_grad():  # a confident teacher (a random one is nearly uniform): a distribution worth learning
        model.cls.predictions.bias.copy_(3 * torch.randn(99))
    return model


@pytest.fixture(scope="module")
def texts():
    return torch.randint(5, 99, (16, 12), generator=torch.Generator().manual_seed(2))


def _losses(output: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_the_student_learns_the_teacher(teacher, texts, tmp_path):
    distill(teacher, texts, tmp_path / "run", steps=40)
    losses = _losses(tmp_path / "run")
    assert len(losses) == 40
    assert sum(losses[-4:]) < 0.2 * sum(losses[:4])  # the KL to the teacher falls


def test_a_killed_run_resumes_exactly(teacher, texts, tmp_path):
    whole = distill(teacher, texts, tmp_path / "whole", steps=10)
    with pytest.raises(Killed):
        distill(teacher, texts, tmp_path / "cut", steps=10, kill_after=7)  # last checkpoint: step 6
    assert len(_losses(tmp_path / "cut")) == 7
    resumed = distill(teacher, texts, tmp_path / "cut", steps=10, resume=True)
    assert _losses(tmp_path / "cut") == _losses(tmp_path / "whole")  # step 7's line written again, once
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name  # bit for bit: weights, and so the optimizer, schedule and dropout RNG
    with pytest.raises(Killed):
        distill(teacher, texts, tmp_path / "again", steps=10, kill_after=4)
    with pytest.raises(InputError, match=r"differ from the interrupted run.*lr 0.001 \(the run used 0.003\)"):
        distill(teacher, texts, tmp_path / "again", steps=10, lr=1e-3, resume=True)  # other settings: refused


def test_the_recipe_leaves_the_optimizer_step_to_the_core():
    """What the core owns (backward, loss scaling, clipping, the optimizer and schedule steps) is not written here."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(distill)))
    calls = {
        node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"backward", "clip_grad_norm_", "unscale_", "zero_grad", "GradScaler"}
    assert "step" not in calls  # optimizer.step / scheduler.step / scaler.step: optimizer_step does them
