"""transformers' question-answering pipeline as the reference for bertkit's QA pipeline.

transformers 5 removed ``QuestionAnsweringPipeline``; the HF convention is the 4.x one (the issue measured 4.57).
The reference is reached two ways:

- tests/parity/test_pipeline_parameters.py reads a committed reference, tests/fixtures/qa/hf_qa_reference.json.gz:
  transformers 4.57.1's answers for the seeded fixture model built by ``build_qa_model`` below and the runs of
  ``qa_runs``, with the digest of that model (``model_digest``). A changed fixture (other weights, another
  vocabulary, other questions or settings) fails the test, naming the command that regenerates the file:

      make qa-reference        # .venv/bin/python tests/fixtures/qa/regenerate.py

  which installs transformers 4.57.1 into a throwaway ``pip install --target`` directory and runs ``CHILD`` there.
- tests/data/test_qa_agreement.py (the data tier, its model trained in the test) runs ``CHILD`` live, in a child
  process whose ``transformers`` has the pipeline: the installed one if it does, else one installed apart, named by
  ``BERTKIT_TRANSFORMERS4`` (a ``pip install --target`` directory, prepended to the child's ``PYTHONPATH``):

      .venv/bin/pip install --target /tmp/tf4 --no-deps "transformers==4.57.1" "huggingface-hub>=0.34,<1.0" \\
          "tokenizers>=0.22,<=0.23.0" requests urllib3 idna charset-normalizer certifi
      BERTKIT_TRANSFORMERS4=/tmp/tf4 .venv/bin/python -m pytest tests/data/test_qa_agreement.py

  It skips, naming this, when neither is there.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFERENCE = FIXTURES / "qa" / "hf_qa_reference.json.gz"  # gzip: top_k=1000 makes it 2 MB of JSON
REGENERATE = "make qa-reference (.venv/bin/python tests/fixtures/qa/regenerate.py)"
TRANSFORMERS4 = [
    "transformers==4.57.1",
    "huggingface-hub>=0.34,<1.0",
    "tokenizers>=0.22,<=0.23.0",
    "requests",
    "urllib3",
    "idna",
    "charset-normalizer",
    "certifi",
]
SKIP_REASON = (
    "the reference is transformers 4.x's QuestionAnsweringPipeline (removed in 5): set BERTKIT_TRANSFORMERS4 to a "
    "directory holding transformers 4.x (see tests/hf_qa.py)"
)

CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
torch.set_num_threads(1)
from transformers import BertForQuestionAnswering, BertTokenizerFast, QuestionAnsweringPipeline
import transformers
job = json.load(sys.stdin)
model = BertForQuestionAnswering.from_pretrained(job["dir"]).eval()
tok = BertTokenizerFast.from_pretrained(job["dir"], do_lower_case=job["lowercase"])
qa = QuestionAnsweringPipeline(model=model, tokenizer=tok, device=-1)
out = [[qa(question=x["question"], context=x["context"], **kwargs) for x in items] for items, kwargs in job["runs"]]
json.dump({"version": transformers.__version__, "answers": out}, sys.stdout, default=float)
"""

# ------------------------------------------------------------------------------------------ the committed reference

QA_SEED = 5
QA_SETTINGS = [
    {},
    {"top_k": 3},
    {"handle_impossible_answer": True, "top_k": 1000},  # every candidate, the empty answer among them
    {"max_seq_len": 40, "doc_stride": 12},  # several overlapping windows per context
    {"max_seq_len": 40, "doc_stride": 12, "top_k": 4, "max_question_len": 5},
    {"align_to_words": False, "top_k": 2},
    {"max_answer_len": 2, "top_k": 2},
]


def tiny_config(ft: Path = FIXTURES / "finetune", **extra):
    """The tiny BertConfig of the QA fixtures (2 layers, hidden 32) on the fine-tuning fixtures' vocabulary."""
    from bertkit import BertConfig

    vocab = [x for x in (ft / "vocab.txt").read_text(encoding="utf-8").splitlines() if x]
    return BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=512,
        **extra,
    )


def build_qa_model(directory: Path, ft: Path = FIXTURES / "finetune") -> Path:
    """The fixture: a random BertForQuestionAnswering (2 layers, hidden 32, seed ``QA_SEED``) on the fine-tuning
    fixtures' vocabulary, saved to ``directory``."""
    import torch

    from bertkit.modeling import BertForQuestionAnswering

    config = tiny_config(ft)
    torch.manual_seed(QA_SEED)
    directory.mkdir(parents=True, exist_ok=True)
    BertForQuestionAnswering(config).save_pretrained(directory)
    shutil.copy(ft / "vocab.txt", directory / "vocab.txt")
    return directory


