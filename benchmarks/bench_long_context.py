"""Long context on CPU: the peak memory of embedding one document of 1k, 2k, 4k and 8k tokens with a ModernBERT
(128-token sliding windows in two layers of three, global attention in the third), bertkit's ``Encoder.encode``
against transformers' ``ModernBertModel`` on the same weights, and whether each grows linearly with length.

Each (side, length) runs in a fresh process: load the model, embed a 16-token text (kernels warmed), reset the
process's peak resident memory (``/proc/self/clear_refs``), embed the document (fp32, inference mode, mean pooling),
and report the peak above the loaded model (VmHWM - VmRSS before) and the seconds. The sides alternate per length.

bertkit: ``Encoder.encode`` (tokenisation, batching, pooling included); its local layers take the blocked O(T * W)
path past 4 windows and its global layers run SDPA without a mask (one unpadded document), so no [T, T] matrix
exists. transformers: ``ModernBertModel`` (sdpa) on the same token ids, masked mean computed here; its sliding
window is a dense [T, T] mask.

Growth: the peak at 8k over the peak at 4k (and 2k over 1k): about 2x per doubling is linear, about 4x quadratic.

    .venv/bin/python benchmarks/bench_long_context.py                       # modernbert-mini, 1 thread
    .venv/bin/python benchmarks/bench_long_context.py --preset modernbert-tiny --lengths 1024,2048
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIDES = ("bertkit", "transformers")


def make_model_dir(directory: Path, preset: str, words: int) -> None:
    """A random ModernBERT of ``preset`` (8192 positions, window 128) with a WordPiece vocabulary of ``words`` whole
    words, saved by bertkit (transformers reads the same directory)."""
    import torch

    from bertkit.modeling_modernbert import ModernBertConfig, ModernBertModel

    vocab = SPECIALS + [f"w{i}" for i in range(words)]
    config = ModernBertConfig.from_preset(
        preset,
        vocab_size=len(vocab),
        pad_token_id=0,
        cls_token_id=2,
        sep_token_id=3,
        bos_token_id=2,
        eos_token_id=3,
        max_position_embeddings=8192,
        local_attention=128,
    )
    torch.manual_seed(0)
    ModernBertModel(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")


def document(n_tokens: int, words: int, seed: int = 0) -> str:
    """A text of ``n_tokens`` tokens with [CLS] and [SEP] (each word one token)."""
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(words)}" for _ in range(n_tokens - 2))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def one(side: str, directory: Path, length: int, words: int) -> None:
    """In its own process: load ``side``'s model, warm it, reset the peak, embed the document; print a JSON line."""
    import torch

    from bertkit.features import Encoder

    encoder = Encoder.from_pretrained(directory, precision="fp32")
    text = document(length, words)
    if side == "bertkit":

        def embed(t: str):
            return encoder.encode([t], layers=-1, pooling="mean", max_length=length)
    else:
        import transformers

        model = transformers.ModernBertModel.from_pretrained(directory, attn_implementation="sdpa").eval()

        def embed(t: str):
            ids = torch.tensor([encoder.tokenizer.encode(t, max_length=length).ids])
            with torch.inference_mode():
                hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            return hidden.mean(1).numpy()

    embed(document(16, words, seed=1))  # kernels warmed at a tiny size
    with open("/proc/self/clear_refs", "w") as f:  # Linux: reset the peak (VmHWM) to the current RSS
        f.write("5")
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    vector = embed(text)
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM") - before
    print(
        json.dumps(
            {
                "side": side,
                "length": length,
                "seconds": seconds,
                "peak_kib": peak,
                "norm": float((vector**2).sum()) ** 0.5,
            }
        ),
        flush=True,
    )


def growth(peaks: dict[int, int]) -> str:
    """Peak ratio per doubling of the length, and the verdict (linear: about 2x; quadratic: about 4x)."""
    lengths = sorted(peaks)
    steps = [(a, b, peaks[b] / max(peaks[a], 1)) for a, b in zip(lengths, lengths[1:])]
    per_doubling = [r ** (1 / max(1e-9, math.log2(b / a))) for a, b, r in steps]
    worst = max(per_doubling) if per_doubling else float("nan")
    verdict = "linear" if worst < 2.8 else "quadratic" if worst > 3.4 else "between linear and quadratic"
    return ", ".join(f"{a}->{b}: {r:.2f}x" for a, b, r in steps) + f"; worst per doubling {worst:.2f}x: {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="modernbert-mini")
    parser.add_argument("--lengths", type=lambda t: [int(x) for x in t.split(",")], default=[1024, 2048, 4096, 8192])
    parser.add_argument("--words", type=int, default=2000, help="vocabulary words (each one token)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--sides", default=",".join(SIDES), help="bertkit,transformers")
    parser.add_argument("--one", nargs=3, metavar=("SIDE", "DIR", "LENGTH"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        import torch

        torch.set_num_threads(args.threads)
        side, directory, length = args.one
        return one(side, Path(directory), int(length), args.words)
    sides = [s for s in args.sides.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "model"
        make_model_dir(directory, args.preset, args.words)
        import torch

        print(
            f"{args.preset}, 8192 positions, window 128, fp32, {args.threads} thread(s), torch {torch.__version__}; "
            "each (side, length) in a fresh process; peak = resident memory above the loaded model"
        )
        results: dict[str, dict[int, dict]] = {s: {} for s in sides}
        for length in args.lengths:
            for side in sides:  # alternating per length
                cmd = [
                    sys.executable,
                    __file__,
                    "--one",
                    side,
                    str(directory),
                    str(length),
                    "--words",
                    str(args.words),
                    "--threads",
                    str(args.threads),
                ]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                results[side][length] = r
                print(
                    f"  {side:>12} {length:>5} tokens: {r['seconds']:7.2f} s, peak {r['peak_kib'] / 1024:7.1f} MiB "
                    f"({r['peak_kib'] / length:5.1f} KiB/token)",
                    flush=True,
                )
        for side in sides:
            print(f"{side} growth: " + growth({n: r["peak_kib"] for n, r in results[side].items()}))
        if len(sides) == 2 and args.lengths:
            n = max(args.lengths)
            a, b = results[sides[1]][n]["peak_kib"], results[sides[0]][n]["peak_kib"]
            print(f"at {n} tokens: {sides[1]} peak / {sides[0]} peak = {a / max(b, 1):.2f}x")


if __name__ == "__main__":
    main()
