"""``bertkit fill-mask --model DIR "text with [MASK]"``: the top-k predictions for each [MASK], with probabilities."""

from __future__ import annotations

import argparse
import sys

MASK = "[MASK]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR", help="a model directory (bertkit or Hugging Face "
                                                                      "layout) with vocab.txt")
    parser.add_argument("text", nargs="+", help='texts holding [MASK], e.g. "the [MASK] sat on the mat ."')
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object per text")


def encode_with_masks(tokenizer, text: str) -> list[int]:
    """[CLS] pieces [SEP], where every literal ``[MASK]`` in ``text`` becomes the mask id (whatever the casing)."""
    pieces = text.split(MASK)
    ids = [tokenizer.cls_token_id]
    for i, piece in enumerate(pieces):
        if i:
            ids.append(tokenizer.mask_token_id)
        ids.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(piece)) if piece.strip() else [])
    ids.append(tokenizer.sep_token_id)
    return ids


def fill_mask(model, tokenizer, texts: list[str], top_k: int = 5) -> list[list[list[tuple[str, float]]]]:
    """For each text, for each [MASK] in order, the ``top_k`` (token, probability) pairs."""
    import torch

    results = []
    max_len = model.config.max_position_embeddings
    for text in texts:
        ids = encode_with_masks(tokenizer, text)
        if len(ids) > max_len:
            raise ValueError(f"the text is {len(ids)} tokens long; the model takes at most {max_len}")
        with torch.no_grad():
            out = model(torch.tensor([ids]))
        logits = out.logits if hasattr(out, "logits") and out.logits is not None else out.prediction_logits
        probs = logits[0].float().softmax(-1)
        per_mask = []
        for pos in [i for i, t in enumerate(ids) if t == tokenizer.mask_token_id]:
            p, idx = probs[pos].topk(min(top_k, probs.size(-1)))
            per_mask.append([(tokenizer.convert_ids_to_tokens(int(i)), float(v)) for v, i in zip(p, idx)])
        results.append(per_mask)
    return results


def load(model_dir: str):
    from bertkit.modeling import BertForMaskedLM
    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(model_dir)
    model = BertForMaskedLM.from_pretrained(model_dir).eval()
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"{model_dir}: vocab.txt has {len(tokenizer)} tokens but the model has "
                         f"{model.config.vocab_size}")
    return model, tokenizer


def print_predictions(texts: list[str], results, as_json: bool = False, file=None) -> None:
    import json

    file = sys.stdout if file is None else file

    for text, per_mask in zip(texts, results):
        if as_json:
            print(json.dumps({"text": text, "predictions": [[{"token": t, "probability": round(p, 5)} for t, p in m]
                                                            for m in per_mask]}), file=file)
            continue
        print(text, file=file)
        for n, preds in enumerate(per_mask, 1):
            label = f"  [MASK] #{n}: " if len(per_mask) > 1 else "  "
            print(label + "   ".join(f"{t} {p:.1%}" for t, p in preds), file=file)


def run(args: argparse.Namespace) -> int:
    if args.top_k < 1:
        print("bertkit fill-mask: error: --top-k must be >= 1", file=sys.stderr)
        return 2
    missing = [t for t in args.text if MASK not in t]
    if missing:
        print(f"bertkit fill-mask: error: no [MASK] in {missing[0]!r}", file=sys.stderr)
        return 2
    try:
        model, tokenizer = load(args.model)
        results = fill_mask(model, tokenizer, args.text, args.top_k)
    except (OSError, ValueError) as e:
        print(f"bertkit fill-mask: error: {e}", file=sys.stderr)
        return 2
    print_predictions(args.text, results, args.json)
    return 0
