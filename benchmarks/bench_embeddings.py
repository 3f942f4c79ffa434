"""Sentence-embedding training: ``bertkit finetune --task pairs`` vs sentence-transformers' own trainer, and memory.

Speed: both sides train the same random-initialised bert-mini-shaped model (built once with ``transformers``,
saved, loaded by both) with MultipleNegativesRankingLoss (scale 20, in-batch negatives) on the same
(question, answer sentence) pairs from SQuAD, at the same batch size, max_seq_length, learning rate and precision,
for the same number of steps. Each side is timed from a model directory and the rows in memory to a trained model
(loading, tokenization and the loop included; sentence-transformers saves nothing, bertkit writes its output),
and by its training loop alone (sentence-transformers: ``trainer.train()``; bertkit: the loop after tokenization).
Use enough --steps that loading does not dominate. One untimed 1-step run of each side first (imports, first
calls); then runs alternate (sentence-transformers, bertkit, bertkit, sentence-transformers, ...); medians and the
throughput ratios are printed.

    sentence-transformers: SentenceTransformer(dir) (mean pooling), losses.MultipleNegativesRankingLoss,
                           SentenceTransformerTrainer (use_cpu on CPU, bf16 flag when --precision bf16)
    bertkit:               bertkit.embeddings.recipe.train_embeddings (what `bertkit finetune --task pairs` runs)

Memory: peak resident memory (and, on a GPU, peak allocated CUDA memory) of a fresh `bertkit finetune --task pairs`
process at batch 256, with and without ``--mini-batch-size 32`` (GradCache).

    .venv/bin/python benchmarks/bench_embeddings.py --steps 20 --batch-size 64 --repeats 3
    .venv/bin/python benchmarks/bench_embeddings.py --steps 2 --batch-size 16 --repeats 1 --memory-steps 1  # smoke

Needs the ``bench`` extra (sentence-transformers, datasets, accelerate) and ../shared/data/squad/dev-v1.1.json
(falls back to the synthetic fixture pairs when absent).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SIZES = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8)}  # layers, hidden, heads


def load_pairs(limit: int, data: Path = DATA) -> tuple[list[tuple[str, str]], Path]:
    """(question, answer sentence) pairs and the vocabulary to use."""
    squad = data / "squad" / "dev-v1.1.json"
    vocab = data / "vocab" / "bert-base-uncased" / "vocab.txt"
    if squad.is_file() and vocab.is_file():
        from bertkit.embeddings.data import read_squad_pairs

        rows = read_squad_pairs(squad, "sentence").rows
        source = "SQuAD dev-v1.1 (question, answer sentence)"
    else:
        from bertkit.embeddings.data import read_pairs

        fixtures = ROOT / "tests" / "fixtures" / "embeddings"
        rows = read_pairs(fixtures / "train_pairs.tsv").rows
        vocab = fixtures / "vocab.txt"
        source = "synthetic fixture pairs"
    while len(rows) < limit:
        rows = rows + rows
    print(f"data: {source}, {len(rows[:limit])} pairs used", flush=True)
    return [tuple(r) for r in rows[:limit]], vocab


def build_model_dir(directory: Path, vocab: Path, size: str, seed: int = 0) -> None:
    import torch
    import transformers

    layers, hidden, heads = SIZES[size]
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=sum(1 for _ in vocab.open(encoding="utf-8")),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
    )
    transformers.BertModel(config).save_pretrained(directory)
    shutil.copy(vocab, directory / "vocab.txt")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
    )


def run_sentence_transformers(model_dir: Path, rows, args, work: Path) -> tuple[float, float]:
    """(seconds end to end, pairs per second of trainer.train() alone)."""
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args

    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.losses import MultipleNegativesRankingLoss

    t0 = time.perf_counter()
    model = SentenceTransformer(str(model_dir), device=args.device)
    model.max_seq_length = args.max_seq_length
    data = datasets.Dataset.from_dict({"anchor": [a for a, _ in rows], "positive": [p for _, p in rows]})
    training = Args(
        output_dir=str(work / "st"),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=args.lr,
        warmup_ratio=0.1,
        weight_decay=0.01,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        logging_steps=10**9,
        dataloader_drop_last=True,
        use_cpu=args.device == "cpu",
        bf16=args.precision == "bf16",
        seed=42,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=training, train_dataset=data, loss=MultipleNegativesRankingLoss(model, scale=20.0)
    )
    t1 = time.perf_counter()
    trainer.train()
    end = time.perf_counter()
    return end - t0, args.steps * args.batch_size / (end - t1)


def run_bertkit(model_dir: Path, rows, args, work: Path) -> tuple[float, float]:
    """(seconds end to end, pairs per second of the training loop alone)."""
    import torch

    from bertkit.embeddings.data import TextRows
    from bertkit.embeddings.recipe import EmbeddingTrainArgs, train_embeddings
    from bertkit.training.distributed import DistContext

    t0 = time.perf_counter()
    cfg = EmbeddingTrainArgs(
        task="pairs",
        train="(in memory)",
        model=str(model_dir),
        output=str(work / "bk"),
        batch_size=args.batch_size,
        max_steps=args.steps,
        lr=args.lr,
        max_seq_length=args.max_seq_length,
        precision=args.precision,
        quiet=True,
    )
    summary = train_embeddings(cfg, TextRows(list(rows)), None, DistContext(device=torch.device(args.device)))
    return time.perf_counter() - t0, summary["rows_per_second"]


def measure_memory(model_dir: Path, rows, args, work: Path, mini: int) -> dict:
    """Peak RSS (and CUDA peak) of a fresh `bertkit finetune --task pairs` process at --memory-batch."""
    data = work / "pairs.tsv"
    if not data.exists():
        with open(data, "w", encoding="utf-8") as f:
            f.write("anchor\tpositive\n")
            for a, p in rows:
                f.write(f"{a.replace(chr(9), ' ')}\t{p.replace(chr(9), ' ')}\n")
    argv = [
        "finetune",
        "--task",
        "pairs",
        "--train",
        str(data),
        "--model",
        str(model_dir),
        "--output",
        str(work / f"mem{mini}"),
        "--batch-size",
        str(args.memory_batch),
        "--max-steps",
        str(args.memory_steps),
        "--max-seq-length",
        str(args.max_seq_length),
        "--precision",
        args.precision,
        "--quiet",
        "--device",
        args.device,
    ]
    if mini:
        argv += ["--mini-batch-size", str(mini)]
    code = (
        "import json, resource, sys, torch\n"
        "from bertkit.cli import main\n"
        f"rc = main({argv!r})\n"
        "out = {'rc': rc, 'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}\n"
        "if torch.cuda.is_available(): out['cuda_peak_mib'] = torch.cuda.max_memory_allocated() / 2**20\n"
        "print('MEMORY ' + json.dumps(out))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    line = [x for x in proc.stdout.splitlines() if x.startswith("MEMORY ")]
    if proc.returncode or not line:
        raise SystemExit(f"memory run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result = json.loads(line[0][7:])
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-size", choices=tuple(SIZES), default="mini")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-seq-length", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--memory-batch", type=int, default=256)
    p.add_argument("--memory-mini", type=int, default=32)
    p.add_argument("--memory-steps", type=int, default=2)
    p.add_argument("--data-dir", type=Path, default=DATA, help="the shared data folder (default: %(default)s)")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()

    import torch

    sys.path.insert(0, str(ROOT / "src"))
    rows, vocab = load_pairs(max(args.steps * args.batch_size, args.memory_batch * args.memory_steps), args.data_dir)
    print(
        f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"device {args.device}, precision {args.precision}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        build_model_dir(model_dir, vocab, args.model_size)
        print(
            f"model: bert-{args.model_size} shape {SIZES[args.model_size]} (layers, hidden, heads), random init; "
            f"batch {args.batch_size}, max_seq_length {args.max_seq_length}, {args.steps} steps",
            flush=True,
        )
        if not args.skip_speed:
            times: dict[str, list[float]] = {"sentence-transformers": [], "bertkit": []}
            loops: dict[str, list[float]] = {"sentence-transformers": [], "bertkit": []}
            runs = {"sentence-transformers": run_sentence_transformers, "bertkit": run_bertkit}
            warm = argparse.Namespace(**{**vars(args), "steps": 1})  # one untimed step each: imports, first calls
            run_sentence_transformers(model_dir, rows[: args.batch_size * 2], warm, work)
            run_bertkit(model_dir, rows[: args.batch_size * 2], warm, work)
            order = ["sentence-transformers", "bertkit"]
            for r in range(args.repeats):
                for name in order if r % 2 == 0 else order[::-1]:
                    seconds, loop_rate = runs[name](model_dir, rows[: args.steps * args.batch_size], args, work)
                    times[name].append(seconds)
                    loops[name].append(loop_rate)
                    print(
                        f"  run {r + 1} {name:22s} {seconds:7.2f} s end to end "
                        f"({args.steps * args.batch_size / seconds:7.1f} pairs/s; training loop alone "
                        f"{loop_rate:7.1f} pairs/s)",
                        flush=True,
                    )
            st, bk = statistics.median(times["sentence-transformers"]), statistics.median(times["bertkit"])
            n = args.steps * args.batch_size
            print(
                f"median: sentence-transformers {st:.2f} s ({n / st:.1f} pairs/s), bertkit {bk:.2f} s "
                f"({n / bk:.1f} pairs/s); bertkit throughput ratio {st / bk:.2f}x end to end (target >= 1.5x)"
            )
            lst, lbk = statistics.median(loops["sentence-transformers"]), statistics.median(loops["bertkit"])
            print(
                f"median training loop alone: sentence-transformers {lst:.1f} pairs/s, bertkit {lbk:.1f} pairs/s; "
                f"ratio {lbk / lst:.2f}x"
            )
        if not args.skip_memory:
            plain = measure_memory(model_dir, rows, args, work, 0)
            cached = measure_memory(model_dir, rows, args, work, args.memory_mini)
            print(f"memory at batch {args.memory_batch} ({args.memory_steps} steps): plain {json.dumps(plain)}")
            print(f"memory at batch {args.memory_batch}, --mini-batch-size {args.memory_mini}: {json.dumps(cached)}")
            key = "cuda_peak_mib" if "cuda_peak_mib" in plain else "peak_rss_mib"
            print(f"peak {key}: {plain[key]:.0f} -> {cached[key]:.0f} MiB ({plain[key] / cached[key]:.2f}x less)")


if __name__ == "__main__":
    main()
