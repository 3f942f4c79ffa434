"""A ``torch.compile``d pre-training step (``bertkit pretrain --compile``) against the eager step: the same loss and
gradients on a padded batch, fp32 on the CPU.

The default suite compiles with the ``aot_eager`` backend: TorchDynamo's capture and AOTAutograd's joint graph, what
inductor receives, without inductor's C++ code generation, which took 165 s for this tiny model's forward alone on
the shared 2-core machine. ``BERTKIT_INDUCTOR_TESTS=1`` runs the same test through inductor as well."""

from __future__ import annotations

import os

import pytest
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


def test_compiled_layers_train_as_the_eager_model_and_evaluation_compiles_nothing():
    """`bertkit pretrain`'s compile (its default on a GPU): each encoder layer compiled in place, shapes dynamic.
    Every layer is compiled, the state dict keeps its names, a step's loss and gradients are the eager step's, a
    second batch shape compiles nothing new (a ramp's next stage), and evaluation under ``eagerly`` compiles
    nothing."""
    import numpy as np
    import torch._dynamo

    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM
    from bertkit.training.step import compile_layers, eagerly

    config = ModernBertConfig.from_preset(
        "modernbert-tiny", vocab_size=100, pad_token_id=0, cls_token_id=1, sep_token_id=2, local_attention=8
    )  # its 3 layers: global, local, local; a window of 4 at 12 tokens: the local layers' band mask
    torch.manual_seed(0)
    model = ModernBertForMaskedLM(config).train()
    names = list(model.state_dict())

    def step(run, T):
        g = torch.Generator().manual_seed(T)
        ids = torch.randint(5, 100, (3, T), generator=g)
        labels = torch.where(torch.rand(3, T, generator=g) < 0.3, ids, -100)
        positions = torch.from_numpy(np.flatnonzero(labels.reshape(-1).numpy() != -100))
        model.zero_grad(set_to_none=True)
        loss = run(ids, labels=labels, masked_positions=positions).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    eager = step(model, 12)
    torch._dynamo.reset()
    assert len(compile_layers(model, backend="aot_eager", dynamic=True)) == len(model.model.layers) == 3
    assert list(model.state_dict()) == names
    compiled = step(model, 12)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs >= 1  # compiled, not run eagerly
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-3, atol=0)
    for a, b in zip(eager[1], compiled[1]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)
    step(model, 16)  # another stage's shape
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    with eagerly(), torch.no_grad():
        model.eval()(torch.randint(5, 100, (2, 7)))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
