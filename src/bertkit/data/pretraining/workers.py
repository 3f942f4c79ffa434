"""What the preparation workers run (:mod:`bertkit.data.pretraining.pipeline`): kept free of numpy and torch, so a
worker process starts in a fraction of a second."""

from __future__ import annotations

import itertools
import os
from array import array

from bertkit.data.pretraining.corpus import block_sentences
from bertkit.tokenization import BertTokenizer

_TOKENIZER = None


def init_tokenizer(vocab_path: str, lowercase: bool | None) -> None:
    global _TOKENIZER
    # each worker tokenizes on one thread: the workers already use every core
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    _TOKENIZER = BertTokenizer.from_pretrained(vocab_path, lowercase=lowercase)


def tokenize_block(task: tuple[str, list[str], str]) -> tuple[array, array, list[int]]:
    """A block's (token ids int32, tokens per sentence int64, sentences per item); sentences without tokens are
    dropped (and not counted)."""

    kind, items, splitter = task
    sentences, counts = block_sentences(kind, items, splitter)
    ids = _TOKENIZER._ids(sentences) if sentences else []  # the batch fast path behind BertTokenizer.__call__
    lengths = array("q", map(len, ids))
    if 0 in lengths:
        kept, k = [], 0
        for c in counts:
            kept.append(sum(1 for n in lengths[k : k + c] if n))
            k += c
        counts = kept
        lengths = array("q", (n for n in lengths if n))
    return array("i", itertools.chain.from_iterable(ids)), lengths, counts
