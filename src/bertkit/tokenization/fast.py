"""Any Hugging Face ``tokenizer.json`` (byte-level BPE as ModernBERT's and RoBERTa's, Unigram, WordPiece with other
pipelines...) run by the ``tokenizers`` library, and :func:`load_tokenizer`, the one loader of a model directory's
tokenizer.

A directory with ``vocab.txt``, or with a ``tokenizer.json`` describing BERT's own WordPiece pipeline, keeps the
Google-exact :class:`~bertkit.tokenization.wordpiece.BertTokenizer`. Any other ``tokenizer.json`` gets a
:class:`FastTokenizer`: the ``tokenizers`` library itself does the normalising, pre-tokenizing, model, truncation
and post-processing (special-token template), as ``transformers.PreTrainedTokenizerFast`` does on the same file,
behind the interface bertkit's callers use (special-token ids, :class:`Encoding` with offsets and word ids, id <->
token conversion, ``save_pretrained``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.config import ConfigError, opened_dir
from bertkit.files import write_json, write_text
from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.vocab import VocabError, VocabNotFoundError, load_tokenizer_json, read_json_object
from bertkit.tokenization.wordpiece import (
    CONFIG_NAME,
    TOKENIZER_JSON_NAME,
    VOCAB_NAME,
    BertTokenizer,
    TokenIds,
    find_vocab,
)

logger = logging.getLogger(__name__)

SPECIAL_TOKENS_MAP_NAME = "special_tokens_map.json"
# the special tokens bertkit's callers use, by transformers' attribute names
SPECIAL_NAMES = ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token")
REQUIRED = ("cls_token", "sep_token", "pad_token")  # every encoder input has them; [MASK]/[UNK] may be absent
# used only when neither tokenizer_config.json nor special_tokens_map.json names a token: BERT's, then RoBERTa's
CONVENTIONS = (
    {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]", "unk_token": "[UNK]"},
    {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "mask_token": "<mask>", "unk_token": "<unk>"},
)


def _model_config(opened: Any, directory: Path) -> dict[str, Any]:
    """``directory``'s config.json ({} when absent), from a :class:`bertkit.modeldir.ModelDir` that has read it when
    there is one; a file it refuses is read here to be refused with this reader's message."""
    if opened is not None and Path(opened) == directory:
        try:
            return opened.config_json or {}
        except ConfigError:
            pass
    return read_json_object(directory / "config.json", "the model config")


def load_tokenizer(path: str | Path, lowercase: bool | None = None) -> BertTokenizer | FastTokenizer:
    """The tokenizer of a model directory (or of a ``vocab.txt`` / ``tokenizer.json`` file).

    ``vocab.txt``, or a ``tokenizer.json`` of BERT's WordPiece pipeline: :class:`BertTokenizer` (Google-exact, as
    :meth:`BertTokenizer.from_pretrained`). Any other ``tokenizer.json``: :class:`FastTokenizer`.

    Args:
        lowercase: WordPiece only (overrides the vocabulary's casing); a ``tokenizer.json``'s casing is its
            normaliser's, so a value here is refused for one.

    Raises:
        VocabNotFoundError: neither ``vocab.txt`` nor ``tokenizer.json`` there (the message names the directory).
        VocabError: an unreadable tokenizer file, or special tokens missing from it.
    """
    opened = opened_dir(path)
    path = Path(path)
    source = find_vocab(path) if path.is_dir() else path
    if source is not None and source.suffix == ".json" and source.is_file():
        config = _model_config(opened, source.parent)
        vocab_size = config.get("vocab_size")
        check_tokenizer_json(source, vocab_size if type(vocab_size) is int and vocab_size > 0 else None)
    if (
        source is None
        or not source.exists()
        or source.name == VOCAB_NAME
        or source.suffix != ".json"
        or is_bert_wordpiece(source)
    ):
        return BertTokenizer.from_pretrained(path, lowercase=lowercase)
    if lowercase is not None:
        raise VocabError(
            f"{source}: casing (--cased/--lowercase) applies to WordPiece vocabularies; this "
            "tokenizer.json sets its own in its normalizer"
        )
    return FastTokenizer.from_pretrained(source)


