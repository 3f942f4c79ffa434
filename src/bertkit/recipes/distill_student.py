"""Distillation's student (``--student``): every K-th layer of the teacher (DistilBERT's initialisation), a random
preset of either architecture over the teacher's vocabulary, or a pre-trained directory that tokenizes as the
teacher does. The distillation itself is :mod:`bertkit.recipes.distill`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torch import nn

from bertkit import models
from bertkit.errors import InputError
from bertkit.tokenization.vocab import load_tokenizer_json


def build_student(spec: str, teacher: nn.Module, task, tokenizer, teacher_dir: str | Path) -> nn.Module:
    """The student of ``--student``: ``layers:K`` (every K-th layer of the teacher, starting with the first, with its
    embeddings and head: DistilBERT's initialisation), a preset name (``bert-*`` or ``modernbert-*``, random, the
    teacher's vocabulary) or a pre-trained directory with the teacher's vocabulary (its head initialised)."""
    if spec.startswith("layers:"):
        return _every_kth_layer(teacher, spec)
    presets = models.preset_names()
    if spec in presets:
        return _from_preset(spec, teacher, task, tokenizer)
    directory = Path(spec)
    if not directory.is_dir():
        raise InputError(f"--student {spec}: neither a directory, nor layers:K, nor a preset ({', '.join(presets)})")
    _check_same_vocabulary(directory, Path(teacher_dir))
    try:
        student = task.load_model(directory, finetuned=False)
    except FileNotFoundError as e:  # a directory without weights
        raise InputError(f"--student {spec}: {e}") from None
    if student.config.vocab_size < len(tokenizer):
        raise InputError(
            f"--student {spec}: {student.config.vocab_size} embeddings, the teacher's vocabulary has {len(tokenizer)}"
        )
    return student


def _every_kth_layer(teacher: nn.Module, spec: str) -> nn.Module:
    """The teacher with only its layers 0, K, 2K...: same widths, embeddings and head, copied weights."""
    try:
        k = int(spec.split(":", 1)[1])
    except ValueError:
        k = 0
    depth = teacher.config.num_hidden_layers
    if not 1 <= k <= depth:
        raise InputError(f"--student {spec}: K must be an integer in 1..{depth} (the teacher's layers)")
    kept = list(range(0, depth, k))
    changes: dict[str, Any] = {"num_hidden_layers": len(kept)}
    if getattr(teacher.config, "layer_types", None) is not None:  # ModernBERT: each kept layer keeps its attention
        changes["layer_types"] = [teacher.config.layer_types[i] for i in kept]
    student = type(teacher)(dataclasses.replace(teacher.config, **changes))
    renumber = {old: new for new, old in enumerate(kept)}
    weights = {}
    for key, value in teacher.state_dict().items():
        match = models.LAYER_KEY.search(key)
        if match is None:
            weights[key] = value.clone()
        elif int(match.group(1)) in renumber:
            weights[key[: match.start(1)] + str(renumber[int(match.group(1))]) + key[match.end(1) :]] = value.clone()
    student.load_state_dict(weights, strict=True)
    return student


def _from_preset(name: str, teacher: nn.Module, task, tokenizer) -> nn.Module:
    """A random student of preset ``name`` over the teacher's vocabulary, with the task's head."""
    config = teacher.config
    sizes: dict[str, Any] = dict(vocab_size=config.vocab_size, pad_token_id=tokenizer.pad_token_id)
    sizes.update(task.model_overrides())
    sizes["max_position_embeddings"] = config.max_position_embeddings
    arch = models.of_preset(name)
    sizes.update({key: getattr(tokenizer, attr) for key, attr in arch.special_ids.items()})  # the teacher's ids
    if "token_type_ids" in arch.inputs:  # segment embeddings: as many types as the teacher's
        sizes["type_vocab_size"] = getattr(config, "type_vocab_size", 2)
    return arch.model_class(models.ROLES[task.head])(arch.config_class().from_preset(name, **sizes))


def _vocabulary(directory: Path) -> list[str] | None:
    """The tokens of a model directory's vocab.txt or tokenizer.json, in id order (None when it has neither)."""
    if (directory / "vocab.txt").is_file():
        return [t.rstrip("\r") for t in (directory / "vocab.txt").read_text(encoding="utf-8").split("\n") if t]
    if (directory / "tokenizer.json").is_file():
        vocab, _ = load_tokenizer_json(directory / "tokenizer.json")
        return sorted(vocab, key=vocab.__getitem__)
    return None


def _check_same_vocabulary(student_dir: Path, teacher_dir: Path) -> None:
    """A student directory must tokenize as the teacher does: the same tokens with the same ids."""
    tokens, teacher_tokens = _vocabulary(student_dir), _vocabulary(teacher_dir)
    if tokens is None:
        raise InputError(f"--student {student_dir}: no vocab.txt or tokenizer.json")
    if tokens != teacher_tokens:
        differ = next((i for i, (a, b) in enumerate(zip(tokens, teacher_tokens or [])) if a != b), None)
        where = (
            f"id {differ} is {tokens[differ]!r} there, {teacher_tokens[differ]!r} in the teacher's"
            if differ is not None
            else f"{len(tokens)} tokens against the teacher's {len(teacher_tokens or [])}"
        )
        raise InputError(
            f"--student {student_dir}: its vocabulary differs from the teacher's ({where}); a student must share "
            "the teacher's vocabulary"
        )
