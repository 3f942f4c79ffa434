"""``bertkit vocab``: train a WordPiece vocabulary (Google layout) on plain-text files; ``bertkit vocab extend``
(``bertkit.commands.vocab_extend``) extends a model's vocabulary for a corpus."""

from __future__ import annotations

import argparse

from bertkit.data.pretraining.corpus import check_corpus_files, corpus_texts, expand_corpus
from bertkit.options import number, output_path
from bertkit.outputs import check_output, removed_on_failure
from bertkit.tokenization import train_vocab, vocab_stats

VOCAB_FILES = ("vocab.txt", "tokenizer_config.json")  # what a vocabulary directory gets
EPILOG = (
    "bertkit vocab extend --model DIR --corpus FILE... --add N --output DIR: extend a model's vocabulary (-h there)"
)


def delegate(argv: list[str]) -> str | None:
    """``bertkit vocab extend ...`` runs ``bertkit.commands.vocab_extend`` (its own flags)."""
    return "bertkit.commands.vocab_extend" if argv[:1] == ["extend"] else None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="UTF-8 text files, one text per line (any size: streamed)")
    parser.add_argument(
        "-o", "--output", required=True, type=output_path, help="directory for vocab.txt + tokenizer_config.json"
    )
    parser.add_argument(
        "--vocab-size",
        type=number(int, "--vocab-size"),
        default=30522,
        help="total size incl. specials (default 30522)",
    )
    parser.add_argument("--cased", action="store_true", help="keep case and accents (default: uncased)")
    parser.add_argument(
        "--strip-accents", choices=["auto", "yes", "no"], default="auto", help="auto: strip when uncased (Google)"
    )
    parser.add_argument("--no-chinese-chars", action="store_true", help="do not split CJK ideographs")
    parser.add_argument(
        "--min-frequency",
        type=number(int, "--min-frequency"),
        default=2,
        help="minimum pair frequency for a merge (default 2)",
    )
    parser.add_argument(
        "--num-unused", type=number(int, "--num-unused"), default=99, help="[unusedN] slots after [PAD] (default 99)"
    )
    parser.add_argument(
        "--limit-alphabet",
        type=number(int, "--limit-alphabet"),
        default=None,
        help="max initial characters (default: all)",
    )
    parser.add_argument(
        "--holdout", nargs="*", default=[], help="held-out text files: print [UNK] rate and tokens per word on them"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --output holds (a directory's files; a vocab.txt given as --output): refused otherwise",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    # a *.txt --output is the vocabulary alone, a file in its directory; else a directory
    output = Path(args.output)
    directory, writes = (output.parent, (output.name,)) if output.suffix == ".txt" else (output, VOCAB_FILES)
    check_corpus_files(expand_corpus(args.holdout))  # a missing or binary one: refused before the training
    inputs = {"FILES": args.files, "--holdout": args.holdout}
    check_output(directory, inputs, overwrite=args.overwrite, writes=writes, whole=output.suffix != ".txt")
    with removed_on_failure(directory):
        tok = train_vocab(
            args.files,
            vocab_size=args.vocab_size,
            lowercase=not args.cased,
            min_frequency=args.min_frequency,
            output=args.output,
            num_unused=args.num_unused,
            strip_accents={"auto": None, "yes": True, "no": False}[args.strip_accents],
            tokenize_chinese_chars=not args.no_chinese_chars,
            limit_alphabet=args.limit_alphabet,
            show_progress=not args.quiet,
        )
    print(
        f"wrote {output if output.suffix == '.txt' else output / 'vocab.txt'}: {tok.vocab_size} tokens "
        f"([UNK]={tok.unk_token_id}, [CLS]={tok.cls_token_id}, [SEP]={tok.sep_token_id}, [MASK]={tok.mask_token_id})"
    )
    for path in args.holdout:
        s = vocab_stats(tok, corpus_texts([path]))
        print(
            f"holdout {path}: {s['lines']} lines, {s['words']} words, [UNK] rate {100 * s['unk_rate']:.3f}%, "
            f"{s['tokens_per_word']:.3f} tokens/word"
        )
    return 0
