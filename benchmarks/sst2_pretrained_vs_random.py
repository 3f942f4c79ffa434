"""Does pre-training help? Fine-tune a pre-trained BERT directory and the SAME architecture from random
initialisation on SST-2 with the same seed, data and budget, and print both dev accuracies.

    python benchmarks/sst2_pretrained_vs_random.py --model runs/bert-mini --train-examples 8000 --epochs 1

Needs ../shared/data/glue/SST-2 (or --train / --dev). The random model gets Google's initialisation
(truncated normal, std 0.02) from bertkit's ``BertForPreTraining(config)``; both use the model directory's vocab.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="pre-trained bertkit / HF BERT directory (with vocab.txt)")
    parser.add_argument("--train", default=str(SHARED / "glue" / "SST-2" / "train.tsv"))
    parser.add_argument("--dev", default=str(SHARED / "glue" / "SST-2" / "dev.tsv"))
    parser.add_argument("--train-examples", type=int, default=8000, help="first N training sentences (0 = all)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--output", default=None, help="keep the two fine-tuned models here (default: temporary)")
    args = parser.parse_args()

    from bertkit.commands.finetune import load_tokenizer
    from bertkit.config import BertConfig
    from bertkit.modeling import BertForPreTraining
    from bertkit.recipes.finetune import FinetuneArgs, finetune
    from bertkit.tasks import get_task

    work = Path(args.output or tempfile.mkdtemp(prefix="sst2_pvr_"))
    random_dir = work / "random-init"
    random_dir.mkdir(parents=True, exist_ok=True)
    config = BertConfig.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    BertForPreTraining(config).save_pretrained(random_dir)
    for name in ("vocab.txt", "tokenizer_config.json"):
        if (Path(args.model) / name).is_file():
            shutil.copy(Path(args.model) / name, random_dir / name)

    results = {}
    for label, model_dir in (("pre-trained", Path(args.model)), ("random init", random_dir)):
        task = get_task("sst2", max_seq_length=args.max_seq_length)
        train = task.read(args.train)
        if args.train_examples:
            del train[args.train_examples:]
        dev = task.read(args.dev)
        tokenizer = load_tokenizer(model_dir)
        model = task.load_model(model_dir, finetuned=False)
        fargs = FinetuneArgs(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                             precision=args.precision, quiet=True)
        t0 = time.perf_counter()
        summary = finetune(task, model, tokenizer, train, dev, work / label.replace(" ", "-"), fargs)
        results[label] = {"dev_accuracy": summary["accuracy"], "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{label:<12} SST-2 dev accuracy {summary['accuracy']:.4f}  ({results[label]['seconds']} s)", flush=True)
    print(json.dumps({"model": str(args.model), "config": f"L{config.num_hidden_layers}/H{config.hidden_size}",
                      "train_examples": args.train_examples, "epochs": args.epochs, "lr": args.lr,
                      "batch_size": args.batch_size, "seed": args.seed, **results}, indent=2))
    diff = results["pre-trained"]["dev_accuracy"] - results["random init"]["dev_accuracy"]
    print(f"pre-trained - random = {diff:+.4f}")


if __name__ == "__main__":
    main()
