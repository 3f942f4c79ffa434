"""``bertkit tokenize``: show how a vocabulary tokenizes text (wordpieces or a tokenizer.json's tokens, or ids)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.options import cased_option, option
from bertkit.tokenization import load_tokenizer


@dataclass(frozen=True, kw_only=True)
class TokenizeConfig:
    """What ``bertkit tokenize`` reads and prints."""

    vocab: str = option(
        flag="vocab", help="vocab.txt or tokenizer.json, or a model directory with either (+ tokenizer_config.json)"
    )
    text: list[str] = option(
        flag="text", nargs="*", default_factory=list, help="texts to tokenize (default: read lines from stdin)"
    )
    cased: bool | None = cased_option("force cased (default: config or guess)", default=None)
    ids: bool = option(False, help="print ids instead of tokens")


CONFIG = TokenizeConfig


def run(cfg: TokenizeConfig) -> int:
    import sys

    tok = load_tokenizer(cfg.vocab, lowercase=None if cfg.cased is None else not cfg.cased)
    texts = cfg.text or (line.rstrip("\n") for line in sys.stdin)
    for text in texts:
        enc = tok.encode(text, truncation=False)
        print(" ".join(str(i) for i in enc.ids) if cfg.ids else " ".join(enc.tokens))
    return 0
