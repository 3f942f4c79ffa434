"""Fine-tuning throughput: bertkit's loop vs transformers' BertForSequenceClassification / BertForQuestionAnswering
in a plain loop. Same config, same initial weights, same examples and batch size; the variants alternate in one
process and the script prints median examples/second and the ratios.

Variants (per head):
- ``hf-maxlen fp32``   transformers model, batches padded to --max-seq-length (the classic run_glue / run_squad
                       ``pad_to_max_length`` loop), torch AdamW (default implementation): the baseline;
- ``hf-dynamic fp32``  transformers model on bertkit's length-bucketed, dynamically padded batches (isolates the
                       model's own speed from the data pipeline);
- ``bertkit fp32``     bertkit's recipe step: length-bucketed dynamic padding, fused AdamW (build_optimizer);
- ``bertkit auto``     the same with ``--precision auto`` (bf16 autocast where the CPU / GPU supports it).

Ratios printed: bertkit fp32 vs hf-maxlen fp32 (fp32-vs-fp32), bertkit auto vs hf-maxlen fp32 (auto-vs-fp32), and
bertkit fp32 vs hf-dynamic fp32 (same batches: model + optimizer only).

    python benchmarks/bench_finetune.py --model-size bert-mini --batch-size 32 --steps 8 --rounds 3

Data: SST-2 train sentences and SQuAD dev questions from ../shared/data when present (else synthetic text).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

import bertkit
from bertkit import BertConfig
from bertkit.precision import autocast, resolve_precision
from bertkit.tasks import length_batches
from bertkit.training.optim import build_optimizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def make_vocab(directory: Path) -> Path:
    src = SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"
    if src.is_file():
        (directory / "vocab.txt").write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    else:  # synthetic fallback: a small vocabulary of letters and a few words
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,")
        words += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + ["the", "film", "is", "good", "bad", "very"]
        (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return directory / "vocab.txt"


def classification_data(n: int, rng: random.Random):
    from bertkit.data.tasks.readers import ClassificationExample

    path = SHARED / "glue" / "SST-2" / "train.tsv"
    if path.is_file():
        from bertkit.data.tasks.glue import read_glue

        ex = read_glue(path, "sst2", require_label=True)
        return rng.sample(list(ex), n)
    words = "the film is very good bad dull fun and a story of".split()
    return [
        ClassificationExample(str(i), " ".join(rng.choice(words) for _ in range(rng.randint(3, 40))), None, str(i % 2))
        for i in range(n)
    ]


def squad_data(n: int, rng: random.Random):
    from bertkit.data.tasks.squad import SquadExample, read_squad

    path = SHARED / "squad" / "dev-v1.1.json"
    if path.is_file():
        ex, _ = read_squad(path)
        return rng.sample(list(ex), n)
    ctx = " ".join("the film was good and the story was long ." for _ in range(30))
    return [SquadExample(str(i), "what was good ?", ctx, [("the film", 0)]) for i in range(n)]


def pad_to(features, length: int, task):
    """The same features as one transformers-style batch padded to ``length`` (pad_to_max_length)."""
    batch = task.collate(features)
    out = {}
    for k, v in batch.items():
        if v.dim() == 2 and k in ("input_ids", "token_type_ids", "attention_mask"):
            full = torch.zeros(v.size(0), length, dtype=v.dtype)
            full[:, : v.size(1)] = v[:, :length]
            out[k] = full
        else:
            out[k] = v
    return out


def bench_head(name: str, task, examples, config: BertConfig, args, tokenizer) -> dict:
    features = task.featurize(examples, tokenizer, training=True)
    lengths = [len(f["input_ids"]) for f in features]
    # every feature of the sampled examples, in the recipe's length-bucketed order (SQuAD: windows >= examples)
    batches = length_batches(lengths, args.batch_size, shuffle=True, seed=0)
    n_examples = sum(len(b) for b in batches)
    device = "cpu"
    auto = resolve_precision("auto", device)
    bk_class = getattr(bertkit, task.model_class.__name__)
    hf_class = getattr(transformers, task.model_class.__name__)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        bk_class(config).save_pretrained(d)
        init = {
            "hf": lambda: hf_class.from_pretrained(d, attn_implementation="sdpa"),
            "bk": lambda: bk_class.from_pretrained(d),
        }
        models = {
            "hf-maxlen fp32": init["hf"](),
            "hf-dynamic fp32": init["hf"](),
            "bertkit fp32": init["bk"](),
            f"bertkit auto({auto})": init["bk"](),
        }
    opts = {}
    for k, m in models.items():
        m.train()
        if k.startswith("hf"):
            opts[k] = torch.optim.AdamW(m.parameters(), lr=1e-5, weight_decay=0.01)  # plain loop: defaults
        else:
            opts[k] = build_optimizer(m, lr=1e-5)
    # pre-collate once: collation is part of each loop's cost only through its own padding length
    dynamic = [task.collate([features[i] for i in b]) for b in batches]
    maxlen = [pad_to([features[i] for i in b], args.max_seq_length, task) for b in batches]

    def run(key: str) -> float:
        model, opt = models[key], opts[key]
        data = maxlen if key.startswith("hf-maxlen") else dynamic
        precision = auto if "auto" in key else "fp32"
        start = time.perf_counter()
        for batch in data:
            if key.startswith("bertkit"):
                with autocast(precision, device):
                    loss = model(**batch).loss
            else:
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return n_examples / (time.perf_counter() - start)

    for key in models:  # warm-up: one pass each (kernels, allocator, optimizer state)
        run(key)
    results: dict[str, list[float]] = {k: [] for k in models}
    for r in range(args.rounds):
        order = list(models) if r % 2 == 0 else list(reversed(models))  # alternate the order between rounds
        for key in order:
            results[key].append(run(key))
    med = {k: statistics.median(v) for k, v in results.items()}
    padded = {
        "maxlen": statistics.mean(b["input_ids"].size(1) for b in maxlen),
        "dynamic": statistics.mean(b["input_ids"].size(1) for b in dynamic),
    }
    base = med["hf-maxlen fp32"]
    mean_len = statistics.mean(lengths)
    print(
        f"\n== {name}: {task.model_class.__name__}, {args.model_size}, batch {args.batch_size}, "
        f"{len(batches)} steps x {args.rounds} rounds; mean length {mean_len:.1f} tokens; padded batch width: "
        f"max-length {padded['maxlen']:.0f}, dynamic {padded['dynamic']:.1f}"
    )
    for k, v in med.items():
        print(f"  {k:<22} {v:8.1f} examples/s   (rounds: {', '.join(f'{x:.1f}' for x in results[k])})")
    auto_key = f"bertkit auto({auto})"
    ratios = {
        "bertkit fp32 / hf-maxlen fp32": med["bertkit fp32"] / base,
        f"bertkit auto({auto}) / hf-maxlen fp32": med[auto_key] / base,
        "bertkit fp32 / hf-dynamic fp32 (same batches)": med["bertkit fp32"] / med["hf-dynamic fp32"],
    }
    for k, v in ratios.items():
        print(f"  ratio {k:<48} {v:5.2f}x")
    return {"medians": med, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-size", default="bert-mini")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--steps",
        type=int,
        default=8,
        help="batch-size x steps examples are sampled; every "
        "feature of them is trained on in each timed run (SQuAD: one step per window batch)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-seq-length", type=int, default=128, help="classification; SQuAD uses 384")
    parser.add_argument("--only", choices=["classification", "squad"], default=None)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        tokenizer = bertkit.BertTokenizer.from_pretrained(make_vocab(Path(d)), lowercase=True)
    config = BertConfig.from_preset(args.model_size, vocab_size=max(len(tokenizer), 64))
    out = {}
    n = args.batch_size * args.steps
    if args.only in (None, "classification"):
        from bertkit.tasks.classification import ClassificationTask

        task = ClassificationTask("sst2", max_seq_length=args.max_seq_length)
        out["classification"] = bench_head(
            "SST-2 classification", task, classification_data(n, rng), config, args, tokenizer
        )
    if args.only in (None, "squad"):
        from bertkit.tasks.squad import SquadTask

        task = SquadTask("squad", max_seq_length=384, doc_stride=128)
        qa_args = argparse.Namespace(**{**vars(args), "max_seq_length": 384})
        out["squad"] = bench_head("SQuAD span QA", task, squad_data(n, rng), config, qa_args, tokenizer)
    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
