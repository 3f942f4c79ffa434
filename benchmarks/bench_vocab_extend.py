"""Pieces per word before and after ``bertkit vocab extend`` (issue 32): Google's English uncased vocabulary extended
by N tokens on a domain's adaptation text, measured on held-out text of the same domain. No model is trained: the
extension's tokenizer side alone (the same choice ``bertkit vocab extend`` makes, with the tokenizer it writes).

- Korean (NSMC, ``../shared/data/korean/nsmc/ratings_test.txt``): reviews split by ``crc32(id) % 10``: 0-5 adaptation
  text, 6-7 training, 8 dev, 9 test (the held-out text measured here). Deterministic, independent of the file order.
- News (CoNLL-2003, ``../shared/data/ner/conll2003``): the sentences of train.txt (words joined by spaces) are the
  adaptation text, those of valid.txt the held-out text.

A word is a word of Google's basic tokenization. A word that becomes [UNK] counts as its characters (it lost them
all): "characters" as the tokenizer sees them (uncased: after NFD, so a Hangul syllable is 2-3 jamo) and, more
strictly, as written (NFC: a syllable is one character). Prints one line per domain.

    PYTHONPATH=src python benchmarks/bench_vocab_extend.py [--add 2000] [--data ../shared/data]
    PYTHONPATH=src python benchmarks/bench_vocab_extend.py --vocab runs/books30 --domains news   # another model's
"""

from __future__ import annotations

import argparse
import unicodedata
import zlib
from collections import Counter
from pathlib import Path

from bertkit.tokenization import BertTokenizer
from bertkit.tokenization.extend import WordPieceSplitter, choose_wordpiece, count_words, place_tokens


def nsmc_split(path: Path) -> dict[str, list[str]]:
    """NSMC reviews by ``crc32(id) % 10``: 0-5 adapt, 6-7 train, 8 dev, 9 test."""
    parts: dict[str, list[str]] = {"adapt": [], "train": [], "dev": [], "test": []}
    names = ["adapt"] * 6 + ["train"] * 2 + ["dev", "test"]
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) == 3 and fields[1].strip():
            parts[names[zlib.crc32(fields[0].encode()) % 10]].append(fields[1])
    return parts


def conll_sentences(path: Path) -> list[str]:
    sentences, words = [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(" ".join(words))
            words = []
        else:
            words.append(line.split()[0])
    return sentences


def measure(counts: Counter, vocab: dict[str, int]) -> dict[str, float]:
    split = WordPieceSplitter(vocab).split
    words = pieces = pieces_nfc = unk = 0
    for word, freq in counts.items():
        p = split(word)
        words += freq
        unk += freq if p is None else 0
        pieces += freq * (len(word) if p is None else len(p))
        pieces_nfc += freq * (len(unicodedata.normalize("NFC", word)) if p is None else len(p))
    return {"ppw": pieces / words, "ppw_nfc": pieces_nfc / words, "unk": unk / words, "words": words}


def run(name: str, tok: BertTokenizer, adapt: list[str], held: list[str], add: int) -> None:
    chosen = choose_wordpiece(count_words(tok, adapt), tok.vocab, add)
    vocab = place_tokens(chosen, tok.vocab)
    held_counts = count_words(tok, held)
    b, a = measure(held_counts, tok.vocab), measure(held_counts, vocab)
    print(
        f"{name}: {len(adapt)} adaptation texts, {len(held)} held-out texts ({b['words']} words); "
        f"{len(chosen)} tokens added ({sum(c.slot is not None for c in chosen)} into [unused] slots, "
        f"{sum(c.pieces == [tok.unk_token_id] for c in chosen)} of them missing characters)\n"
        f"  pieces/word {b['ppw']:.3f} -> {a['ppw']:.3f} ({100 * (a['ppw'] / b['ppw'] - 1):+.1f}%); "
        f"[UNK] words as NFC characters {b['ppw_nfc']:.3f} -> {a['ppw_nfc']:.3f} "
        f"({100 * (a['ppw_nfc'] / b['ppw_nfc'] - 1):+.1f}%); "
        f"[UNK] words {100 * b['unk']:.2f}% -> {100 * a['unk']:.2f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--add", type=int, default=2000)
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument(
        "--vocab", help="the vocabulary extended (a vocab.txt or a model directory; default Google's uncased)"
    )
    parser.add_argument("--domains", default="korean,news", help="which of korean, news (default both)")
    args = parser.parse_args()
    data = Path(args.data)
    tok = BertTokenizer.from_pretrained(args.vocab or data / "vocab" / "bert-base-uncased" / "vocab.txt")
    if "korean" in args.domains:
        nsmc = nsmc_split(data / "korean" / "nsmc" / "ratings_test.txt")
        run("Korean (NSMC)", tok, nsmc["adapt"], nsmc["test"], args.add)
    if "news" in args.domains:
        conll = data / "ner" / "conll2003"
        train, valid = conll_sentences(conll / "train.txt"), conll_sentences(conll / "valid.txt")
        run("News (CoNLL-2003)", tok, train, valid, args.add)


if __name__ == "__main__":
    main()
