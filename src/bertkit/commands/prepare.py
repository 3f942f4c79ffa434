"""``bertkit prepare``: tokenize a corpus into pre-training shards once (a CPU machine is enough).

The shards go to a cache directory keyed by the corpus files, the vocabulary and the settings
(``$BERTKIT_CACHE/prepared/<key>``, default ``~/.cache/bertkit``), or to ``--output``. ``bertkit pretrain`` with the
same ``--corpus``, ``--vocab`` and settings finds them in the cache and links them into its run instead of
tokenizing again. An interrupted preparation resumes where it stopped when run again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.pretraining.corpus import FORMATS, check_corpus_files
from bertkit.data.pretraining.corpus_files import find_corpus
from bertkit.data.pretraining.prepare import DEFAULTS, _settings, cache_dir, corpus_fingerprint, prepare_corpus
from bertkit.data.pretraining.splitter import SPLITTERS
from bertkit.errors import BertkitError, InputError
from bertkit.options import (
    corpus_option,
    encoding_option,
    follow_symlinks_option,
    lowercase_option,
    option,
    output_option,
    quiet_option,
    vocab_option,
    workers_option,
)
from bertkit.outputs import check_output, removed_on_failure
from bertkit.tokenization import BertTokenizer


@dataclass(frozen=True, kw_only=True)
class PrepareConfig:
    """What ``bertkit prepare`` reads, writes, and the settings its shards are keyed by."""

    corpus: list[str] = corpus_option()
    vocab: str = vocab_option("vocab.txt, or a model/tokenizer directory", required=True)
    output: str | None = output_option(
        "shard directory (default: the cache, where bertkit pretrain finds it)", required=False
    )
    corpus_format: str = option("auto", choices=FORMATS, help="auto: by name and content")
    text_field: str = option("text", help="JSONL field / Parquet or Arrow column")
    splitter: str = option(
        "regex", choices=SPLITTERS, help="sentence splitter for prose and JSONL: regex (fast) or pysbd (slow)"
    )
    encoding: str = encoding_option()
    lowercase: bool | None = lowercase_option()
    workers: int | None = workers_option()
    shard_tokens: int = option(DEFAULTS["shard_tokens"], help="tokens per shard")
    eval_fraction: float = option(DEFAULTS["eval_fraction"], help="held-out fraction of the text")
    follow_symlinks: bool = follow_symlinks_option()
    quiet: bool = quiet_option()

    def __post_init__(self) -> None:
        if not Path(self.vocab).exists():
            raise InputError(f"--vocab {self.vocab}: no such file or directory")


CONFIG = PrepareConfig


def run(cfg: PrepareConfig) -> int:
    vocab = Path(cfg.vocab)
    settings = {
        "corpus_format": cfg.corpus_format,
        "encoding": cfg.encoding,
        "splitter": cfg.splitter,
        "text_field": cfg.text_field,
        "shard_tokens": cfg.shard_tokens,
        "eval_fraction": cfg.eval_fraction,
    }
    listing = find_corpus(cfg.corpus, cfg.follow_symlinks)  # warns once about each link skipped
    # a binary file, or no text at all: refused before OUTPUT
    check_corpus_files(listing.files, cfg.corpus_format, cfg.encoding, cfg.text_field, some_text=True)
    output = cfg.output
    if output is not None:  # not a file, not one of the inputs (an existing shard directory is prepare's to judge)
        check_output(output, {"--corpus": cfg.corpus, "--vocab": cfg.vocab}, overwrite=None)
    if output is None:
        tokenizer = BertTokenizer.from_pretrained(str(vocab), lowercase=cfg.lowercase)
        fp = corpus_fingerprint(listing.files, tokenizer, **_settings(*settings.values(), DEFAULTS["max_eval_tokens"]))
        output = cache_dir(fp)
    with removed_on_failure(output, only=BertkitError):  # refused (an empty corpus): gone; interrupted: resumes
        meta = prepare_corpus(
            listing.files,
            output,
            vocab,
            lowercase=cfg.lowercase,
            workers=cfg.workers,
            progress=not cfg.quiet and sys.stderr.isatty(),
            use_cache=False,
            log=(lambda m: None) if cfg.quiet else (lambda m: print(m, file=sys.stderr)),
            **settings,
        )
    tokens = sum(s["tokens"] for s in meta["shards"])
    held = meta["eval"]["tokens"] if meta.get("eval") else 0
    print(f"{', '.join(cfg.corpus)}: {listing.summary()}")
    print(f"{output}: {len(meta['shards'])} shard(s), {tokens:,} training tokens, {held:,} held out")
    return 0
