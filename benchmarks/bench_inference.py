"""CPU inference paths side by side: transformers fp32, bertkit fp32, bertkit default (bf16 autocast where the CPU
has native bf16), bertkit int8 (dynamic int8 Linear, q/k/v fused, on the int8 engine bertkit picks for the CPU:
onednn where it has VNNI / AMX), bertkit int8 on the other engine (``bertkit int8 x86``: fbgemm, or ``bertkit int8
onednn``), with more than one thread the int8 Encoder with its batches side by side (``bertkit int8
parallel``: ``encoder.parallel_batches``, opt-in, one thread per batch) and, when onnxruntime is installed,
bertkit's ONNX Runtime backend in fp32 and int8 (``Encoder.from_pretrained`` / ``load_pipeline(..., backend="onnx")``).

Two workloads, each run alternating the paths (path 1, path 2, ..., path 1, ...) and reporting medians:

1. **Embeddings**: sentences/s embedding SST-2 dev sentences (masked mean of the last layer) with a bert-base-shaped
   model of RANDOM weights (speed does not depend on the weights; no pre-trained weights are available offline),
   and the cosine of each path's vectors to bertkit fp32's.
2. **Classifier**: a fine-tuned SST-2 classifier (``--classifier DIR``, or one fine-tuned here: bert-mini shape from
   random initialisation on ``--clf-train`` SST-2 training sentences; small, so its accuracy is modest) on the SST-2
   dev set: sentences/s, accuracy and its change against bertkit fp32, cosine of the logits to fp32's, and the
   largest change of a class probability.

Every path tokenises for itself inside the timed call. transformers runs batches in input order (as its users
write it); bertkit's paths sort by length. Ratios are printed against transformers fp32
and against the bertkit default.

    .venv/bin/python benchmarks/bench_inference.py                       # bert-base shape, full dev set
    .venv/bin/python benchmarks/bench_inference.py --n 128 --repeats 2 --clf-train 2000   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def set_data(path: Path) -> None:
    global DATA
    DATA = path


def read_sst2(path: Path, n: int | None = None) -> tuple[list[str], list[int]]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    rows = [line.rsplit("\t", 1) for line in lines if line.strip()][:n]
    return [r[0].strip() for r in rows], [int(r[1]) for r in rows]


def build_encoder_dir(directory: Path, vocab: Path, layers: int, hidden: int, heads: int) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=sum(1 for _ in vocab.open(encoding="utf-8")),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
    )
    transformers.BertModel(config).save_pretrained(directory)
    shutil.copy(vocab, directory / "vocab.txt")


def finetune_classifier(directory: Path, vocab: Path, n_train: int, epochs: float) -> None:
    """A bert-mini SST-2 classifier fine-tuned from random initialisation with ``bertkit finetune``."""
    import torch

    from bertkit import BertConfig
    from bertkit.cli import main
    from bertkit.modeling import BertForPreTraining

    base = directory.parent / "clf-base"
    torch.manual_seed(0)
    BertForPreTraining(BertConfig.from_preset("bert-mini", vocab_size=sum(1 for _ in vocab.open()))).save_pretrained(
        base
    )
    shutil.copy(vocab, base / "vocab.txt")
    code = main(
        [
            "finetune",
            "--task",
            "sst2",
            "--train",
            str(DATA / "glue/SST-2/train.tsv"),
            "--dev",
            str(DATA / "glue/SST-2/dev.tsv"),
            "--model",
            str(base),
            "--output",
            str(directory),
            "--epochs",
            str(epochs),
            "--lr",
            "3e-4",
            "--batch-size",
            "32",
            "--max-train-examples",
            str(n_train),
            "--quiet",
        ]
    )
    if code:
        sys.exit(f"fine-tuning the classifier failed ({code})")


# --------------------------------------------------------------------------------------------- the paths
# each returns a callable: () -> np.ndarray (embeddings [N, H] or logits [N, C]) computed from the raw sentences


def transformers_path(model_dir: Path, texts: list[str], task: str, batch_size: int):
    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
    cls = transformers.BertModel if task == "embed" else transformers.BertForSequenceClassification
    model = cls.from_pretrained(model_dir).eval()

    def run():
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(
                    texts[start : start + batch_size],
                    padding=True,
                    truncation=True,
                    max_length=128,
                    return_tensors="pt",
                )
                if task == "embed":
                    hidden = model(**batch).last_hidden_state
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    out.append((hidden * mask).sum(1) / mask.sum(1))
                else:
                    out.append(model(**batch).logits)
        return torch.cat(out).float().numpy()

    return run


def bertkit_path(
    model_dir: Path,
    texts: list[str],
    task: str,
    batch_size: int,
    precision: str,
    quantize: str | None,
    backend: str = "torch",
    engine: str | None = None,
    parallel_batches: bool | None = None,
):
    """``engine``: the int8 engine to quantise with (``BERTKIT_INT8_ENGINE`` while loading; None: bertkit's pick).
    ``parallel_batches``: set the Encoder's (None: its default, off)."""
    from bertkit.quantize import ENGINE_VARIABLE

    saved = os.environ.pop(ENGINE_VARIABLE, None)
    if engine:
        os.environ[ENGINE_VARIABLE] = engine
    try:
        if task == "embed":
            from bertkit import Encoder

            encoder = Encoder.from_pretrained(model_dir, precision=precision, quantize=quantize, backend=backend)
            if parallel_batches is not None:
                encoder.parallel_batches = parallel_batches
            return lambda: encoder.encode(
                texts, layers=-1, pooling="mean", batch_size=batch_size, max_length=128, show_progress=False
            ), encoder.precision
        from bertkit.pipelines import load_pipeline

        pipe = load_pipeline(model_dir, precision=precision, quantize=quantize, batch_size=batch_size, backend=backend)
        return lambda: pipe.logits(texts), pipe.precision
    finally:
        os.environ.pop(ENGINE_VARIABLE, None)
        if saved is not None:
            os.environ[ENGINE_VARIABLE] = saved


def build_paths(model_dir: Path, texts: list[str], task: str, args, work: Path) -> dict:
    import torch

    paths = {"transformers fp32": transformers_path(model_dir, texts, task, args.batch_size)}
    paths["bertkit fp32"], _ = bertkit_path(model_dir, texts, task, args.batch_size, "fp32", None)
    paths["bertkit default"], default_precision = bertkit_path(model_dir, texts, task, args.batch_size, "auto", None)
    # int8: the engine bertkit picks for this CPU (onednn where it has VNNI / AMX), and each other engine there is
    paths["bertkit int8"], _ = bertkit_path(model_dir, texts, task, args.batch_size, "fp32", "int8")
    if task == "embed" and torch.get_num_threads() > 1:  # the int8 Encoder with its batches side by side (opt-in)
        paths["bertkit int8 parallel"], _ = bertkit_path(
            model_dir, texts, task, args.batch_size, "fp32", "int8", parallel_batches=True
        )
    from bertkit.quantize import pick_engine

    picked = pick_engine()
    for engine in ("x86", "onednn"):
        if engine != picked and engine in torch.backends.quantized.supported_engines:
            paths[f"bertkit int8 {engine}"], _ = bertkit_path(
                model_dir, texts, task, args.batch_size, "fp32", "int8", engine=engine
            )
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("(onnxruntime not installed: no ONNX Runtime paths)")
        return paths, default_precision
    from bertkit.export import export_onnx

    # bertkit's ONNX Runtime backend: Encoder.from_pretrained / load_pipeline(backend="onnx"), on graphs exported
    # once here (DIR/encoder.onnx or DIR/model.onnx, and their int8 versions)
    onnx_dir = work / f"{task}-onnx"
    shutil.copytree(model_dir, onnx_dir)
    for q in (None, "int8"):
        name = ("encoder" if task == "embed" else "model") + (".int8.onnx" if q else ".onnx")
        export_onnx(onnx_dir, onnx_dir / name, quantize=q, check=False, hidden_states=task == "embed")
        paths[f"bertkit onnx {q or 'fp32'}"], _ = bertkit_path(
            onnx_dir, texts, task, args.batch_size, "fp32", q, backend="onnx"
        )
    return paths, default_precision


def measure(paths: dict, n: int, repeats: int, clock=time.perf_counter) -> tuple[dict, dict]:
    """Alternate the paths ``repeats`` times after one warm-up each: (median seconds, last outputs) per path."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    outputs = {name: run() for name, run in paths.items()}  # warm-up (and outputs for the quality columns)
    for r in range(repeats):
        for name, run in paths.items():
            t0 = clock()
            run()
            times[name].append(clock() - t0)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {n / v[-1]:.1f}/s" for k, v in times.items()), flush=True)
    return {k: statistics.median(v) for k, v in times.items()}, outputs


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def report(title: str, n: int, seconds: dict, outputs: dict, labels: list[int] | None, default_precision: str) -> list:
    ref = outputs["bertkit fp32"]
    base = seconds["transformers fp32"]
    default = seconds["bertkit default"]
    rows = []
    print(f"\n{title}")
    head = f"{'path':<22} {'sent/s':>9} {'vs transformers':>16} {'vs bertkit default':>19} {'min cos':>8}"
    if labels is not None:
        head += f" {'accuracy':>9} {'Δ points':>9} {'max Δprob':>10}"
    print(head)
    for name, s in seconds.items():
        out = outputs[name]
        row = {
            "path": name,
            "sentences_per_s": n / s,
            "vs_transformers_fp32": base / s,
            "vs_bertkit_default": default / s,
            "min_cosine_to_fp32": float(cosine(out, ref).min()),
        }
        line = f"{name:<22} {n / s:>9.1f} {base / s:>15.2f}x {default / s:>18.2f}x {row['min_cosine_to_fp32']:>8.5f}"
        if labels is not None:
            acc = float((out.argmax(-1) == np.array(labels)).mean())
            ref_acc = float((ref.argmax(-1) == np.array(labels)).mean())
            row.update(
                accuracy=acc,
                accuracy_change_points=100 * (acc - ref_acc),
                max_prob_change=float(np.abs(softmax(out) - softmax(ref)).max()),
            )
            line += f" {acc:>9.4f} {100 * (acc - ref_acc):>+9.2f} {row['max_prob_change']:>10.4f}"
        print(line)
        rows.append(row)
    from bertkit.quantize import pick_engine

    print(
        f"(bertkit default = precision auto -> {default_precision} on this CPU; bertkit int8 = engine {pick_engine()})"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=0, help="SST-2 dev sentences for the embedding workload (0 = all 872)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch / ONNX Runtime threads (0 = torch's default)")
    parser.add_argument(
        "--classifier", default=None, help="a fine-tuned SST-2 model directory (default: fine-tune a small one here)"
    )
    parser.add_argument("--clf-train", type=int, default=20000, help="SST-2 training sentences for that classifier")
    parser.add_argument("--clf-epochs", type=float, default=1.0)
    parser.add_argument("--skip", default="", help="comma-separated workloads to skip: embed, classify")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time (the "
        "figures to report); cpu: this process's CPU time, for comparing paths with --threads 1 on a "
        "machine shared with other jobs (with more threads it counts every thread's time)",
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--data", default=str(DATA), help="the shared data folder (default ../shared/data)")
    args = parser.parse_args()
    set_data(Path(args.data))

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    vocab = DATA / "vocab/bert-base-uncased/vocab.txt"
    if not vocab.is_file():
        sys.exit(f"{DATA} is absent: this benchmark needs the shared SST-2 data and vocabulary")
    texts, labels = read_sst2(DATA / "glue/SST-2/dev.tsv")
    skip = set(filter(None, args.skip.split(",")))
    print(
        f"torch {torch.__version__}, {args.threads} threads, batch {args.batch_size}, {args.repeats} rounds, "
        f"{args.clock} clock"
    )
    results: dict = {"args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "embed" not in skip:
            n = args.n or len(texts)
            model_dir = work / "encoder"
            build_encoder_dir(model_dir, vocab, args.layers, args.hidden, args.heads)
            print(
                f"\nembeddings: {n} SST-2 dev sentences, random-weight model L={args.layers} H={args.hidden}, "
                "mean pooling of the last layer"
            )
            paths, precision = build_paths(model_dir, texts[:n], "embed", args, work)
            seconds, outputs = measure(paths, n, args.repeats, clock)
            results["embed"] = report(
                f"== embeddings ({n} sentences, L={args.layers} H={args.hidden}, random weights)",
                n,
                seconds,
                outputs,
                None,
                precision,
            )
        if "classify" not in skip:
            clf = Path(args.classifier) if args.classifier else work / "clf"
            if not args.classifier:
                print(f"\nfine-tuning a bert-mini SST-2 classifier from random init on {args.clf_train} sentences")
                finetune_classifier(clf, vocab, args.clf_train, args.clf_epochs)
            config = json.loads((clf / "config.json").read_text())
            shape = f"L={config['num_hidden_layers']} H={config['hidden_size']}"
            print(f"\nclassifier: {clf} ({shape}) on the {len(texts)} SST-2 dev sentences")
            paths, precision = build_paths(clf, texts, "classify", args, work)
            seconds, outputs = measure(paths, len(texts), args.repeats, clock)
            results["classify"] = report(
                f"== SST-2 classifier ({shape}, {len(texts)} dev sentences)",
                len(texts),
                seconds,
                outputs,
                labels,
                precision,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
