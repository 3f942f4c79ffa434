"""bertkit on a CUDA GPU against transformers: the same numbers, not only a faster step.

At bert-base shape (random weights saved by bertkit and loaded by both), on padded batches, it prints
``|out - ref| / |ref|`` for:

* the encoder forward and pre-training heads in fp32 on the GPU, against float64 on the CPU (transformers),
* the same under bf16 autocast,
* one pre-training step's loss and every parameter's gradient in fp32 (dropout off), bertkit's sparse MLM head
  against transformers' full-vocabulary loss on the same GPU (key biases left out: their gradient is zero up to
  rounding),
* a sequence-classification fine-tuning step's loss and gradients.

Fresh random inputs for every check; every output is checked finite. Exit code 1 when an fp32 error is over 1e-4 or
a bf16 one over 2e-2.

    python3 benchmarks/gpu_check.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def batch(vocab: int, n: int, seq: int, seed: int, device) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (n, seq), generator=g)
    lens = torch.randint(seq // 4, seq + 1, (n,), generator=g)
    mask = (torch.arange(seq)[None, :] < lens[:, None]).long()
    ids[mask == 0] = 0
    types = (torch.arange(seq)[None, :] >= (lens[:, None] // 2)).long() * mask
    labels = torch.full_like(ids, -100)
    pick = (torch.rand(n, seq, generator=g) < 0.15) & mask.bool()
    labels[pick] = ids[pick]
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "token_type_ids": types.to(device),
        "labels": labels.to(device),
        "next_sentence_label": torch.randint(0, 2, (n,), generator=g).to(device),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model-size", default="bert-base")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    import transformers

    from bertkit import BertConfig, BertForPreTraining, BertForSequenceClassification

    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    config = BertConfig.from_preset(args.model_size, vocab_size=30522)
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        theirs = transformers.BertForPreTraining.from_pretrained(tmp)
        ref64 = transformers.BertForPreTraining.from_pretrained(tmp).double().eval()
    ours.to(dev).eval()
    theirs.to(dev).eval()
    rows: list[tuple[str, float, float | None, float]] = []  # transformers: None where it is the reference
    lim32, lim16 = 1e-4, 2e-2

    keys = ("input_ids", "attention_mask", "token_type_ids")
    for seed, (name, dtype) in enumerate([("fp32", None), ("bf16 autocast", torch.bfloat16)]):
        b = batch(config.vocab_size, args.batch_size, args.seq_len, seed, dev)
        x = {k: b[k] for k in keys}
        with torch.no_grad():
            ref = ref64(**{k: v.cpu() for k, v in x.items()}, output_hidden_states=True)
            with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                a = ours(**x, output_hidden_states=True)
                t = theirs(**x, output_hidden_states=True)
        real = b["attention_mask"].bool().cpu()
        lim = lim32 if dtype is None else lim16
        for what, mine, hf, r in [
            (
                "last hidden state (real tokens)",
                a.hidden_states[-1].cpu()[real],
                t.hidden_states[-1].cpu()[real],
                ref.hidden_states[-1][real],
            ),
            (
                "MLM logits (real tokens)",
                a.prediction_logits.cpu()[real],
                t.prediction_logits.cpu()[real],
                ref.prediction_logits[real],
            ),
            ("NSP logits", a.seq_relationship_logits, t.seq_relationship_logits, ref.seq_relationship_logits),
        ]:
            rows.append((f"{name}: {what}", rel(mine, r), rel(hf, r), lim))

    # one pre-training step in fp32, dropout off: loss and gradients
    b = batch(config.vocab_size, args.batch_size, args.seq_len, 7, dev)
    for m in (ours, theirs):
        m.zero_grad(set_to_none=True)
    la = ours(**b).loss
    la.backward()
    lt = theirs(**b).loss
    lt.backward()
    rows.append(("pre-training loss (fp32, bertkit sparse head)", rel(la.detach(), lt.detach()), None, lim32))
    tp = dict(theirs.named_parameters())
    worst, worst_name = 0.0, ""
    for n, p in ours.named_parameters():
        q = tp.get(n)
        # a key bias adds the same amount to every score of a query's row, which softmax ignores: its gradient is
        # zero up to rounding, and a relative error of rounding noise means nothing
        if q is None or p.grad is None or q.grad is None or q.grad.norm() == 0 or n.endswith("self.key.bias"):
            continue
        e = rel(p.grad, q.grad)
        if e > worst:
            worst, worst_name = e, n
    rows.append((f"pre-training grads, worst ({worst_name.replace('bert.encoder.', '')})", worst, None, 1e-3))

    # a classification fine-tuning step
    del ours, theirs
    torch.manual_seed(1)
    cls = BertForSequenceClassification(BertConfig.from_preset(args.model_size, vocab_size=30522, num_labels=3))
    with tempfile.TemporaryDirectory() as tmp:
        cls.save_pretrained(tmp)
        hf_cls = transformers.BertForSequenceClassification.from_pretrained(tmp)
    cls.to(dev).eval()
    hf_cls.to(dev).eval()
    b = batch(config.vocab_size, args.batch_size, args.seq_len, 8, dev)
    x = {k: b[k] for k in keys}
    y = b["next_sentence_label"]
    la = cls(**x, labels=y).loss
    la.backward()
    lt = hf_cls(**x, labels=y).loss
    lt.backward()
    rows.append(("classification loss (fp32)", rel(la.detach(), lt.detach()), None, lim32))
    hp = dict(hf_cls.named_parameters())
    worst = max(
        rel(p.grad, hp[n].grad)
        for n, p in cls.named_parameters()
        if n in hp
        and p.grad is not None
        and hp[n].grad is not None
        and hp[n].grad.norm() > 0
        and not n.endswith("self.key.bias")
    )
    rows.append(("classification grads, worst parameter", worst, None, 1e-3))

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(
        f"{args.model_size}, batch {args.batch_size} x {args.seq_len}, {name}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}; rel error |x - ref| / |ref|"
    )
    print(f"{'check':<62} {'bertkit':>10} {'transformers':>12} {'limit':>8}")
    bad = 0
    for what, mine, hf, lim in rows:
        ok = mine <= lim
        bad += not ok
        theirs = "-" if hf is None else f"{hf:.2e}"
        print(f"{what:<62} {mine:>10.2e} {theirs:>12} {lim:>8.0e} {'ok' if ok else 'OVER'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
