"""A ``torch.compile``d pre-training step (``bertkit pretrain --compile``) against the eager step: the same loss and
gradients on a padded batch, fp32 on the CPU.

The default suite compiles with the ``aot_eager`` backend: TorchDynamo's capture and AOTAutograd's joint graph, what
inductor receives, without inductor's C++ code generation, which took 165 s for this tiny model's forward alone on
the shared 2-core machine. ``BERTKIT_INDUCTOR_TESTS=1`` runs the same test through inductor as well."""

from __future__ import annotations

import os

import pytest
import torch
from tinymodels import tiny_config

from bertkit.modeling import BertForPreTraining

BACKENDS = ["aot_eager"] + (["inductor"] if os.environ.get("BERTKIT_INDUCTOR_TESTS") == "1" else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_step_equals_the_eager_padded_step(backend):
    import torch._dynamo

    torch.manual_seed(0)
    config = tiny_config(vocab_size=100, layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config).train()
    ids = torch.randint(5, 100, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # padding: the masked attention path
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    batch = dict(
        input_ids=ids,
        attention_mask=mask,
        token_type_ids=torch.zeros_like(ids),
        labels=labels,
        next_sentence_label=torch.tensor([0, 1, 0]),
    )
    results = []
    torch._dynamo.reset()
    for run in (model, torch.compile(model, backend=backend)):
        model.zero_grad(set_to_none=True)
        loss = run(**batch).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it was compiled, not run eagerly
    (eager, eager_grads), (compiled, compiled_grads) = results
    assert torch.isfinite(eager) and abs(float(compiled) - float(eager)) <= 1e-3 * abs(float(eager))
    for a, b in zip(eager_grads, compiled_grads):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)


def test_the_recipes_compile_is_one_graph_for_every_batch_shape():
    """`bertkit pretrain`'s compile (its default on a GPU): the model compiled with dynamic shapes, its batches as
    the loop hands them over (labelled positions from the host, no mask where nothing is padded: ``mlm_inputs``).
    One graph, with no break (selecting by ``labels != -100`` would break it, and wait for the device); the step's
    loss and gradients are the eager step's; another batch shape (a ramp's next stage) and another count of
    labelled positions compile nothing new, nor does a stage shorter than the local layers' window."""
    import numpy as np
    import torch._dynamo

    from bertkit.data.pretraining.masking import mlm_inputs
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

    config = ModernBertConfig.from_preset(
        "modernbert-tiny", vocab_size=100, pad_token_id=0, cls_token_id=1, sep_token_id=2, local_attention=8
    )  # its 3 layers: global, local, local; a window of 4 at 12 tokens: the local layers' band mask
    torch.manual_seed(0)
    model = ModernBertForMaskedLM(config).train()

    def step(run, rows, T, p):
        rng = np.random.default_rng(T)
        ids = rng.integers(5, 100, size=(rows, T))
        host = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "labels": np.where(rng.random(ids.shape) < p, ids, -100),
        }
        model.zero_grad(set_to_none=True)
        loss = run(**{k: torch.from_numpy(v) for k, v in mlm_inputs(host).items()}).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    eager = step(model, 3, 12, 0.3)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled_model = torch.compile(model, backend="aot_eager", dynamic=True)
    compiled = step(compiled_model, 3, 12, 0.3)
    stats = torch._dynamo.utils.counters["stats"]
    assert stats["unique_graphs"] == 1 and not torch._dynamo.utils.counters["graph_break"]
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-3, atol=0)
    for a, b in zip(eager[1], compiled[1]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)
    step(compiled_model, 5, 16, 0.5)  # another stage's shape, another count of labels
    # a stage shorter than the window (a ramp's first: every pair within it): the same graph, the eager step's loss
    short = step(compiled_model, 6, 4, 0.5)
    assert stats["unique_graphs"] == 1 and not torch._dynamo.utils.counters["graph_break"]
    torch.testing.assert_close(short[0], step(model, 6, 4, 0.5)[0], rtol=1e-3, atol=0)


def test_padded_labelled_positions_give_the_unpadded_step_and_share_a_shape():
    """A graphed step (``compiled.CompiledStep``) pads the labelled positions to a multiple with an unlabelled one
    (``mlm_inputs(pad_to=...)``): the compiled step on padded positions gives the eager unpadded step's loss and
    gradients, and two batches with different counts of labels hand the graph one shape."""
    import numpy as np
    import torch._dynamo

    from bertkit.data.pretraining.masking import mlm_inputs
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

    config = ModernBertConfig.from_preset(
        "modernbert-tiny", vocab_size=100, pad_token_id=0, cls_token_id=1, sep_token_id=2, local_attention=8
    )
    torch.manual_seed(0)
    model = ModernBertForMaskedLM(config).train()

    def host(seed, p):
        rng = np.random.default_rng(seed)
        ids = rng.integers(5, 100, size=(3, 12))
        labels = np.where(rng.random(ids.shape) < p, ids, -100)
        labels[:, 0] = -100  # [CLS]: never labelled
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": labels}

    def step(run, inputs):
        model.zero_grad(set_to_none=True)
        loss = run(**{k: torch.from_numpy(v) for k, v in inputs.items()}).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    first, second = host(1, 0.3), host(2, 0.4)
    padded = [mlm_inputs(h, pad_to=16) for h in (first, second)]
    counts = [int((h["labels"] != -100).sum()) for h in (first, second)]
    assert counts[0] != counts[1] and all(len(p["masked_positions"]) == 16 for p in padded)  # one shape, two counts
    for h, p, n in zip((first, second), padded, counts):
        tail = p["masked_positions"][n:]
        assert len(tail) and (h["labels"].reshape(-1)[tail] == -100).all()  # padding: unlabelled positions
    eager = step(model, mlm_inputs(first))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled_model = torch.compile(model, backend="aot_eager", dynamic=True)
    compiled = step(compiled_model, padded[0])
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-3, atol=0)
    for a, b in zip(eager[1], compiled[1]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)
    step(compiled_model, padded[1])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_the_step_is_graphed_on_one_gpu_for_a_plain_masked_lm_only():
    """``compile_step``'s rule: CUDA graphs (and padded positions) where one GPU trains a plain masked LM; a CPU,
    several processes or an objective's own model keep the plain compile; ``--no-compile`` none."""
    from types import SimpleNamespace

    from bertkit.recipes.pretrain.compiled import POSITIONS_MULTIPLE, compile_step

    model = torch.nn.Linear(2, 2)
    cfg = SimpleNamespace(compile=None)

    def ctx(device, world=1):
        return SimpleNamespace(device=torch.device(device), distributed=world > 1)

    one_gpu = compile_step(cfg, ctx("cuda"), model, plain_mlm=True)
    assert one_gpu.graphed and one_gpu.pad_to == POSITIONS_MULTIPLE and "CUDA graphs" in one_gpu.said
    assert one_gpu.model is not model  # compiled (lazily: nothing runs until it is called)
    for step in (
        compile_step(cfg, ctx("cuda", world=2), model, plain_mlm=True),
        compile_step(cfg, ctx("cuda"), model, plain_mlm=False),
        compile_step(SimpleNamespace(compile=True), ctx("cpu"), model, plain_mlm=True),
    ):
        assert step.model is not model and not step.graphed and step.pad_to == 0 and step.said == ", compiled"
    plain = compile_step(cfg, ctx("cpu"), model, plain_mlm=True)  # a CPU's default: eager
    assert plain.model is model and plain.said == ""
    assert compile_step(SimpleNamespace(compile=False), ctx("cuda"), model, plain_mlm=True).model is model
