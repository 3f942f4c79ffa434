"""Can a masked LM find a token of one segment in the other? The echo probe: 15% of the tokens of each sentence are
masked (every one [MASK]) and predicted twice, once with the sentence alone (``[CLS] A [SEP]``) and once after an
intact copy of it (``[CLS] A [SEP] A_masked [SEP]``). Accuracy is argmax == the original token over the masked
positions. A model that reads across segments gets the copy's tokens nearly all right; one that does not scores the
same both ways. Sentence-pair tasks (QNLI, STS-B, MRPC) lean on the same skill: a word of one sentence found in the
other (BENCHMARKS.md, "Echo instances").

    .venv/bin/python benchmarks/echo_probe.py MODEL_DIR SENTENCES.txt [--sentences 400]
"""

from __future__ import annotations

import argparse
import random

import torch

from bertkit import models
from bertkit.tokenization.fast import load_tokenizer


def probe(model, tok, sentences: list[str], seed: int = 0, max_tokens: int = 60) -> tuple[int, float, float]:
    """(masked tokens, accuracy alone, accuracy after the intact copy), in percent."""
    cls, sep, mask = (tok.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    rng = random.Random(seed)
    alone = copied = n = 0
    with torch.no_grad():
        for text in sentences:
            ids = tok.convert_tokens_to_ids(tok.tokenize(text))[:max_tokens]
            if len(ids) < 5:
                continue
            pos = [i for i in range(len(ids)) if rng.random() < 0.15] or [0]
            masked = [mask if i in pos else t for i, t in enumerate(ids)]
            one = model(input_ids=torch.tensor([[cls, *masked, sep]])).logits[0, 1:]
            two = model(input_ids=torch.tensor([[cls, *ids, sep, *masked, sep]])).logits[0, len(ids) + 2 :]
            for i in pos:
                alone += int(one[i].argmax() == ids[i])
                copied += int(two[i].argmax() == ids[i])
                n += 1
    return n, 100.0 * alone / n, 100.0 * copied / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a masked LM's directory (bertkit or transformers layout)")
    parser.add_argument("text", help="one sentence per line")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cls = models.of_directory(args.model).model_class("masked_lm", args.model)
    model = cls.from_pretrained(args.model).eval()
    with open(args.text, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()][: args.sentences]
    n, alone, copied = probe(model, load_tokenizer(args.model), sentences)
    print(f"{args.model}: {n} masked tokens; alone {alone:.1f}%, after an intact copy {copied:.1f}%")


if __name__ == "__main__":
    main()
