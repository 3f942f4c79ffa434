"""``bertkit distill`` on tiny models and the fine-tuning fixtures: every task family learns from its teacher alone
(``--alpha 1``: no gold label reaches the loss) to agree with it better than a constant predictor does; unlabeled text
is used; the students of ``layers:K``, a preset and a directory; BERT and ModernBERT; a run stopped by SIGTERM and
resumed equals an uninterrupted one; the student loads in transformers with identical logits; bad input is one line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from tinymodels import FINETUNE_FIXTURES as FT
from tinymodels import FINETUNE_VOCAB, make_model_dir, read_vocab
from tinymodernbert import make_modernbert_dir

from bertkit.cli import main
from bertkit.tasks import LABEL_KEYS, get_task
from bertkit.tasks.options import load_model
from bertkit.tokenization import load_tokenizer

FAST = ["--batch-size", "8", "--lr", "3e-3", "--quiet", "--precision", "fp32", "--threads", "1"]
FAMILIES = {  # task: (train, dev)
    "sst2": ("sst2_train.tsv", "sst2_dev.tsv"),
    "stsb": ("stsb_train.tsv", "stsb_dev.tsv"),
    "conll2003": ("conll_train.txt", "conll_dev.txt"),
    "squad": ("squad_train.json", "squad_dev.json"),
    "swag": ("swag_train.csv", "swag_dev.csv"),
}


def _finetune(task: str, base: Path, out: Path, epochs: int = 12, dev: bool = True) -> Path:
    """A teacher: with ``dev``, its best dev checkpoint; else its last (fitted to the training set)."""
    train, dev_file = FAMILIES[task]
    argv = ["finetune", "--task", task, "--model", str(base), "--train", str(FT / train)]
    argv += ["--dev", str(FT / dev_file)] if dev else []
    assert main([*argv, "--output", str(out), "--epochs", str(epochs), *FAST]) == 0
    return out


def _distill(teacher: Path, student: str, out: Path, *extra: str, dev: bool = True) -> int:
    train, dev_file = FAMILIES[json.loads((teacher / "finetune_config.json").read_text())["task"]]
    argv = [
        "distill",
        "--teacher",
        str(teacher),
        "--student",
        student,
        "--output",
        str(out),
        "--train",
        str(FT / train),
    ]
    argv += ["--dev", str(FT / dev_file)] if dev else []
    return main([*argv, "--epochs", "12", *FAST, *extra])


def _outputs(task_name: str, model_dir: Path):
    """The model's raw dev outputs in one padded batch, and the batch."""
    task = get_task(task_name)
    model = load_model(task, model_dir, finetuned=True).eval()
    features = task.featurize(task.read(FT / FAMILIES[task_name][1]), load_tokenizer(model_dir))
    batch = {k: v for k, v in task.collate(features).items() if k not in LABEL_KEYS}
    with torch.no_grad():
        return model(**batch), batch


def _decisions(out, batch) -> torch.Tensor:
    """What the model decides: classes, choices, tags of real tokens, or answer start and end positions."""
    mask = batch["attention_mask"].bool()
    if getattr(out, "start_logits", None) is not None:
        low = torch.finfo(out.start_logits.dtype).min
        return torch.cat([out.start_logits.masked_fill(~mask, low), out.end_logits.masked_fill(~mask, low)]).argmax(-1)
    return out.logits.argmax(-1)[mask] if out.logits.dim() == 3 else out.logits.argmax(-1)


def _losses(out: Path) -> list[float]:
    return [r["train_loss"] for r in json.loads((out / "train_log.json").read_text())["history"]]


@pytest.fixture(scope="module")
def base(tiny_dir) -> Path:
    return tiny_dir


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A random 1-layer pre-trained directory with the teachers' vocabulary: a student that starts knowing nothing."""
    return make_model_dir(tmp_path_factory.mktemp("small"), FINETUNE_VOCAB, layers=1, max_position_embeddings=128)


@pytest.fixture(scope="module")
def sst2_teacher(base, tmp_path_factory) -> Path:
    return _finetune("sst2", base, tmp_path_factory.mktemp("sst2"), epochs=20)


