"""Why ELECTRA's discriminator sits at the prior on the books: the same model, head and loss, fed three kinds of
replacement, on real text.

Three routes, each a ModernBERT-tiny discriminator (the budget recipe's model: 3 layers, width 128) with ELECTRA's
RTD head and loss (``bertkit.recipes.pretrain.objectives.electra``), 20,000 32-token windows of the bundled books,
batch 32, AdamW at
lr 1e-3, one thread, the same seed:

- ``uniform``: the discriminator alone, 15% of the tokens replaced by tokens drawn uniformly from the vocabulary;
- ``electra``: the recipe's model (``ElectraPretraining``: a 1-layer generator sharing the embeddings, MLM loss plus
  50 x RTD), replacements sampled from the generator at the masked positions, as ``pretrain --objective electra``;
- ``electra-uniform``: the same model and losses, its samples swapped for uniform draws.

It prints the AUC of the RTD logits for "replaced" on each training batch every ``--every`` steps (0.5: no signal).
A uniform draw is mostly a rare token, so token identity alone gives it away; the generator soon samples about as
the corpus's unigram distribution does, and then only context tells a replaced token from an original one.

    python benchmarks/electra_replacements.py --steps 200      # about 3 minutes on one core

Recorded in BENCHMARKS.md ("ELECTRA"; the write-up: docs/results/pretraining.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import tempfile
from pathlib import Path

import torch

import bertkit.recipes.pretrain.objectives.electra as electra
from bertkit.commands.quickstart import bundled_corpus
from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel
from bertkit.tokenization import train_vocab

T, B, MASK_PROB = 32, 32, 0.15


def sequences(vocab_size: int, limit: int = 20000) -> tuple[torch.Tensor, object]:
    """Consecutive 32-token windows ([CLS] and 31 pieces) of the bundled books' token stream, and the tokenizer
    trained on them."""
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "books.txt"
        text.write_text("".join(gzip.decompress(p.read_bytes()).decode("utf-8") for p in bundled_corpus()))
        tok = train_vocab([text], vocab_size=vocab_size, show_progress=False)
        lines = text.read_text(encoding="utf-8").splitlines()
    stream: list[int] = []
    for line in lines:
        stream += tok.encode(line, add_special_tokens=False).ids
        if len(stream) >= limit * (T - 1):
            break
    cls = tok.convert_tokens_to_ids("[CLS]")
    windows = torch.tensor(stream[: len(stream) // (T - 1) * (T - 1)]).view(-1, T - 1)
    return torch.cat([torch.full((len(windows), 1), cls), windows], 1), tok


def run(route: str, data: torch.Tensor, tok, steps: int, every: int, lr: float, seed: int) -> list[tuple[int, float]]:
    torch.manual_seed(seed)
    special = dict(pad_token_id=0, cls_token_id=101, bos_token_id=101, sep_token_id=102, eos_token_id=102)
    config = ModernBertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=192,  # the budget recipe's ModernBERT-tiny
        **special,
    )
    mask_id, vocab = tok.convert_tokens_to_ids("[MASK]"), config.vocab_size
    uniform = lambda n: torch.randint(1000, vocab, (n,))  # noqa: E731 (past the special and character rows)
    if route == "uniform":
        encoder, head = ModernBertModel(config), electra.RtdHead(config)
        params = [*encoder.parameters(), *head.parameters()]
    else:
        one = dataclasses.replace(config, num_hidden_layers=1, layer_types=list(config.layer_types[:1]))
        model = electra.ElectraPretraining(ModernBertModel(config), ModernBertForMaskedLM(one), 50.0)
        params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    draw = electra.sample
    curve = []
    for step in range(steps + 1):
        ids = data[torch.randint(0, len(data), (B,))]
        chosen = torch.rand(ids.shape) < MASK_PROB
        if route == "uniform":
            fake = ids.clone()
            fake[chosen] = uniform(int(chosen.sum()))
            labels = (fake != ids).long()
            logits = head(encoder(fake).last_hidden_state)
            loss = electra.rtd_loss(logits, labels)
        else:
            masked = ids.masked_fill(chosen, mask_id)
            targets = torch.where(chosen, ids, torch.full_like(ids, -100))
            if route.endswith("uniform"):
                electra.sample = lambda logits, generator=None: uniform(logits.shape[0])
            try:
                out = model(masked, torch.ones_like(ids), None, targets)
            finally:
                electra.sample = draw
            loss, logits, labels = out.loss, out.rtd_logits, out.rtd_labels
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % every == 0:
            active = labels != -100
            curve.append((step, electra.auc(logits[active].detach(), labels[active] == 1)))
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--routes", default="uniform,electra,electra-uniform")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, tok = sequences(args.vocab_size)
    routes = args.routes.split(",")
    curves = {r: run(r, data, tok, args.steps, args.every, args.lr, args.seed) for r in routes}
    print("step," + ",".join(f"{r}_auc" for r in routes))
    for i, (step, _) in enumerate(curves[routes[0]]):
        print(f"{step}," + ",".join(f"{curves[r][i][1]:.3f}" for r in routes))


if __name__ == "__main__":
    main()
