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
