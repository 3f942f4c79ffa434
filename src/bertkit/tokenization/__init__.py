"""Google-exact BERT tokenization (normaliser + WordPiece), ``Encoding``, WordPiece vocabulary training, and
:func:`load_tokenizer`: a model directory's tokenizer, WordPiece or any other ``tokenizer.json`` (``FastTokenizer``)."""

from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.fast import FastTokenizer, is_wordpiece, load_tokenizer, require_wordpiece
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
    "FastTokenizer",
    "VocabError",
    "VocabNotFoundError",
    "find_vocab",
    "guess_lowercase",
    "is_wordpiece",
    "load_tokenizer",
    "load_tokenizer_json",
    "load_vocab",
    "reference_basic_tokenize",
    "require_wordpiece",
    "save_vocab",
    "train_vocab",
    "truncate_pair_lengths",
    "vocab_stats",
]
