"""``bertkit prepare``: tokenize a corpus into pre-training shards once (a CPU machine is enough).

The shards go to a cache directory keyed by the corpus files, the vocabulary and the settings
(``$BERTKIT_CACHE/prepared/<key>``, default ``~/.cache/bertkit``), or to ``--output``. ``bertkit pretrain`` with the
same ``--corpus``, ``--vocab`` and settings finds them in the cache and links them into its run instead of
tokenizing again. An interrupted preparation resumes where it stopped when run again.
"""

from __future__ import annotations

import argparse

from bertkit.options import number, output_path
from bertkit.outputs import check_output, removed_on_failure


def configure(parser: argparse.ArgumentParser) -> None:
    # the library loads when the command runs, not for its -h
    from bertkit.data.pretraining.corpus import ENCODINGS, FORMATS
    from bertkit.data.pretraining.prepare import DEFAULTS
    from bertkit.data.pretraining.splitter import SPLITTERS

    parser.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        help="corpus files or directories: text (prose or Google's one-sentence-per-line), JSONL, "
        "Parquet, a datasets.save_to_disk directory; gzip/zstd compressed text too",
    )
    parser.add_argument("--vocab", required=True, help="vocab.txt, or a model/tokenizer directory")
    parser.add_argument(
        "--output",
        default=None,
        type=output_path,
        help="shard directory (default: the cache, where bertkit pretrain finds it)",
    )
    parser.add_argument("--corpus-format", choices=FORMATS, default="auto", help="default: auto (by name and content)")
    parser.add_argument("--text-field", default="text", help="JSONL field / Parquet or Arrow column (default text)")
    parser.add_argument(
        "--splitter",
        choices=SPLITTERS,
        default="regex",
        help="sentence splitter for prose and JSONL: regex (default, fast) or pysbd (slow)",
    )
    parser.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="auto",
        help="auto: read non-UTF-8 lines as Windows-1252 with a warning; utf-8: fail on them",
    )
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=None, help="uncased tokenizing")
    case.add_argument("--cased", dest="lowercase", action="store_false", help="cased tokenizing")
    parser.add_argument(
        "--workers", type=number(int, "--workers"), default=None, help="worker processes (default: every core)"
    )
    parser.add_argument(
        "--shard-tokens",
        type=number(int, "--shard-tokens"),
        default=DEFAULTS["shard_tokens"],
        help=f"tokens per shard (default {DEFAULTS['shard_tokens']})",
    )
    parser.add_argument(
        "--eval-fraction",
        type=number(float, "--eval-fraction"),
        default=DEFAULTS["eval_fraction"],
        help=f"held-out fraction of the text (default {DEFAULTS['eval_fraction']})",
    )
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read symbolic links that leave a corpus directory too (default: skipped, with a warning naming them)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    # the library loads when the command runs, not for its -h
    from bertkit.data.pretraining.corpus import check_corpus_files
    from bertkit.data.pretraining.corpus_files import find_corpus
    from bertkit.data.pretraining.prepare import DEFAULTS, _settings, cache_dir, corpus_fingerprint, prepare_corpus
    from bertkit.errors import BertkitError, InputError
    from bertkit.tokenization import BertTokenizer

    vocab = Path(args.vocab)
    if not vocab.exists():
        raise InputError(f"--vocab {vocab}: no such file or directory")
    settings = {
        "corpus_format": args.corpus_format,
        "encoding": args.encoding,
        "splitter": args.splitter,
        "text_field": args.text_field,
        "shard_tokens": args.shard_tokens,
        "eval_fraction": args.eval_fraction,
    }
    listing = find_corpus(args.corpus, args.follow_symlinks)  # warns once about each link skipped
    # a binary file, or no text at all: refused before OUTPUT
    check_corpus_files(listing.files, args.corpus_format, args.encoding, args.text_field, some_text=True)
    output = args.output
    if output is not None:  # not a file, not one of the inputs (an existing shard directory is prepare's to judge)
        check_output(output, {"--corpus": args.corpus, "--vocab": args.vocab}, overwrite=None)
    if output is None:
        tokenizer = BertTokenizer.from_pretrained(str(vocab), lowercase=args.lowercase)
        fp = corpus_fingerprint(
            listing.files,
            tokenizer,
            **_settings(
                args.corpus_format,
                args.encoding,
                args.splitter,
                args.text_field,
                args.shard_tokens,
                args.eval_fraction,
                DEFAULTS["max_eval_tokens"],
            ),
        )
        output = cache_dir(fp)
    with removed_on_failure(output, only=BertkitError):  # refused (an empty corpus): gone; interrupted: resumes
        meta = prepare_corpus(
            listing.files,
            output,
            vocab,
            lowercase=args.lowercase,
            workers=args.workers,
            progress=not args.quiet and sys.stderr.isatty(),
            use_cache=False,
            log=(lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr)),
            **settings,
        )
    tokens = sum(s["tokens"] for s in meta["shards"])
    held = meta["eval"]["tokens"] if meta.get("eval") else 0
    print(f"{', '.join(args.corpus)}: {listing.summary()}")
    print(f"{output}: {len(meta['shards'])} shard(s), {tokens:,} training tokens, {held:,} held out")
    return 0