# a tokenizer.json takes about this many bytes per token at most (vocabulary, merges, added tokens: real files take
# 15 to 80), plus the pipeline's settings; a larger file is refused before it is parsed
MAX_BYTES_PER_TOKEN, MAX_SETTINGS_BYTES = 512, 1 << 20
MAX_DEPTH = 64  # real files nest 6 or 7 levels deep (a Sequence of normalizers inside the pipeline)


def check_tokenizer_json(file: Path, vocab_size: int | None = None) -> dict[str, Any]:
    """Refuse a hostile ``tokenizer.json`` before anything large is built from it; returns it parsed.

    Refused, in one line naming the file: a file far larger than ``vocab_size`` tokens take (checked before
    reading it: a 70 MB file of 3 million tokens against a config's 30522 is refused at once); nesting deeper than
    ``MAX_DEPTH``; ids shared by two tokens (of ``model.vocab``, or of two added tokens); ids past ``vocab_size``
    (the model has no embedding for them). ``vocab_size``: the model config's, or None (no model: no size bound).
    """
    size = file.stat().st_size
    limit = MAX_SETTINGS_BYTES + MAX_BYTES_PER_TOKEN * vocab_size if vocab_size else None
    if limit is not None and size > limit:
        raise VocabError(
            f"{file}: {size / 1e6:.1f} MB, far more than a vocabulary of config.json's vocab_size {vocab_size} "
            f"takes (at most {limit / 1e6:.1f} MB); refused before reading it"
        )
    try:
        spec = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabError(f"{file}: cannot read it as JSON ({e})") from None
    except RecursionError:
        raise VocabError(f"{file}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    check_spec(spec, file, vocab_size)
    return spec


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of a parsed JSON value, counted iteratively; stops once past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_spec(spec: Any, file: Path, vocab_size: int | None = None) -> None:
    """:func:`check_tokenizer_json`'s checks of a parsed ``tokenizer.json``: depth, unique ids, ids in range."""
    if _depth(spec, MAX_DEPTH) > MAX_DEPTH:
        raise VocabError(f"{file}: nested more than {MAX_DEPTH} levels deep; not a tokenizer.json")
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise VocabError(f'{file}: not a tokenizer.json (expected a JSON object with a "model")')
    vocab = spec["model"].get("vocab")
    ids: dict[int, str] = {}
    if isinstance(vocab, dict):
        for token, idx in vocab.items():
            if type(idx) is not int or idx < 0:
                raise VocabError(f"{file}: model.vocab[{token!r}] is {json.dumps(idx)[:40]}, not a token id")
            if idx in ids:
                shared = sum(1 for v in vocab.values() if v == idx)
                raise VocabError(
                    f"{file}: model.vocab gives id {idx} to {shared} tokens ({ids[idx]!r}, {token!r}...); each id "
                    "must name one token"
                )
            ids[idx] = token
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, ids by position
        ids = dict(enumerate(str(v[0]) if isinstance(v, list) and v else "" for v in vocab))
    added: dict[int, str] = {}
    for entry in spec.get("added_tokens") or []:
        idx, content = (entry.get("id"), entry.get("content")) if isinstance(entry, dict) else (None, None)
        if type(idx) is not int or idx < 0 or not isinstance(content, str):
            raise VocabError(f"{file}: added_tokens holds {json.dumps(entry)[:60]}, not an {{id, content}} token")
        if idx in added:
            raise VocabError(f"{file}: added_tokens gives id {idx} to {added[idx]!r} and {content!r}")
        added[idx] = content
    top = max([*ids, *added], default=-1)
    if vocab_size is not None and top >= vocab_size:
        raise VocabError(
            f"{file}: token ids reach {top}, but config.json's vocab_size is {vocab_size}: the model has no "
            f"embedding past id {vocab_size - 1}"
        )


def is_bert_wordpiece(tokenizer_json: str | Path) -> bool:
    """Whether a ``tokenizer.json`` describes BERT's WordPiece pipeline exactly (what :class:`BertTokenizer` reads)."""
    try:
        load_tokenizer_json(tokenizer_json)
    except VocabError:
        return False
    return True


def is_wordpiece(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` is bertkit's WordPiece :class:`BertTokenizer` (``##`` continuations, Google's words)."""
    return isinstance(tokenizer, BertTokenizer)


def require_wordpiece(tokenizer: Any, where: str | Path, what: str) -> None:
    """Refuse, in one line naming ``where``, a feature (``what``) that needs a WordPiece vocabulary."""
    if not is_wordpiece(tokenizer):
        raise VocabError(
            f"{where}: {what} needs a WordPiece vocabulary (vocab.txt); this directory's tokenizer is a "
            f"{tokenizer.model_type} tokenizer.json"
        )


def _token_content(value: Any) -> str | None:
    """A special token as transformers writes it: a string, or an AddedToken object ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: no space before punctuation and English contractions."""
    for a, b in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(a, b)
    return text


class FastTokenizer(TokenIds):
    """A ``tokenizer.json`` run by the ``tokenizers`` library, with the interface of :class:`BertTokenizer`.

    Token ids, truncation (``longest_first``), special tokens (the file's post-processor template), offsets and word
    ids are the library's, i.e. what ``transformers.PreTrainedTokenizerFast`` gives on the same file.

    Args:
        spec: the ``tokenizer.json`` text.
        special_tokens: ``{"cls_token": "[CLS]", ...}`` (:data:`SPECIAL_NAMES`; None for an absent one).
        model_max_length: default ``max_length`` for truncation.
        config: the ``tokenizer_config.json`` object it came with (written back by :meth:`save_pretrained`).
        source: where it was read from (named in errors).
    """

    def __init__(
        self,
        spec: str,
        special_tokens: dict[str, str | None],
        model_max_length: int = 512,
        config: dict[str, Any] | None = None,
        source: str | Path = TOKENIZER_JSON_NAME,
    ) -> None:
        from tokenizers import Tokenizer

        self.source = Path(source)
        try:
            self._rust = Tokenizer.from_str(spec)
        except Exception as e:  # the library raises plain Exceptions for malformed files
            raise VocabError(f"{self.source}: the tokenizers library cannot read it ({e})") from None
        self._spec = spec
        self._rust.no_truncation()
        self._rust.no_padding()
        self._lock = threading.Lock()  # truncation is a setting of the Rust object: one batch at a time sets it
        self.model_type = str(json.loads(spec).get("model", {}).get("type", "unknown"))
        self.model_max_length = model_max_length
        self.config = dict(config or {})
        # transformers' decode clean-up (no space before punctuation), which transformers 5 skips for BPE models
        # (it strips spaces the text had) unless the config forces it
        self.clean_up_tokenization_spaces = bool(self.config.get("clean_up_tokenization_spaces", False)) and (
            self.model_type != "BPE"
            or bool(self.config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"))
        )
        self.vocab: dict[str, int] = self._rust.get_vocab(with_added_tokens=True)
        self.special_tokens = dict(special_tokens)
        for name in SPECIAL_NAMES:
            token = special_tokens.get(name)
            idx = self.vocab.get(token) if token is not None else None
            if token is not None and idx is None:
                raise VocabError(f"{self.source}: the {name} {token!r} is not in its vocabulary")
            setattr(self, name, token)
            setattr(self, name + "_id", idx)
        missing = [name for name in REQUIRED if getattr(self, name) is None]
        if missing:
            raise VocabError(
                f"{self.source}: no {', '.join(missing)} named (in {CONFIG_NAME} or "
                f"{SPECIAL_TOKENS_MAP_NAME}), and its vocabulary has neither BERT's [CLS]/[SEP]/[PAD] "
                "nor RoBERTa's <s>/</s>/<pad>"
            )
        self.all_special_ids = {getattr(self, n + "_id") for n in SPECIAL_NAMES} - {None}
        if self._rust.post_processor is None:
            # bertkit builds some inputs itself as [CLS] A [SEP] B [SEP] (SQuAD windows, tagging); every input gets
            # that shape, where transformers would add no special tokens at all
            from tokenizers import processors

            logger.warning(
                f"bertkit: {self.source} has no post-processor (special-token template); inputs get "
                f"BERT's: {self.cls_token} A {self.sep_token} (B {self.sep_token})"
            )
            self._rust.post_processor = processors.TemplateProcessing(
                single=f"{self.cls_token}:0 $A:0 {self.sep_token}:0",
                pair=f"{self.cls_token}:0 $A:0 {self.sep_token}:0 $B:1 {self.sep_token}:1",
                special_tokens=[(self.cls_token, self.cls_token_id), (self.sep_token, self.sep_token_id)],
            )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        state["_rust"] = self._rust.to_str()  # as set up here (a template added), never truncating between calls
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        self.__dict__.update(state)
        self._rust = Tokenizer.from_str(state["_rust"])
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------------------------------------
    # loading and saving

    @classmethod
    def from_pretrained(cls, path: str | Path) -> FastTokenizer:
        """Read ``tokenizer.json`` (a directory's, or the file) and the special tokens named next to it.

        Special tokens come, as in transformers, from ``tokenizer_config.json`` with ``special_tokens_map.json``
        taking precedence; a token named in neither is BERT's ([CLS] [SEP] [PAD] [MASK] [UNK]) when the
        vocabulary holds [CLS] and [SEP], else RoBERTa's (<s> </s> <pad> <mask> <unk>) when it holds <s> and </s>
        (each only when the vocabulary has it).
        """
        path = Path(path)
        file = path / TOKENIZER_JSON_NAME if path.is_dir() else path
        if not file.is_file():
            raise VocabNotFoundError(f"{path}: no {VOCAB_NAME} or {TOKENIZER_JSON_NAME} (the tokenizer's vocabulary)")
        try:
            spec = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise VocabError(f"{file}: cannot read it ({e})") from None
        try:
            parsed = json.loads(spec)
        except json.JSONDecodeError as e:
            raise VocabError(f"{file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
        except RecursionError:
            raise VocabError(f"{file}: nested too deeply (at most {MAX_DEPTH} levels)") from None
        check_spec(parsed, file)
        config = read_json_object(file.parent / CONFIG_NAME, "the tokenizer config")
        special_map = read_json_object(file.parent / SPECIAL_TOKENS_MAP_NAME, "the special tokens map")
        special = {name: _token_content(special_map.get(name, config.get(name))) for name in SPECIAL_NAMES}
        if not all(special.values()):
            vocab = set(_vocab_tokens(parsed))
            for convention in CONVENTIONS:
                if convention["cls_token"] in vocab and convention["sep_token"] in vocab:
                    special = {n: special[n] or (t if t in vocab else None) for n, t in convention.items()}
                    break
        max_len = config.get("model_max_length")
        model_max_length = max_len if type(max_len) is int and 0 < max_len < 1_000_000 else 512  # HF writes 1e30
        return cls(spec, special, model_max_length, config, file)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``tokenizer.json`` (the file as read), ``tokenizer_config.json`` and ``special_tokens_map.json``
        (readable by ``transformers.AutoTokenizer``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_text(directory / TOKENIZER_JSON_NAME, self._spec)
        named = {n: getattr(self, n) for n in SPECIAL_NAMES if getattr(self, n) is not None}
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **self.config,
            **named,
            "model_max_length": self.model_max_length,
        }
        write_json(directory / CONFIG_NAME, config, sort_keys=False)
        write_json(directory / SPECIAL_TOKENS_MAP_NAME, named, sort_keys=False)
        return directory

    # ----------------------------------------------------------------------------------------------------------------
    # vocabulary

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary without added tokens (as transformers' ``vocab_size``; ``len()`` counts them)."""
        return self._rust.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._rust.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"FastTokenizer({self.model_type}, size={len(self)}, source={str(self.source)!r})"

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """Tokens back to text by the file's decoder (space-joined without one), as transformers does."""
        decoder = self._rust.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    @property
    def continuing_subword_prefix(self) -> str | None:
        """The model's mark of a word's later pieces (None for byte-level BPE: words are told by spaces)."""
        return getattr(self._rust.model, "continuing_subword_prefix", None) or None

    def _token(self, idx: int) -> str:
        token = self._rust.id_to_token(idx) if idx >= 0 else None
        if token is None:
            raise IndexError(f"token id {idx} is outside the vocabulary of {self.source} (size {len(self)})")
        return token

    # ----------------------------------------------------------------------------------------------------------------
    # encoding

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``, without special tokens."""
        return self._rust.encode(text, add_special_tokens=False).tokens

    def _limit(self, max_length: int | None, truncation: bool) -> int | None:
        if not truncation:
            return None
        return self.model_max_length if max_length is None else max_length

    def encode(
        self,
        text: str,
        pair: str | None = None,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> Encoding:
        """Encode ``text`` (and ``pair``) with the file's special-token template; see :meth:`encode_batch`."""
        return self.encode_batch([text], None if pair is None else [pair], max_length, truncation, add_special_tokens)[
            0
        ]

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: bool = True,
        add_special_tokens: bool = True,
    ) -> list[Encoding]:
        """Encode many texts (and pairs). With ``truncation`` each result holds at most ``max_length`` tokens
        (default ``model_max_length``), special tokens included; pairs lose tokens from the longer segment first
        (the library's ``longest_first``, as transformers)."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of texts; use encode() for one text")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pairs")
        for t in (*texts, *(pairs or ())):
            if not isinstance(t, str):
                raise TypeError(f"expected str, got {type(t).__name__}")
        inputs: list[Any] = list(texts) if pairs is None else list(zip(texts, pairs))
        limit = self._limit(max_length, truncation)
        with self._lock:
            try:
                if limit is None:
                    self._rust.no_truncation()
                else:
                    self._rust.enable_truncation(max(int(limit), 0), strategy="longest_first")
                out = self._rust.encode_batch(inputs, add_special_tokens=add_special_tokens)
            except Exception as e:  # e.g. a limit shorter than the special tokens
                raise VocabError(f"{self.source}: cannot encode with max_length={limit}: {e}") from None
            finally:
                self._rust.no_truncation()
        return [
            Encoding(
                ids=e.ids,
                tokens=e.tokens,
                type_ids=e.type_ids,
                attention_mask=e.attention_mask,
                special_tokens_mask=e.special_tokens_mask,
                offsets=list(e.offsets),
                word_ids=e.word_ids,
                sequence_ids=e.sequence_ids,
            )
            for e in out
        ]

    def encode_with_masks(self, text: str, mask_token: str) -> list[int]:
        """Ids of ``text`` with its special tokens, every literal ``mask_token`` becoming the mask token (which the
        library matches as the added token it is, with its own handling of the spaces around it)."""
        if self.mask_token is None:
            raise VocabError(f"{self.source}: this tokenizer has no mask token, which fill-mask needs")
        if mask_token != self.mask_token:
            text = text.replace(mask_token, self.mask_token)
        return self.encode(text, truncation=False).ids

    def __call__(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        padding: str | bool = "longest",
        max_length: int | None = None,
        truncation: bool = True,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = "pt",
        add_special_tokens: bool = True,
    ) -> dict[str, Any]:
        """A padded batch, as :meth:`BertTokenizer.__call__`."""
        if isinstance(texts, str):
            texts = [texts]
            if isinstance(pairs, str):
                pairs = [pairs]
        encs = self.encode_batch(texts, pairs, max_length, truncation, add_special_tokens)
        return BertTokenizer._pad(
            self,
            [e.ids for e in encs],
            [e.type_ids for e in encs],  # type: ignore[arg-type]
            padding,
            max_length,
            pad_to_multiple_of,
            return_tensors,
        )

    # ----------------------------------------------------------------------------------------------------------------
    # decoding

    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` by the file's decoder (and transformers' clean-up where transformers 5 applies it)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        text = self._rust.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return _clean_up_tokenization(text) if self.clean_up_tokenization_spaces else text


def _vocab_tokens(spec: dict[str, Any]) -> list[str]:
    """The tokens of a parsed ``tokenizer.json``: its model's vocabulary (a dict for BPE/WordPiece/WordLevel, a list
    of [token, score] for Unigram) and its added tokens."""
    vocab = spec.get("model", {}).get("vocab")
    tokens = list(vocab) if isinstance(vocab, dict) else [v[0] for v in vocab or [] if isinstance(v, list) and v]
    tokens += [a.get("content") for a in spec.get("added_tokens") or [] if isinstance(a, dict)]
    return [t for t in tokens if isinstance(t, str)]
