"""``bertkit vocab extend``: add to a model's vocabulary the N strings that save the most pieces on a corpus, and write
a new model directory whose new embedding rows start as the mean of the pieces they replace.

``bertkit vocab FILES... -o DIR`` (training a vocabulary) is unchanged: ``extend`` is a variant of ``bertkit vocab``
chosen by its first word (``bertkit.cli.VARIANTS``). The choice is ``bertkit.tokenization.extend``'s, the weights'
surgery ``bertkit.resize``'s.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.pretraining.corpus import corpus_texts
from bertkit.errors import InputError
from bertkit.options import corpus_option, model_option, option, output_option, overwrite_option, seed_option
from bertkit.outputs import MODEL_FILES, check_output, removed_on_failure
from bertkit.tokenization import BertTokenizer, FastTokenizer, load_tokenizer
from bertkit.tokenization.extend import (
    WordPieceSplitter,
    bpe_spec,
    choose_bpe,
    choose_wordpiece,
    count_words,
    extend_bpe_json,
    place_tokens,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ExtendArgs:
    """What ``bertkit vocab extend`` reads and writes."""

    model: str = model_option("model directory (bertkit, Hugging Face or Google TF; BERT or ModernBERT)")
    corpus: list[str] = corpus_option("UTF-8 text files of the domain, one text per line")
    add: int = option(required=True, metavar="N", help="how many tokens to add")
    output: str = output_option("directory for the extended model (config, weights, tokenizer)")
    overwrite: bool = overwrite_option(
        "write into an existing --output that holds files (the model files are replaced, others left)"
    )
    init: str = option(
        "mean",
        choices=("mean", "random"),
        help="new rows: mean of the rows of the pieces each token replaces, or random as the model initialises",
    )
    min_saving: int = option(2, help="stop before a token that saves fewer pieces than this on the corpus")
    seed: int = seed_option(0, group=None, help="seed of --init random")
    show: int = option(20, help="print the first this many tokens chosen")


CONFIG = ExtendArgs
DESCRIPTION = "extend a model's vocabulary by the N strings that save the most pieces on a corpus"


def pieces_on(counts: Counter, tokenizer: Any) -> tuple[int, int, int]:
    """(words, pieces, words that are [UNK]) of a corpus of word ``counts`` under ``tokenizer``; an [UNK] word counts
    as its characters (it lost them all)."""

    words = pieces = unk = 0
    if hasattr(tokenizer, "basic_tokenize"):
        splitter = WordPieceSplitter(tokenizer.vocab, tokenizer.max_input_chars_per_word)
        for word, freq in counts.items():
            split = splitter.split(word)
            words += freq
            pieces += freq * (len(word) if split is None else len(split))
            unk += freq if split is None else 0
        return words, pieces, unk
    model = tokenizer._rust.model
    for word, freq in counts.items():
        words += freq
        pieces += freq * len(model.tokenize(word))
    return words, pieces, unk


def extend_vocabulary(
    model: str | Path,
    corpus: Sequence[str | Path],
    add: int,
    output: str | Path,
    init: str = "mean",
    min_saving: int = 2,
    seed: int = 0,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Choose ``add`` tokens for the corpus, place them, write the extended tokenizer and model to ``output``.

    Returns a report: ``chosen`` (the :class:`~bertkit.tokenization.extend.Choice` list, ids set), ``slots`` (how
    many took ``[unusedN]`` slots), ``vocab_size`` (the model's, before and after), ``before`` / ``after`` ((words,
    pieces, [UNK] words) on the corpus). ``output`` may not be ``model`` (nor hold a corpus file it would replace),
    nor an existing directory holding files unless ``overwrite`` (``bertkit.outputs.check_output``); a failed
    extension removes the ``output`` it made."""
    import json

    # torch (the weights' surgery): kept out of `bertkit vocab extend -h`
    from bertkit.resize import extend_model_directory, read_directory_config

    model, output = Path(model), Path(output)
    if add < 1:
        raise InputError(f"--add {add}: give a positive number of tokens")
    check_output(output, {"--model": model, "--corpus": corpus}, overwrite=overwrite, writes=MODEL_FILES)
    tokenizer = load_tokenizer(model)
    if not isinstance(tokenizer, BertTokenizer):
        bpe_spec(json.loads(tokenizer._spec), str(tokenizer.source))  # a tokenizer.json this can extend, or an error
    counts = count_words(tokenizer, corpus_texts(corpus))
    if isinstance(tokenizer, BertTokenizer):
        chosen = choose_wordpiece(counts, tokenizer.vocab, add, tokenizer.max_input_chars_per_word, min_saving)
        vocab = place_tokens(chosen, tokenizer.vocab)
        new_tok: Any = BertTokenizer(
            vocab,
            tokenizer.lowercase,
            tokenizer.strip_accents,
            tokenizer.tokenize_chinese_chars,
            tokenizer.max_input_chars_per_word,
            tokenizer.model_max_length,
        )
    else:
        chosen = choose_bpe(counts, tokenizer, add, min_saving)
        place_tokens(chosen, tokenizer.vocab, use_unused=False)
        spec = extend_bpe_json(tokenizer._spec, chosen, str(tokenizer.source))
        special = {name: getattr(tokenizer, name) for name in ("cls_token", "sep_token", "pad_token")}
        special.update({name: getattr(tokenizer, name) for name in ("mask_token", "unk_token")})
        new_tok = FastTokenizer(spec, special, tokenizer.model_max_length, tokenizer.config, tokenizer.source)
    if not chosen:  # the model as it was, under another name: nothing to write
        raise InputError(
            f"--corpus {' '.join(map(str, corpus))}: no token would save --min-saving {min_saving} pieces (every "
            f"word the corpus repeats already splits well); nothing written to {output}"
        )
    old_size = read_directory_config(model).get("vocab_size", 0)
    new_size = max([old_size, *(c.id + 1 for c in chosen)])
    with removed_on_failure(output):
        extend_model_directory(model, output, [(c.id, c.pieces) for c in chosen], new_size, init, seed)
        new_tok.save_pretrained(output)
    return {
        "chosen": chosen,
        "slots": sum(1 for c in chosen if c.slot is not None),
        "vocab_size": (old_size, new_size),
        "before": pieces_on(counts, tokenizer),
        "after": pieces_on(counts, new_tok),
    }


def run(cfg: ExtendArgs) -> int:
    report = extend_vocabulary(
        cfg.model, cfg.corpus, cfg.add, cfg.output, cfg.init, cfg.min_saving, cfg.seed, overwrite=cfg.overwrite
    )
    chosen = report["chosen"]
    (w0, p0, u0), (w1, p1, u1) = report["before"], report["after"]
    old, new = report["vocab_size"]
    print(
        f"wrote {cfg.output}: {len(chosen)} tokens added ({report['slots']} into [unusedN] slots), "
        f"vocab_size {old} -> {new}, rows initialised: {cfg.init}"
    )
    print(
        f"on the corpus: {w0} words, pieces per word {p0 / max(w0, 1):.3f} -> {p1 / max(w1, 1):.3f} "
        f"({100 * (p1 - p0) / max(p0, 1):+.1f}%), [UNK] words {100 * u0 / max(w0, 1):.2f}% -> "
        f"{100 * u1 / max(w1, 1):.2f}% (an [UNK] word counts as its characters)"
    )
    for c in chosen[: cfg.show]:
        print(f"  {c.id:>7}  {c.token}  saves {c.saving}" + (f"  (was {c.slot})" if c.slot else ""))
    return 0
