"""ModernBERT's part of the pre-training recipe (``bertkit pretrain --arch modernbert``): its size presets and its
model factory. The loop, the data and the checkpoints are BERT's (``recipes/pretrain/recipe.py``); what changes is the
model (``bertkit.modeling_modernbert.ModernBertForMaskedLM``, saved in transformers' ModernBERT layout) and two
defaults of ModernBERT's recipe, whatever ``--recipe``: 30% masking and no next-sentence prediction (it has no NSP
head)."""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import InputError
from bertkit.recipes.pretrain.setup import init_embeddings, load_init_from, unigram_bias

ARCHS = ("bert", "modernbert")
DEFAULTS = {"mask_prob": 0.3, "nsp": False}  # ModernBERT's recipe (Warner et al., 2024), over --recipe's


def preset(model_size: str) -> str:
    """``--model-size`` for ModernBERT: ``modernbert-mini`` as is, and BERT's names mapped by size (``bert-mini``,
    the default, -> ``modernbert-mini``), so the default command works for either architecture."""
    from bertkit.modeling_modernbert import PRESETS

    name = model_size if model_size.startswith("modernbert-") else "modern" + model_size
    if name not in PRESETS:
        raise InputError(f"--model-size {model_size}: not a ModernBERT size; choose one of {sorted(PRESETS)}")
    return name


def build_model(cfg, tokenizer, shard_dir: Path, max_len: int, device):
    """A fresh ``ModernBertForMaskedLM`` of ``--model-size`` with the tokenizer's vocabulary and special-token ids
    (MLM decoder bias from the corpus's unigram frequencies with ``output_bias=unigram``), or the ``--init-from``
    ModernBERT; dropout set to ``cfg.dropout`` for training (config.json keeps the model's)."""
    import torch

    from bertkit.data.pretraining.instances import VocabInfo
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM

    if cfg.nsp:
        raise InputError("--nsp: ModernBERT has no next-sentence head; pre-train it with masked LM only (--no-nsp)")
    if getattr(cfg, "position_init", None) == "sinusoidal":
        raise InputError(
            "--position-init sinusoidal: ModernBERT has no position embeddings (its positions are "
            "rotary); leave the flag out"
        )
    torch.manual_seed(cfg.seed)
    v = VocabInfo.from_tokenizer(tokenizer)
    if cfg.init_from:
        config, model = load_init_from(cfg, ModernBertConfig, ModernBertForMaskedLM, tokenizer, max_len, InputError)
    else:
        config = ModernBertConfig.from_preset(
            preset(cfg.model_size),
            vocab_size=len(tokenizer),
            pad_token_id=v.pad_id,
            cls_token_id=v.cls_id,
            sep_token_id=v.sep_id,
            bos_token_id=v.cls_id,
            eos_token_id=v.sep_id,
            max_position_embeddings=max(8192, max_len),
            **cfg.config_overrides,
        )
        model = ModernBertForMaskedLM(config)
        if cfg.output_bias == "unigram" and model.decoder.bias is not None:
            with torch.no_grad():
                model.decoder.bias.copy_(unigram_bias(shard_dir, config.vocab_size, tokenizer))
        init_embeddings(cfg, model.model.embeddings.tok_embeddings.weight, shard_dir)
    if cfg.dropout is not None:
        saved = (config.embedding_dropout, config.attention_dropout, config.mlp_dropout, config.classifier_dropout)
        model.set_dropout(cfg.dropout)
        (config.embedding_dropout, config.attention_dropout, config.mlp_dropout, config.classifier_dropout) = saved
    return model.to(device).train(), config
