"""bertkit.training's core on its own: RunDir (stale temp files, metrics truncation, resume keys, the one resume
protocol on directories the previous code wrote, the newest intact checkpoint, writability), TrainState (save/load
of every state: optimizer, schedule, loss scaler, RNG, position), apply_update (clip 0 = none) and Run's epoch loop
(groups, eval_due, after_step: data position, evaluation cadence, a signal's checkpoint and the resume after it)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import time

import pytest
import torch

from bertkit.errors import InputError
from bertkit.training.checkpointing import load_checkpoint
from bertkit.training.distributed import DistContext
from bertkit.training.interrupt import GracefulStop, Interrupted
from bertkit.training.meter import Meter
from bertkit.training.optim import build_optimizer, linear_schedule
from bertkit.training.run import Run
from bertkit.training.rundir import RunDir, check_writable
from bertkit.training.state import TrainState
from bertkit.training.step import apply_update


def _state(seed: int = 0, scale: float | None = None) -> TrainState:
    """A tiny model's TrainState; ``scale``: an fp16-style loss scaler starting there (doubling every 2 steps)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = build_optimizer(model, lr=1e-2)
    scaler = (
        torch.amp.GradScaler("cpu", enabled=False)
        if scale is None
        else torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=2)
    )
    return TrainState(model, optimizer, linear_schedule(optimizer, 2, 10), scaler)


def _step(state: TrainState, clip: float = 1.0) -> float:
    loss = state.model(torch.randn(16, 4)).pow(2).mean()
    state.scaler.scale(loss).backward()
    return apply_update(state, clip)


def test_stale_temp_files_go_ours_and_safetensors_but_nothing_else(tmp_path):
    """A killed save leaves ``.NAME.tmp-PID`` (ours) or ``.tmpXXXXXX`` (safetensors' own, no PID in it)."""
    run = RunDir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    dead = 2**22 + 12345  # above any pid_max default: no such process
    stale = [
        tmp_path / ".tmpAb12Cd",
        tmp_path / f".model.safetensors.tmp-{dead}",
        tmp_path / "checkpoints" / f".step-00000003.pt.tmp-{dead}",
        tmp_path / "checkpoints" / ".tmpZZ9911",
    ]
    kept = [
        tmp_path / "model.safetensors",
        tmp_path / ".tmp",
        tmp_path / ".tmpTooLong1",
        tmp_path / f".latest.tmp-{os.getpid()}",
        tmp_path / "notes.tmp123456",
    ]
    for p in stale + kept:
        p.write_bytes(b"x")
    assert sorted(run.remove_stale()) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)


def test_metrics_truncation_keeps_what_the_checkpoint_covers_and_drops_a_torn_line(tmp_path):
    run = RunDir(tmp_path)
    for step in (1, 2, 3, 4):
        run.append_metrics({"step": step, "loss": 1.0 / step})
        if step == 1:  # lines no run writes (another program's): dropped, not a traceback
            with open(tmp_path / "metrics.jsonl", "a") as f:
                f.write('[1, 2]\n5\n{"step": "two"}\n')
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')  # torn by a kill
    run.truncate_metrics(2)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_resume_refusals_and_key_differences(tmp_path):
    state = _state()
    run = RunDir(tmp_path)
    keys = {"task": "sst2", "args": {"lr": 1e-4, "seed": 1}}
    assert run.open(keys, resume=False, overwrite=False).checkpoint is None  # nothing there: start
    state.save(run.checkpoints, DistContext(), run=keys)
    with pytest.raises(InputError, match="pass --resume"):
        run.open(keys, resume=False, overwrite=False)
    assert run.open(keys, resume=True, overwrite=False).checkpoint["step"] == 0
    with pytest.raises(InputError, match=r"--lr 0.001 \(the run used 0.0001\)"):
        run.open({"task": "sst2", "args": {"lr": 1e-3, "seed": 1}}, resume=True, overwrite=False)


