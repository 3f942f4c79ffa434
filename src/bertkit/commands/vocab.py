"""``bertkit vocab``: train a WordPiece vocabulary (Google layout) on plain-text files; ``bertkit vocab extend``
(``bertkit.commands.vocab_extend``, a variant chosen by its first word: ``bertkit.cli.VARIANTS``) extends a model's
vocabulary for a corpus."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.pretraining.corpus import check_corpus_files, corpus_texts, expand_corpus
from bertkit.options import cased_option, option, output_option, overwrite_option, quiet_option
from bertkit.outputs import check_output, removed_on_failure
from bertkit.tokenization import train_vocab, vocab_stats

VOCAB_FILES = ("vocab.txt", "tokenizer_config.json")  # what a vocabulary directory gets
EPILOG = (
    "bertkit vocab extend --model DIR --corpus FILE... --add N --output DIR: extend a model's vocabulary (-h there)"
)


@dataclass(frozen=True, kw_only=True)
class VocabConfig:
    """What ``bertkit vocab`` reads, writes and how it trains."""

    files: list[str] = option(
        flag="files", nargs="+", default_factory=list, help="UTF-8 text files, one text per line (any size: streamed)"
    )
    output: str = output_option("directory for vocab.txt + tokenizer_config.json", short="-o")
    vocab_size: int = option(30522, help="total size incl. specials")
    cased: bool = cased_option("keep case and accents (default: uncased)")
    strip_accents: str = option("auto", choices=("auto", "yes", "no"), help="auto: strip when uncased (Google)")
    no_chinese_chars: bool = option(False, help="do not split CJK ideographs")
    min_frequency: int = option(2, help="minimum pair frequency for a merge")
    num_unused: int = option(99, help="[unusedN] slots after [PAD]")
    limit_alphabet: int | None = option(None, help="max initial characters (default: all)")
    holdout: list[str] = option(
        nargs="*", default_factory=list, help="held-out text files: print [UNK] rate and tokens per word on them"
    )
    overwrite: bool = overwrite_option(
        "replace what --output holds (a directory's files; a vocab.txt given as --output): refused otherwise"
    )
    quiet: bool = quiet_option("no progress bars")


CONFIG = VocabConfig


def run(args: VocabConfig) -> int:
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
