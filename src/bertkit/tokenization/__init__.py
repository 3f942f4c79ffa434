"""Google-exact BERT tokenization (normaliser + WordPiece), ``Encoding``, and WordPiece vocabulary training."""

from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.normalizer import ExactNormalizer, reference_basic_tokenize
from bertkit.tokenization.trainer import train_vocab, vocab_stats
from bertkit.tokenization.vocab import (
    SPECIAL_TOKENS,
    VocabError,
    VocabNotFoundError,
    load_tokenizer_json,
    load_vocab,
    save_vocab,
)
from bertkit.tokenization.wordpiece import BertTokenizer, find_vocab, guess_lowercase, truncate_pair_lengths

__all__ = [
    "SPECIAL_TOKENS",
    "BertTokenizer",
    "Encoding",
    "ExactNormalizer",
    "VocabError",
    "VocabNotFoundError",
    "find_vocab",
    "guess_lowercase",
    "load_tokenizer_json",
    "load_vocab",
    "reference_basic_tokenize",
    "save_vocab",
    "train_vocab",
    "truncate_pair_lengths",
    "vocab_stats",
]
