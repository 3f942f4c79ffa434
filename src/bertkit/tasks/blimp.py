"""BLiMP (Warstadt et al., 2020) on a masked LM, scored as BabyLM scores it: pseudo-log-likelihood (PLL).

Definition (docs/experiments.md, "BLiMP"), the one ``minicons``' ``MaskedLMScorer`` computes
(tests/parity/test_blimp_parity.py holds the two to 1e-4):

- a sentence is tokenized with the model directory's tokenizer as ``[CLS] s [SEP]``;
- **original** PLL (Salazar et al., 2020): each real token (not [CLS], [SEP] or padding) is replaced by [MASK] in
  its own copy of the sentence; the log-softmax over the vocabulary (fp32) of the original token at that position
  is summed over the sentence;
- **word-l2r** PLL (Kauf & Ivanova, 2023; minicons' ``within_word_l2r``): as original, but a copy also masks the
  later pieces of the same word (the word ids of the tokenizer's pre-tokenization), so a word's first piece cannot
  be read off its own continuation;
- a pair is right when the good sentence scores strictly higher than the bad one (``ties="wrong"``, the default: a
  model that scores everything alike gets 0, not 50); BabyLM's evaluation counts a tie as right (``ties="correct"``:
  its harness takes the first of equal log-likelihoods, the good sentence), so ``tie_rate`` says how many pairs tie;
- a paradigm's accuracy is its share of right pairs; a field's, the mean of its paradigms'; **overall**, the mean
  over the paradigms (67 in BLiMP), all in percent.

Speed: the masked copies of every distinct sentence are cut into length-sorted batches
(:func:`bertkit.runtime.batch_loop`), the encoder runs once per batch, and the MLM head (transform + decoder) runs
only at each copy's one scored position, never over [B, T, V].

    paradigms = read_blimp("data/blimp", pairs_per_paradigm=100)
    scorer = PllScorer.from_pretrained("runs/my-bert")
    result = evaluate_blimp(scorer.sentence_scores, paradigms)   # BlimpResult: overall, fields, paradigms (percent)

:class:`BlimpProbe` is the same figure on a fixed, seeded sample, for a pre-training loop to call.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import models
from bertkit.batches import plan_batches
from bertkit.config import read_model_config, reads_next_token
from bertkit.data.tasks.readers import jsonl_records, open_text
from bertkit.errors import InputError, MissingFileError
from bertkit.files import write_json, write_text
from bertkit.modeldir import ModelDir
from bertkit.precision import resolve_precision
from bertkit.runtime import batch_loop
from bertkit.training.interrupt import Interrupted

log = logging.getLogger(__name__)

PLL_METHODS = ("original", "word-l2r")  # minicons' PLL_metric "original" and "within_word_l2r"
FIELDS = ("sentence_good", "sentence_bad", "field", "UID")  # what each JSONL row must carry
TIES = ("wrong", "correct")  # a pair whose two sentences score alike: bertkit's rule, BabyLM's
LONG_SENTENCE = 128  # tokens: a longer sentence's PLL (one copy per token, each as long) is said to be slow


# ------------------------------------------------------------------------------------------------------ the data


@dataclass
class Paradigm:
    """One BLiMP paradigm (one JSONL file): its ``UID``, its ``field`` and its (good, bad) sentence pairs; ``path``
    and ``lines`` (each pair's line in it) name where a pair came from, when it was read from a file."""

    uid: str
    field: str
    pairs: list[tuple[str, str]]
    path: Path | None = None
    lines: list[int] = field(default_factory=list, repr=False)

    def where(self, i: int) -> str:
        """``FILE:LINE`` of pair ``i`` (the UID and the pair's index when it was not read from a file)."""
        return f"{self.path}:{self.lines[i]}" if self.path is not None and self.lines else f"{self.uid} pair {i}"


def read_paradigm(path: str | os.PathLike, limit: int | None = None) -> Paradigm:
    """The pairs of one BLiMP JSONL file (the first ``limit``; None: all). A row that is not a JSON object with
    string ``sentence_good``, ``sentence_bad``, ``field`` and ``UID`` (the same UID and field as the file's first
    row) is an InputError naming the file and line; blank lines are skipped."""
    path = Path(path)
    pairs: list[tuple[str, str]] = []
    lines: list[int] = []
    uid = kind = None
    # the task readers' open_text: a byte that is not UTF-8 or a NUL names file and line; a pipe or a device (a link
    # to /dev/zero) is refused before it is read
    with open_text(path) as f:
        for lineno, row in jsonl_records(f):  # the JSONL readers' one first step (bad JSON, deep nesting, non-objects)
            if limit is not None and len(pairs) >= limit:
                break
            if isinstance(row, str):
                raise InputError(f"{path}:{lineno}: {row} (each line: a JSON object with {', '.join(FIELDS)})")
            for name in FIELDS:
                if not isinstance(row.get(name), str) or not row[name].strip():
                    what = "no" if name not in row else "an empty or non-string"
                    raise InputError(f"{path}:{lineno}: {what} {name!r} field")
            if uid is None:
                uid, kind = row["UID"], row["field"]
            elif (row["UID"], row["field"]) != (uid, kind):
                raise InputError(
                    f"{path}:{lineno}: UID {row['UID']!r} / field {row['field']!r} differ from the file's first row "
                    f"({uid!r} / {kind!r}): one paradigm per file"
                )
            pairs.append((row["sentence_good"], row["sentence_bad"]))
            lines.append(lineno)
    if not pairs:
        raise InputError(f"{path}: no pairs (an empty BLiMP file)")
    return Paradigm(uid, kind, pairs, path, lines)


def read_blimp(directory: str | os.PathLike, pairs_per_paradigm: int | None = None) -> list[Paradigm]:
    """Every ``*.jsonl`` paradigm of a BLiMP directory, by file name (the first ``pairs_per_paradigm`` pairs of
    each; None: all). A missing directory, one without JSONL files or two files of one UID is an InputError."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MissingFileError(f"{directory}: not a directory (expected BLiMP's <UID>.jsonl files)")
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise InputError(f"{directory}: no *.jsonl files (expected BLiMP's <UID>.jsonl files)")
    paradigms = [read_paradigm(p, pairs_per_paradigm) for p in files]
    seen: dict[str, Path] = {}
    for path, paradigm in zip(files, paradigms):
        if paradigm.uid in seen:
            raise InputError(f"{path}: UID {paradigm.uid!r} is also {seen[paradigm.uid].name}'s")
        seen[paradigm.uid] = path
    return paradigms


def sample_paradigms(paradigms: Sequence[Paradigm], per_paradigm: int, seed: int = 0) -> list[Paradigm]:
    """A fixed sample of ``per_paradigm`` pairs of each paradigm (all of a smaller one), in file order; the same
    ``seed`` gives the same pairs."""
    rng = random.Random(seed)
    out = []
    for p in paradigms:
        keep = sorted(rng.sample(range(len(p.pairs)), min(per_paradigm, len(p.pairs))))
        lines = [p.lines[i] for i in keep] if p.lines else []
        out.append(Paradigm(p.uid, p.field, [p.pairs[i] for i in keep], p.path, lines))
    return out


def check_pairs(paradigms: Sequence[Paradigm], tokenizer: Any, max_length: int | None, flag: str = "") -> int:
    """Refuse, before any scoring, a sentence of ``paradigms`` that tokenizes to nothing (zero-width spaces, control
    characters: it would score 0.0 and tie) or to more tokens than the model's ``max_length`` positions: an
    InputError naming ``flag`` (``--blimp`` in pre-training), the file and the line. Says (a warning) when the
    longest sentence makes pseudo-log-likelihood slow: one copy per token, each as long, so its cost grows with the
    square of its length. Returns the longest sentence's tokens."""
    where = {}
    for p in paradigms:
        for i, pair in enumerate(p.pairs):
            for s in pair:
                where.setdefault(s, p.where(i))
    sentences = list(where)
    if not sentences:
        return 0
    encodings = tokenizer.encode_batch(sentences, truncation=False)
    special = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    prefix = f"{flag} " if flag else ""
    longest = 0
    for s, e in zip(sentences, encodings):
        if not any(t not in special for t in e.ids):
            raise InputError(
                f"{prefix}{where[s]}: the sentence {s[:60]!r} tokenizes to nothing (no token but [CLS] and [SEP]): "
                "it has no pseudo-log-likelihood to compare"
            )
        if max_length and len(e.ids) > max_length:
            raise InputError(
                f"{prefix}{where[s]}: a sentence of {len(e.ids)} tokens is longer than the model's {max_length} "
                f"positions: {s[:60]!r}..."
            )
        if len(e.ids) > longest:
            longest, slowest = len(e.ids), s
    if longest > LONG_SENTENCE:
        log.warning(
            f"bertkit: {prefix}{where[slowest]}: a sentence of {longest} tokens; its pseudo-log-likelihood runs "
            f"{longest - 2} masked copies of {longest} tokens (the cost grows with the square of the length)"
        )
    return longest


# ------------------------------------------------------------------------------------------------ the scorer


@dataclass
class MaskedCopies:
    """The masked copies of S tokenized sentences: ``ids`` [S, T] (padded), ``lengths`` [S], ``words`` [S, T]
    (word id of each token, -1 for specials and padding), and per copy C: ``sentence`` [C], ``position`` [C] (the
    scored token) and ``target`` [C] (its original id). Copies run sentence by sentence, left to right."""

    ids: np.ndarray
    lengths: np.ndarray
    words: np.ndarray
    sentence: np.ndarray
    position: np.ndarray
    target: np.ndarray

    def __len__(self) -> int:
        return len(self.sentence)


@dataclass
class PllScorer:
    """Pseudo-log-likelihood of sentences under ``model`` (any registered architecture's masked LM: its encoder
    ``models.encoder_of(model)`` and ``model.mlm_head_module()``) with ``tokenizer``.

    ``pll``: one of :data:`PLL_METHODS`. ``batch_size``: masked copies per forward pass. ``precision``: the
    encoder's (``auto`` resolved for the device); the MLM head and the log-softmax run in fp32 always. ``stop``:
    asked between batches (a training run's signal or spent budget); True abandons the scoring with
    :class:`Stopped`."""

    model: Any
    tokenizer: Any
    pll: str = "original"
    batch_size: int = 256
    precision: str = "fp32"
    device: str = "cpu"
    max_length: int | None = None  # the longest sentence the model takes (its position table), tokens
    progress: bool = False
    stop: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        if self.pll not in PLL_METHODS:
            raise InputError(f"--pll must be one of {', '.join(PLL_METHODS)}, got {self.pll!r}")
        if self.tokenizer.mask_token_id is None:
            raise InputError("the tokenizer has no [MASK] token: pseudo-log-likelihood needs one")
        self.precision = resolve_precision(self.precision, self.device)  # "auto" -> what the device runs

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike, device: str = "cpu", precision: str = "fp32", **options: Any
    ) -> PllScorer:
        """The scorer of a model directory with an MLM head (BERT's ``BertForPreTraining`` / ``BertForMaskedLM``,
        ModernBERT's ``ModernBertForMaskedLM``, an ELECTRA run's ``generator/``) and its tokenizer. A directory
        whose checkpoint has no MLM head is an InputError naming it. ``directory`` may be a
        :class:`bertkit.modeldir.ModelDir` (read once)."""
        if not Path(directory).is_dir():
            raise MissingFileError(f"{directory}: not a model directory (expected config.json, weights, vocabulary)")
        directory = ModelDir.open(directory)
        arch = models.of_directory(directory)
        model_class = arch.model_class(arch.features_role, directory)  # the encoder with its MLM head
        model, info = model_class.from_pretrained(directory, output_loading_info=True)
        missing = [k for k in info.initialised if k.startswith(arch.mlm_keys)]
        if missing:
            raise InputError(
                f"{directory}: the checkpoint has no masked-LM head ({missing[0]} is absent): BLiMP's "
                "pseudo-log-likelihood needs one (a pre-trained directory, or an ELECTRA run's generator/)"
            )
        tokenizer = directory.tokenizer()
        limit = getattr(model.config, "max_position_embeddings", None)
        return cls(model.to(device).eval(), tokenizer, device=device, precision=precision, max_length=limit, **options)

    def copies(self, sentences: Sequence[str]) -> MaskedCopies:
        """Tokenize ``sentences`` and lay out their masked copies (one per real token)."""
        tok = self.tokenizer
        encodings = tok.encode_batch(list(sentences), truncation=False) if sentences else []
        lengths = np.array([len(e.ids) for e in encodings], dtype=np.int64)
        if self.max_length and len(lengths) and lengths.max() > self.max_length:
            i = int(lengths.argmax())
            raise InputError(
                f"a sentence of {lengths[i]} tokens is longer than the model's {self.max_length} positions: "
                f"{sentences[i][:80]!r}"
            )
        longest = int(lengths.max()) if len(lengths) else 0
        ids = np.full((len(encodings), longest), tok.pad_token_id, dtype=np.int64)
        words = np.full((len(encodings), longest), -1, dtype=np.int64)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            words[i, : len(e.ids)] = [-1 if w is None else w for w in e.word_ids]
        inside = np.arange(longest)[None, :] < lengths[:, None]
        # minicons scores every token but these three ids (its get_masked_tensors), so this does too
        real = inside & ~np.isin(ids, [tok.cls_token_id, tok.sep_token_id, tok.pad_token_id])
        sentence, position = np.nonzero(real)  # row-major: sentence by sentence, left to right
        return MaskedCopies(ids, lengths, words, sentence, position, ids[sentence, position])

    def _masked_inputs(self, copies: MaskedCopies, batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids [B, T], attention_mask [B, T]) of the copies ``batch``: T is the batch's longest sentence."""
        rows, pos = copies.sentence[batch], copies.position[batch]
        width = int(copies.lengths[rows].max())
        ids = copies.ids[rows, :width].copy()
        cols = np.arange(width)[None, :]
        masked = cols == pos[:, None]
        if self.pll == "word-l2r":  # the later pieces of the scored token's word too (minicons' within_word_l2r)
            words = copies.words[rows, :width]
            word = words[np.arange(len(batch)), pos][:, None]
            masked |= (words == word) & (word >= 0) & (cols > pos[:, None])
        ids[masked] = self.tokenizer.mask_token_id
        attention = (cols < copies.lengths[rows][:, None]).astype(np.int64)
        return torch.from_numpy(ids), torch.from_numpy(attention)

    def token_log_probs(self, copies: MaskedCopies) -> np.ndarray:
        """[C] float32: log p(original token | its masked copy) of every copy, in copy order."""
        encoder = models.encoder_of(self.model)
        head = self.model.mlm_head_module()
        if any(p.dtype != torch.float32 for p in head.parameters()):  # a bf16-weight model (a CPU run's MasterWeights)
            head = copy.deepcopy(head).float()  # its head in fp32, as the scores need (a copy: training holds it)
        device = torch.device(self.device)
        out = np.zeros(len(copies), dtype=np.float32)
        lengths = copies.lengths[copies.sentence].tolist()
        shift = 1 if reads_next_token(self.model.config) else 0  # mntp: a [MASK] at j is answered at j - 1

        def run(batch: list[int]) -> torch.Tensor:
            index = np.asarray(batch)
            ids, attention = self._masked_inputs(copies, index)
            hidden = encoder(input_ids=ids.to(device), attention_mask=attention.to(device)).last_hidden_state
            read = torch.from_numpy(copies.position[index] - shift).to(device)  # the scored token's logits' place
            rows = hidden[torch.arange(len(index), device=device), read]
            # the MLM head (transform, decoder) at the scored positions only, [B, V], and in fp32 whatever the
            # encoder's precision: bf16 logits moved sentence scores 10x more and flipped 0.7% of BLiMP's pairs
            with torch.autocast(device.type, enabled=False):
                log_probs = torch.log_softmax(head(rows.float()), -1)
            target = torch.from_numpy(copies.target[index]).to(device)
            return log_probs.gather(1, target[:, None]).squeeze(1).cpu()

        was_training = self.model.training
        self.model.eval()
        try:
            for batch, scores in batch_loop(
                lengths,
                run,
                self.batch_size,
                device=device,
                precision=self.precision,
                progress=self.progress,
                desc="BLiMP",
                unit="copy",
            ):
                out[batch] = scores.numpy()
                if self.stop is not None and self.stop():
                    raise Stopped("the scoring was stopped between two batches")
        finally:
            self.model.train(was_training)
        return out

    def sums(self, copies: MaskedCopies) -> np.ndarray:
        """[S] float64: the PLL of each sentence of ``copies`` (its tokens' log-probabilities summed)."""
        scores = np.zeros(len(copies.lengths), dtype=np.float64)
        np.add.at(scores, copies.sentence, self.token_log_probs(copies).astype(np.float64))
        return scores

    def sentence_scores(self, sentences: Sequence[str]) -> np.ndarray:
        """[S] float64: the PLL of each sentence."""
        return self.sums(self.copies(sentences))


