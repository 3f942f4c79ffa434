"""Continue a saved masked LM for some minutes on echo instances only, and save it: the exploration that showed echo
training carries over to a sentence-pair task (BENCHMARKS.md, "Echo instances"). Each instance is a corpus line's
first 60 tokens A, then ``[CLS] A [SEP] A' [SEP]`` with A' = A less a fifth of its tokens, both masked 15% (80/10/10);
batch 32, AdamW (0.9, 0.98), weight decay 0.01, the lr warmed up over 50 steps and then constant, bf16 autocast.
``--share`` below 1 mixes in plain single-segment instances of up to 126 tokens. The recipe's own route is
``bertkit pretrain --echo-share P``.

    .venv/bin/python benchmarks/echo_continue.py MODEL_DIR SENTENCES.txt OUT --minutes 8 --lr 1e-3
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from pathlib import Path

import torch

from bertkit import models
from bertkit.tokenization.fast import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("text", help="one sentence per line")
    parser.add_argument("output")
    parser.add_argument("--share", type=float, default=1.0, help="the share of echo instances")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = random.Random(0)
    model = models.of_directory(args.model).model_class("masked_lm", args.model).from_pretrained(args.model).train()
    tok = load_tokenizer(args.model)
    cls, sep, mask, pad = (tok.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"))
    vocab_size = model.config.vocab_size
    with open(args.text, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]

    def masked(ids: list[int]) -> tuple[list[int], list[int]]:
        x, y = list(ids), [-100] * len(ids)
        for i in range(len(ids)):
            if rng.random() < 0.15:
                y[i], r = ids[i], rng.random()
                x[i] = mask if r < 0.8 else (rng.randrange(1000, vocab_size) if r < 0.9 else ids[i])
        return x, y

    def instance() -> tuple[list[int], list[int]]:
        ids = tok.convert_tokens_to_ids(tok.tokenize(rng.choice(lines)))
        if rng.random() < args.share:
            a = ids[:60]
            (xa, ya), (xb, yb) = masked(a), masked([t for t in a if rng.random() >= 0.2])
            return [cls, *xa, sep, *xb, sep], [-100, *ya, -100, *yb, -100]
        xa, ya = masked(ids[:126])
        return [cls, *xa, sep], [-100, *ya, -100]

    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98))
    start, step, losses = time.time(), 0, []
    while time.time() - start < args.minutes * 60:
        batch = [instance() for _ in range(32)]
        width = max(len(x) for x, _ in batch)
        ids = torch.tensor([x + [pad] * (width - len(x)) for x, _ in batch])
        labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in batch])
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (step + 1) / 50)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=(ids != pad).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        if step % 50 == 0:
            print(f"step {step}: loss {sum(losses[-50:]) / 50:.3f}", flush=True)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (Path(args.model) / name).exists():
            shutil.copy(Path(args.model) / name, out / name)
    print(f"{step} steps; saved {out}")


if __name__ == "__main__":
    main()
