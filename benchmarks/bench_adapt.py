"""Issue 32's demonstrations, scored: pieces per word and held-out MLM of adaptation routes on a domain's held-out
text, each route with its own vocabulary (the routes, commands and split: BENCHMARKS.md, "Adapting a model to a new
language or domain").

Two meters, both honest (every scored position's input is [MASK]; nothing the input gives away is counted):

- **token MLM** (``bertkit.recipes.pretrain.evaluate.held_out_accuracy``, the pre-training meter): 15% of the tokens of
  the held-out text, tokenized by each route's own vocabulary. It does not compare across vocabularies: a route that
  splits a Korean word into 6 jamo is scored on 6 easy guesses where an extended route is scored on 1 hard one.
- **word MLM** (this script): the *same* words are masked for every route, 15% of the words of each held-out line
  (chosen by a seed and the line, not by the vocabulary). Every piece of a chosen word becomes [MASK]; the word counts
  as recovered when the argmax at each of its positions is its piece. A word that contains [UNK] is never recovered
  (its characters are lost). Lines are kept only where every route's tokenization fits in ``--seq-len``, so each
  route is scored on the same words. Baseline, per route: the share of the most frequent masked word in that route's
  pieces, leaving out words that hold [UNK] (never recovered, so no guess scores on them).

    .venv/bin/python benchmarks/bench_adapt.py --heldout kor/heldout.txt none:g30 cpt:kor/r1 mean:kor/r2 random:kor/r3
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from collections import Counter
from pathlib import Path

import torch

from bertkit import models
from bertkit.tokenization import BertTokenizer


def pieces_of(tok: BertTokenizer, line: str) -> list[list[int]]:
    """The line's words (Google's basic tokenization), each as its WordPiece ids."""
    return [tok.convert_tokens_to_ids(tok.tokenize(w)) for w in tok.basic_tokenize(line)]


@torch.no_grad()
def word_mlm(model, tok: BertTokenizer, lines: list[list[list[int]]], masks: list[list[int]], batch: int = 32):
    """(recovered words, masked words, recovered-by-piece positions, masked positions) over ``lines``."""
    ok_w = n_w = ok_p = n_p = 0
    for s in range(0, len(lines), batch):
        rows, labels, spans = [], [], []
        for words, chosen in zip(lines[s : s + batch], masks[s : s + batch]):
            ids, lab, sp = [tok.cls_token_id], [-100], []
            for i, p in enumerate(words):
                if i in chosen:
                    sp.append((len(ids), len(p), tok.unk_token_id in p))
                    ids += [tok.mask_token_id] * len(p)
                    lab += p
                else:
                    ids += p
                    lab += [-100] * len(p)
            rows.append(ids + [tok.sep_token_id])
            labels.append(lab + [-100])
            spans.append(sp)
        width = max(map(len, rows))
        input_ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
        attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        guess = logits.argmax(-1)
        for b, sp in enumerate(spans):
            for start, n, has_unk in sp:
                right = [guess[b, start + k].item() == labels[b][start + k] for k in range(n)]
                ok_p += sum(right)
                n_p += n
                ok_w += int(all(right) and not has_unk)
                n_w += 1
    return ok_w, n_w, ok_p, n_p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", required=True, help="held-out text, one text per line")
    parser.add_argument("routes", nargs="+", help="NAME:MODEL_DIR for each route")
    parser.add_argument("--lines", type=int, default=2000, help="held-out lines scored (the first N that fit)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rate", type=float, default=0.15, help="share of each line's words masked")
    parser.add_argument("--draws", type=int, default=3, help="mask draws (different words) per line")
    parser.add_argument("--token-mlm", action="store_true", help="also the pre-training meter on each route")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.manual_seed(0)
    routes = [r.split(":", 1) for r in args.routes]
    toks = {name: BertTokenizer.from_pretrained(d) for name, d in routes}
    raw = [ln for ln in Path(args.heldout).read_text(encoding="utf-8").splitlines() if ln.strip()]
    kept: dict[str, list] = {name: [] for name, _ in routes}
    masks: list[list[int]] = []
    for line in raw:
        cut = {name: pieces_of(tok, line) for name, tok in toks.items()}
        n_words = {len(c) for c in cut.values()}
        if len(n_words) != 1 or any(sum(map(len, c)) + 2 > args.seq_len for c in cut.values()):
            continue
        n = n_words.pop()
        if n < 2:
            continue
        for draw in range(args.draws):
            rng = random.Random(zlib.crc32(line.encode()) + draw)
            masks.append(sorted(rng.sample(range(n), max(1, round(args.rate * n)))))
            for name in kept:
                kept[name].append(cut[name])
        if len(masks) >= args.lines * args.draws:
            break

    def constant(name: str) -> float:
        """The best constant guess under a route's vocabulary: the share of the masked words that its most frequent
        masked word (as that route's pieces) makes up. A word holding [UNK] is never recovered, so it is no guess."""
        unk = toks[name].unk_token_id
        words = [tuple(kept[name][i][j]) for i, m in enumerate(masks) for j in m]
        counts = Counter(w for w in words if unk not in w)
        return counts.most_common(1)[0][1] / len(words) if counts else 0.0

    results = {}
    for name, d in routes:
        arch = models.of_directory(d)
        model = arch.model_class("masked_lm").from_pretrained(d).eval()
        tok = toks[name]
        ok_w, n_w, ok_p, n_p = word_mlm(model, tok, kept[name], masks)
        all_pieces = [p for line in kept[name] for w in line for p in w]
        words = [w for line in kept[name] for w in line]
        rec = {
            "word_mlm_acc": ok_w / n_w,
            "word_baseline": constant(name),
            "masked_words": n_w,
            "piece_acc_in_masked_words": ok_p / n_p,
            "pieces_per_word": len(all_pieces) / len(words),
            "unk_words": sum(tok.unk_token_id in w for w in words) / len(words),
        }
        if args.token_mlm:
            import tempfile

            from bertkit.data.pretraining.prepare import prepare_corpus
            from bertkit.recipes.pretrain.evaluate import held_out_accuracy

            with tempfile.TemporaryDirectory() as tmp:
                prepare_corpus(
                    [Path(args.heldout)],
                    Path(tmp) / "s",
                    Path(d) / "vocab.txt",
                    workers=0,
                    progress=False,
                    eval_fraction=0.9,
                    use_cache=False,
                )
                rec.update(held_out_accuracy(d, shards=Path(tmp) / "s", max_batches=40, draws=8))
        results[name] = rec
        print(
            f"{name:8s} word MLM {100 * rec['word_mlm_acc']:5.2f}% (constant {100 * rec['word_baseline']:.2f}%, "
            f"{n_w} words); pieces/word {rec['pieces_per_word']:.3f}, [UNK] words {100 * rec['unk_words']:.2f}%"
            + (
                f"; token MLM {100 * rec['mlm_acc']:.2f}% (constant {100 * rec['mlm_baseline']:.2f}%)"
                if "mlm_acc" in rec
                else ""
            ),
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
