"""Time to quality: held-out masked-token accuracy after a wall-clock budget of pre-training, for bertkit's budget
recipe, bertkit's paper recipe, and a plain transformers loop (at its best lr of 1e-4, 5e-4, 1e-3).

Every route trains the same model size on the same sentence-split corpus (default: the five bundled books) with the
same vocabulary (trained once on it) from ``--budget`` of wall clock, and every final model is scored the same way,
loaded into ``transformers.BertForPreTraining`` in fp32, on the same fixed held-out batches (the last 2% of the
sentences of every book, never trained on; single segments of 128 tokens, 15% static masks, EVERY chosen position
[MASK]: none random, none kept, so no figure counts a token the input gave away): accuracy of the argmax at masked
positions, the MLM loss there, NSP accuracy on held-out pairs, and the best-constant baseline (the share of the most
frequent token at those positions: the plateau a model sits on until it learns context). The definition is
bertkit.tasks.mlm's, checked by tests/unit/test_mlm_meter.py on a model built to cheat it.

    # the grid: budgets x routes x seeds -> CSV + PNG (needs a quiet machine: 1+2+5+10 min x (2 + 3 lr) x 2 seeds)
    .venv/bin/python benchmarks/pretrain_quality.py --budgets 1m,2m,5m,10m --seeds 0,1 --out runs/pq
    # one small cell, to check it works
    .venv/bin/python benchmarks/pretrain_quality.py --budgets 20s --seeds 0 --lrs 1e-3 --model-size bert-tiny
    # ModernBERT (issue 23): bertkit pretrain --arch modernbert (budget recipe) and transformers' ModernBertForMaskedLM
    .venv/bin/python benchmarks/pretrain_quality.py --budgets 20s --seeds 0 --lrs 1e-3 --model-size modernbert-tiny \
        --routes modernbert,transformers-modernbert
    # the recipe ablation behind the budget recipe's defaults (docs/pretraining.md)
    .venv/bin/python benchmarks/pretrain_quality.py --ablation --budgets 2m --model-size bert-tiny --threads 1
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

# the ablation: each variant is the budget recipe with one choice changed (or the paper recipe plus one choice)
ABLATION: dict[str, dict] = {
    "paper, lr 1e-3 (the old quickstart)": {"recipe": "paper", "lr": 1e-3},
    "paper + unigram output bias": {"recipe": "paper", "lr": 1e-3, "output_bias": "unigram"},
    "paper + no dropout": {"recipe": "paper", "lr": 1e-3, "dropout": 0.0},
    "paper + MLM only, packed": {"recipe": "paper", "lr": 1e-3, "nsp": False, "short_seq_prob": 0.0},
    "budget (defaults)": {"recipe": "budget"},
    "budget, zero output bias": {"recipe": "budget", "output_bias": "zero"},
    "budget, dropout 0.1": {"recipe": "budget", "dropout": 0.1},
    "budget, NSP": {"recipe": "budget", "nsp": True, "short_seq_prob": 0.1},
    "budget, linear schedule": {"recipe": "budget", "schedule": "linear"},
    "budget, onecycle schedule": {"recipe": "budget", "schedule": "onecycle", "warmup_fraction": 0.3},
    "budget, seq ramp 64:0.3": {"recipe": "budget", "seq_ramp": "64:0.3"},
    "budget, batch ramp 8:0.05,16:0.15": {"recipe": "budget", "batch_ramp": "8:0.05,16:0.15"},
    "budget, mask 0.15": {"recipe": "budget", "mask_prob": 0.15},
    "budget, lr x2": {"recipe": "budget", "lr_scale": 2.0},
    "budget, lr x0.5": {"recipe": "budget", "lr_scale": 0.5},
    # issue 20: candidates to leave the plateau, scored by the honest meter
    "budget, mask mix 100/0/0": {"recipe": "budget", "mask_mix": "100/0/0"},
    "budget, seq 64 x batch 64": {"recipe": "budget", "seq_len": 64, "batch_size": 64},
    "budget, seq 64 x batch 32": {"recipe": "budget", "seq_len": 64},
    "budget, 100/0/0, seq 64": {"recipe": "budget", "mask_mix": "100/0/0", "seq_len": 64},
    "budget, mask 0.15, 100/0/0": {"recipe": "budget", "mask_prob": 0.15, "mask_mix": "100/0/0"},
    "budget, sinusoidal positions": {"recipe": "budget", "position_init": "sinusoidal"},
    "budget, sinusoidal, 100/0/0": {"recipe": "budget", "position_init": "sinusoidal", "mask_mix": "100/0/0"},
    "budget, sinusoidal, lr x0.25": {"recipe": "budget", "position_init": "sinusoidal", "lr_scale": 0.25},
    "budget, sinusoidal, seq 64 x batch 64": {
        "recipe": "budget",
        "position_init": "sinusoidal",
        "seq_len": 64,
        "batch_size": 64,
    },
    "budget, sinusoidal, mask 0.15": {"recipe": "budget", "position_init": "sinusoidal", "mask_prob": 0.15},
    "budget, sinusoidal, seq 32 x batch 128": {
        "recipe": "budget",
        "position_init": "sinusoidal",
        "seq_len": 32,
        "batch_size": 128,
    },
    "budget, normal positions, seq 64 x batch 64": {"recipe": "budget", "seq_len": 64, "batch_size": 64},
    "budget, normal positions, seq 32 x batch 128": {"recipe": "budget", "seq_len": 32, "batch_size": 128},
    "budget, ramp 32x128:0.7 then 128x32": {
        "recipe": "budget",
        "position_init": "sinusoidal",
        "seq_ramp": "32:0.7",
        "batch_ramp": "128:0.7",
    },
    # bert-mini at a 5-minute budget on one thread makes about 180 steps: its lr, and smaller batches for more steps
    "budget, lr x3": {"recipe": "budget", "lr_scale": 3.0},
    "budget, batch 64 while short": {"recipe": "budget", "batch_ramp": "64:0.7"},
    "budget, batch 32 while short": {"recipe": "budget", "batch_ramp": "32:0.7"},
}


def prepare(out: Path, corpus: list[str], vocab: str | None, vocab_size: int) -> tuple[Path, Path, Path]:
    """(sentences.txt, vocab.txt, shards dir): the corpus sentence-split once, a vocabulary, the shards."""
    from bertkit.data.pretraining.corpus import write_sentences
    from bertkit.data.pretraining.prepare import prepare_corpus
    from bertkit.tokenization import train_vocab

    out.mkdir(parents=True, exist_ok=True)
    sentences = out / "sentences.txt"
    if not sentences.is_file():
        write_sentences(corpus, sentences)
    if vocab is None:
        vocab_path = out / "vocab" / "vocab.txt"
        if not vocab_path.is_file():
            train_vocab([sentences], vocab_size=vocab_size, output=out / "vocab", show_progress=False)
    else:
        vocab_path = Path(vocab)
    prepare_corpus([str(sentences)], out / "shards", vocab_path, corpus_format="google", progress=False)
    return sentences, vocab_path, out / "shards"


def heldout(
    shard_dir: Path, vocab_path: Path, n_batches: int, seq_len: int = 128, min_masked: int | None = None
) -> tuple[list[dict], list[dict], float]:
    """(MLM batches: single segments of ``seq_len`` tokens, NSP batches: pairs, the best-constant baseline on the MLM
    batches). Mask draws are added until ``n_batches`` x 32 sequences, or ``min_masked`` masked tokens."""
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.tokenization import BertTokenizer

    vinfo = VocabInfo.from_tokenizer(BertTokenizer.from_pretrained(vocab_path))

    def batches(nsp: bool) -> list[dict]:
        out = []  # the held-out text is small (2%): several mask draws over it, so accuracies are less noisy
        for seed in range(8):
            data = PretrainingData(
                shard_dir,
                vinfo,
                DataOptions(max_seq_length=seq_len, batch_size=32, nsp=nsp, short_seq_prob=0.0, seed=seed),
                split="eval",
            )
            out += [{k: torch.from_numpy(v) for k, v in b.items()} for b in data.eval_batches(n_batches)]
            if (
                sum(len(b["input_ids"]) for b in out) >= n_batches * 32
                if min_masked is None
                else sum(int((b["labels"] != -100).sum()) for b in out) >= min_masked
            ):
                break
        return out

    mlm, nsp = batches(False), batches(True)
    labels = torch.cat([b["labels"][b["labels"] != -100] for b in mlm])
    return mlm, nsp, float(torch.bincount(labels).max()) / len(labels)  # the best constant guess


def evaluate(model_dir: Path, mlm: list[dict], nsp: list[dict]) -> dict:
    """Held-out MLM accuracy and loss at [MASK] positions, and NSP accuracy, by transformers in fp32."""
    import transformers

    if is_modernbert(model_dir):  # transformers' ModernBertForMaskedLM, the same meter (no NSP head)
        return evaluate_modernbert(model_dir, mlm)
    model = transformers.BertForPreTraining.from_pretrained(model_dir).eval()
    ok = n = nsp_ok = nsp_n = 0
    loss = 0.0
    with torch.no_grad():
        for b in mlm:
            out = model(
                input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"]
            )
            sel = b["labels"] != -100
            if len(set(b["input_ids"][sel].tolist())) != 1:  # every scored input is the same id: [MASK]
                raise SystemExit("held-out batches give tokens away (not all [MASK]); refusing to score them")
            logits = out.prediction_logits[sel]
            ok += int((logits.argmax(-1) == b["labels"][sel]).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, b["labels"][sel], reduction="sum"))
            n += int(sel.sum())
        for b in nsp:
            out = model(
                input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"]
            )
            nsp_ok += int((out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum())
            nsp_n += len(b["next_sentence_label"])
    return {
        "mlm_acc": ok / max(1, n),
        "mlm_loss": loss / max(1, n),
        "nsp_acc": nsp_ok / max(1, nsp_n),
        "masked_tokens": n,
    }


def is_modernbert(model_dir: Path) -> bool:
    return json.loads((model_dir / "config.json").read_text()).get("model_type") == "modernbert"


def evaluate_modernbert(model_dir: Path, mlm: list[dict]) -> dict:
    """``evaluate`` for a ModernBERT directory: held-out MLM accuracy and loss at the same [MASK] positions, by
    transformers' ``ModernBertForMaskedLM`` in fp32 (sdpa; no segment ids: it has no segment embeddings). It has no
    NSP head: ``nsp_acc`` is NaN."""
    import transformers

    model = transformers.ModernBertForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    ok = n = 0
    loss = 0.0
    with torch.no_grad():
        for b in mlm:
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits  # [B, T, V]
            sel = b["labels"] != -100
            if len(set(b["input_ids"][sel].tolist())) != 1:  # every scored input is the same id: [MASK]
                raise SystemExit("held-out batches give tokens away (not all [MASK]); refusing to score them")
            logits = logits[sel]
            ok += int((logits.argmax(-1) == b["labels"][sel]).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, b["labels"][sel], reduction="sum"))
            n += int(sel.sum())
    return {"mlm_acc": ok / max(1, n), "mlm_loss": loss / max(1, n), "nsp_acc": float("nan"), "masked_tokens": n}


def run_transformers_modernbert(
    out: Path, shard_dir: Path, vocab: Path, budget: float, seed: int, model_size: str, lr: float
) -> dict:
    """``run_transformers``'s plain loop with transformers' ``ModernBertForMaskedLM`` (sdpa; its config's default
    full-vocabulary logits, as ``run_mlm.py`` users get) on ModernBERT's recipe: MLM only, 30% masking (80/10/10),
    fp32, torch AdamW, a linear schedule fitted to the budget from 3 timed steps, stopped at the deadline. The model
    is ``--model-size``'s ModernBERT (``bert-mini`` -> ``modernbert-mini``), built by bertkit with the same random
    init and loaded by transformers."""
    import transformers

    from bertkit import models
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertForMaskedLM
    from bertkit.recipes.pretrain.tables import NO_NSP_HEAD as DEFAULTS

    preset = models.get("modernbert").preset
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(vocab)
    v = VocabInfo.from_tokenizer(tok)
    data = PretrainingData(
        shard_dir, v, DataOptions(batch_size=32, seed=seed, nsp=DEFAULTS["nsp"], mask_prob=DEFAULTS["mask_prob"])
    )
    torch.manual_seed(seed)
    init = out / "init"
    config = ModernBertConfig.from_preset(
        preset(model_size),
        vocab_size=len(tok),
        pad_token_id=v.pad_id,
        cls_token_id=v.cls_id,
        sep_token_id=v.sep_id,
        bos_token_id=v.cls_id,
        eos_token_id=v.sep_id,
        max_position_embeddings=8192,
    )
    ModernBertForMaskedLM(config).save_pretrained(init)
    model = transformers.ModernBertForMaskedLM.from_pretrained(init, attn_implementation="sdpa").train()

    def batch(i):
        n = data.num_batches(0)
        b = data.batch(i // n, i % n)
        return {k: torch.from_numpy(b[k]) for k in ("input_ids", "attention_mask", "labels")}

    def step(b, opt, sched):
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        return float(loss.detach())

    probe_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    times = []
    for i in range(3):
        t = time.perf_counter()
        step(batch(i), opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0))
        times.append(time.perf_counter() - t)
    model.load_state_dict(probe_state)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    total = max(1, int((budget * 0.95 - 2) / (sorted(times)[1] * 1.06)))
    sched = transformers.get_linear_schedule_with_warmup(opt, max(1, int(0.05 * total)), total)
    t0, done = time.perf_counter(), 0
    while done < total and time.perf_counter() - t0 < budget:
        step(batch(done), opt, sched)
        done += 1
    model.save_pretrained(out)
    return {"steps": done, "lr": lr}


def run_bertkit(
    out: Path, sentences: Path, vocab: Path, budget: float, seed: int, model_size: str, threads: int | None, **choices
) -> dict:
    from bertkit.recipes.pretrain import BUDGET_LR, PretrainConfig, pretrain

    if out.exists():
        shutil.rmtree(out)
    scale = choices.pop("lr_scale", None)
    if scale is not None:
        choices["lr"] = BUDGET_LR.get(model_size, 2e-4) * scale
    t0 = time.time()
    limit = {"max_steps": int(-budget)} if budget < 0 else {"max_time": budget}  # negative: a step count
    pretrain(
        PretrainConfig(
            corpus=[str(sentences)],
            corpus_format="google",
            vocab=str(vocab),
            output=str(out),
            model_size=model_size,
            save_every=10**9,
            eval_batches=2,
            seed=seed,
            threads=threads,
            quiet=True,
            workers=1,
            **limit,
            **choices,
        )
    )
    run = json.loads((out / "run.json").read_text())
    steps = max((json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()), default=0)
    return {"steps": steps, "lr": run["config"]["lr"], "wall_s": round(time.time() - t0, 1)}


def run_transformers(
    out: Path, shard_dir: Path, vocab: Path, budget: float, seed: int, model_size: str, lr: float
) -> dict:
    """A plain loop from transformers' docs: fp32, torch AdamW, full-vocabulary logits, MLM + NSP, linear schedule
    fitted to the budget from 3 timed steps, stopped at the deadline."""
    import transformers

    from bertkit import BertConfig, BertForPreTraining
    from bertkit.data.pretraining.instances import DataOptions, PretrainingData, VocabInfo
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(vocab)
    data = PretrainingData(shard_dir, VocabInfo.from_tokenizer(tok), DataOptions(batch_size=32, seed=seed))
    torch.manual_seed(seed)
    init = out / "init"
    BertForPreTraining(BertConfig.from_preset(model_size, vocab_size=len(tok))).save_pretrained(init)
    model = transformers.BertForPreTraining.from_pretrained(init).train()

    def batch(i):
        n = data.num_batches(0)
        return {k: torch.from_numpy(v) for k, v in data.batch(i // n, i % n).items()}

    def step(b, opt, sched):
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        return float(loss.detach())

    probe_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    times = []
    for i in range(3):
        t = time.perf_counter()
        step(batch(i), opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0))
        times.append(time.perf_counter() - t)
    model.load_state_dict(probe_state)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    total = max(1, int((budget * 0.95 - 2) / (sorted(times)[1] * 1.06)))
    sched = transformers.get_linear_schedule_with_warmup(opt, max(1, int(0.05 * total)), total)
    t0, done = time.perf_counter(), 0
    while done < total and time.perf_counter() - t0 < budget:
        step(batch(done), opt, sched)
        done += 1
    model.save_pretrained(out)
    return {"steps": done, "lr": lr}


def plot(rows: list[dict], path: Path) -> None:
    """Mean held-out accuracy per budget for every route: solid at 128 tokens, dashed at the short length when the
    rows carry it; dotted lines: the best constant guesses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    short = next((k for k in rows[0] if k.startswith("mlm_acc_")), None) if rows else None
    lines = [("mlm_acc", "-", "128 tokens")] + ([(short, "--", f"{short[8:]} tokens")] if short else [])
    for key, style, suffix in lines:
        for i, route in enumerate(sorted({r["route"] for r in rows})):
            points: dict[float, list[float]] = {}
            for r in rows:
                if r["route"] == route and r.get(key) not in (None, ""):
                    points.setdefault(float(r["budget_min"]), []).append(float(r[key]))
            xs = sorted(points)
            ax.plot(
                xs,
                [sum(points[x]) / len(points[x]) for x in xs],
                style,
                marker="o",
                color=f"C{i}",
                label=f"{route}, {suffix}",
            )
        base_key = "mlm_baseline" if key == "mlm_acc" else f"mlm_baseline_{key[8:]}"
        base = [float(r.get(base_key) or r.get("unigram_baseline") or 0) for r in rows if r.get(base_key)]
        if base:
            ax.axhline(sum(base) / len(base), color="grey", linestyle=":", label=f"best constant guess, {suffix}")
    ax.set_xlabel("pre-training budget (minutes, CPU)")
    ax.set_ylabel("held-out MLM accuracy ([MASK] positions)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.recipes.pretrain import parse_duration

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="1m,2m,5m,10m")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--lrs", default="1e-4,5e-4,1e-3", help="the transformers loop's lrs (its best is reported)")
    ap.add_argument("--model-size", default="bert-mini")
    ap.add_argument("--corpus", nargs="+", default=None, help="default: the bundled books")
    ap.add_argument("--vocab", default=None, help="default: a vocabulary trained on the corpus")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--short-len", type=int, default=32, help="also score on held-out sequences of this length")
    ap.add_argument(
        "--routes",
        default="budget,paper,transformers",
        help="comma-separated: budget, paper, transformers (BERT); modernbert, transformers-modernbert "
        "(ModernBERT: --model-size bert-X maps to modernbert-X)",
    )
    ap.add_argument("--ablation", action="store_true", help="run the recipe ablation instead of the routes")
    ap.add_argument("--only", default=None, help="ablation: variants whose name contains one of these (a|b|...)")
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="ablation: a fixed step count instead of the budgets (compares quality per step on a loaded machine)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads for every route")
    ap.add_argument("--out", default="runs/pretrain_quality")
    ap.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="CSV",
        help="only combine these results.csv (lanes run side by side) into --out's curve and table",
    )
    args = ap.parse_args()
    if args.merge:
        merge(args.merge, Path(args.out))
        return
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out)
    corpus = args.corpus or [str(p) for p in bundled_corpus()]
    sentences, vocab, shards = prepare(out / "prepared", corpus, args.vocab, args.vocab_size)
    mlm, nsp, baseline = heldout(shards, vocab, args.eval_batches)
    print(
        f"held-out: {sum(int((b['labels'] != -100).sum()) for b in mlm)} masked tokens (all [MASK]); best "
        f"constant guess {baseline:.4f}",
        flush=True,
    )
    # the same held-out text cut into short sequences (about as many masked tokens): what a model trained mostly on
    # short sequences (the budget recipe's ramp) knows; reported beside the 128-token figure, never instead of it
    mlm_short, _, baseline_short = heldout(
        shards,
        vocab,
        10 * args.eval_batches,
        seq_len=args.short_len,
        min_masked=sum(int((b["labels"] != -100).sum()) for b in mlm),
    )
    print(
        f"held-out at {args.short_len} tokens: {sum(int((b['labels'] != -100).sum()) for b in mlm_short)} masked "
        f"tokens; best constant guess {baseline_short:.4f}",
        flush=True,
    )
    rows: list[dict] = []
    csv_path = out / (("ablation-steps.csv" if args.steps else "ablation.csv") if args.ablation else "results.csv")

    def record(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    for budget_text in [f"{args.steps}steps"] if args.steps else args.budgets.split(","):
        budget = -float(args.steps) if args.steps else parse_duration(budget_text)
        for seed in map(int, args.seeds.split(",")):
            cells: list[tuple[str, dict]] = []
            if args.ablation:
                cells = [
                    (name, dict(choices))
                    for name, choices in ABLATION.items()
                    if args.only is None or any(o in name for o in args.only.split("|"))
                ]
            else:
                for route in args.routes.split(","):
                    if route in ("budget", "paper"):
                        cells.append((f"bertkit {route}", {"recipe": route}))
                    elif route == "transformers":
                        cells += [(f"transformers lr {lr}", {"lr": float(lr)}) for lr in args.lrs.split(",")]
                    elif route == "modernbert":  # bertkit pretrain --arch modernbert, the budget recipe
                        cells.append(("bertkit modernbert", {"recipe": "budget", "arch": "modernbert"}))
                    elif route == "transformers-modernbert":  # each lr its own row (summarize's best-lr is BERT's)
                        cells += [
                            (f"modernbert (transformers) lr {lr}", {"lr": float(lr)}) for lr in args.lrs.split(",")
                        ]
            for name, choices in cells:
                d = out / "runs" / f"{name.replace(' ', '_').replace(',', '')}-{budget_text}-{seed}"
                if name.startswith("modernbert (transformers)"):
                    info = run_transformers_modernbert(d, shards, vocab, budget, seed, args.model_size, choices["lr"])
                elif name.startswith("transformers"):
                    info = run_transformers(d, shards, vocab, budget, seed, args.model_size, choices["lr"])
                else:
                    info = run_bertkit(d, sentences, vocab, budget, seed, args.model_size, args.threads, **choices)
                result = evaluate(d, mlm, nsp)
                short = evaluate(d, mlm_short, [])
                minutes = round(budget / 60, 3) if budget > 0 else None
                record(
                    {
                        "route": name,
                        "budget_min": minutes,
                        "seed": seed,
                        **info,
                        "mlm_acc": round(result["mlm_acc"], 4),
                        "mlm_loss": round(result["mlm_loss"], 4),
                        "nsp_acc": round(result["nsp_acc"], 4),
                        "mlm_baseline": round(baseline, 4),
                        f"mlm_acc_{args.short_len}": round(short["mlm_acc"], 4),
                        f"mlm_baseline_{args.short_len}": round(baseline_short, 4),
                        "model_size": args.model_size,
                    }
                )
    if not args.ablation:
        summarize(rows, out)


def summarize(rows: list[dict], out: Path) -> None:
    """The curve (the transformers loop at its best lr per budget, chosen on the mean over seeds) and a markdown
    table: each route's mean held-out MLM accuracy per budget, with the per-seed values and steps."""
    by_lr: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["route"].startswith("transformers"):
            by_lr.setdefault((float(r["budget_min"]), r["route"]), []).append(r)

    def mean_acc(cell: list[dict]) -> float:
        return sum(float(r["mlm_acc"]) for r in cell) / len(cell)

    best: dict[float, list[dict]] = {}
    for (budget, _), cell in by_lr.items():
        if budget not in best or mean_acc(cell) > mean_acc(best[budget]):
            best[budget] = cell
    shown = [r for r in rows if not r["route"].startswith("transformers")]
    shown += [dict(r, route="transformers (best lr)") for cell in best.values() for r in cell]
    plot(shown, out / "time_to_quality.png")
    budgets = sorted({float(r["budget_min"]) for r in shown})
    lines: list[str] = []
    shorts = sorted({k for r in rows for k in r if k.startswith("mlm_acc_") and r[k] not in ("", None)})
    for key in ["mlm_acc"] + shorts:
        length = "128" if key == "mlm_acc" else key[8:]
        lines += [
            "",
            f"{key} (held-out, every chosen position [MASK]; {length} tokens)",
            "",
            "| route | " + " | ".join(f"{b:g} min" for b in budgets) + " |",
            "|---" * (len(budgets) + 1) + "|",
        ]
        for route in sorted({r["route"] for r in rows}) + ["transformers (best lr)"]:
            cells = []
            for b in budgets:
                got = sorted(
                    (
                        r
                        for r in (shown if route.endswith("(best lr)") else rows)
                        if r["route"] == route and float(r["budget_min"]) == b and r.get(key) not in ("", None)
                    ),
                    key=lambda r: int(r["seed"]),
                )
                if not got:
                    cells.append("")
                    continue
                mean = sum(float(r[key]) for r in got) / len(got)
                detail = ", ".join(f"{float(r[key]):.2%}" for r in got)
                extra = f" lr {got[0]['lr']}" if route.endswith("(best lr)") else ""
                cells.append(f"**{mean:.2%}** ({detail}; {'/'.join(str(r['steps']) for r in got)} steps{extra})")
            lines.append(f"| {route} | " + " | ".join(cells) + " |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out / 'time_to_quality.png'} and {out / 'table.md'}")


def merge(csvs: list[str], out: Path) -> None:
    """Several results.csv (lanes run side by side) -> one results.csv, curve and table in OUT."""
    rows: list[dict] = []
    for path in csvs:
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))  # lanes run before a column existed lack it
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: (r["route"], float(r["budget_min"]), int(r["seed"]))))
    summarize(rows, out)


if __name__ == "__main__":
    main()