class Stopped(Exception):  # noqa: N818 (what happened, as Interrupted says)
    """A :class:`PllScorer` whose ``stop`` said so between two batches: its scores are abandoned."""


def _score_part(job: tuple) -> np.ndarray:
    """One worker process of :func:`scores_in_processes`: its own model, ``threads`` torch threads, its sentences."""
    directory, sentences, threads, options = job
    torch.set_num_threads(threads)
    return PllScorer.from_pretrained(directory, **options).sentence_scores(sentences)


def scores_in_processes(
    directory: str | os.PathLike, sentences: Sequence[str], workers: int, threads: int = 1, **options: Any
) -> np.ndarray:
    """[S] float64: each sentence's PLL under the model of ``directory``, scored by ``workers`` processes of
    ``threads`` threads each (``options``: :meth:`PllScorer.from_pretrained`'s). The sentences are dealt to the
    workers by length, so each gets the same mix of short and long; a copy's score does not depend on its batch in
    fp32, so the scores are those of one process. On a CPU whose kernels scale badly across threads for some shapes
    (bf16 on a 2-core EPYC, BENCHMARKS.md "BLiMP"), two one-thread processes beat one two-thread process."""
    import multiprocessing

    workers = min(workers, len(sentences))  # never a worker without a sentence to score
    if workers <= 1:
        return _score_part((directory, sentences, threads, options))
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    parts = [order[w::workers] for w in range(workers)]
    jobs = [(str(directory), [sentences[i] for i in part], threads, options) for part in parts]
    # SIGTERM ends the workers too (they outlived a killed parent): handled from before the workers exist (a
    # signal between the pool's start and the handler killed the command with the workers left running)
    with _terminated_as_interrupt():
        pool = multiprocessing.get_context("spawn").Pool(workers)  # a fresh interpreter: no forked torch state
        try:
            results = pool.map(_score_part, jobs)
            pool.close()  # the workers end on their own (terminate() would leave their semaphores to the tracker)
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
    scores = np.zeros(len(sentences), dtype=np.float64)
    for part, result in zip(parts, results):
        scores[part] = result
    return scores


