"""Time to quality: held-out MLM accuracy after a wall-clock budget of bert-mini pre-training on the shared Gutenberg
books, for ``bertkit pretrain`` and for a plain transformers loop, evaluated the same way on text not trained on.

Both routes see the same shards (bert-base-uncased vocabulary, seq 128, MLM + NSP, dynamic masking), the same batch
order, the same initial weights and the same lr schedule shape (linear warmup 5%, linear decay to 0 at the number of
steps that fits the budget, estimated from a few timed steps). bertkit runs its recipe (sparse MLM head, bf16 autocast
where available, fused AdamW, clipping); transformers runs fp32, ``torch.optim.AdamW``, full-vocabulary logits.

Evaluation: both final models are loaded into ``transformers.BertForPreTraining`` in fp32 and scored on the same fixed
held-out batches (the last 2% of sentences of every book, never trained on; static masks): accuracy of the argmax at
masked positions, and NSP accuracy.

    .venv/bin/python benchmarks/pretrain_quality.py --budget 10m          # needs ~25 quiet minutes
    .venv/bin/python benchmarks/pretrain_quality.py --budget 3m --out runs/pq3
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def evaluate_hf(model_dir: Path, batches: list[dict]) -> dict:
    import transformers

    model = transformers.BertForPreTraining.from_pretrained(model_dir).eval()
    ok = n = nsp_ok = nsp_n = 0
    with torch.no_grad():
        for b in batches:
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                        token_type_ids=b["token_type_ids"])
            sel = b["labels"] != -100
            ok += int((out.prediction_logits.argmax(-1)[sel] == b["labels"][sel]).sum())
            n += int(sel.sum())
            nsp_ok += int((out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum())
            nsp_n += len(b["next_sentence_label"])
    return {"mlm_acc": ok / n, "nsp_acc": nsp_ok / nsp_n, "masked_tokens": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="10m")
    ap.add_argument("--model-size", default="bert-mini")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-batches", type=int, default=40)
    ap.add_argument("--out", default="runs/pretrain_quality")
    ap.add_argument("--only", choices=["bertkit", "transformers"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both routes")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from bertkit import BertConfig, BertForPreTraining
    from bertkit.data.pretraining import DataOptions, PretrainingData, VocabInfo
    from bertkit.recipes.pretrain import PretrainConfig, parse_duration, pretrain
    from bertkit.tokenization import BertTokenizer

    budget = parse_duration(args.budget)
    books = sorted(str(p) for p in (SHARED / "corpus" / "gutenberg").glob("*.txt"))
    vocab = SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"
    if not books or not vocab.is_file():
        raise SystemExit(f"needs the shared data in {SHARED}")
    out = Path(args.out)
    results = {}

    # ---- bertkit: the recipe, as `bertkit pretrain` runs it
    ours = out / "bertkit"
    if args.only in (None, "bertkit"):
        if ours.exists():
            shutil.rmtree(ours)
        t0 = time.time()
        pretrain(PretrainConfig(corpus=books, vocab=str(vocab), output=str(ours), model_size=args.model_size,
                                batch_size=args.batch_size, lr=args.lr, max_time=budget, save_every=10**9,
                                eval_batches=4, quiet=False, seed=0, threads=args.threads))
        results["bertkit_wall_s"] = time.time() - t0
    shards = ours / "data" / "shards"
    tok = BertTokenizer.from_pretrained(vocab)
    vinfo = VocabInfo.from_tokenizer(tok)
    data = PretrainingData(shards, vinfo, DataOptions(batch_size=args.batch_size, seed=0))
    held = PretrainingData(shards, vinfo, DataOptions(batch_size=args.batch_size, seed=0), split="eval")
    eval_batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in held.eval_batches(args.eval_batches)]

    # ---- transformers: a plain loop from its docs (fp32, AdamW, full-vocabulary logits)
    theirs = out / "transformers"
    if args.only in (None, "transformers"):
        config = BertConfig.from_preset(args.model_size, vocab_size=len(tok))
        torch.manual_seed(0)
        init = out / "init"
        BertForPreTraining(config).save_pretrained(init)  # the same initial weights as bertkit's run
        model = transformers.BertForPreTraining.from_pretrained(init).train()
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

        def batch(i):
            n = data.num_batches(0)
            return {k: torch.from_numpy(v) for k, v in data.batch(i // n, i % n).items()}

        def step(b):
            loss = model(**b).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            return float(loss.detach())

        # fit the schedule to the budget from 3 timed steps, as bertkit does
        probe_state = {k: v.clone() for k, v in model.state_dict().items()}
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0)
        times = []
        for i in range(3):
            t = time.perf_counter()
            step(batch(i))
            times.append(time.perf_counter() - t)
        model.load_state_dict(probe_state)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        total = max(1, int((budget * 0.95 - 2) / (sorted(times)[1] * 1.06)))
        sched = transformers.get_linear_schedule_with_warmup(opt, max(1, int(0.05 * total)), total)
        print(f"transformers loop: {sorted(times)[1] * 1000:.0f} ms/step, scheduling {total} steps")
        t0 = time.perf_counter()
        done = 0
        while done < total and time.perf_counter() - t0 < budget:
            loss = step(batch(done))
            done += 1
            if done % 50 == 0:
                print(f"  step {done}/{total} loss {loss:.3f}", flush=True)
        model.save_pretrained(theirs)
        results["transformers_steps"] = done
        results["transformers_scheduled"] = total

    for name, d in (("bertkit", ours), ("transformers", theirs)):
        if (d / "model.safetensors").is_file() or (d / "pytorch_model.bin").is_file():
            results[name] = evaluate_hf(d, eval_batches)
    if (ours / "run.json").is_file():
        results["bertkit_steps"] = json.loads((ours / "run.json").read_text())["total_steps"]
    results["budget_s"] = budget
    print(json.dumps(results, indent=2))
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