@pytest.mark.parametrize("task", sorted(FAMILIES))
def test_each_family_learns_from_the_teacher_alone(task, base, small, sst2_teacher, tmp_path):
    # regression: the last teacher, whose scores spread (the best dev one of this fixture is an early, flat one)
    teacher = sst2_teacher if task == "sst2" else _finetune(task, base, tmp_path / "t", dev=task != "stsb")
    student = tmp_path / "student"
    assert _distill(teacher, str(small), student, "--alpha", "1", "--temperature", "1", dev=task != "stsb") == 0
    (t, batch), (s, _) = _outputs(task, teacher), _outputs(task, student)
    if task == "stsb":  # regression (no dev: the last student): its scores follow the teacher's
        assert (
            torch.corrcoef(torch.stack([t.logits.view(-1), s.logits.view(-1)]))[0, 1] > 0.4
        )  # a random student: about 0
        return
    losses = _losses(student)
    assert losses[-1] < 0.7 * losses[0]  # the distance to the teacher falls (a running mean)
    teacher_says, student_says = _decisions(t, batch), _decisions(s, batch)
    constant = torch.bincount(teacher_says).max().item() / len(teacher_says)  # the best constant's agreement
    assert (teacher_says == student_says).float().mean().item() > constant
    written = {p.name for p in student.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.txt", "finetune_config.json", "metrics.json"} <= written


def test_sst2_student_beats_the_constant_predictor(small, sst2_teacher, tmp_path):
    """On gold dev labels the student (which saw none in its loss) beats predicting the majority class."""
    assert _distill(sst2_teacher, str(small), tmp_path / "s", "--alpha", "1", "--temperature", "1") == 0
    gold = [line.split("\t")[1].strip() for line in (FT / "sst2_dev.tsv").read_text().splitlines()[1:] if line]
    majority = max(gold.count(label) for label in set(gold)) / len(gold)
    assert json.loads((tmp_path / "s" / "metrics.json").read_text())["accuracy"] > majority


def test_unlabeled_text_is_labelled_by_the_teacher(small, sst2_teacher, tmp_path):
    out = tmp_path / "s"
    extra = ["--max-train-examples", "8", "--unlabeled", str(FT / "sst2_train.tsv"), str(FT / "sst2_dev.tsv")]
    assert _distill(sst2_teacher, str(small), out, *extra) == 0
    log = json.loads((out / "train_log.json").read_text())
    n_train, n_dev = (len((FT / f).read_text().strip().splitlines()) - 1 for f in FAMILIES["sst2"])
    assert log["train_examples"] == 8 + n_train + n_dev
    assert _losses(out)[-1] < 0.7 * _losses(out)[0]


def test_every_kth_layer_copies_the_teachers_layers(base, tmp_path):
    teacher = _finetune("sst2", make_model_dir(tmp_path / "b4", FINETUNE_VOCAB, layers=4), tmp_path / "t", epochs=1)
    out = tmp_path / "s"
    assert _distill(teacher, "layers:2", out, "--max-steps", "1", "--lr", "1e-9", "--warmup-fraction", "0") == 0
    from safetensors.torch import load_file

    t, s = load_file(str(teacher / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    for student_layer, teacher_layer in ((0, 0), (1, 2)):
        key = "bert.encoder.layer.{}.attention.self.query.weight"
        torch.testing.assert_close(s[key.format(student_layer)], t[key.format(teacher_layer)], atol=1e-6, rtol=0)
    torch.testing.assert_close(s["classifier.weight"], t["classifier.weight"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("intermediate", ["hidden", "attention", "both"])
def test_intermediate_losses_train_a_narrower_student(sst2_teacher, tmp_path, intermediate):
    """hidden 16 against the teacher's 32: the learned projections train with the student and stay out of its
    directory."""
    narrow = make_model_dir(
        tmp_path / "n", FINETUNE_VOCAB, layers=1, max_position_embeddings=128, hidden_size=16, num_attention_heads=2
    )
    out = tmp_path / "s"
    assert _distill(sst2_teacher, str(narrow), out, "--intermediate", intermediate, "--epochs", "4") == 0
    assert _losses(out)[-1] < _losses(out)[0]
    from safetensors.torch import load_file

    assert not [k for k in load_file(str(out / "model.safetensors")) if "projection" in k]


def test_modernbert_teacher_and_students(tmp_path):
    """A ModernBERT teacher taught to a ModernBERT preset, to its own every-other layer, and to a BERT student."""
    vocab = read_vocab(FINETUNE_VOCAB)
    base = make_modernbert_dir(tmp_path / "mb", vocab, num_hidden_layers=4)
    teacher = _finetune("sst2", base, tmp_path / "teacher", epochs=6)
    bert = make_model_dir(tmp_path / "bert", FINETUNE_VOCAB, layers=1, max_position_embeddings=128)
    for student in ("modernbert-tiny", "layers:2", str(bert)):
        out = tmp_path / student.replace(":", "").replace("/", "_")
        assert _distill(teacher, student, out, "--epochs", "3", "--intermediate", "hidden") == 0
        assert _losses(out)[-1] < _losses(out)[0]
        model_type = json.loads((out / "config.json").read_text())["model_type"]
        assert model_type == ("bert" if student == str(bert) else "modernbert")
        _outputs("sst2", out)  # loads as a fine-tuned model


def test_sigterm_then_resume_equals_an_uninterrupted_run(small, sst2_teacher, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    import bertkit.recipes.finetune as recipe

    extra = ["--epochs", "3", "--eval-every", "5", "--intermediate", "hidden"]
    assert _distill(sst2_teacher, str(small), tmp_path / "whole", *extra) == 0
    step, calls = recipe.optimizer_step, []

    def signalled(*args, **kwargs):  # SIGTERM arrives during the 7th step
        calls.append(1)
        if len(calls) == 7:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(*args, **kwargs)

    monkeypatch.setattr(recipe, "optimizer_step", signalled)
    assert _distill(sst2_teacher, str(small), tmp_path / "cut", *extra) == 128 + signal.SIGTERM
    assert (tmp_path / "cut" / "checkpoints").is_dir()
    monkeypatch.setattr(recipe, "optimizer_step", step)
    assert _distill(sst2_teacher, str(small), tmp_path / "cut", *extra, "--resume") == 0
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("whole", "cut"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    logs = [json.loads((tmp_path / d / "train_log.json").read_text())["history"] for d in ("whole", "cut")]
    assert logs[0] == logs[1]
    monkeypatch.setattr(recipe, "optimizer_step", signalled)
    calls.clear()
    assert _distill(sst2_teacher, str(small), tmp_path / "cut3", *extra) == 128 + signal.SIGTERM
    monkeypatch.setattr(recipe, "optimizer_step", step)
    assert _distill(sst2_teacher, str(small), tmp_path / "cut3", "--epochs", "3", "--eval-every", "5", "--resume") == 2


@pytest.mark.parametrize("preset", ["bert-tiny", "modernbert-tiny"])
def test_the_student_loads_in_transformers_with_identical_logits(small, sst2_teacher, tmp_path, preset):
    """A BERT teacher's student of either architecture: transformers gives the logits bertkit gives."""
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "s"
    assert _distill(sst2_teacher, preset, out, "--max-steps", "3") == 0
    ours, batch = _outputs("sst2", out)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out, attn_implementation="eager").eval()
    if preset.startswith("modernbert"):
        batch.pop("token_type_ids")
    with torch.no_grad():
        logits = theirs(**batch).logits
    torch.testing.assert_close(logits, ours.logits, atol=1e-5, rtol=1e-5)
    layers = {"bert-tiny": 2, "modernbert-tiny": 3}[preset]
    assert theirs.config.num_hidden_layers == layers and theirs.config.hidden_size == 128
    assert theirs.config.model_type == preset.split("-")[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--teacher": "missing"}, "--teacher .*missing: no such directory"),
        ({"--student": "other-vocab"}, "--student .*other-vocab: its vocabulary differs from the teacher's"),
        ({"--student": "layers:0"}, "--student layers:0: K must be an integer in 1..2"),
        ({"--student": "nowhere"}, "--student nowhere: neither a directory"),
        ({"--epochs": "0"}, "--epochs must be > 0, got 0"),
        ({"--lr": "nan"}, "--lr must be > 0, got nan"),
        ({"--temperature": "-1"}, "--temperature must be > 0, got -1"),
        ({"--alpha": "nan"}, "--alpha must be >= 0 and <= 1, got nan"),
        ({"--batch-size": "0"}, "--batch-size must be > 0, got 0"),
        ({"--max-steps": "-1"}, "--max-steps must be > 0, got -1"),
        ({"--clip": "nan"}, "--clip must be >= 0, got nan"),
        ({"--task": "cola"}, "--task cola: the teacher .* was fine-tuned on sst2"),
        ({"--unlabeled": "missing.tsv"}, "missing.tsv"),
        ({"--text-column": "x"}, "--text-column: --task sst2 does not use it"),  # was silently ignored
    ],
)
def test_bad_input_is_one_line(sst2_teacher, tmp_path, capsys, change, message, monkeypatch):
    import re

    monkeypatch.chdir(tmp_path)
    other = [t if t != "film" else "movie" for t in read_vocab(FINETUNE_VOCAB)]
    make_model_dir(tmp_path / "other-vocab", other, layers=1, max_position_embeddings=128)
    argv = {"--teacher": str(sst2_teacher), "--student": "layers:1", "--output": str(tmp_path / "out")}
    argv.update(change)
    flat = [x for k, v in argv.items() for x in (k, v)]
    train, dev = FAMILIES["sst2"]
    assert main(["distill", *flat, "--train", str(FT / train), "--dev", str(FT / dev), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


@pytest.fixture(scope="module")
def embedding_teacher(tmp_path_factory) -> Path:
    """A random tiny BERT (hidden 64) with sentence-transformers files: mean pooling, normalised."""
    from bertkit import BertModel
    from bertkit.st_format import write_sentence_transformers

    path = tmp_path_factory.mktemp("emb")
    make_model_dir(path, FINETUNE_VOCAB, BertModel, layers=2, max_position_embeddings=128, hidden_size=64)
    write_sentence_transformers(path, pooling="mean", normalize=True, dim=64, max_seq_length=64)
    return path


def _sts(model_dir: Path, capsys) -> float:
    """Spearman x 100 of ``bertkit evaluate --task sts`` on the STS-B fixture."""
    capsys.readouterr()
    assert main(["evaluate", "--task", "sts", "--model", str(model_dir), "--data", str(FT / "stsb_dev.tsv")]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["spearman"]


@pytest.mark.parametrize("student", ["narrow", "layers:2"])
def test_embeddings_regress_onto_the_teachers(embedding_teacher, tmp_path, capsys, student):
    """A narrower student learns the teacher's PCA-reduced vectors, a same-width one the vectors themselves; either
    saves as a sentence-embedding model that ``bertkit evaluate --task sts`` reads, scoring near its teacher."""
    from bertkit import BertModel
    from bertkit.st_format import write_sentence_transformers

    untrained = None
    if student == "narrow":
        student = str(make_model_dir(tmp_path / "n", FINETUNE_VOCAB, BertModel, layers=1, max_position_embeddings=128))
        write_sentence_transformers(student, pooling="mean", normalize=True, dim=32, max_seq_length=64)
        untrained = _sts(Path(student), capsys)
    out = tmp_path / "s"
    texts = [
        "--train",
        str(FT / "sst2_train.tsv"),
        "--unlabeled",
        str(FT / "sst2_dev.tsv"),
        "--text-column",
        "sentence",
    ]
    argv = ["distill", "--teacher", str(embedding_teacher), "--student", student, "--output", str(out), *texts]
    # 25 epochs at lr 1e-2 left the narrow student at 91% of its teacher on a 2-core AVX2 EPYC (77.5 against 84.8),
    # short of the target that they met elsewhere; 40 at 2e-2 reach 89.0 (narrow) and 90.1 (layers:2) there
    assert main([*argv, "--dev", str(FT / "stsb_dev.tsv"), "--epochs", "40", *FAST, "--lr", "2e-2"]) == 0
    assert _losses(out)[-1] < 0.7 * _losses(out)[0]
    assert (out / "modules.json").is_file() and not (out / "finetune_config.json").exists()
    teacher_score, student_score = _sts(embedding_teacher, capsys), _sts(out, capsys)
    assert student_score >= 0.97 * teacher_score, (student_score, teacher_score)  # the target, on the fixture
    if untrained is not None:
        assert student_score > untrained + 5  # learnt from the teacher, not there from the start


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--task", "sst2"],
            "--task sst2: .* is a sentence-embedding model \\(modules.json\\), not fine-tuned on sst2",
        ),
        (["--doc-stride", "5"], "--doc-stride: --task embeddings does not use it"),
        (["--max-seq-length", "1000"], "--max-seq-length 1000: the model in .* has 128 positions"),
    ],
)
def test_a_flag_embedding_distillation_does_not_use_is_one_line(embedding_teacher, tmp_path, capsys, flags, message):
    """Issue 54, items 6 and 10: each was silently ignored (--task sst2 took the embedding route all the same)."""
    import re

    argv = ["distill", "--teacher", str(embedding_teacher), "--student", "layers:1", "--output", str(tmp_path / "o")]
    assert main([*argv, "--train", str(FT / "sst2_train.tsv"), "--text-column", "sentence", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "o").exists()
