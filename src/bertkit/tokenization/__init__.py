"""Google-exact BERT tokenization (normaliser + WordPiece), ``Encoding``, and WordPiece vocabulary training."""

from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.normalizer import ExactNormalizer, reference_basic_tokenize
from bertkit.tokenization.trainer import train_vocab, vocab_stats
from bertkit.tokenization.vocab import SPECIAL_TOKENS, load_vocab, save_vocab
from bertkit.tokenization.wordpiece import BertTokenizer, guess_lowercase, truncate_pair_lengths

__all__ = [
    "SPECIAL_TOKENS",
    "BertTokenizer",
    "Encoding",
    "ExactNormalizer",
    "guess_lowercase",
    "load_vocab",
    "reference_basic_tokenize",
    "save_vocab",
    "train_vocab",
    "truncate_pair_lengths",
    "vocab_stats",
]
