"""``bertkit pretrain``: MLM + NSP pre-training from raw text (also under ``torchrun --nproc_per_node N``).

Its config is ``PretrainConfig`` (``bertkit.recipes.pretrain``), whose fields are the flags: a flag's default and help
live there once. ``run`` resolves it once (the recipe's choices, printed by the run) and checks what only the resolved
run shows (``--config-override`` against the architecture's config, OUTPUT against the inputs) before training.
"""

from __future__ import annotations

from bertkit.errors import InputError
from bertkit.outputs import check_output
from bertkit.recipes.pretrain.config import PretrainConfig

CONFIG = PretrainConfig
DESCRIPTION = (
    "Pre-train BERT (masked LM, and next-sentence prediction with the paper's recipe) on your text files. OUTPUT "
    "ends as a model directory (config.json, model.safetensors, vocab.txt) that bertkit and transformers load; "
    "checkpoints go to OUTPUT/checkpoints and metrics to OUTPUT/metrics.jsonl. SIGTERM or Ctrl-C saves a "
    "checkpoint first. Run it under torchrun for DistributedDataParallel."
)


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


def resolved(config: PretrainConfig) -> PretrainConfig:
    """The run's config resolved once (the recipe's model and choices filled in: ``resolve``), and checked where only
    the resolved run shows a fault: the overrides against its architecture and sequence lengths, OUTPUT against its
    inputs."""
    # the library loads when the command runs, not for its -h
    from bertkit.recipes.pretrain import longest_sequence, resolve

    cfg = resolve(config)
    check_overrides(cfg.config_overrides, cfg.arch, cfg.model_size, cfg.init_from, longest_sequence(cfg))
    # OUTPUT inside a corpus directory would be read back as corpus by the next run, and one holding an input would
    # be cleared by --overwrite: refused as every command's output is (an existing run is RunDir.open's to judge)
    inputs = {"--corpus": cfg.corpus, "--vocab": cfg.vocab, "--init-from": cfg.init_from, "--blimp": cfg.blimp}
    check_output(cfg.output, inputs, overwrite=None)
    return cfg


def run(config: PretrainConfig) -> int:
    # the library loads when the command runs, not for its -h
    from bertkit.recipes.pretrain import pretrain

    try:
        pretrain(resolved(config))
    except (ValueError, FileNotFoundError) as e:  # raised below the recipe by code that does not know the run
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
    return 0
