"""``bertkit demo``: build a small random BERT, run a bundled sentence through it and print what it computed."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.options import option, seed_option

SENTENCE = "the quick brown fox jumps over the lazy dog ."


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What ``bertkit demo`` builds and runs."""

    model_size: str = option("bert-tiny", help="a preset name")
    text: str = option(SENTENCE, help="the sentence to run (whitespace-split into a toy vocab)")
    seed: int = seed_option(0, group=None, help="seed of the random weights")


CONFIG = DemoConfig


def run(cfg: DemoConfig) -> int:
    import torch  # kept out of `bertkit demo -h`

    # torch (bertkit.modeling): kept out of `bertkit demo -h`
    from bertkit import BertConfig, BertForPreTraining

    torch.manual_seed(cfg.seed)
    words = cfg.text.split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words))
    ids = [2] + [vocab.index(w) for w in words] + [3]
    config = BertConfig.from_preset(cfg.model_size, vocab_size=len(vocab))
    model = BertForPreTraining(config).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {cfg.model_size} ({config.num_hidden_layers} layers, hidden {config.hidden_size}, "
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
