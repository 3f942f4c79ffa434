"""``bertkit quickstart``: the main job end to end on bundled books, in about five minutes on a laptop CPU.

It trains a WordPiece vocabulary on five public-domain novels shipped with bertkit, pre-trains bert-tiny on them
for ``--max-time`` with the budget recipe (what learns fastest in minutes: docs/pretraining.md), prints the held-out
masked-word accuracy beside the unigram baseline, and fills in masked words with the model it has just trained.

The printed figure is the one a user gets on new text: it is measured on two other bundled novels the run never
reads (``resources/corpus/heldout``), not on later sentences of its own books, at the length the saved model
accepts: the model's positions are cut to the sequence length it trained (``cap_positions``), since the positions
past it were never trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit import models
from bertkit.errors import InputError, RunError
from bertkit.options import (
    batch_size_option,
    device_option,
    lr_option,
    option,
    overwrite_option,
    precision_option,
    quiet_option,
    seed_option,
    threads_option,
)
from bertkit.tasks.cloze import cloze_probe

SENTENCES = [
    (
        "it is a truth universally acknowledged , that a single man in possession of a good fortune must be in want "
        "of a [MASK] ."
    ),
    "alice was beginning to get very [MASK] of sitting by her sister on the bank .",
    '" you have been in afghanistan , i perceive , " said sherlock [MASK] .',
    "she looked at him and [MASK] nothing .",
    "the [MASK] was in the garden .",
]


def bundled_corpus(folder: str = "") -> list[Path]:
    """The bundled books (gzip-compressed UTF-8 prose, licence header and footer removed): the training books, or
    with ``folder="heldout"`` the two novels the quickstart keeps aside to score on."""
    from importlib import resources

    root = resources.files("bertkit") / "resources" / "corpus"
    root = root / folder if folder else root
    files = sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".txt.gz"))
    if not files:
        raise RunError(f"the bundled corpus is missing from {root}; reinstall bertkit")
    return files


def cap_positions(model_dir: Path, length: int) -> bool:
    """Cut a saved BERT's position table to its first ``length`` rows (``max_position_embeddings = length``), so it
    accepts only the lengths it trained: rows past them keep their random init. False where there is nothing to cut
    (no absolute positions, or no more than ``length``)."""
    import dataclasses

    # torch: kept out of `bertkit quickstart -h`, as in run()
    from bertkit.modeling import BertForPreTraining

    if not models.of_directory(model_dir).absolute_positions:
        return False  # ModernBERT: rotary positions, nothing to cut
    model = BertForPreTraining.from_pretrained(model_dir)
    if model.config.max_position_embeddings <= length:
        return False
    state = model.state_dict()
    key = "bert.embeddings.position_embeddings.weight"
    state[key] = state[key][:length].clone()
    capped = BertForPreTraining(dataclasses.replace(model.config, max_position_embeddings=length))
    capped.load_state_dict({k: v for k, v in state.items() if k in capped.state_dict()})
    capped.save_pretrained(model_dir)
    return True


def score_unseen_books(out: Path, books: list[Path]) -> dict[str, float]:
    """The run's held-out MLM figures (``held_out_accuracy``) on ``books``, which it never read: they are tokenized
    with its vocabulary into ``out/heldout`` (90% of each book's sentences form the scored split) and cut into the
    run's sequences."""
    # torch (the pre-training recipe): kept out of `bertkit quickstart -h`
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.recipes.pretrain import held_out_accuracy

    shards = out / "heldout"
    prepare_corpus(books, shards, out / "vocab.txt", workers=0, progress=False, eval_fraction=0.9, use_cache=False)
    return held_out_accuracy(out, shards=shards)


@dataclass(frozen=True, kw_only=True)
class QuickstartConfig:
    """What ``bertkit quickstart`` trains; the flags it shares with ``bertkit pretrain`` are defined once in
    ``bertkit.options``."""

    output: str = option("runs/quickstart", help="run directory")
    corpus: list[str] | None = option(
        None, nargs="+", metavar="PATH", help="text files to use instead of the bundled books (as for pretrain)"
    )
    max_time: str = option(
        "5m",
        metavar="DURATION",
        help="pre-training budget (5m: in 5 minutes bert-tiny gets well past the unigram plateau, docs/pretraining.md)",
    )
    model_size: str = option("bert-tiny", help="the model's size preset")
    vocab_size: int = option(8000, help="size of the trained vocabulary")
    batch_size: int = batch_size_option(128, help="sequences per batch")
    seq_len: int = option(
        32,
        help="sequence length (32: short sequences leave the unigram plateau in the fewest steps, "
        "docs/pretraining.md; the saved model then accepts up to 32 tokens, the length it trained)",
    )
    overwrite: bool = overwrite_option("replace an earlier quickstart run in --output")
    quiet: bool = quiet_option("no progress or messages")
    lr: float | None = lr_option(None, help="peak learning rate (default: the budget recipe's)", group=None)
    seed: int = seed_option(0, group=None, help="seed of the weights, the data order and the masks")
    device: str | None = device_option()
    precision: str = precision_option()
    threads: int | None = threads_option(group=None)


CONFIG = QuickstartConfig
DESCRIPTION = __doc__.splitlines()[0].split(": ", 1)[1]


def run(qs: QuickstartConfig) -> int:
    # torch: kept out of `bertkit quickstart -h`
    from bertkit.features import Encoder, encode_with_masks, format_fill_mask
    from bertkit.recipes.pretrain import PretrainConfig, PretrainError, held_out_accuracy, parse_duration, pretrain

    corpus = [Path(p) for p in qs.corpus] if qs.corpus else bundled_corpus()
    try:
        budget = parse_duration(qs.max_time)
    except ValueError as e:
        raise InputError(f"--max-time: {e}") from None
    cfg = PretrainConfig(
        corpus=[str(p) for p in corpus],
        output=qs.output,
        vocab_size=qs.vocab_size,
        arch=models.DEFAULT,  # BERT, the demo measured in docs/pretraining.md ("The quickstart"), not the budget one
        model_size=qs.model_size,
        seq_len=qs.seq_len,
        batch_size=qs.batch_size,
        lr=qs.lr,
        max_time=budget,
        save_every=200,
        log_every=25,
        eval_batches=8,
        precision=qs.precision,
        device=qs.device,
        seq_ramp="off",
        batch_ramp="off",
        seed=qs.seed,
        overwrite=qs.overwrite,
        quiet=qs.quiet,
        threads=qs.threads,
    )
    out = Path(qs.output)
    if (out / "run.json").is_file() and not qs.overwrite:
        raise PretrainError(
            f"{out} already holds a run. Pass --overwrite to replace it, or --output another/dir to "
            f"keep it (its model can be tried with: bertkit fill-mask --model {out} "
            '"the [MASK] was in the garden .")'
        )
    if not qs.quiet:
        what = "text files" if qs.corpus else "bundled public-domain books"
        print(f"bertkit quickstart: {len(corpus)} {what} -> {qs.output}")
        print(
            f"  1. train a {qs.vocab_size}-token WordPiece vocabulary   2. pre-train {qs.model_size} "
            f"for {qs.max_time}   3. score it on held-out text   4. fill in masked words\n"
        )
    pretrain(cfg)
    capped = cap_positions(out, qs.seq_len)
    if qs.corpus:
        score, where = held_out_accuracy(out), "later sentences of your files, never trained on"
    else:
        books = bundled_corpus("heldout")
        score, where = score_unseen_books(out, books), f"{len(books)} novels it never read"
    print(
        f"\nheld-out masked-word accuracy: {score['mlm_acc']:.1%}, {score['mlm_acc'] / score['mlm_baseline']:.1f}x "
        f"the best constant guess ({score['mlm_baseline']:.1%}); {score['masked_tokens']} words of {where}, every "
        f"one replaced by [MASK], in {qs.seq_len}-token sequences"
        + (f" (the model accepts {qs.seq_len} tokens: the length it trained)" if capped else "")
    )
    encoder = Encoder.from_pretrained(out, precision="fp32")
    print(cloze_probe(encoder).line() + " (bertkit.tasks.cloze: names and phrases of the bundled books)")
    # the model accepts the length it trained: a sentence longer in this vocabulary's pieces is left out, said so
    limit = encoder.config.max_position_embeddings
    shown = [t for t in SENTENCES if len(encode_with_masks(encoder.tokenizer, t)) <= limit]
    print("\nfill-mask with the model just trained (top 5 guesses for each [MASK]):\n")
    if shown:
        print(format_fill_mask(shown, encoder.fill_mask(shown, top_k=5)))
    if len(shown) < len(SENTENCES):
        print(f"({len(SENTENCES) - len(shown)} example sentence(s) longer than the {limit} tokens the model accepts)")
    print(
        f"\nthe model is in {out}/ (config.json, model.safetensors, vocab.txt); it loads with "
        f'bertkit.BertForPreTraining.from_pretrained("{out}") or transformers.'
    )
    print(f'try your own text:  bertkit fill-mask --model {out} "the [MASK] of the house"')
    print("pre-train on your own files:  bertkit pretrain --corpus my.txt --output runs/mine --max-time 10m")
    print(f"what it gains on tasks over a random init:  bertkit downstream --model {out} --data-dir DATA --output OUT")
    return 0