def test_resume_into_a_directory_of_other_files_is_refused(tmp_path):
    """Issue 54, item 8's kin: --resume on a directory that holds no run (no run.json, no checkpoint) but files of
    its own is refused, also for a recipe that names no ``files`` (fine-tuning, embeddings, distillation: they
    started afresh in it); an empty or missing one starts from step 0, as a run killed before it wrote anything."""
    from bertkit.errors import RunRefused

    keys = {"task": "sst2"}
    assert RunDir(tmp_path / "absent").open(keys, resume=True, overwrite=False).resumed is False
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunRefused, match="holds no run"):
        RunDir(tmp_path).open(keys, resume=True, overwrite=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_corrupted_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    state, run = _state(), RunDir(tmp_path)
    for _ in range(2):
        _step(state)
        state.save(run.checkpoints, DistContext(), keep=3)
    (run.checkpoints / "step-00000002.pt").write_bytes(b"not a checkpoint")
    path, saved = run.latest_intact_checkpoint()
    assert path.name == "step-00000001.pt" and saved["step"] == 1
    assert "step-00000002.pt" in caplog.text and "previous" in caplog.text
    (run.checkpoints / "step-00000001.pt").write_bytes(b"torn")
    caplog.clear()
    with pytest.raises(InputError, match="no readable checkpoint"):
        run.latest_intact_checkpoint()
    assert "falling back" not in caplog.text  # nothing to fall back to: the error alone, one line
    torch.save({"model": {}, "step": 1}, run.checkpoints / "step-00000001.pt")  # not a training checkpoint
    with pytest.raises(InputError, match=r"step-00000001.pt: not a bertkit training checkpoint \(no optimizer/sch"):
        run.latest_intact_checkpoint()


def test_resuming_from_another_models_checkpoint_is_refused_before_anything_is_written(tmp_path):
    """Run.begin restores the TrainState from the checkpoint opened; one of another model (or a torn state) is a
    one-line RunRefused naming it, and run.json is not rewritten; Run.open refuses one without the step count a
    recipe schedules from (pre-training's was a KeyError traceback)."""
    from bertkit.errors import RunRefused

    keys = {"args": {"lr": 1e-2}}
    model = torch.nn.Linear(3, 3)
    optimizer = build_optimizer(model, lr=1e-2)
    other = TrainState(model, optimizer, linear_schedule(optimizer, 2, 10), torch.amp.GradScaler("cpu", enabled=False))
    path = other.save(RunDir(tmp_path).checkpoints, DistContext(), run=keys, total_steps=4)
    (tmp_path / "run.json").write_text(json.dumps(keys))
    run = Run(tmp_path, DistContext(), keys, quiet=True)
    with pytest.raises(RunRefused, match=r"--resume: .*step-\d+\.pt does not fit this run \(Missing key\(s\)"):
        run.start(_state(), resume=True, overwrite=False, total_steps=4)
    assert json.loads((tmp_path / "run.json").read_text()) == keys
    saved = load_checkpoint(path)
    _state().save(RunDir(tmp_path).checkpoints, DistContext(), run=keys, total_steps=4, history=[1], keep=1)
    with pytest.raises(RunRefused, match=r"does not fit this run \(its dev records or training loss are not"):
        Run(tmp_path, DistContext(), keys, quiet=True).start(_state(), resume=True, overwrite=False, total_steps=4)
    del saved["total_steps"]  # one no Run wrote: what a recipe schedules from is missing
    torch.save(saved, path)
    with pytest.raises(RunRefused, match=r"is not a checkpoint of a bertkit run \(no integer step and total_steps\)"):
        Run(tmp_path, DistContext(), keys, quiet=True).open(resume=True, overwrite=False)


def test_train_state_round_trip_continues_bit_for_bit(tmp_path):
    """Save after 2 steps, take 3 more; a fresh state loaded from the checkpoint takes the same 3: the weights, the
    optimizer's moments, the schedule, the fp16 loss scaler (its scale and growth count), the step, the data position
    and the RNG state (the same random batches) are all restored. The resume-exactness every recipe relies on; end
    to end once per recipe (kill -9 of `bertkit pretrain`: tests/integration/test_pretrain_run.py)."""
    a = _state(scale=16.0)
    for _ in range(2):
        _step(a)
    a.position = {"epoch": 0, "batch": 2}
    path = a.save(tmp_path, DistContext())
    random.random()
    for _ in range(3):
        _step(a)
    assert a.scaler.get_scale() > 16.0  # the scaler moved: restoring it matters
    b = _state(seed=99, scale=1024.0)
    b.load(load_checkpoint(path), DistContext())
    assert (b.step, b.position) == (2, {"epoch": 0, "batch": 2})
    for _ in range(3):
        _step(b)
    for (_, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y)
    assert b.scheduler.state_dict() == a.scheduler.state_dict()
    assert b.scaler.state_dict() == a.scaler.state_dict()
    moments = [(a.optimizer.state[p], b.optimizer.state[q]) for p, q in zip(a.model.parameters(), b.model.parameters())]
    assert all(torch.equal(x[k], y[k]) for x, y in moments for k in x if torch.is_tensor(x[k]))


def test_clip_zero_means_no_clipping():
    """--clip 0 leaves the gradients as they are (clipping at 0 would zero them)."""
    a, b = _state(), _state()
    torch.manual_seed(1)
    norm = _step(a, clip=0.0)
    torch.manual_seed(1)
    loss = b.model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()
    b.optimizer.step()
    assert norm > 0
    for x, y in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(x, y)


def test_open_reads_run_directories_the_previous_code_wrote(tmp_path):
    """RunDir.open, the one resume protocol, on directories written before it: pre-training's run.json (its
    ``config`` only, no ``finished``) beside its model is a finished run, refused in one line with --resume and
    without; one killed mid-run resumes, a setting it does not record (newer than the run) being no difference;
    fine-tuning's run.json (the keys alone) with a checkpoint resumes, and its train_log.json marks it finished."""
    keys = {"config": {"seq_len": 32, "max_steps": 8, "new_flag": 1}}
    old = tmp_path / "pretrain"
    old.mkdir()
    (old / "run.json").write_text(json.dumps({"config": {"seq_len": 32, "max_steps": 8}, "total_steps": 8}))
    _state().save(RunDir(old).checkpoints, DistContext())
    assert RunDir(old).open(keys, resume=True, overwrite=False).checkpoint["step"] == 0
    with pytest.raises(InputError, match="already holds an interrupted run"):
        RunDir(old).open(keys, resume=False, overwrite=False)
    (old / "model.safetensors").write_bytes(b"")
    with pytest.raises(InputError, match="--resume: .* holds a finished run"):
        RunDir(old).open(keys, resume=True, overwrite=False)
    with pytest.raises(InputError, match=r"already holds a different run \(differs in max_steps\)"):
        RunDir(old).open({"config": {"seq_len": 32, "max_steps": 9}}, resume=False, overwrite=False)
    ft, ft_keys = tmp_path / "finetune", {"task": "sst2", "args": {"lr": 1e-4}}
    ft.mkdir()
    (ft / "run.json").write_text(json.dumps(ft_keys))
    _state().save(RunDir(ft).checkpoints, DistContext(), run=ft_keys)
    assert RunDir(ft).open(ft_keys, resume=True, overwrite=False).resumed
    (ft / "train_log.json").write_text("{}")
    with pytest.raises(InputError, match="holds a finished run"):
        RunDir(ft).open(ft_keys, resume=True, overwrite=False)


@pytest.mark.parametrize("with_record", [False, True])
def test_resume_reads_the_checkpoint_once(tmp_path, monkeypatch, with_record):
    """--resume reads the newest checkpoint once, also in a run directory without run.json (written before it),
    whose resume keys the checkpoint holds: the decision's read is the one the run continues from."""
    from bertkit.training import rundir

    keys, reads = {"task": "sst2", "args": {"lr": 1e-4}}, []
    monkeypatch.setattr(rundir, "load_checkpoint", lambda path: reads.append(path) or load_checkpoint(path))
    _state().save(RunDir(tmp_path).checkpoints, DistContext(), run=keys)
    if with_record:
        (tmp_path / "run.json").write_text(json.dumps(keys))
    opened = RunDir(tmp_path).open(keys, resume=True, overwrite=False)
    assert opened.resumed and opened.checkpoint["step"] == 0 and reads == [opened.path]


@pytest.mark.parametrize("text", ["[1, 2]", '{"task": ', "[" * 100_000 + "]" * 100_000, "\udcff"])
def test_a_foreign_run_json_is_one_line_naming_it(tmp_path, text):
    """run.json that is not a JSON object (an array, torn, nested past the parser's depth, not UTF-8) is one
    InputError line naming it, whichever way it fails."""
    (tmp_path / "run.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(InputError, match="run.json: not a readable run record") as e:
        RunDir(tmp_path).open({"args": {}}, resume=True, overwrite=False)
    assert len(str(e.value).splitlines()) == 1


def test_check_writable_names_the_flag(tmp_path):
    check_writable(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir() and not list((tmp_path / "new" / "dir").iterdir())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match=f"--onnx {blocker}: cannot write there"):
        check_writable(blocker, "--onnx")


def _train(path, seed: int, resume: bool = False, stop_after: int | None = None):
    """Run's epoch loop over 2 epochs of 3 batches, 2 batches a step (an epoch's last step takes one): 4 steps, an
    evaluation every 3; each step's group of batches and each saved record are recorded."""
    state, groups, saved = _state(seed), [], []
    state.position = {"epoch": 0, "batch": 0}
    run = Run(path, DistContext(), {"args": {"lr": 1e-2}}, main_metric="m", quiet=True, steps_per_epoch=2)
    run.start(state, resume=resume, overwrite=False, total_steps=4)

    def step(group):
        groups.append(group)
        _step(state)
        run.count(float(state.step))
        if state.step == stop_after:
            os.kill(os.getpid(), signal.SIGTERM)  # a request: the step finishes, then the checkpoint

    plan = lambda epoch: [f"e{epoch}b{b}" for b in range(3)]  # noqa: E731
    evaluate = lambda: {"m": -float(state.step)}  # noqa: E731  (the first evaluation stays the best)
    with GracefulStop() as stop:  # an epoch-based recipe's loop on Run's API (finetune's, the embedding tasks')
        if run.eval_pending:
            run.evaluate(evaluate, saved.append)
        for group in run.groups(plan, per_step=2):
            step(group)
            run.stepped(0.0, time.perf_counter())
            if run.after_step(stop, run.eval_due(3)):
                run.evaluate(evaluate, saved.append)
        run.end(stop, checkpoint=False)
    return state, run, groups, saved


def test_run_train_keeps_the_position_and_resumes_after_a_signal(tmp_path):
    """Uninterrupted: the groups of batches in order and the evaluations at step 3 (eval_every) and 4 (the last).
    Stopped by SIGTERM after step 3: a checkpoint at the data position, Interrupted, the due evaluation pending;
    resumed: the pending evaluation first, then the rest of the epoch, ending with the uninterrupted weights."""
    whole, _, groups, saved = _train(tmp_path / "whole", seed=0)
    assert groups == [["e0b0", "e0b1"], ["e0b2"], ["e1b0", "e1b1"], ["e1b2"]]
    assert [r["step"] for r in saved] == [3] and whole.step == 4  # step 4's evaluation did not improve
    with pytest.raises(Interrupted, match="stopped at step 3 of 4"):
        _train(tmp_path / "cut", seed=0, stop_after=3)
    (ckpt,) = (tmp_path / "cut" / "checkpoints").glob("step-*.pt")
    saved_state = load_checkpoint(ckpt)
    assert saved_state["position"] == {"epoch": 1, "batch": 2} and saved_state["eval_pending"] is True
    resumed, run, groups, saved = _train(tmp_path / "cut", seed=7, resume=True)
    assert groups == [["e1b2"]] and [r["step"] for r in run.history] == [3, 4] and [r["step"] for r in saved] == [3]
    for (_, x), (_, y) in zip(whole.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(x, y)


def test_evaluations_count_as_training_time(tmp_path, monkeypatch):
    """Run.evaluate's seconds are training time (the clock --max-time's budget resumes from), through Run.timed as
    pre-training's held-out evaluation's are, a work that raises included; on a clock the test moves."""
    import types

    from bertkit.training import run as run_module

    clock = [100.0]
    monkeypatch.setattr(run_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def work(seconds: float, fail: bool = False) -> dict:
        clock[0] += seconds
        if fail:
            raise RuntimeError("the evaluation failed")
        return {"m": 1.0}

    state = _state()
    state.position = {"epoch": 0, "batch": 0}
    run = Run(tmp_path, DistContext(), {"args": {"lr": 1e-2}}, main_metric="m", quiet=True)
    run.start(state, resume=False, overwrite=False, total_steps=1)
    run.evaluate(lambda: work(2.5), lambda record: None)
    assert run.seconds() == 2.5 and run.best["m"] == 1.0
    assert run.timed(lambda: work(1.0)) == {"m": 1.0} and run.seconds() == 3.5
    with pytest.raises(RuntimeError):
        run.evaluate(lambda: work(0.25, fail=True), lambda record: None)
    assert run.seconds() == 3.75


def test_save_if_no_best_saves_the_current_model_only_without_a_best(tmp_path):
    state, run, _, _ = _train(tmp_path / "a", seed=0)
    kept = []
    run.save_if_no_best(kept.append)
    assert kept == []  # the run has a best record: that model is the one saved
    run.best = None
    run.save_if_no_best(kept.append)
    assert kept == [{"step": 4, "train_loss": run.train_loss()}]


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_layer_decay_gives_each_depth_its_lr_and_adam_moves_each_param_by_it(arch):
    """--layer-decay: with decay 0.5 and lr 0.1 on a 3-layer classifier, Adam's first step (no weight decay, eps
    ~0, so each weight moves by its lr times the sign of its gradient) moves the head by 0.1, layer i by
    0.1 * 0.5^(3 - i) and the embeddings by 0.1 * 0.5^4, read from the weights themselves; decay 1 keeps Google's
    two groups."""
    from tinymodels import tiny_config
    from tinymodernbert import modernbert_config

    from bertkit.modeling import BertForSequenceClassification
    from bertkit.modeling_modernbert import ModernBertForSequenceClassification

    torch.manual_seed(0)
    if arch == "bert":
        model = BertForSequenceClassification(tiny_config(vocab_size=40, num_labels=2))
        layer = "encoder.layer."
    else:
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
        model = ModernBertForSequenceClassification(modernbert_config(vocab, num_labels=2))
        layer = "layers."
    assert len(build_optimizer(model, lr=0.1).param_groups) == 2
    optimizer = build_optimizer(model, lr=0.1, weight_decay=0.0, eps=1e-20, layer_decay=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(5, 40, (4, 12))
    torch.nn.functional.cross_entropy(model(input_ids=ids).logits, torch.tensor([0, 1, 0, 1])).backward()
    optimizer.step()
    seen = set()
    for name, param in model.named_parameters():
        moved = (param.detach() - before[name]).abs().max().item()
        if moved == 0:  # rows no input reached (unused embedding rows, padding) have no gradient
            continue
        if layer in name:
            depth = int(name.split(layer)[1].split(".")[0]) + 1
        elif "embeddings." in name:
            depth = 0
        else:
            depth = 4
        seen.add(depth)
        assert moved == pytest.approx(0.1 * 0.5 ** (4 - depth), rel=1e-3), name
    assert seen == {0, 1, 2, 3, 4}


def test_the_meter_sums_device_tensors_to_the_numbers_read_one_by_one():
    """The pre-training loop adds each micro-batch's figures as tensors (no host sync per micro-batch); the window
    it logs is the same, to the last bit, as the sums of the numbers read one by one (the loop before: float(loss)
    / grad_accum, int(count)), also continuing a resumed window's numbers."""
    g = torch.Generator().manual_seed(0)
    losses = torch.rand(40, generator=g) * 10  # fp32, as a model's losses
    counts = torch.randint(0, 5000, (40,), generator=g)
    for start in ({}, {"mlm_loss": 12.345678901, "mlm_ok": 77.0}):
        meter = Meter(dict(start))
        old = dict(start)
        for loss, count in zip(losses, counts):
            meter.add(mlm_loss=loss.double() / 3, mlm_ok=count.sum(), steps=1)
            old["mlm_loss"] = old.get("mlm_loss", 0.0) + float(loss) / 3
            old["mlm_ok"] = old.get("mlm_ok", 0.0) + float(int(count))
        sums = meter.sums
        assert sums["mlm_loss"] == old["mlm_loss"] and sums["mlm_ok"] == old["mlm_ok"] and sums["steps"] == 40
        assert all(type(v) is float for v in sums.values())
        assert meter.ratio("mlm_ok", "steps") == old["mlm_ok"] / 40


def test_a_deferred_finiteness_check_skips_the_step_on_the_device_and_reports_at_the_check():
    """A GPU's step keeps its figures on the device (``defer``): a non-finite loss makes the fused optimizer skip
    the update there (no weight takes it), and ``check_finite`` (the recipe's log points and checkpoints) calls
    ``on_not_finite`` with that step's figures. A finite step's norm is the eager path's number."""
    from bertkit.training.step import check_finite

    a, b = _state(), _state()
    torch.manual_seed(1)
    eager = _step(a)
    torch.manual_seed(1)
    loss = b.model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()
    deferred = apply_update(b, 1.0, loss=loss.detach(), on_not_finite=lambda *_: None, defer=True)
    assert isinstance(deferred, torch.Tensor) and float(deferred) == eager
    check_finite(b, lambda *f: pytest.fail(f"a finite step reported {f}"))
    before = [p.detach().clone() for p in b.model.parameters()]
    loss = b.model(torch.randn(16, 4)).pow(2).mean() * float("nan")
    loss.backward()
    apply_update(b, 1.0, loss=loss.detach(), on_not_finite=lambda *_: None, defer=True)
    assert all(torch.equal(p, q) for p, q in zip(b.model.parameters(), before))  # skipped on the device
    seen = []
    check_finite(b, lambda loss, norm: seen.append((loss, norm)))
    assert len(seen) == 1 and math.isnan(seen[0][0])
    check_finite(b, lambda *f: pytest.fail("reported twice"))
