"""Distillation side by side, on SST-2 or CoNLL-2003 NER (the shared data): the teacher, the student fine-tuned
directly on the labels, and the distilled student (``bertkit distill``) without and with unlabeled text.

Quality: the dev metric of each (accuracy, entity F1), the students' the median over ``--seeds``, and what share of
the teacher's each keeps. Speed (CPU): sentences/s of the teacher and the distilled student through the predict
pipeline (``bertkit predict``'s: ``load_pipeline``) at fp32, int8 (dynamic int8 Linear) and ONNX Runtime (fp32,
int8), and through ``bertkit serve`` (``POST /predict`` or ``/ner``, ``--clients`` concurrent clients, one sentence
per request), fp32 and int8; ratios student / teacher on the same inputs.

No pre-trained weights are available offline: by default the teacher (bert-mini) and the student (bert-tiny) start
from random initialisation over bert-base-uncased's vocabulary; ``--teacher-init DIR`` / ``--student-init DIR``
take pre-trained directories (from ``bertkit pretrain``), which is where distillation is meant to be measured.

    .venv/bin/python benchmarks/bench_distill.py --task sst2 --seeds 3                    # the table (a quiet machine)
    .venv/bin/python benchmarks/bench_distill.py --task sst2 --n-train 256 --n-dev 128 --n-unlabeled 256 \\
        --epochs 1 --seeds 1 --n-speed 64 --repeats 1                                       # proves it runs (minutes)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import measure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
# task: (train file, dev file, metric, pipeline method, server route)
TASKS = {
    "sst2": ("glue/SST-2/train.tsv", "glue/SST-2/dev.tsv", "accuracy", "logits", "/predict"),
    "conll2003": ("ner/conll2003/train.txt", "ner/conll2003/valid.txt", "f1", "token_scores", "/ner"),
}


def cli(*argv) -> None:
    from bertkit.cli import main

    code = main([str(a) for a in argv])
    if code:
        sys.exit(f"bertkit {argv[0]} failed ({code})")


def random_init(directory: Path, preset: str, vocab: Path) -> Path:
    """A randomly initialised BERT preset over ``vocab`` (what fine-tuning and distillation start from offline)."""
    import torch

    from bertkit import BertConfig
    from bertkit.modeling import BertForPreTraining

    torch.manual_seed(0)
    size = sum(1 for line in vocab.open(encoding="utf-8") if line.strip())
    BertForPreTraining(BertConfig.from_preset(preset, vocab_size=size)).save_pretrained(directory)
    shutil.copy(vocab, directory / "vocab.txt")
    return directory


def examples_of(task: str, path: Path) -> tuple[str, list[str]]:
    """(header, examples as text blocks): SST-2 rows, or CoNLL sentences (blank-line separated, no -DOCSTART-)."""
    text = path.read_text(encoding="utf-8")
    if task == "sst2":
        lines = text.splitlines()
        return lines[0] + "\n", [line + "\n" for line in lines[1:] if line.strip()]
    blocks = [b for b in text.split("\n\n") if b.strip() and not b.lstrip().startswith("-DOCSTART-")]
    return "", [b.strip("\n") + "\n\n" for b in blocks]


def sentences(task: str, blocks: list[str]) -> list[str]:
    if task == "sst2":
        return [b.rsplit("\t", 1)[0].strip() for b in blocks]
    return [" ".join(line.split()[0] for line in b.splitlines() if line.strip()) for b in blocks]


def quality(args, work: Path, vocab: Path) -> dict:
    """Dev metric of the teacher and, per seed, of the direct and the distilled students."""
    train_file, dev_file, metric, _, _ = TASKS[args.task]
    header, train_blocks = examples_of(args.task, DATA / train_file)
    unlabeled = work / ("unlabeled" + Path(train_file).suffix)
    if args.unlabeled_text:  # one text per line, in the task's format (CoNLL: words split off punctuation, tag O)
        texts = Path(args.unlabeled_text).read_text(encoding="utf-8").splitlines()[: args.n_unlabeled]
        if args.task == "sst2":
            blocks = [t.replace("\t", " ").strip() + "\t0\n" for t in texts if t.strip()]
        else:
            words = (re.findall(r"\w+|[^\w\s]", t) for t in texts)
            blocks = ["".join(f"{w} O\n" for w in ws) + "\n" for ws in words if ws]
    else:  # the training rows after --n-train, labels ignored
        blocks = train_blocks[args.n_train : args.n_train + args.n_unlabeled]
    unlabeled.write_text(header + "".join(blocks), "utf-8")
    data = ["--task", args.task, "--train", DATA / train_file, "--dev", DATA / dev_file]
    data += ["--max-train-examples", args.n_train, "--max-eval-examples", args.n_dev, "--quiet"]
    common = ["--epochs", args.epochs, "--batch-size", args.batch_size, "--max-seq-length", args.max_seq_length]
    common += ["--precision", args.precision]
    teacher_init = Path(args.teacher_init) if args.teacher_init else random_init(work / "t0", args.teacher, vocab)
    student_init = Path(args.student_init) if args.student_init else random_init(work / "s0", args.student, vocab)
    teacher = Path(args.teacher_dir) if args.teacher_dir else work / "teacher"
    if not args.teacher_dir:
        t0 = time.perf_counter()
        cli("finetune", *data, *common, "--model", teacher_init, "--output", teacher, "--lr", args.teacher_lr)
        print(f"teacher fine-tuned in {time.perf_counter() - t0:.0f} s", flush=True)
    runs: dict[str, list[float]] = {"student, labels only": [], "distilled": [], "distilled + unlabeled": []}
    for seed in range(args.seeds):
        flags = [*common, "--lr", args.student_lr, "--seed", seed]
        direct, distilled, more = (work / f"{name}-{seed}" for name in ("direct", "distilled", "unlabeled"))
        cli("finetune", *data, *flags, "--model", student_init, "--output", direct)
        spec = ["--teacher", teacher, "--student", student_init, "--alpha", args.alpha, "--temperature", args.t]
        spec += ["--intermediate", args.intermediate] if args.intermediate else []
        cli("distill", *data, *flags, *spec, "--output", distilled)
        if args.n_unlabeled:
            cli("distill", *data, *flags, *spec, "--output", more, "--unlabeled", unlabeled)
        for name, out in zip(runs, (direct, distilled, more)):
            if (out / "metrics.json").is_file():
                runs[name].append(json.loads((out / "metrics.json").read_text())[metric])
        print(f"seed {seed}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in runs.items() if v), flush=True)
    best = json.loads((teacher / "metrics.json").read_text())[metric]
    table = {"teacher": {metric: best, "kept": 1.0}}
    for name, values in runs.items():
        if values:
            med = statistics.median(values)
            table[name] = {metric: med, "kept": med / best if best else float("nan"), "seeds": values}
    return {"table": table, "teacher": str(teacher), "distilled": str(work / "distilled-0")}


def pipeline_paths(name: str, directory: Path, texts: list[str], args, work: Path) -> dict:
    """name fp32 / int8 / onnx fp32 / onnx int8 -> a callable running the predict pipeline over ``texts``."""
    from bertkit.pipelines import load_pipeline

    method = TASKS[args.task][3]
    paths = {}
    for q in (None, "int8"):
        pipe = load_pipeline(directory, precision="fp32", quantize=q, batch_size=args.batch_size)
        paths[f"{name} {q or 'fp32'}"] = (lambda p: lambda: getattr(p, method)(texts))(pipe)
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return paths
    from bertkit.export import export_onnx

    onnx_dir = work / f"{name}-onnx"
    shutil.copytree(directory, onnx_dir, dirs_exist_ok=True)
    for q in (None, "int8"):
        export_onnx(onnx_dir, onnx_dir / ("model.int8.onnx" if q else "model.onnx"), quantize=q, check=False)
        pipe = load_pipeline(onnx_dir, precision="fp32", quantize=q, batch_size=args.batch_size, backend="onnx")
        paths[f"{name} onnx {q or 'fp32'}"] = (lambda p: lambda: getattr(p, method)(texts))(pipe)
    return paths


def server_rate(directory: Path, texts: list[str], args, quantize: str | None) -> float:
    """Sentences/s of ``bertkit serve`` answering one sentence per request from ``--clients`` threads."""
    cmd = [sys.executable, "-m", "bertkit.cli", "serve", "--model", directory, "--port", args.port]
    cmd += ["--log-level", "warning", "--precision", "fp32"] + (["--quantize", quantize] if quantize else [])
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"bertkit serve {directory} did not start") from None
                time.sleep(0.5)
        route, queue, lock = TASKS[args.task][4], list(texts), threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    text = queue.pop()
                body = json.dumps({"inputs": text}).encode()
                req = urllib.request.Request(url + route, data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=300) as r:
                    r.read()

        start = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(texts) / (time.perf_counter() - start)
    finally:
        proc.terminate()
        proc.wait(30)


def speed(args, teacher: Path, student: Path, work: Path) -> dict:
    _, dev_file, _, _, _ = TASKS[args.task]
    texts = sentences(args.task, examples_of(args.task, DATA / dev_file)[1])[: args.n_speed]
    paths = {
        **pipeline_paths("teacher", teacher, texts, args, work),
        **pipeline_paths("student", student, texts, args, work),
    }
    seconds, _ = measure(paths, len(texts), args.repeats)
    rates = {name: len(texts) / s for name, s in seconds.items()}
    if args.clients:
        for q in (None, "int8"):
            for name, directory in (("teacher", teacher), ("student", student)):
                rates[f"{name} serve {q or 'fp32'}"] = server_rate(directory, texts, args, q)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=tuple(TASKS), default="sst2")
    parser.add_argument("--teacher", default="bert-mini", help="the teacher's preset (random initialisation)")
    parser.add_argument("--student", default="bert-tiny", help="the student's preset (random initialisation)")
    parser.add_argument("--teacher-init", help="a pre-trained teacher directory instead of --teacher")
    parser.add_argument("--student-init", help="a pre-trained student directory instead of --student")
    parser.add_argument("--teacher-dir", help="an already fine-tuned teacher (skips fine-tuning one)")
    parser.add_argument("--n-train", type=int, default=20000, help="labelled training examples")
    parser.add_argument("--n-unlabeled", type=int, default=40000, help="the next training examples, labels dropped")
    parser.add_argument(
        "--unlabeled-text", help="unlabeled text instead (one per line; its first --n-unlabeled), e.g. book sentences"
    )
    parser.add_argument("--n-dev", type=int, default=0, help="dev examples (0 = all)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--teacher-lr", type=float, default=1e-4)
    parser.add_argument("--student-lr", type=float, default=3e-4)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--t", type=float, default=2.0, help="distillation temperature")
    parser.add_argument("--precision", default="auto", help="training precision (fp32 on a CPU slow at bf16)")
    parser.add_argument("--intermediate", help="hidden | attention | both: the distilled students' intermediate loss")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-speed", type=int, default=0, help="dev sentences timed (0 = all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8, help="concurrent server clients (0 = no server figures)")
    parser.add_argument("--port", type=int, default=8431)
    parser.add_argument(
        "--speed-only", metavar="STUDENT", help="only the speed figures, of --teacher-dir and this student"
    )
    parser.add_argument("--keep", help="keep the models in this folder (default: a temporary one)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--data", default=str(DATA), help="the shared data folder (default ../shared/data)")
    args = parser.parse_args()
    data = Path(args.data)
    globals()["DATA"] = data
    vocab = data / "vocab/bert-base-uncased/vocab.txt"
    if not vocab.is_file():
        sys.exit(f"{data} is absent: this benchmark needs the shared data and vocabulary")
    args.n_speed = args.n_speed or None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.speed_only:
            if not args.teacher_dir:
                sys.exit("--speed-only needs --teacher-dir")
            result = {"table": {}, "teacher": args.teacher_dir, "distilled": args.speed_only}
        else:
            result = quality(args, work, vocab)
        rates = speed(args, Path(result["teacher"]), Path(result["distilled"]), work)
    metric = TASKS[args.task][2]
    print(
        f"\n{args.task}: {args.teacher_dir or args.teacher_init or args.teacher} teacher, "
        f"{args.student_init or args.student} student"
    )
    print(f"{'model':26s} {metric:>9s} {'kept':>7s}")
    for name, row in result["table"].items():
        print(f"{name:26s} {row[metric]:9.4f} {row['kept']:7.1%}")
    print(f"\n{'path':26s} {'sentences/s':>12s} {'student / teacher':>18s}")
    for name, rate in rates.items():
        twin = rates.get(name.replace("student", "teacher")) if name.startswith("student") else None
        print(f"{name:26s} {rate:12.1f} " + (f"{rate / twin:17.2f}x" if twin else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **result, "rates": rates}, indent=1))


if __name__ == "__main__":
    main()
