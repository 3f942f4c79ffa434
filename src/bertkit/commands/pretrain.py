"""``bertkit pretrain``: MLM + NSP pre-training from raw text (also under ``torchrun --nproc_per_node N``).

The flags are built from ``PretrainConfig``'s fields (``bertkit.options``): a flag's default and help live there once.
"""

from __future__ import annotations

import argparse
import json

from bertkit.errors import InputError
from bertkit.outputs import check_output


def configure(parser: argparse.ArgumentParser) -> None:
    # the library loads when the command runs, not for its -h
    from bertkit.options import add_options
    from bertkit.recipes.pretrain import PretrainConfig

    parser.description = (
        "Pre-train BERT (masked LM, and next-sentence prediction with the paper's recipe) on your text files. OUTPUT "
        "ends as a model directory (config.json, model.safetensors, vocab.txt) that bertkit and transformers load; "
        "checkpoints go to OUTPUT/checkpoints and metrics to OUTPUT/metrics.jsonl. SIGTERM or Ctrl-C saves a "
        "checkpoint first. Run it under torchrun for DistributedDataParallel."
    )
    groups = add_options(parser, PretrainConfig)
    data, model = groups["data"], groups["model and objectives"]
    case = data.add_mutually_exclusive_group()
    case.add_argument(
        "--lowercase",
        dest="lowercase",
        action="store_true",
        default=None,
        help="uncased (default for a trained vocabulary)",
    )
    case.add_argument("--cased", dest="lowercase", action="store_false", help="keep case")
    nsp = model.add_mutually_exclusive_group()
    nsp.add_argument(
        "--nsp",
        dest="nsp",
        action="store_true",
        default=None,
        help="next-sentence prediction on [CLS] A [SEP] B [SEP] pairs (paper)",
    )
    nsp.add_argument("--no-nsp", dest="nsp", action="store_false", help="MLM only, on full packed sequences")
    model.add_argument(
        "--config-override",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a BertConfig field, e.g. num_hidden_layers=2 (repeatable; value read as JSON)",
    )


def parse_overrides(items: list[str]) -> dict:
    """``["k=v", ...]`` -> {k: JSON value, or the string when it is not JSON}."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--config-override {item!r}: expected KEY=VALUE")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
        except RecursionError:  # '[' x 100,000: the parser recurses once per level
            raise InputError(f"--config-override {key.strip()}: the value nests too deeply to be read") from None
    return overrides


def check_overrides(
    overrides: dict, arch: str, model_size: str, init_from: str | None, longest: int | None = None
) -> None:
    """Refuse (one line naming it) an override that is not a field of the architecture's config, or a value the
    config refuses, or ``max_position_embeddings`` shorter than the ``longest`` sequence the run feeds the model,
    before anything is read or built."""
    import dataclasses
    import difflib

    if not overrides:
        return
    # the library loads when the command runs, not for its -h
    from bertkit import models

    config_class = models.get(arch).config_class()
    model_size = models.get(arch).preset(model_size)
    names = [f.name for f in dataclasses.fields(config_class) if f.init]
    for key in overrides:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; the fields: {', '.join(names)}"
            raise InputError(f"--config-override {key}: not a {config_class.__name__} field{hint}")
    positions = overrides.get("max_position_embeddings")
    if isinstance(positions, int) and longest is not None and positions < longest:
        raise InputError(
            f"--config-override max_position_embeddings={positions}: the run feeds the model sequences of "
            f"{longest} tokens (--seq-len, --seq-ramp, --phase2-seq-len); give at least {longest}"
        )
    if init_from is None:
        try:
            config_class.from_preset(model_size, **overrides)
        except (TypeError, ValueError) as e:
            if isinstance(e, InputError):  # the config's own check: it names the field
                raise InputError(f"--config-override: {e}") from None
            culprit = [key for key in overrides if _refused_alone(config_class, model_size, key, overrides[key])]
            raise InputError(f"--config-override {', '.join(culprit[:1] or overrides)}: {e}") from None


def _refused_alone(config_class, model_size: str, key: str, value) -> bool:
    """Whether the preset refuses ``key=value`` on its own (to name the override a bare TypeError is about)."""
    try:
        config_class.from_preset(model_size, **{key: value})
    except (TypeError, ValueError):
        return True
    return False


def config_from_args(args: argparse.Namespace):
    """The run's config, validated and resolved once (the recipe's model and choices filled in: ``resolve``)."""
    # the library loads when the command runs, not for its -h
    from bertkit.options import from_args
    from bertkit.recipes.pretrain import PretrainConfig, check_given, longest_sequence, resolve

    overrides = parse_overrides(args.config_overrides)
    check_given(args)  # the flags as given, before a config is made (its own checks read --init-from's directory)
    cfg = resolve(from_args(PretrainConfig, args, config_overrides=overrides))
    check_overrides(overrides, cfg.arch, cfg.model_size, cfg.init_from, longest_sequence(cfg))
    # OUTPUT inside a corpus directory would be read back as corpus by the next run, and one holding an input would
    # be cleared by --overwrite: refused as every command's output is (an existing run is RunDir.open's to judge)
    inputs = {"--corpus": cfg.corpus, "--vocab": cfg.vocab, "--init-from": cfg.init_from, "--blimp": cfg.blimp}
    check_output(cfg.output, inputs, overwrite=None)
    return cfg


def run(args: argparse.Namespace) -> int:
    # the library loads when the command runs, not for its -h
    from bertkit.recipes.pretrain import pretrain

    try:
        pretrain(config_from_args(args))
    except (ValueError, FileNotFoundError) as e:  # raised below the recipe by code that does not know the run
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
    return 0
