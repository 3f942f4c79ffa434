"""Sentence-embedding quality from a bertkit-pretrained model: raw mean pooling vs SimCSE vs pairs training.

    raw      the pre-trained model, masked mean of the last layer (no training)
    simcse   bertkit finetune --task simcse on sentences of the shared Gutenberg books
    pairs    bertkit finetune --task pairs on SQuAD (question, answer sentence) pairs of the TRAINING articles

Scored on
    retrieval  SQuAD questions -> paragraphs of the HELD-OUT articles (split by article: no paragraph or question of
               the test articles is seen in training), BEIR layout, exact search: nDCG@10, MRR@10, Recall@1/10
    MRPC       the GLUE MRPC dev pairs as an STS-like scorer: Spearman (x 100) of the cosine against the 0/1 label

    .venv/bin/python benchmarks/embeddings_quality.py --model runs/bert-mini --work runs/emb-quality
    .venv/bin/python benchmarks/embeddings_quality.py --model runs/bert-mini --steps 5 --sentences 2000  # smoke
    .venv/bin/python benchmarks/embeddings_quality.py --model runs/bert-mini --only pairs --distill bert-tiny
        # and the pairs model distilled into a bert-tiny (bertkit distill --task embeddings), scored the same way

Needs ../shared/data (squad/dev-v1.1.json, corpus/gutenberg, glue/MRPC/dev.tsv). Every command it runs is printed.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def bertkit(argv: list[str]) -> dict:
    """Run a bertkit command in this process; its last stdout line (JSON) is returned."""
    import contextlib
    import io

    from bertkit.cli import main

    print("$ bertkit " + " ".join(shlex.quote(a) for a in argv), flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code:
        raise SystemExit(f"bertkit {argv[0]} failed with exit code {code}")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def build_squad(data: Path, work: Path, train_fraction: float) -> tuple[Path, Path]:
    """SQuAD dev split by article: the first articles -> train JSON (for --squad-pairs), the rest -> a BEIR folder
    (questions -> paragraphs)."""
    squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    articles = squad["data"]
    cut = int(len(articles) * train_fraction)
    train = work / "squad_train_articles.json"
    train.write_text(json.dumps({"version": squad.get("version", "1.1"), "data": articles[:cut]}), encoding="utf-8")
    beir = work / "squad_beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    with (
        open(beir / "corpus.jsonl", "w", encoding="utf-8") as corpus,
        open(beir / "queries.jsonl", "w", encoding="utf-8") as queries,
        open(beir / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for a, article in enumerate(articles[cut:], cut):
            for p, para in enumerate(article["paragraphs"]):
                doc = f"a{a}p{p}"
                corpus.write(json.dumps({"_id": doc, "title": "", "text": para["context"]}) + "\n")
                for qa in para["qas"]:
                    queries.write(json.dumps({"_id": qa["id"], "text": qa["question"]}) + "\n")
                    qrels.write(f"{qa['id']}\t{doc}\t1\n")
    print(f"SQuAD: {cut} training articles, {len(articles) - cut} held-out articles -> {beir}", flush=True)
    return train, beir


def build_sentences(data: Path, work: Path, n: int, seed: int) -> Path:
    from bertkit.data.pretraining.splitter import split_sentences

    sentences: list[str] = []
    for book in sorted((data / "corpus" / "gutenberg").glob("*.txt")):
        paragraphs = [
            p.replace("\n", " ").strip() for p in book.read_text(encoding="utf-8", errors="replace").split("\n\n")
        ]
        sentences += [s for s in split_sentences([p for p in paragraphs if p]) if 5 <= len(s.split()) <= 60]
    random.Random(seed).shuffle(sentences)
    out = work / "gutenberg_sentences.txt"
    out.write_text("\n".join(sentences[:n]) + "\n", encoding="utf-8")
    print(f"Gutenberg: {min(n, len(sentences))} sentences of {len(sentences)} -> {out}", flush=True)
    return out


def score(model: Path, beir: Path, mrpc: Path, work: Path, name: str, raw: bool) -> dict:
    extra = ["--pooling", "mean", "--layers", "-1"] if raw else []
    r = bertkit(
        [
            "evaluate",
            "--task",
            "retrieval",
            "--model",
            str(model),
            "--data",
            str(beir),
            "--output",
            str(work / f"eval-{name}-retrieval"),
            *extra,
        ]
    )
    m = bertkit(
        [
            "evaluate",
            "--task",
            "sts",
            "--model",
            str(model),
            "--data",
            str(mrpc),
            "--text-column",
            "#1 String",
            "--pair-column",
            "#2 String",
            "--label-column",
            "Quality",
            "--output",
            str(work / f"eval-{name}-mrpc"),
            *extra,
        ]
    )
    return {
        "ndcg@10": r["ndcg@10"],
        "mrr@10": r["mrr@10"],
        "recall@1": r["recall@1"],
        "recall@10": r["recall@10"],
        "mrpc_spearman": m["spearman"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a bertkit-pretrained model directory (e.g. bert-mini)")
    p.add_argument("--work", type=Path, default=Path("runs/embeddings-quality"))
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--train-fraction", type=float, default=0.5, help="SQuAD articles used for training")
    p.add_argument("--sentences", type=int, default=50_000, help="Gutenberg sentences for SimCSE")
    p.add_argument("--steps", type=int, default=0, help="max steps per training run (0: one epoch)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--mini-batch-size", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--distill",
        metavar="STUDENT",
        help="also distil the pairs model into STUDENT (a preset or a "
        "directory over its vocabulary) with bertkit distill --task embeddings, and score the student",
    )
    p.add_argument("--distill-epochs", type=float, default=3.0)
    p.add_argument("--distill-lr", type=float, default=5e-4)
    p.add_argument("--only", choices=("raw", "simcse", "pairs"), nargs="*", help="the routes run (default all)")
    args = p.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    squad_train, beir = build_squad(args.data_dir, work, args.train_fraction)
    sentences = build_sentences(args.data_dir, work, args.sentences, args.seed)
    mrpc = args.data_dir / "glue" / "MRPC" / "dev.tsv"
    common = [
        "--model",
        args.model,
        "--batch-size",
        str(args.batch_size),
        "--lr",
        str(args.lr),
        "--max-seq-length",
        str(args.max_seq_length),
        "--seed",
        str(args.seed),
        "--quiet",
    ]
    if args.steps:
        common += ["--max-steps", str(args.steps)]
    if args.mini_batch_size:
        common += ["--mini-batch-size", str(args.mini_batch_size)]
    only = set(args.only or ("raw", "simcse", "pairs")) | ({"pairs"} if args.distill else set())
    results = {"raw": score(Path(args.model), beir, mrpc, work, "raw", raw=True)} if "raw" in only else {}
    runs = {
        "simcse": ["--task", "simcse", "--train", str(sentences)],
        "pairs": ["--task", "pairs", "--train", str(squad_train), "--squad-pairs", "sentence"],
    }
    for name, argv in runs.items():
        if name not in only:
            continue
        summary = bertkit(["finetune", *argv, "--output", str(work / name), *common])
        results[name] = {
            **score(work / name, beir, mrpc, work, name, raw=False),
            "train_steps": summary["steps"],
            "train_seconds": summary["train_seconds"],
        }
    if args.distill:
        # the student learns the pairs model's vectors (MSE; PCA to its width when narrower) on text of the
        # training side only: the training articles' questions and paragraphs and the Gutenberg sentences
        texts = work / "distill_texts.txt"
        squad = json.loads(squad_train.read_text(encoding="utf-8"))["data"]
        lines = [qa["question"] for a in squad for p in a["paragraphs"] for qa in p["qas"]]
        lines += [p["context"] for a in squad for p in a["paragraphs"]]
        lines += sentences.read_text(encoding="utf-8").splitlines()
        texts.write_text("\n".join(t.replace("\n", " ").strip() for t in lines if t.strip()) + "\n", "utf-8")
        argv = ["distill", "--task", "embeddings", "--teacher", str(work / "pairs"), "--student", args.distill]
        argv += ["--train", str(texts), "--output", str(work / "distilled"), "--epochs", str(args.distill_epochs)]
        argv += ["--lr", str(args.distill_lr), "--batch-size", "64", "--max-seq-length", str(args.max_seq_length)]
        summary = bertkit([*argv, "--seed", str(args.seed), "--quiet"])
        results["distilled"] = {
            **score(work / "distilled", beir, mrpc, work, "distilled", raw=False),
            "train_steps": summary.get("steps"),
            "train_seconds": summary.get("train_seconds"),
        }
        teacher = results["pairs"]
        results["distilled"]["kept"] = {k: results["distilled"][k] / teacher[k] for k in ("ndcg@10", "mrpc_spearman")}
        print(f"distilled student keeps {results['distilled']['kept']} of the pairs model", flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\n{'':8s} {'nDCG@10':>8s} {'MRR@10':>8s} {'R@1':>6s} {'R@10':>6s} {'MRPC rho':>9s}")
    for name, r in results.items():
        print(
            f"{name:8s} {r['ndcg@10']:8.2f} {r['mrr@10']:8.2f} {r['recall@1']:6.2f} {r['recall@10']:6.2f} "
            f"{r['mrpc_spearman']:9.2f}"
        )


if __name__ == "__main__":
    main()
