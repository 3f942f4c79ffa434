"""``bertkit evaluate --task sts|retrieval``: score a sentence-embedding model (any BERT directory).

bertkit evaluate --task sts --model runs/simcse --data STS-B/dev.tsv
bertkit evaluate --task retrieval --model runs/pairs --data beir/scifact --split test
bertkit evaluate --task sts --model runs/my-bert --data dev.tsv --pooling mean --layers -1   # a raw model
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bertkit.embeddings.data import read_scored
from bertkit.errors import InputError
from bertkit.files import write_json
from bertkit.options import device_option, model_option, option, precision_option

POOLINGS = ("mean", "max", "mean_max", "cls", "cls_pooled", "first", "sep")


@dataclass(frozen=True, kw_only=True)
class EmbeddingEvalArgs:
    """What ``bertkit evaluate --task sts|retrieval`` reads and writes."""

    task: str = option(
        None,
        choices=("sts", "retrieval"),
        required=True,
        help="sts: Pearson / Spearman x 100 of the cosine; retrieval: BEIR folder, exact search",
    )
    model: str = model_option("bertkit, Hugging Face or sentence-transformers BERT directory")
    data: str = option(
        None,
        required=True,
        help="sts: (sentence1, sentence2, score) file, STS-B's GLUE file "
        "included; retrieval: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)",
    )
    output: str | None = option(None, help="where metrics.json goes (default: MODEL/eval-<data name>)")
    split: str = option("test", help="retrieval: the qrels file qrels/SPLIT.tsv")
    run_file: str | None = option(
        None,
        metavar="PATH",
        help="retrieval: also write the ranking as a TREC run file "
        "(qid Q0 docid rank score tag; the top 100 per judged query), for trec_eval, "
        "pytrec_eval or ir_measures",
    )
    batch_size: int = option(64)
    pooling: str | None = option(
        None,
        choices=POOLINGS,
        help="override the model's pooling (default: the saved one; layer -2 mean for a raw BERT)",
        group="encoding",
    )
    layers: str | None = option(None, help="override the layers, comma-separated (e.g. -1)", group="encoding")
    max_seq_length: int | None = option(None, help="tokens per text (default: the model's)", group="encoding")
    text_column: str | None = option(None, help="sts: first-sentence column (default sentence1)", group="data")
    pair_column: str | None = option(None, help="sts: second-sentence column (default sentence2)", group="data")
    label_column: str | None = option(None, help="sts: score column (default score)", group="data")
    data_format: str | None = option(
        None,
        flag="--format",
        choices=("csv", "tsv", "jsonl"),
        group="data",
        help="sts file format (default: from the extension)",
    )
    skip_bad_rows: bool = option(False, help="skip and count malformed rows", group="data")
    device: str | None = device_option()
    precision: str = precision_option()

    def __post_init__(self) -> None:
        if self.run_file and self.task != "retrieval":
            raise InputError("--run-file is for --task retrieval (a TREC run file is a ranking)")


CONFIG = EmbeddingEvalArgs


def run(cfg: EmbeddingEvalArgs) -> int:
    # torch: kept out of `bertkit evaluate --task sts -h`
    from bertkit.embeddings.evaluate import read_beir, retrieval_metrics, sts_metrics
    from bertkit.features import Encoder
    from bertkit.precision import resolve_device
    from bertkit.training.rundir import run_record

    options = {}
    if cfg.pooling:
        options["pooling"] = cfg.pooling
    if cfg.layers:
        options["layers"] = [x.strip() for x in cfg.layers.split(",") if x.strip()]
    if cfg.max_seq_length:
        options["max_length"] = cfg.max_seq_length
    try:
        encoder = Encoder.from_pretrained(cfg.model, device=resolve_device(cfg.device), precision=cfg.precision)
        if cfg.task == "sts":
            data = read_scored(
                cfg.data, cfg.text_column, cfg.pair_column, cfg.label_column, cfg.data_format, cfg.skip_bad_rows
            )
            metrics = sts_metrics(encoder, data, cfg.batch_size, **options)
        else:
            data = read_beir(cfg.data, cfg.split, cfg.skip_bad_rows)
            metrics = retrieval_metrics(encoder, data, cfg.batch_size, run_file=cfg.run_file, **options)
    except (FileNotFoundError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
    spec = encoder.spec(options.get("layers"), options.get("pooling"))
    metrics["encoding"] = {"layers": list(spec.layers), "pooling": spec.pooling, "normalize": spec.normalize}
    output = Path(cfg.output or Path(cfg.model) / f"eval-{Path(cfg.data).stem or Path(cfg.data).name}")
    output.mkdir(parents=True, exist_ok=True)
    if cfg.run_file:
        metrics["run_file"] = str(cfg.run_file)
    backend = "onnxruntime" if encoder.backend == "onnx" else "pytorch"
    metrics.update(run_record(encoder.precision, encoder.device, backend))
    write_json(output / "metrics.json", {"task": cfg.task, "data": cfg.data, **metrics})
    print(json.dumps({"output": str(output), "task": cfg.task, **metrics}, sort_keys=True))
    return 0
