"""A tiny random ModernBERT directory for the tests of the commands that take one (ONNX export, int8, probes,
attention maps, the feature-based tagger, the reranker, long context): hidden 32, 4 heads, 3 layers (layer 0
global, layers 1 and 2 sliding-window), the WordPiece vocabulary given, saved with ``save_pretrained``."""

from __future__ import annotations

from pathlib import Path

import torch


def modernbert_config(vocab: list[str], **overrides):
    """The tiny config: the vocabulary's size and special-token ids; ``overrides`` set any field (a small
    ``local_attention`` puts the sliding windows to work on short inputs)."""
    from bertkit.modeling_modernbert import ModernBertConfig

    pad, cls, sep = vocab.index("[PAD]"), vocab.index("[CLS]"), vocab.index("[SEP]")
    values = dict(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=4,
        max_position_embeddings=128,
        pad_token_id=pad,
        cls_token_id=cls,
        sep_token_id=sep,
        bos_token_id=cls,
        eos_token_id=sep,
    )
    values.update(overrides)
    return ModernBertConfig(**values)


def make_modernbert_dir(
    path: Path,
    vocab: list[str],
    cls_name: str = "ModernBertForMaskedLM",
    seed: int = 0,
    spread: float = 1.0,
    **overrides,
) -> Path:
    """A random ``cls_name`` (any ``bertkit.modeling_modernbert.MODEL_CLASSES`` name) saved at ``path`` with its
    ``vocab.txt``. ``spread`` scales a head's classifier weights (so that int8 and label differences would show)."""
    from bertkit.modeling_modernbert import MODEL_CLASSES

    torch.manual_seed(seed)
    model = MODEL_CLASSES[cls_name](modernbert_config(vocab, **overrides))
    classifier = getattr(model, "classifier", None)
    if classifier is not None and spread != 1.0:
        with torch.no_grad():
            classifier.weight.mul_(spread)
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return path


def fixture_vocab(fixtures_dir: Path) -> list[str]:
    """The fine-tuning fixtures' WordPiece vocabulary (tests/fixtures/finetune/vocab.txt), one token a line."""
    return [line for line in (fixtures_dir / "finetune" / "vocab.txt").read_text(encoding="utf-8").splitlines() if line]
