"""``bertkit demo``: build a small random BERT, run a bundled sentence through it and print what it computed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bertkit.options import add_options, seed_option

SENTENCE = "the quick brown fox jumps over the lazy dog ."


@dataclass
class DemoSeed:
    seed: int = seed_option(0, group=None, help="seed of the random weights")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-size", default="bert-tiny", help="a preset name (default: bert-tiny)")
    parser.add_argument("--text", default=SENTENCE, help="the sentence to run (whitespace-split into a toy vocab)")
    add_options(parser, DemoSeed)


def run(args: argparse.Namespace) -> int:
    import torch  # kept out of `bertkit demo -h`

    # torch (bertkit.modeling): kept out of `bertkit demo -h`
    from bertkit import BertConfig, BertForPreTraining

    torch.manual_seed(args.seed)
    words = args.text.split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words))
    ids = [2] + [vocab.index(w) for w in words] + [3]
    config = BertConfig.from_preset(args.model_size, vocab_size=len(vocab))
    model = BertForPreTraining(config).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {args.model_size} ({config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, {n_params:,} parameters, random weights)"
    )
    print(f"input: {' '.join(vocab[i] for i in ids)}")
    print(f"hidden states: {len(out.hidden_states)} x {tuple(out.hidden_states[-1].shape)}")
    print(
        f"MLM logits: {tuple(out.prediction_logits.shape)}; NSP probabilities: "
        f"{[round(p, 3) for p in out.seq_relationship_logits.softmax(-1)[0].tolist()]}"
    )
    print(f"[CLS] vector (first 5): {[round(v, 4) for v in out.hidden_states[-1][0, 0, :5].tolist()]}")
    return 0
