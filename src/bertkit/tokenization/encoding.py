"""The :class:`Encoding` returned by :meth:`bertkit.BertTokenizer.encode`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Encoding:
    """One encoded input: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` (when built with special tokens).

    All lists have the same length T.

    Attributes:
        ids: token ids.
        tokens: the wordpieces (``##`` marks a continuation).
        type_ids: segment ids: 0 for [CLS], A and its [SEP]; 1 for B and its [SEP].
        attention_mask: 1 for every token (padding is added later, in batches).
        special_tokens_mask: 1 for [CLS]/[SEP], 0 for text tokens.
        offsets: (begin, end) character span of each token in the ORIGINAL text of its segment; (0, 0) for specials.
        word_ids: index of the word (within its segment) each token comes from; None for specials. A word is what
            Google's basic tokenizer yields: punctuation characters and CJK ideographs are words of their own.
        sequence_ids: 0 for A, 1 for B, None for specials.
    """

    ids: list[int]
    tokens: list[str]
    type_ids: list[int]
    attention_mask: list[int]
    special_tokens_mask: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    sequence_ids: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)
