"""Sentence embedding throughput: ``bertkit.Encoder`` vs the route a ``transformers`` user would write.

Both sides embed the same SST-2 sentences end to end (tokenize, run the model, masked mean over the last layer) with
the same random-initialised bert-base-shaped model (built once with ``transformers``, saved, and loaded by both).

    transformers route: BertTokenizerFast + BertModel, batches of 32 in input order, padding per batch,
                        torch.no_grad, fp32, masked mean of last_hidden_state
    bertkit route:      Encoder.from_pretrained(dir).encode(sentences, layers=-1, pooling="mean")
                        (length-sorted batches under a token budget, layers up to the requested one, no pooler,
                        inference_mode, bf16 autocast where the CPU has native bf16)

Runs alternate (transformers, bertkit, transformers, ...) and the medians and their ratio are printed, plus the
agreement of the two outputs (cosine similarity per sentence).

    .venv/bin/python benchmarks/bench_features.py --n 256 --repeats 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def load_sentences(path: Path, n: int) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].strip() for line in lines[:n]]


def build_model_dir(directory: Path, vocab: Path, layers: int, hidden: int, heads: int, seed: int) -> None:
    import torch
    import transformers

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


def transformers_route(model_dir: Path, sentences: list[str], batch_size: int = 32):
    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)  # reads vocab.txt (lowercasing default)
    model = transformers.BertModel.from_pretrained(model_dir).eval()

    def run():
        out = []
        with torch.no_grad():
            for start in range(0, len(sentences), batch_size):
                batch = tokenizer(
                    sentences[start : start + batch_size],
                    padding=True,
                    truncation=True,
                    max_length=512,
                    return_tensors="pt",
                )
                hidden = model(**batch).last_hidden_state  # [B, T, H]
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                out.append((hidden * mask).sum(1) / mask.sum(1))
        return torch.cat(out).numpy()

    return run


def bertkit_route(model_dir: Path, sentences: list[str], precision: str, batch_size: int, max_batch_tokens: int):
    from bertkit import Encoder

    encoder = Encoder.from_pretrained(model_dir, precision=precision)

    def run():
        return encoder.encode(
            sentences,
            layers=-1,
            pooling="mean",
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            show_progress=False,
        )

    return run, encoder.precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA / "glue" / "SST-2" / "train.tsv")
    parser.add_argument("--vocab", type=Path, default=DATA / "vocab" / "bert-base-uncased" / "vocab.txt")
    parser.add_argument("--n", type=int, default=256, help="number of sentences (from the top of the file)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--precision", default="auto", help="bertkit precision: auto | bf16 | fp32")
    parser.add_argument("--batch-size", type=int, default=128, help="bertkit: inputs per batch (at most)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384, help="bertkit: padded tokens per batch")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences = load_sentences(args.data, args.n)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        build_model_dir(model_dir, args.vocab, args.layers, args.hidden, args.heads, seed=0)
        hf_run = transformers_route(model_dir, sentences)
        bk_run, precision = bertkit_route(model_dir, sentences, args.precision, args.batch_size, args.max_batch_tokens)
        print(
            f"{len(sentences)} sentences from {args.data.name}; model {args.layers}x{args.hidden} (random); "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads; bertkit precision {precision}"
        )
        hf_out, bk_out = hf_run(), bk_run()  # warm-up (and the outputs compared below)
        cos = (hf_out * bk_out).sum(1) / (np.linalg.norm(hf_out, axis=1) * np.linalg.norm(bk_out, axis=1))
        print(f"agreement: cosine(transformers, bertkit) min {cos.min():.5f}, median {np.median(cos):.5f}")
        times: dict[str, list[float]] = {"transformers": [], "bertkit": []}
        for r in range(args.repeats):
            for name, fn in (("transformers", hf_run), ("bertkit", bk_run)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
                print(f"  run {r + 1} {name:12s} {len(sentences) / times[name][-1]:8.1f} sentences/s")
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in ("transformers", "bertkit"):
        print(f"{name:12s} median {med[name]:.2f} s = {len(sentences) / med[name]:.1f} sentences/s")
    print(f"ratio bertkit / transformers: {med['transformers'] / med['bertkit']:.2f}x sentences/s")


if __name__ == "__main__":
    main()
