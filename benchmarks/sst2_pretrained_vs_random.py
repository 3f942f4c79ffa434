"""Does pre-training help? Fine-tune a pre-trained BERT directory and the SAME architecture from random
initialisation on SST-2 with the same seed, data and budget, and print both dev accuracies.

    python benchmarks/sst2_pretrained_vs_random.py --model runs/bert-mini --train-examples 8000 --epochs 1
    python benchmarks/sst2_pretrained_vs_random.py --model runs/bert-mini --lr 1e-4,3e-4 --dropout 0.1

With several learning rates, each route is fine-tuned at each and its best dev accuracy is reported, the paper's
protocol ("we selected the best fine-tuning learning rate on the Dev set"). ``--dropout`` sets the fine-tuning
dropout of both models (e.g. 0.1 for a model pre-trained with dropout off, whose config.json says 0).

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
    parser.add_argument("--lr", default="1e-4", help="learning rate, or a comma-separated grid")
    parser.add_argument(
        "--dropout", type=float, default=None, help="fine-tuning dropout for both models (default: the config's)"
    )
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--output", default=None, help="keep the two fine-tuned models here (default: temporary)")
    args = parser.parse_args()

    from bertkit.config import BertConfig
    from bertkit.modeling import BertForPreTraining
    from bertkit.recipes.finetune import FinetuneArgs, finetune
    from bertkit.tasks import get_task
    from bertkit.tokenization import load_tokenizer

    work = Path(args.output or tempfile.mkdtemp(prefix="sst2_pvr_"))
    random_dir = work / "random-init"
    random_dir.mkdir(parents=True, exist_ok=True)
    config = BertConfig.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    BertForPreTraining(config).save_pretrained(random_dir)
    for name in ("vocab.txt", "tokenizer_config.json"):
        if (Path(args.model) / name).is_file():
            shutil.copy(Path(args.model) / name, random_dir / name)

    lrs = [float(x) for x in args.lr.split(",")]
    results: dict[str, dict[str, float]] = {"pre-trained": {}, "random init": {}}
    for lr in lrs:
        for label, model_dir in (("pre-trained", Path(args.model)), ("random init", random_dir)):
            task = get_task("sst2", max_seq_length=args.max_seq_length)
            train = task.read(args.train)
            if args.train_examples:
                del train[args.train_examples :]
            dev = task.read(args.dev)
            tokenizer = load_tokenizer(model_dir)
            torch.manual_seed(args.seed)  # both routes' classifier heads start from the same draw
            model = task.load_model(model_dir, finetuned=False)
            if args.dropout is not None:
                model.set_dropout(args.dropout)
            fargs = FinetuneArgs(
                epochs=args.epochs,
                batch_size=args.batch_size,
                lr=lr,
                seed=args.seed,
                precision=args.precision,
                quiet=True,
            )
            t0 = time.perf_counter()
            summary = finetune(task, model, tokenizer, train, dev, work / f"{label.replace(' ', '-')}-lr{lr:g}", fargs)
            results[label][f"{lr:g}"] = summary["accuracy"]
            print(
                f"lr {lr:<8g} {label:<12} SST-2 dev accuracy {summary['accuracy']:.4f}  "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    best = {label: max(r.values()) for label, r in results.items()}
    print(
        json.dumps(
            {
                "model": str(args.model),
                "config": f"L{config.num_hidden_layers}/H{config.hidden_size}",
                "train_examples": args.train_examples,
                "epochs": args.epochs,
                "lr_grid": lrs,
                "dropout": args.dropout,
                "batch_size": args.batch_size,
                "seed": args.seed,
                "dev_accuracy": results,
                "best": best,
            },
            indent=2,
        )
    )
    print(
        f"best over the lr grid: pre-trained {best['pre-trained']:.4f}, random init {best['random init']:.4f}, "
        f"pre-trained - random = {best['pre-trained'] - best['random init']:+.4f}"
    )


if __name__ == "__main__":
    main()