class _terminated_as_interrupt:  # noqa: N801 (a context manager, named for what it does)
    """Inside it (main thread), SIGTERM raises ``Interrupted`` (exit 143), so that the ``except`` around a pool ends
    its workers as Ctrl-C's KeyboardInterrupt does; the handler before it comes back after."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._raise)

    @staticmethod
    def _raise(signum, frame) -> None:  # noqa: ARG004
        raise Interrupted("stopped on SIGTERM while scoring; the worker processes were ended", signum)

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


# ------------------------------------------------------------------------------------------------ the figures


@dataclass
class BlimpResult:
    """Accuracies in percent: ``paradigms`` {UID: %}, ``fields`` {field: mean of its paradigms}, ``overall`` (the
    mean over paradigms); ``pairs`` scored; ``scores`` per paradigm, its pairs' (good, bad) PLLs; ``ties``: the
    rule a tie was scored by, ``tie_rate``: the share of tied pairs in percent, ``{"overall": mean over paradigms,
    "paradigms": {UID: %}}``."""

    overall: float
    fields: dict[str, float]
    paradigms: dict[str, float]
    pairs: int
    scores: dict[str, list[tuple[float, float]]] = field(default_factory=dict, repr=False)
    ties: str = "wrong"
    tie_rate: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Any]:
        figures = {"overall": self.overall, "fields": self.fields, "paradigms": self.paradigms, "pairs": self.pairs}
        return {**figures, "ties": self.ties, "tie_rate": self.tie_rate}


def pair_right(good: float, bad: float, ties: str = "wrong") -> bool:
    """A pair is right when the good sentence scores higher; a tie is wrong (``ties="wrong"``, bertkit's rule) or
    right (``"correct"``, BabyLM's)."""
    return good > bad or (ties == "correct" and good == bad)


# BLiMP's own files spell one field two ways: principle_A_case_2 says "syntax/semantics", its 13 fellows
# "syntax_semantics"; the paper's four fields are one field each here
FIELD_SPELLINGS = {"syntax/semantics": "syntax_semantics"}


def field_of(paradigm: Paradigm) -> str:
    """The paradigm's field as the report counts it: its own spelling, or :data:`FIELD_SPELLINGS`' for it."""
    return FIELD_SPELLINGS.get(paradigm.field, paradigm.field)


def summarize(paradigms: Sequence[Paradigm], scores: dict[str, float], ties: str = "wrong") -> BlimpResult:
    """The figures of ``paradigms`` from each sentence's PLL (``scores``: sentence -> PLL), a tie scored by
    ``ties`` (one of :data:`TIES`)."""
    if ties not in TIES:
        raise InputError(f"--ties must be one of {', '.join(TIES)}, got {ties!r}")
    if not paradigms:
        raise InputError("no BLiMP paradigms to score")
    per: dict[str, float] = {}
    tied: dict[str, float] = {}
    by_field: dict[str, list[float]] = {}
    kept: dict[str, list[tuple[float, float]]] = {}
    for p in paradigms:
        pairs = [(scores[g], scores[b]) for g, b in p.pairs]
        per[p.uid] = 100.0 * sum(pair_right(g, b, ties) for g, b in pairs) / len(pairs)
        tied[p.uid] = 100.0 * sum(g == b for g, b in pairs) / len(pairs)
        by_field.setdefault(field_of(p), []).append(per[p.uid])
        kept[p.uid] = pairs
    fields = {f: float(np.mean(v)) for f, v in sorted(by_field.items())}
    overall = float(np.mean(list(per.values())))
    tie_rate = {"overall": float(np.mean(list(tied.values()))), "paradigms": tied}
    return BlimpResult(overall, fields, per, sum(len(p.pairs) for p in paradigms), kept, ties, tie_rate)


def distinct_sentences(paradigms: Sequence[Paradigm]) -> list[str]:
    """Every sentence of ``paradigms``' pairs once, in order of first appearance (BLiMP repeats sentences)."""
    return list(dict.fromkeys(s for p in paradigms for pair in p.pairs for s in pair))


def evaluate_blimp(
    score: Callable[[list[str]], np.ndarray], paradigms: Sequence[Paradigm], ties: str = "wrong"
) -> BlimpResult:
    """Score every distinct sentence of ``paradigms`` once with ``score`` (sentences -> their PLLs: a
    :class:`PllScorer`'s ``sentence_scores``, or :func:`scores_in_processes` over a directory), then the figures
    (a tie scored by ``ties``)."""
    sentences = distinct_sentences(paradigms)
    return summarize(paradigms, dict(zip(sentences, score(sentences).tolist())), ties)


def model_limits(directory: str | os.PathLike) -> tuple[Any, int | None]:
    """(tokenizer, positions) of a model directory, without loading its weights: what :func:`check_pairs` needs
    before the scoring starts; a :class:`bertkit.modeldir.ModelDir` keeps them for :meth:`PllScorer.from_pretrained`."""
    directory = ModelDir.open(directory)
    return directory.tokenizer(), read_model_config(directory).get("max_position_embeddings")


def table(result: BlimpResult, paradigms: Sequence[Paradigm]) -> str:
    """The figures as a plain-text table: each paradigm (by field), each field, then overall."""
    width = max([len(p.uid) for p in paradigms] + [len("overall")])
    lines = [f"{'paradigm':<{width}}  {'field':<22} {'pairs':>6} {'acc %':>7}"]
    for p in sorted(paradigms, key=lambda p: (field_of(p), p.uid)):
        lines.append(f"{p.uid:<{width}}  {field_of(p):<22} {len(p.pairs):>6} {result.paradigms[p.uid]:>7.2f}")
    lines.append("")
    for name, value in result.fields.items():
        count = sum(field_of(p) == name for p in paradigms)
        lines.append(f"{'field: ' + name:<{width}}  {f'{count} paradigms':<22} {'':>6} {value:>7.2f}")
    lines.append(f"{'overall':<{width}}  {f'{len(paradigms)} paradigms':<22} {result.pairs:>6} {result.overall:>7.2f}")
    return "\n".join(lines)


def write_results(output: str | os.PathLike, result: BlimpResult, paradigms: Sequence[Paradigm], record: dict) -> None:
    """``OUTPUT/metrics.json`` (the figures and ``record``: how they were computed) and ``OUTPUT/pairs.jsonl`` (per
    pair: UID, index in its paradigm, the two sentences, their PLLs, right or not), each written atomically."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    write_json(output / "metrics.json", {**result.metrics(), **record})
    rows = []
    for p in paradigms:
        for i, ((good, bad), (g, b)) in enumerate(zip(p.pairs, result.scores[p.uid])):
            row = {"UID": p.uid, "pair": i, "sentence_good": good, "sentence_bad": bad, "good": g, "bad": b}
            rows.append(json.dumps({**row, "right": pair_right(g, b, result.ties)}))
    write_text(output / "pairs.jsonl", "\n".join(rows) + "\n")


# ------------------------------------------------------------------------------------------------ the probe


class BlimpProbe:
    """BLiMP during pre-training: a fixed, seeded sample of ``pairs_per_paradigm`` pairs of each paradigm of a
    BLiMP directory (or of paradigms already read), tokenized once; ``probe(model)`` is the overall accuracy
    (percent) of the model as it is now, by the same scorer as ``bertkit evaluate --task blimp`` (in eval mode; the
    model's mode comes back after).

        probe = BlimpProbe("data/blimp", tokenizer, pairs_per_paradigm=20)
        percent = probe(model)                      # a masked LM of any registered architecture
    """

    def __init__(
        self,
        blimp: str | os.PathLike | Sequence[Paradigm],
        tokenizer: Any,
        pairs_per_paradigm: int = 20,
        seed: int = 0,
        pll: str = "original",
        batch_size: int = 256,
        max_length: int | None = None,
        flag: str = "",
    ):
        paradigms = read_blimp(blimp) if isinstance(blimp, (str, os.PathLike)) else blimp  # a directory, or read
        self.paradigms = sample_paradigms(paradigms, pairs_per_paradigm, seed)
        self.pairs = sum(len(p.pairs) for p in self.paradigms)  # in the sample, all paradigms
        self.sentences = distinct_sentences(self.paradigms)
        check_pairs(self.paradigms, tokenizer, max_length, flag)  # before training, naming the flag, file and line
        self._options = dict(tokenizer=tokenizer, pll=pll, batch_size=batch_size, max_length=max_length)
        self._copies = PllScorer(model=None, **self._options).copies(self.sentences)

    def result(self, model: Any, precision: str = "fp32", stop: Callable[[], bool] | None = None) -> BlimpResult:
        """Every figure of the sample (see :class:`BlimpResult`) for ``model`` on its own device; ``stop`` (asked
        between batches) abandons it with :class:`Stopped`."""
        device = str(next(model.parameters()).device)
        scorer = PllScorer(model=model, precision=precision, device=device, stop=stop, **self._options)
        return summarize(self.paradigms, dict(zip(self.sentences, scorer.sums(self._copies).tolist())))

    def __call__(self, model: Any, precision: str = "fp32", stop: Callable[[], bool] | None = None) -> float:
        return self.result(model, precision, stop).overall

    def seconds(self, model: Any, precision: str = "fp32", batches: int = 2) -> float:
        """An estimate of one probe's seconds on ``model`` (what ``--max-time`` sets aside for each): its first
        ``batches`` batches (the longest) timed, scaled by the padded tokens of all of them, after one untimed batch
        (a model's first call pays for lazy initialisation and kernel choice: on an H200 its seconds, scaled up,
        set aside 90 s of a 4-minute budget for a probe that took 6)."""
        widths = self._copies.lengths[self._copies.sentence]
        plan = plan_batches(widths.tolist(), self._options["batch_size"])
        tokens = [len(b) * int(widths[b].max()) for b in plan]

        def run(n: int) -> int:  # the probe's first n batches (fewer where it has fewer): how many ran
            done = [0]

            def enough() -> bool:
                done[0] += 1
                return done[0] >= n

            try:
                self.result(model, precision, stop=enough)
            except Stopped:
                pass
            return done[0]

        run(1)
        t0 = time.perf_counter()
        done = run(batches)
        return (time.perf_counter() - t0) * sum(tokens) / max(1, sum(tokens[:done]))
