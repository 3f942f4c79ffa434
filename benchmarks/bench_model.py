"""bertkit vs transformers: BertModel forward and a full BertForPreTraining training step, side by side.

Same config, same random weights, same batch; the two implementations alternate in one process, and the script
prints medians and the ratio (HF time / bertkit time, so > 1 means bertkit is faster).

    python benchmarks/bench_model.py --model-size bert-mini --seq-len 128 --batch-size 32 --repeats 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

import bertkit
from bertkit import BertConfig
from bertkit.training.optim import build_optimizer


def make_batch(config: BertConfig, batch: int, seq: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=g)
    types = torch.cat([torch.zeros(batch, seq // 2), torch.ones(batch, seq - seq // 2)], 1).long()
    mask = torch.ones(batch, seq, dtype=torch.long)
    chosen = torch.rand(batch, seq, generator=g) < 0.15
    chosen[:, 0] = False
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return ids, types, mask, labels, nsp


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-size", default="bert-mini")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = leave PyTorch's default)")
    parser.add_argument("--only", choices=["forward", "train"], default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    config = BertConfig.from_preset(args.model_size)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        bertkit.BertForPreTraining(config).save_pretrained(d)
        hf_pt = transformers.BertForPreTraining.from_pretrained(d)
        bk_pt = bertkit.BertForPreTraining.from_pretrained(d)
        hf_base = transformers.BertModel.from_pretrained(d)
        bk_base = bertkit.BertModel.from_pretrained(d)
    ids, types, mask, labels, nsp = make_batch(config, args.batch_size, args.seq_len)
    tokens = args.batch_size * args.seq_len
    print(
        f"{args.model_size}, batch {args.batch_size}, seq {args.seq_len}, fp32, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, threads {torch.get_num_threads()}"
    )

    results = {}
    if args.only in (None, "forward"):
        hf_base.eval()
        bk_base.eval()

        def hf_fwd():
            with torch.inference_mode():
                hf_base(input_ids=ids, attention_mask=mask, token_type_ids=types)

        def bk_fwd():
            with torch.inference_mode():
                bk_base(ids, attention_mask=mask, token_type_ids=types)

        results["forward (BertModel)"] = (hf_fwd, bk_fwd)

    if args.only in (None, "train"):
        hf_pt.train()
        bk_pt.train()
        hf_opt = torch.optim.AdamW(hf_pt.parameters(), lr=1e-4)  # what a user writes from HF's docs
        bk_opt = build_optimizer(bk_pt, lr=1e-4)

        def hf_step():
            out = hf_pt(
                input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp
            )
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(hf_pt.parameters(), 1.0)
            hf_opt.step()
            hf_opt.zero_grad(set_to_none=True)

        def bk_step():
            out = bk_pt(ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(bk_pt.parameters(), 1.0)
            bk_opt.step()
            bk_opt.zero_grad(set_to_none=True)

        results["train step (BertForPreTraining + AdamW)"] = (hf_step, bk_step)

    for name, (hf_fn, bk_fn) in results.items():
        for _ in range(args.warmup):
            hf_fn()
            bk_fn()
        hf_times, bk_times = [], []
        for _ in range(args.repeats):
            hf_times.append(timed(hf_fn))
            bk_times.append(timed(bk_fn))
        hf_med, bk_med = statistics.median(hf_times), statistics.median(bk_times)
        print(
            f"{name}: transformers {hf_med * 1e3:.1f} ms ({tokens / hf_med:,.0f} tok/s) | "
            f"bertkit {bk_med * 1e3:.1f} ms ({tokens / bk_med:,.0f} tok/s) | ratio {hf_med / bk_med:.2f}x"
        )


if __name__ == "__main__":
    main()
