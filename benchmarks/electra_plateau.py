"""How long an ELECTRA discriminator sits at the prior, by architecture, on a task it can only solve from context.

Each sequence counts up by one from a random start (mod the vocabulary); 15% of its tokens are replaced by random
ones. A token is detectably replaced only by comparing it with its neighbours, so a discriminator that has not yet
learned to attend to context calls every token original (balanced accuracy 0.5). The same RTD head and loss
(``bertkit.recipes.pretrain.objectives.electra``) sit on BERT's post-LayerNorm encoder and on ModernBERT's pre-norm
one, each at
2 layers of width 64, trained with AdamW at lr 1e-3, batch 32 x 32 tokens, one thread, the same seed.

    python benchmarks/electra_plateau.py --steps 1200      # prints balanced accuracy every 100 steps per arch

Recorded in docs/pretraining.md ("Replaced-token detection").
"""

from __future__ import annotations

import argparse

import torch

from bertkit.config import BertConfig
from bertkit.modeling import BertModel
from bertkit.modeling_modernbert import ModernBertConfig, ModernBertModel
from bertkit.recipes.pretrain.objectives.electra import RtdHead, rtd_loss

V, H, T, B = 64, 64, 32, 32


def encoder(arch: str):
    if arch == "bert":
        config = BertConfig(
            vocab_size=V,
            hidden_size=H,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=2 * H,
            max_position_embeddings=T,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = BertModel(config)
        return model, config, lambda x: model(x, output_pooler=False).last_hidden_state
    ids = dict(pad_token_id=0, cls_token_id=1, bos_token_id=1, sep_token_id=2, eos_token_id=2)
    config = ModernBertConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=2, intermediate_size=2 * H, **ids
    )
    model = ModernBertModel(config)
    return model, config, lambda x: model(x).last_hidden_state


def run(arch: str, steps: int, every: int) -> list[tuple[int, float]]:
    torch.manual_seed(0)
    model, config, forward = encoder(arch)
    head = RtdHead(config)
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-3)
    curve = []
    for step in range(steps + 1):
        start = torch.randint(5, V, (B, 1))
        ids = (start + torch.arange(T)) % (V - 5) + 5
        chosen = torch.rand(B, T) < 0.15
        fake = ids.clone()
        fake[chosen] = torch.randint(5, V, (int(chosen.sum()),))
        labels = (fake != ids).long()
        logits = head(forward(fake))
        loss = rtd_loss(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % every == 0:
            truth, pred = labels == 1, logits > 0
            balanced = ((truth & pred).sum() / truth.sum() + (~truth & ~pred).sum() / (~truth).sum()) / 2
            curve.append((step, float(balanced)))
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    curves = {arch: run(arch, args.steps, args.every) for arch in ("bert", "modernbert")}
    print("step,bert_balanced_acc,modernbert_balanced_acc")
    for (step, a), (_, b) in zip(curves["bert"], curves["modernbert"]):
        print(f"{step},{a:.3f},{b:.3f}")


if __name__ == "__main__":
    main()