def qa_items(ft: Path = FIXTURES / "finetune") -> list[dict]:
    """The first 12 {question, context} of the SQuAD v1.1 and v2.0 fixtures."""
    items = []
    for name in ("squad_dev.json", "squad_v2_dev.json"):
        data = json.loads((ft / name).read_text(encoding="utf-8"))
        items += [
            {"question": q["question"], "context": p["context"]}
            for a in data["data"]
            for p in a["paragraphs"]
            for q in p["qas"]
        ]
    return items[:12]


def qa_runs(tokenizer, items: list[dict]) -> list[tuple[list[dict], dict]]:
    """(items, pipeline keyword arguments) for each of ``QA_SETTINGS``."""
    runs = []
    for settings in QA_SETTINGS:
        run = items
        if "max_question_len" in settings:  # transformers' fast path does not cut questions: give it short ones
            run = [dict(x, question=" ".join(x["question"].split()[:2])) for x in items]
            assert all(len(tokenizer.encode(x["question"], add_special_tokens=False).ids) <= 5 for x in run)
        runs.append((run, dict(settings)))
    return runs


def model_digest(directory: Path) -> str:
    """sha256 of a model directory's weights (names, dtypes, shapes, values) and vocab.txt: the fixture's identity,
    independent of how safetensors lays out its file."""
    from safetensors.torch import load_file

    h = hashlib.sha256()
    weights = load_file(str(directory / "model.safetensors"))
    for name in sorted(weights):
        t = weights[name].contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        h.update(t.numpy().tobytes())
    h.update((directory / "vocab.txt").read_bytes())
    return h.hexdigest()


def reference_answers(directory: Path, runs: list[tuple[list[dict], dict]], lowercase: bool) -> list[list]:
    """The committed answers for ``runs`` on ``directory`` (its tokenizer lowercasing or not), after checking that
    all three are the fixture they were computed for."""
    if not REFERENCE.is_file():
        raise AssertionError(f"{REFERENCE} is missing: regenerate it with {REGENERATE}")
    ref = json.loads(gzip.decompress(REFERENCE.read_bytes()).decode("utf-8"))
    assert ref["transformers"].startswith("4."), ref["transformers"]
    digest = model_digest(directory)
    assert ref["model_digest"] == digest, (
        f"the QA fixture model changed ({digest} != the reference's {ref['model_digest']}): regenerate "
        f"{REFERENCE.name} with {REGENERATE}"
    )
    want = json.loads(json.dumps([[items, kwargs] for items, kwargs in runs]))
    assert ref["runs"] == want, f"the QA fixture's questions or settings changed: regenerate with {REGENERATE}"
    assert ref["lowercase"] == lowercase, f"the QA fixture's tokenizer changed: regenerate with {REGENERATE}"
    return ref["answers"]


# ------------------------------------------------------------------------------------------------ the live child


def _env() -> dict[str, str] | None:
    """The child's environment, or None when no transformers with the QA pipeline can be found."""
    env = dict(os.environ)
    extra = os.environ.get("BERTKIT_TRANSFORMERS4")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([extra] + [p for p in [env.get("PYTHONPATH")] if p])
        return env
    from importlib.metadata import PackageNotFoundError, version

    try:  # (the version, not an import: this runs when the data tier is collected)
        installed = version("transformers")
    except PackageNotFoundError:
        return None
    return env if installed.startswith("4.") else None


def have_hf_qa() -> bool:
    """Whether ``hf_qa_answers`` can run (else the tests that need it skip with ``SKIP_REASON``)."""
    return _env() is not None


def hf_qa_answers(directory: Path, runs: list[tuple[list[dict], dict]], lowercase: bool) -> list[list]:
    """For each run (items, pipeline keyword arguments), transformers' pipeline answers (a dict, or a list with
    top_k > 1) for each {question, context} of its items. One child process for all runs."""
    env = _env()
    if env is None:
        import pytest

        pytest.skip(SKIP_REASON)
    return run_child(directory, runs, lowercase, env)[1]


def run_child(directory: Path, runs, lowercase: bool, env: dict[str, str]) -> tuple[str, list[list]]:
    """(transformers' version, the answers) from ``CHILD`` run with ``env``."""
    job = {"dir": str(directory), "lowercase": lowercase, "runs": runs}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["version"].startswith("4."), result["version"]
    return result["version"], result["answers"]
